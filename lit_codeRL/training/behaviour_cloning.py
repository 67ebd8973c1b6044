"""Behavioural cloning as one step any policy module can take: the NLL of a batch's trainable
tokens (``algorithms/bc.py``), micro-batched and stepped like every other update.

``BCModule`` trains with nothing else; the code game's predictor warm start
(``rollout/code_game_warmstart.py``) takes these steps before self-play. Both hand in a
:class:`~lit_codeRL.rollout.trajectory.TrajectoryBatch` whose trainable mask covers the
demonstrated answer only (prompts and observations are context).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lit_codeRL.algorithms.bc import nll_loss
from lit_codeRL.training import distributed

if TYPE_CHECKING:  # the module is passed in, never imported: no import cycle with policy_module
    from lit_codeRL.rollout.trajectory import TrajectoryBatch
    from lit_codeRL.training.policy_module import PolicyModule


def nll_update(
    module: PolicyModule, batch: TrajectoryBatch
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """One optimizer step of ``module``'s policy on the mean NLL of ``batch``'s trainable tokens
    (normalised by the whole global batch's token count, so micro-batches and ranks add up).
    Returns :meth:`~lit_codeRL.training.optimizer_steps.MicroBatchedUpdates.update`'s stats
    (``loss``, ``nll``, ``token_prob``) and timings."""
    batch = batch.to(module.device)
    start = batch.first_trainable_position()
    num_tokens = module.loss_normalisers(batch)[1]

    def loss_fn(mb: TrajectoryBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logps, _ = module.token_logprobs(mb, start)
        return nll_loss(logps, mb.trainable_mask[:, start:], num_tokens)

    return module.update(batch, loss_fn, start=start)


@torch.no_grad()
def mean_nll(module: PolicyModule, batch: TrajectoryBatch) -> float:
    """The policy's mean NLL per trainable token of ``batch`` (no gradient, no step; eval mode), in
    the micro-batches an update would use."""
    batch = batch.to(module.device)
    start = batch.first_trainable_position()
    total, tokens = 0.0, 0.0
    micro = batch.micro_batches(module.micro_batch_rows(batch), trim_from=start)
    count = len(micro)
    if module.sharded:  # a sharded forward is a collective: every rank runs as many
        count = distributed.global_max(count, module.device)
    training = module.policy.training
    module.policy.eval()
    try:
        for k in range(count):
            mb = micro[min(k, len(micro) - 1)]
            logps, _ = module.token_logprobs(mb, start)
            if k >= len(micro):
                continue
            mask = mb.trainable_mask[:, start:] != 0
            total -= float(torch.where(mask, logps, torch.zeros_like(logps)).sum())
            tokens += float(mask.sum())
    finally:
        module.policy.train(training)
    return total / max(tokens, 1.0)


__all__ = ["mean_nll", "nll_update"]
