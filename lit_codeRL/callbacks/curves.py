"""Learning curves as a picture: reward, pass rate, evaluation and step time of a run in one PNG.

Every ``lit-coderl fit`` run writes ``<log_dir>/learning_curve.png`` at the end
(:class:`LearningCurveCallback`, added by the CLI unless the config lists one), and
``lit-coderl curves RUN_DIR`` draws the same figure for any finished run directory from its
``metrics.csv`` (CSVLogger), so a user looks at a run instead of reading CSV.

Each panel plots the first of its metrics that the run logged (GRPO/REINFORCE log
``train/reward``, DQN ``train/episode_return``, the code game its writer and predictor rewards,
validity rate and prediction accuracy, BC ``train/loss``; evaluation comes from
``MBPPEvalCallback`` or ``GameEvalCallback``); panels with nothing to show say so.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer

log = logging.getLogger("lit_codeRL")

History = dict[str, list[tuple[int, float]]]
"""Metric name -> ``(step, value)`` points in step order."""

PANELS: list[tuple[str, tuple[str, ...]]] = [
    (
        "Training reward",
        (
            "train/reward",
            "train/episode_return",
            "train/game/writer_reward|train/game/predictor_reward",  # the code game
            "train/loss",
        ),
    ),
    (
        "Training pass rate",
        (
            "train/pass_rate",
            "train/success_rate",
            "train/game/validity_rate|train/game/prediction_accuracy",  # the code game
            "greedy/train_solved",
            "train/nll",
        ),
    ),
    (
        "Groups with learning signal",
        (
            "train/groups_with_signal",
            "train/game/writer_groups_with_signal|train/game/predictor_groups_with_signal",
            "train/frac_zero_std_groups",  # runs from before groups_with_signal: its complement
        ),
    ),
    ("Evaluation", ("mbpp_eval/pass@1", "mbpp_eval/pass_rate", "game_eval/*/vs_*/win")),
    ("Step time (s)", ("time/step_s", "time/generate_s|time/train_s", "time/train_s")),
]
"""(title, metric candidates in order of preference). ``*`` matches any run of characters;
``a|b`` is a candidate that shows both ``a`` and ``b`` when both were logged."""

FILENAME = "learning_curve.png"


def read_metrics_csv(path: str | Path) -> History:
    """``metrics.csv`` as written by Lightning's CSVLogger: one row per logging call, empty
    cells for metrics not logged in it. Rows without a ``step`` are skipped."""
    history: History = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = row.get("step")
            if step in (None, ""):
                continue
            for key, value in row.items():
                if key in ("step", "epoch") or value in (None, ""):
                    continue
                try:
                    number = float(value)
                except ValueError:
                    continue
                history.setdefault(key, []).append((int(float(step)), number))
    for points in history.values():
        points.sort(key=lambda p: p[0])
    return history


def _match(pattern: str, keys: Iterable[str]) -> list[str]:
    keys = list(keys)
    if "|" in pattern:
        parts = [_match(p, keys) for p in pattern.split("|")]
        return [k for part in parts for k in part] if all(parts) else []
    if "*" not in pattern:
        return [pattern] if pattern in keys else []
    return sorted(k for k in keys if fnmatch.fnmatchcase(k, pattern))


def pick_series(history: History, candidates: tuple[str, ...]) -> list[str]:
    """The metrics a panel shows: the first candidate the run logged (all matches of a pattern)."""
    for pattern in candidates:
        found = [k for k in _match(pattern, history) if history[k]]
        if found:
            return found
    return []


def plot_curves(history: History, out: str | Path, title: str = "") -> Path:
    """Draw the panels of ``history`` into ``out`` (PNG) and write the plotted points beside
    it (``out`` with suffix ``.json``: ``{"panels": {title: {metric: [[step, value], ...]}}}``);
    returns the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a cluster node; set before pyplot is imported
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 7), constrained_layout=True)
    for ax in axes.flat[len(PANELS) :]:
        ax.axis("off")
    plotted: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for ax, (panel, candidates) in zip(axes.flat[: len(PANELS)], PANELS, strict=True):
        keys = pick_series(history, candidates)
        plotted[panel] = {key: history[key] for key in keys}
        for key in keys:
            steps, values = zip(*history[key], strict=True)
            marker = "o" if len(steps) < 30 else None
            ax.plot(steps, values, marker=marker, markersize=4, linewidth=1, alpha=0.5, label=key)
            window = max(1, len(values) // 10)
            if window > 1:  # a running mean shows the trend under per-step noise
                smooth = [
                    sum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1))
                    for i in range(len(values))
                ]
                ax.plot(steps, smooth, linewidth=2, color=ax.lines[-1].get_color())
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if keys:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=ax.transAxes)
    if title:
        fig.suptitle(title)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    out.with_suffix(".json").write_text(json.dumps({"panels": plotted}))
    return out


