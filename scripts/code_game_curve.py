"""A code-game run on CPU and its curves: validity rate, prediction accuracy, the writer's reward.

    python scripts/code_game_curve.py                          # SmolLM2-135M-Instruct, 30 steps
    python scripts/code_game_curve.py --steps 10 -- --model.init_args.game.reward_mode zero_sum
    python scripts/code_game_curve.py --steps 20 --warm-start-steps 30 \
        --out bench_results/code_game_warmstart.json       # the predictor's warm start, then 20 steps

Runs ``configs/grpo_code_game.yaml`` through the CLI (self-play: the policy writes programs and
predicts their outputs), reads the run's ``metrics.csv`` and writes, per step, the share of
programs the sandbox's gate admitted and why the others were rejected, the predictors' accuracy,
the writer's shaped reward, the original game's ``reward/avg_batch_reward`` and
``reward/successful_predictions_count``, with rolling means over ``--window`` steps:
``bench_results/code_game_curve.json``, a PNG of the curves beside it and a Markdown table on
stdout. Extra words after ``--`` go to ``lit-coderl fit`` as overrides.

With ``--warm-start-steps N`` the run's first N steps are the predictor's warm start
(``warm_start`` of ``CodeGameModule``: behavioural cloning on (program, output) pairs the gate
ran, ``docs/code_game.md``); the report then adds the predictor's accuracy, format rate and answer
NLL on the held-out pairs before and right after it, the warm start's loss per step, and counts
the self-play steps after it from 0. ``--max-new-tokens`` and ``--prediction-tokens`` shorten the
turns of a run that must fit a time budget.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from spiral_report import smooth  # scripts/ is on sys.path when a script runs

from lit_codeRL.cli import CodeRLCLI

REPO = Path(__file__).resolve().parents[1]
COLUMNS = {
    "validity": "train/game/validity_rate",
    "accuracy": "train/game/prediction_accuracy",
    "format": "train/game/prediction_format_rate",
    "writer_reward": "train/game/writer_reward",
    "learnability": "train/game/learnability",
    "writer_groups_with_signal": "train/game/writer_groups_with_signal",
    "predictor_groups_with_signal": "train/game/predictor_groups_with_signal",
    "no_program": "train/game/rejected/no_program",
    "avg_batch_reward": "reward/avg_batch_reward",
    "successful_predictions": "reward/successful_predictions_count",
    "predictions": "train/game/predictions",
    "program_chars": "train/game/program_chars",
}
PER_PREDICTION = ("accuracy", "format", "learnability", "predictor_groups_with_signal")
"""Series that a step without a single prediction (no program admitted) has no value of."""
WARM_EVAL = ("accuracy", "format_rate", "answer_tokens", "nll")
"""What the warm start measures on its held-out pairs, before and after (``train/warmstart/*``)."""
WARM_HARVEST = (
    "pairs",
    "held_out",
    "pairs_from_writer",
    "pairs_from_seeds",
    "writer_programs",
    "writer_admitted",
)


def run(args) -> Path:
    run_dir = args.run_dir
    cli = CodeRLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs/grpo_code_game.yaml"),
            "--model.init_args.model.name_or_path",
            args.model,
            "--model.init_args.game.prompts_per_step",
            str(args.prompts),
            "--model.init_args.game.programs_per_prompt",
            str(args.programs),
            "--model.init_args.game.predictions_per_program",
            str(args.predictions),
            "--model.init_args.optimizer.learning_rate",
            str(args.lr),
            "--model.init_args.warm_start.steps",
            str(args.warm_start_steps),
            "--model.init_args.warm_start.rounds",
            str(args.warm_start_rounds),
            "--model.init_args.warm_start.seed_programs",
            str(args.warm_start_seeds),
            "--model.init_args.warm_start.eval_pairs",
            str(args.warm_start_eval),
            "--model.init_args.warm_start.batch_size",
            str(args.warm_start_batch),
            "--model.init_args.warm_start.learning_rate",
            str(args.warm_start_lr),
            *(
                ["--model.init_args.sampling.max_new_tokens", str(args.max_new_tokens)]
                if args.max_new_tokens
                else []
            ),
            *(
                ["--model.init_args.game.prediction_max_new_tokens", str(args.prediction_tokens)]
                if args.prediction_tokens
                else []
            ),
            "--trainer.max_steps",
            str(args.steps + args.warm_start_steps),
            "--trainer.default_root_dir",
            run_dir,
            "--trainer.logger",
            "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir",
            run_dir,
            "--trainer.logger.name",
            "",
            *args.extra,
        ]
    )
    return Path(cli.trainer.log_dir)


def read(
    log_dir: Path,
) -> tuple[list[int], dict[str, list[float | None]], dict[str, float], dict[str, object] | None]:
    """The self-play steps (counted from 0 after any warm start), their series, the mean share
    of each refusal reason, and the warm start's report (``None``: the run had none)."""
    rows: dict[int, dict[str, str]] = {}
    warm: dict[int, dict[str, str]] = {}
    with (log_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            if row.get(COLUMNS["validity"]):
                rows[int(row["step"])] = row
            elif row.get("train/warmstart/loss"):  # a warm-start step: no round was played
                warm[int(row["step"])] = row
    offset = len(warm)
    steps = sorted(rows)
    series = {
        name: [float(rows[s][col]) if rows[s].get(col) else None for s in steps]
        for name, col in COLUMNS.items()
    }
    for name in PER_PREDICTION:  # a round without predictions measured nothing: not 0, no value
        series[name] = [v if n else None for v, n in zip(series[name], series["predictions"], strict=True)]
    rejected: dict[str, float] = {}
    for s in steps:
        for key, value in rows[s].items():
            if key.startswith("train/game/rejected/") and value:
                reason = key.removeprefix("train/game/rejected/")
                rejected[reason] = rejected.get(reason, 0.0) + float(value) / len(steps)
    rejected = {reason: share for reason, share in rejected.items() if share > 0}
    return [s - offset for s in steps], series, rejected, warm_start_report(warm) if warm else None


def warm_start_report(warm: dict[int, dict[str, str]]) -> dict[str, object]:
    """The warm start's loss per step, what it harvested and its held-out evaluations."""
    first, last = warm[min(warm)], warm[max(warm)]

    def value(row: dict[str, str], key: str) -> float | None:
        return float(row[key]) if row.get(key) else None

    return {
        "steps": len(warm),
        "loss": [float(warm[s]["train/warmstart/loss"]) for s in sorted(warm)],
        "lr": value(first, "train/lr"),
        **{k: value(first, f"train/warmstart/{k}") for k in WARM_HARVEST},
        "harvest_s": value(first, "time/warmstart_harvest_s"),
        "before": {k: value(first, f"train/warmstart/before/{k}") for k in WARM_EVAL},
        "after": {k: value(last, f"train/warmstart/after/{k}") for k in WARM_EVAL},
        "eval_s": {
            "before": value(first, "time/warmstart_eval_before_s"),
            "after": value(last, "time/warmstart_eval_after_s"),
        },
    }


def plot(path: Path, steps: list[int], series: dict[str, list[float | None]], warm: dict | None) -> None:
    """The predictor's accuracy and format rate (with the warm start's before/after points), the
    writer's rewards, validity, and the warm start's loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 4 if warm else 3
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))

    def line(ax, name: str, label: str) -> None:
        points = [(s, v) for s, v in zip(steps, series[name], strict=True) if v is not None]
        ax.plot([s for s, _ in points], [v for _, v in points], marker=".", label=label)

    ax = axes[0]
    line(ax, "accuracy", "accuracy (self-play)")
    line(ax, "format", "format rate (self-play)")
    if warm:
        for key, marker in (("accuracy", "o"), ("format_rate", "s")):
            ax.plot(
                [-4, -2],
                [warm["before"][key], warm["after"][key]],
                linestyle="none",
                marker=marker,
                markersize=8,
                label=f"held-out {key.replace('_', ' ')}: before / after warm start",
            )
        ax.axvline(-1.0, color="grey", linewidth=0.8)
        ax.text(-4, 1.03, "before", ha="center", fontsize=7)
        ax.text(-2, 1.03, "after", ha="center", fontsize=7)
    ax.set_title("predictor")
    ax.set_xlabel("self-play step")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    ax = axes[1]
    line(ax, "learnability", "learnability 4p(1-p), admitted programs")
    line(ax, "writer_reward", "writer reward (refusals included)")
    ax.set_title("writer")
    ax.set_xlabel("self-play step")
    ax.legend(fontsize=7)
    ax = axes[2]
    line(ax, "validity", "validity (gate admitted)")
    line(ax, "predictor_groups_with_signal", "predictor groups with signal")
    ax.set_title("game")
    ax.set_xlabel("self-play step")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=7)
    if warm:
        ax = axes[3]
        ax.plot(range(len(warm["loss"])), warm["loss"], marker=".")
        ax.set_title(f"warm start: NLL per answer token ({warm['pairs']:.0f} pairs)")
        ax.set_xlabel("warm-start step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cpu_class() -> str:
    """The CPU's model name, with whether it has native bf16 (AVX-512-BF16): timings depend on it."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    name = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?"
    )
    cores = sum(line.startswith("processor") for line in info.splitlines())
    return f"{name}, {cores} cores, " + ("avx512_bf16" if "avx512_bf16" in info else "no avx512_bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=4, help="topics per step")
    ap.add_argument("--programs", type=int, default=4, help="programs per topic (the writer's group)")
    ap.add_argument("--predictions", type=int, default=4, help="predictions per valid program")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--max-new-tokens", type=int, default=0, help="writer turn limit (0: the config's)")
    ap.add_argument(
        "--prediction-tokens", type=int, default=0, help="prediction turn limit (0: the config's)"
    )
    ap.add_argument("--warm-start-steps", type=int, default=0, help="the predictor's BC warm start (0: none)")
    ap.add_argument("--warm-start-rounds", type=int, default=4, help="writer rounds harvested for pairs")
    ap.add_argument("--warm-start-seeds", type=int, default=64, help="seed programs through the gate")
    ap.add_argument("--warm-start-eval", type=int, default=16, help="held-out pairs (before/after)")
    ap.add_argument("--warm-start-batch", type=int, default=8)
    ap.add_argument("--warm-start-lr", type=float, default=1e-5)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--run-dir", default="runs/code_game_curve")
    ap.add_argument("--log-dir", default=None, help="report an existing run's log dir instead of running")
    ap.add_argument("--out", default="bench_results/code_game_curve.json")
    ap.add_argument("extra", nargs="*", help="overrides for lit-coderl fit (after --)")
    args = ap.parse_args()
    start = time.time()
    log_dir = Path(args.log_dir) if args.log_dir else run(args)
    wall = time.time() - start
    steps, series, rejected, warm = read(log_dir)
    if not steps:
        raise SystemExit(f"no code-game steps in {log_dir / 'metrics.csv'}")
    w = args.window

    def window(name: str, first: bool) -> float | None:
        vals = [v for v in (series[name][:w] if first else series[name][-w:]) if v is not None]
        return sum(vals) / len(vals) if vals else None

    summary = {
        name: {"first_window": window(name, True), "last_window": window(name, False)} for name in COLUMNS
    }

    def pooled(part: slice) -> dict[str, float | None]:
        """The per-prediction series over the steps of ``part``, each step weighted by its
        predictions (a step's mean over 4 predictions weighs less than one over 16)."""
        counts = [n or 0.0 for n in series["predictions"][part]]
        out: dict[str, float | None] = {"predictions": sum(counts)}
        for name in ("accuracy", "format", "learnability"):
            pairs = [(v, n) for v, n in zip(series[name][part], counts, strict=True) if v is not None]
            total = sum(n for _, n in pairs)
            out[name] = sum(v * n for v, n in pairs) / total if total else None
        return out

    summary["pooled"] = {
        "all": pooled(slice(None)),
        "first_window": pooled(slice(0, w)),
        "last_window": pooled(slice(-w, None)),
    }
    result = {
        "command": "python scripts/code_game_curve.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("extra", "log_dir", "out")
        ),
        "extra": args.extra,
        "log_dir": str(log_dir),
        "wall_s": None if args.log_dir else wall,  # a re-report did not time the run
        "steps": steps,
        "series": series,
        "rolling_mean": {name: smooth([v or 0.0 for v in vals], w) for name, vals in series.items()},
        "rejected_share_mean": rejected,
        "summary": summary,
        "warm_start": warm,
        "cpu": cpu_class(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    plot(Path(args.out).with_suffix(".png"), steps, series, warm)
    header = "| step | " + " | ".join(COLUMNS) + " |"
    print(header)
    print("|" + "---|" * (len(COLUMNS) + 1))
    for i, s in enumerate(steps):
        cells = [f"{series[n][i]:.3g}" if series[n][i] is not None else "" for n in COLUMNS]
        print(f"| {s} | " + " | ".join(cells) + " |")
    print(
        f"\nfirst/last {w}-step means: "
        + ", ".join(
            f"{n} {v['first_window']:.3g} -> {v['last_window']:.3g}"
            for n, v in summary.items()
            if n in COLUMNS and v["first_window"] is not None and v["last_window"] is not None
        )
    )
    print(
        "pooled over the steps' predictions (all steps): "
        + ", ".join(f"{k} {v:.3g}" for k, v in summary["pooled"]["all"].items() if v is not None)
    )
    print(
        "rejections (mean share of programs): "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(rejected.items()))
    )
    if warm:
        print(
            f"warm start: {warm['steps']} steps on {warm['pairs']:.0f} pairs ({warm['pairs_from_writer']:.0f} "
            f"from the writer's {warm['writer_admitted']:.0f} admitted of {warm['writer_programs']:.0f}, "
            f"{warm['pairs_from_seeds']:.0f} seeds), {warm['held_out']:.0f} held out; loss "
            f"{warm['loss'][0]:.3g} -> {warm['loss'][-1]:.3g}"
        )
        for phase in ("before", "after"):
            print(f"  {phase}: " + ", ".join(f"{k} {v:.3g}" for k, v in warm[phase].items() if v is not None))
    print(f"wrote {args.out} and its .png ({wall:.0f} s)")


if __name__ == "__main__":
    main()
