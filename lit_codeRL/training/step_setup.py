"""What every policy-gradient step does before its algorithm's math, in one place.

GRPO, REINFORCE and PPO start a step alike: per-episode advantages broadcast over the action
tokens (rows without a reward already have an empty trainable mask, ``RolloutModule.next_batch``),
the first trainable column, which rows share a prompt forward, the temperature the trainer's
log-probs use, the reference log-probs when a KL term needs them, and the whole-batch loss
normalisers. :func:`prepare_step` does that; the module files keep only their own math.

:func:`no_grad_columns` is the micro-batched no-grad forward that PPO's pi_old and old values
(and the reference) need: every rank runs as many forwards under FSDP2, where each is a collective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_codeRL.algorithms.grpo import LossType, broadcast_advantages
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.trajectory import TrajectoryBatch, pad_columns
from lit_codeRL.training import distributed

if TYPE_CHECKING:
    from lit_codeRL.training.policy_module import PolicyModule


def loss_temperature(sampling: SamplingParams) -> float:
    """The temperature of the trainer's log-probs: the sampler's, so that they and the sampler's
    recorded log-probs describe the same distribution; 1.0 for greedy sampling (temperature 0,
    whose distribution has no log-probs to match)."""
    return sampling.temperature if sampling.temperature > 0 else 1.0


def valid_rows(batch: TrajectoryBatch) -> Tensor:
    """``[B]`` bool: rows with a reward (the sandbox graded them)."""
    if batch.valid is None:
        return torch.ones(batch.batch_size, dtype=torch.bool, device=batch.rewards.device)
    return batch.valid.bool()


def has_extra_rows(batch: TrajectoryBatch) -> bool:
    """Some episode has several rows (an agent program that rewrote its history,
    ``rollout/harness.py``): rows are then not ``num_generations`` per group."""
    ids = batch.episode_ids
    return ids is not None and ids.numel() > 0 and int(ids.unique().numel()) < batch.batch_size


def per_episode(batch: TrajectoryBatch, advantages: Callable[[Tensor, Tensor | None], Tensor]) -> Tensor:
    """``[B]`` sequence advantages from ``advantages(rewards, valid)``, a group-contiguous
    function of one entry per episode, broadcast to every row of each episode: the group
    baselines compare episodes, however many rows an episode has."""
    if not has_extra_rows(batch):
        return advantages(batch.rewards, batch.valid)
    ids = batch.episode_ids.to(batch.rewards.device)
    first = torch.ones_like(ids, dtype=torch.bool)
    first[1:] = ids[1:] != ids[:-1]  # an episode's rows are contiguous
    valid = batch.valid[first] if batch.valid is not None else None
    seq = advantages(batch.rewards[first], valid)
    return seq[torch.cumsum(first.long(), 0) - 1]


@dataclass(frozen=True)
class StepSetup:
    """What a step's loss needs besides the batch."""

    start: int
    """First trainable column: logits before it are never computed."""
    group: int
    """Rows that share one prompt forward (``num_generations`` or 1)."""
    temperature: float
    """Temperature of the trainer's log-probs (:func:`loss_temperature`)."""
    counts: tuple[float, float] | None
    """``(num_rows, num_tokens)`` of the whole batch (``PolicyModule.loss_normalisers``), or
    ``None`` when the step normalises per minibatch (PPO)."""


def prepare_step(
    module: PolicyModule,
    batch: TrajectoryBatch,
    *,
    sampling: SamplingParams,
    num_generations: int,
    share_prompt_forward: bool,
    beta: float,
    sequence_advantages: Tensor | None = None,
    loss_type: LossType | None = None,
) -> StepSetup:
    """Fill ``batch.advantages`` from ``sequence_advantages`` ``[B]`` (if given) and
    ``batch.ref_logprobs`` (if ``beta`` > 0), and return the step's :class:`StepSetup`
    (``loss_type``: also the whole-batch normalisers)."""
    if sequence_advantages is not None:
        batch.advantages = broadcast_advantages(sequence_advantages, batch.trainable_mask)
    start = batch.first_trainable_position()
    group = num_generations if share_prompt_forward and not has_extra_rows(batch) else 1
    temperature = loss_temperature(sampling)
    if beta > 0:
        batch.ref_logprobs = module.reference_logprobs(batch, start, temperature, group)
    counts = module.loss_normalisers(batch, loss_type) if loss_type is not None else None
    return StepSetup(start, group, temperature, counts)


@torch.no_grad()
def no_grad_columns(
    module: PolicyModule,
    batch: TrajectoryBatch,
    start: int,
    group: int,
    forward: Callable[[TrajectoryBatch], tuple[Tensor | None, ...]],
) -> tuple[Tensor | None, ...]:
    """``forward`` over ``batch`` in the training forward's micro-batches (``micro_batch_rows``,
    trimmed from ``start``), each output ``[b, W - start]`` padded back to ``[B, L - start]`` and
    concatenated (``None`` outputs stay ``None``). Under FSDP2 a rank with fewer micro-batches
    repeats its last one and drops the result, so every rank runs as many forwards."""
    micro = batch.micro_batches(module.micro_batch_rows(batch, group), trim_from=start)
    count = distributed.global_max(len(micro), module.device) if module.sharded else len(micro)
    parts = []
    for k in range(count):
        out = forward(micro[min(k, len(micro) - 1)])
        if k < len(micro):
            parts.append(out)
    width = batch.input_ids.size(1) - start
    return tuple(
        None if first is None else torch.cat([pad_columns(p[i], width) for p in parts])
        for i, first in enumerate(parts[0])
    )


def attach_policy_old(module: PolicyModule, batch: TrajectoryBatch, setup: StepSetup) -> Tensor:
    """Fill ``batch.policy_old_logprobs`` with the trainer's log-probs before any update of this
    step (one no-grad pass, :func:`no_grad_columns`) and return them. With several updates per
    batch the clipped ratio is then to the trainer's pi_old (ratio 1 in the first update, as in
    verl and OpenRLHF) and the sampler's error is left to the truncated importance weight
    (``PolicyModule.sampler_correction``); one update needs no pass."""

    def forward(mb: TrajectoryBatch) -> tuple[Tensor]:
        logps, _ = module.token_logprobs(
            mb, setup.start, temperature=setup.temperature, group_size=setup.group
        )
        return (logps.float(),)

    (logps,) = no_grad_columns(module, batch, setup.start, setup.group, forward)
    batch.policy_old_logprobs = logps * batch.trainable_mask[:, setup.start :]
    return batch.policy_old_logprobs
