"""``IntervalEvaluation``: when an evaluation callback runs (start, every N optimizer steps, end)
and what of it survives a restart; subclasses say what one evaluation is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer


class IntervalEvaluation(Callback):
    """Calls :meth:`evaluate` before the first step, every ``eval_interval_steps`` optimizer steps
    and after the last step; keeps ``last_eval_step`` and ``history`` in checkpoints.

    Args:
        eval_interval_steps: Evaluate every N optimizer steps (0 = only start/end).
        eval_at_start: Evaluate before the first training step (the baseline).
        eval_at_end: Evaluate after the last training step.
    """

    def __init__(self, eval_interval_steps: int, eval_at_start: bool, eval_at_end: bool) -> None:
        self.eval_interval_steps = eval_interval_steps
        self.eval_at_start, self.eval_at_end = eval_at_start, eval_at_end
        self.last_eval_step: int | None = None
        self.history: list[dict[str, Any]] = []
        self._log_dir: str | None = None

    def evaluate(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, float]:
        raise NotImplementedError

    def publish(
        self,
        trainer: Trainer,
        metrics: dict[str, float],
        details: dict[str, Any],
        folder: str,
        output_dir: str | None,
    ) -> None:
        """End of an evaluation (every rank): remember it, log the metrics, and on rank zero write
        ``{"step", "metrics", **details}`` to ``<output_dir or log_dir/folder>/step_XXXXXX.json``."""
        step = trainer.global_step
        self.last_eval_step = step
        self.history.append({"step": step, **metrics})
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
            root = Path(output_dir or Path(self._log_dir or ".") / folder)
            root.mkdir(parents=True, exist_ok=True)
            (root / f"step_{step:06d}.json").write_text(
                json.dumps({"step": step, "metrics": metrics, **details}, indent=1, default=str)
            )
        for key, value in metrics.items():
            trainer.callback_metrics[key] = torch.tensor(value)

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: every rank resolves it here, so the
        # rank-zero-only writer never calls it alone (which deadlocks the other ranks).
        self._log_dir = trainer.log_dir

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.eval_at_start:
            self.evaluate(trainer, pl_module)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        step = trainer.global_step
        # ">=" not "%": one training step may advance global_step by several optimizer steps.
        if self.eval_interval_steps > 0 and step - (self.last_eval_step or 0) >= self.eval_interval_steps:
            self.evaluate(trainer, pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.eval_at_end and self.last_eval_step != trainer.global_step:
            self.evaluate(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {"last_eval_step": self.last_eval_step, "history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_eval_step = state_dict.get("last_eval_step")
        self.history = state_dict.get("history", [])
