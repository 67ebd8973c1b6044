"""A Rich progress bar that does not print ``Epoch 0/-2`` for step-limited runs."""

from __future__ import annotations

from lightning.pytorch.callbacks import RichProgressBar


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
