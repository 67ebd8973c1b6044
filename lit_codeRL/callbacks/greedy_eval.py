"""``GreedyEvalCallback``: the greedy Q-policy's progress on the training problems during training."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl


class GreedyEvalCallback(pl.Callback):
    """Every ``every`` optimizer steps, run the greedy policy once per training problem and log
    ``greedy/train_solved``. A callback (added by ``DQNModule.configure_callbacks``) rather than a
    module hook because Lightning runs callbacks' ``on_train_batch_end`` before the module's and
    moves ``ModelCheckpoint`` last, so a checkpoint monitoring this metric sees the current value."""

    def __init__(self, every: int):
        self.every = every

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, *args: Any) -> None:
        if trainer.global_step % self.every:
            return
        # Greedy episodes are deterministic and their programs mostly cached: a cheap progress signal.
        rows = module.evaluate("train", episodes=1, epsilon=0.0)
        solved = float(sum(r["success_rate"] == 1.0 for r in rows))
        module.update_problem_weights(rows)
        module.log("greedy/train_solved", solved, on_step=True, on_epoch=False, batch_size=1)
