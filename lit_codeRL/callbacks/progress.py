"""What a run shows while it works: a Rich progress bar without ``Epoch 0/-2`` for step-limited
runs, and :class:`EvalProgress`, the progress of an evaluation (MBPP, games, ``validate``)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from lightning.pytorch.callbacks import RichProgressBar

log = logging.getLogger("lit_codeRL")


class StepLimitedRichProgressBar(RichProgressBar):
    """Lightning's ``RichProgressBar``, minus the epoch bound when training is limited by steps.

    RL rollout datasets are endless, so runs stop on ``max_steps`` and Lightning sets
    ``max_epochs = -1``; the stock bar then shows ``Epoch 0/-2``. Here it shows ``Epoch 0``.
    """

    def _get_train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        if max_epochs is None or max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        description = f"Epoch {current_epoch}"
        # Same padding as the parent: equal-width labels keep the bars from flickering.
        return f"{description:{len(self.validation_description)}}"


class EvalProgress:
    """Progress of one evaluation: items done of the total, the running success rate, the time
    spent and the time left (ETA).

    A full MBPP evaluation takes minutes; without this it prints nothing until it ends. Where the
    run's Rich progress bar is live on a terminal, the evaluation is a task on it (the bar's own
    columns show done/total and the time left; the description the running rate). Elsewhere (no
    bar, a pipe or log file, ``tee``) it is one ``[lit-coderl]`` log line per batch::

        mbpp_eval step 12: 48/500 problems, pass@1 0.312 so far, 1m04s elapsed, ETA 10m03s

    Only global rank 0 shows anything; under DDP the counts are its shard's (the label then says
    ``rank 0 of N``), the other ranks move at the same pace.

    Args:
        label: What is evaluated, e.g. ``mbpp_eval step 12``.
        total: Items this rank evaluates.
        unit: What an item is (``problems``, ``games``).
        rate_name: What the running rate is (``pass@1``, ``win rate``).
        trainer: The run's trainer (for its progress bar and rank); ``None``: log lines.
        in_validation_bar: The evaluation is the validation loop itself (``lit-coderl validate``),
            whose bar already counts batches and shows the time left: on a live bar, the running
            rate and the problems done go into that bar's description instead of a task of their
            own (Rich shows no logged ``prog_bar`` metrics outside ``fit``).
        clock: Seconds, monotonic (tests pass a fake one).
    """

    def __init__(
        self,
        label: str,
        total: int,
        unit: str = "problems",
        rate_name: str = "pass@1",
        trainer: Any = None,
        in_validation_bar: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        world = int(getattr(trainer, "world_size", 1) or 1)
        self.label = label if world == 1 else f"{label} (rank 0 of {world})"
        self.total, self.unit, self.rate_name = total, unit, rate_name
        self.done, self.score, self.scored = 0, 0.0, 0
        self._clock, self._start = clock, clock()
        self._speak = trainer is None or bool(getattr(trainer, "is_global_zero", True))
        self._progress = live_rich_progress(trainer) if self._speak else None
        self._bar = getattr(trainer, "progress_bar_callback", None)
        self._in_validation_bar = in_validation_bar and self._progress is not None
        self._loop_description: str | None = None  # the validation task's own, before ours
        self._task = None
        if self._progress is not None and not in_validation_bar:
            self._task = self._progress.add_task(self._description(), total=max(total, 1))

    @property
    def rate(self) -> float | None:
        """The running rate over the scored items so far; ``None`` before any."""
        return self.score / self.scored if self.scored else None

    def advance(self, items: int, score: float, scored: int | None = None) -> None:
        """``items`` more done, with ``score`` successes among ``scored`` of them (default:
        ``items``; a problem the sandbox failed to grade is done but not scored)."""
        self.done += items
        self.score += score
        self.scored += items if scored is None else scored
        if not self._speak:
            return
        if self._in_validation_bar:
            self._describe_validation_task()
        elif self._task is not None:
            self._progress.update(self._task, completed=self.done, description=self._description())
            # Lightning's refresh thread redraws only when its bar asks; a batch takes seconds
            self._progress.refresh()
        else:
            log.info("%s", self.line())

    def line(self) -> str:
        """``<label>: done/total <unit>, <rate_name> r so far, <elapsed> elapsed, ETA <left>``."""
        elapsed = self._clock() - self._start
        left = elapsed / self.done * (self.total - self.done) if self.done else math.nan
        rate = "no graded result yet" if self.rate is None else f"{self.rate_name} {self.rate:.3f} so far"
        return (
            f"{self.label}: {self.done}/{self.total} {self.unit}, {rate}, "
            f"{format_duration(elapsed)} elapsed, ETA {format_duration(left)}"
        )

    def close(self) -> None:
        """Take the task off the bar (the result is logged by the evaluation itself)."""
        if self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None

    def _description(self) -> str:
        rate = "" if self.rate is None else f" {self.rate_name} {self.rate:.3f}"
        return f"{self.label}{rate}"

    def _describe_validation_task(self) -> None:
        task_id = getattr(self._bar, "val_progress_bar_id", None)
        task = next((t for t in self._progress.tasks if t.id == task_id), None)
        if task is None:
            return
        if self._loop_description is None:
            self._loop_description = task.description
        rate = "" if self.rate is None else f" {self.rate_name} {self.rate:.3f},"
        description = f"{self._loop_description}{rate} {self.done}/{self.total} {self.unit}"
        self._progress.update(task_id, description=description)


def live_rich_progress(trainer: Any) -> Any:
    """The Rich ``Progress`` of ``trainer``'s progress bar if it is live on a terminal, else
    ``None`` (no trainer, another bar, not started yet or stopped, output not a terminal: there
    a live display shows only its last state, so per-batch lines are what a log keeps)."""
    bar = getattr(trainer, "progress_bar_callback", None)
    if not isinstance(bar, RichProgressBar) or not bar.is_enabled:
        return None
    progress = bar.progress
    if progress is None or not progress.live.is_started or not progress.console.is_terminal:
        return None
    return progress


def format_duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``; ``?`` when unknown."""
    if not math.isfinite(seconds):
        return "?"
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