def summarize(history: History) -> dict[str, tuple[float, float]]:
    """First and last value of every panel's metrics: what the end-of-run message prints."""
    out = {}
    for _, candidates in PANELS[:4]:
        for key in pick_series(history, candidates):
            out[key] = (history[key][0][1], history[key][-1][1])
    return out


def curves_for_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """The learning-curve PNG of a finished run directory (``lit-coderl curves RUN_DIR``).

    ``run_dir`` is a run's log directory (with ``metrics.csv``) or a parent of several
    (``runs/quickstart``): then its newest ``version_*`` / subdirectory holding a
    ``metrics.csv`` is drawn."""
    run = Path(run_dir)
    if not run.exists():
        raise FileNotFoundError(f"no run directory {run}")
    csv_path = run / "metrics.csv"
    if not csv_path.is_file():
        found = sorted(run.glob("**/metrics.csv"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise FileNotFoundError(
                f"{run} has no metrics.csv (runs write one with the CSVLogger, as the shipped configs do)"
            )
        csv_path = found[-1]
    history = read_metrics_csv(csv_path)
    return plot_curves(history, out or csv_path.parent / FILENAME, title=str(csv_path.parent))


class LearningCurveCallback(Callback):
    """At the end of ``fit``, draw the run's learning curve to ``<log_dir>/learning_curve.png``
    and print where the run's outputs are.

    It records ``train/*`` and ``time/*`` from ``trainer.callback_metrics`` after every training
    step and takes evaluations from the interval-evaluation callbacks' history, so it needs no
    particular logger.

    Args:
        filename: File name of the PNG inside the run's log directory.
    """

    def __init__(self, filename: str = FILENAME) -> None:
        self.filename = filename
        self.history: History = {}
        self._log_dir: str | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: resolve it on every rank, here.
        self._log_dir = trainer.log_dir

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        if not trainer.is_global_zero:
            return
        # The step the loggers write for this batch (metrics.csv's), so that a redraw from the
        # CSV matches; it counts batches, while global_step counts optimizer steps.
        step = getattr(trainer.fit_loop.epoch_loop, "_batches_that_stepped", trainer.global_step)
        for key, value in trainer.callback_metrics.items():
            if key.startswith(("train/", "time/", "greedy/")):
                number = float(value)
                if math.isfinite(number):
                    self.history.setdefault(key, []).append((step, number))

    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.is_global_zero or self._log_dir is None:
            return
        history = {k: list(v) for k, v in self.history.items()}
        for cb in trainer.callbacks:
            for point in getattr(cb, "history", None) or []:
                if isinstance(point, dict) and "step" in point:
                    for key, value in point.items():
                        if key != "step" and isinstance(value, int | float):
                            history.setdefault(key, []).append((int(point["step"]), float(value)))
        for points in history.values():
            points.sort(key=lambda p: p[0])
        run = Path(self._log_dir)
        try:
            png = plot_curves(history, run / self.filename, title=str(run))
        except Exception as err:  # a plotting failure must not fail a finished run
            log.warning("could not draw the learning curve: %s", err)
            return
        lines = [f"learning curve: {png}"]
        for key, (first, last) in summarize(history).items():
            lines.append(f"  {key}: {first:.3f} -> {last:.3f}")
        for name in ("metrics.csv", "rollouts*.jsonl", "mbpp_eval", "game_eval", "hf_model", "checkpoints"):
            for path in sorted(run.glob(name)):
                lines.append(f"{path.name}: {path}")
        print("\n".join(lines), flush=True)
