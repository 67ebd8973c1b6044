"""``CompletionTableCallback``: a table of sampled completions in the logs every N steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger


class CompletionTableCallback(Callback):
    """Publishes the latest rollout's completions (problem, reward, verdict, text) to every logger.

    Reads ``pl_module.last_records`` (a list of JSON-ready dicts), which every lit-coderl
    rollout module sets after each step. TensorBoard gets a markdown text panel, W&B a table, and
    every run a markdown file under ``<log_dir>/samples/``. A module whose records are not
    completions of problems (the code game: program, true output, prediction) defines
    ``completion_table(records, max_chars) -> (columns, rows)``, which is used instead.

    Args:
        every_n_steps: Publish every N optimizer steps (0 disables).
        max_rows: Rows per table.
        max_chars: Completions are cut to this many characters.
    """

    def __init__(self, every_n_steps: int = 10, max_rows: int = 8, max_chars: int = 600) -> None:
        self.every_n_steps, self.max_rows, self.max_chars = every_n_steps, max_rows, max_chars
        self._last_step = -1
        self._log_dir: str | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: resolve it here, where every rank calls it,
        # never inside the rank-zero-only branch below (that deadlocks the other ranks).
        self._log_dir = trainer.log_dir

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        step = trainer.global_step
        if self.every_n_steps <= 0 or not trainer.is_global_zero:
            return
        if self._last_step >= 0 and step - self._last_step < self.every_n_steps:
            return
        records = getattr(pl_module, "last_records", None) or []
        if not records:
            return
        self._last_step = step
        custom = getattr(pl_module, "completion_table", None)
        if custom is not None:
            columns, rows = custom(records[: self.max_rows], self.max_chars)
        else:
            rows = [
                [
                    r.get("problem_id", ""),
                    f"{r.get('reward', 0):.3f}",
                    r.get("verdict", ""),
                    str(r.get("completion", ""))[: self.max_chars],
                ]
                for r in records[: self.max_rows]
            ]
            columns = ["problem", "reward", "verdict", "completion"]
        markdown = self._markdown(columns, rows)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_text("samples/completions", markdown, global_step=step)
            elif isinstance(logger, WandbLogger):
                logger.log_table(key="samples/completions", columns=columns, data=rows, step=step)
        if self._log_dir:
            out = Path(self._log_dir) / "samples"
            out.mkdir(parents=True, exist_ok=True)
            (out / f"step_{step:06d}.md").write_text(markdown)

    @staticmethod
    def _markdown(columns: list[str], rows: list[list[str]]) -> str:
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", "<br>")

        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
