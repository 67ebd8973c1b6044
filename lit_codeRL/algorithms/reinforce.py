"""REINFORCE (Williams 1992) with the baselines used for LM policies, as pure tensor functions.

* ``none``: the return itself, ``A_i = R_i``.
* ``mean``: the group's mean return, ``A_i = R_i - mean_j R_j`` (ReMax/GRPO without std scaling).
* ``rloo``: leave-one-out, ``A_i = R_i - mean_{j != i} R_j`` (Kool et al. 2019, "Buy 4 REINFORCE
  samples, get a baseline for free"; Ahmadian et al. 2024, "Back to Basics"). Unbiased, since
  sample ``i``'s baseline does not depend on its own action; equal to
  ``G / (G - 1) * (R_i - mean_j R_j)``.

Layout as in ``algorithms/grpo.py``: rewards ``[B]`` are group-contiguous (rows
``g * G .. g * G + G - 1`` share a prompt).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from lit_codeRL.algorithms.grpo import LossType, aggregate_token_loss
from lit_codeRL.algorithms.kl import add_kl_penalty, masked_mean

Baseline = Literal["none", "mean", "rloo"]


def rloo_advantages(rewards: Tensor, group_size: int, valid: Tensor | None = None) -> Tensor:
    """Leave-one-out advantages ``[B] -> [B]``: each reward minus the mean of the *other* rewards
    of its group. ``valid`` (``[B]`` bool) leaves samples without a reward out of the others'
    baselines; they and samples with no valid peer get 0."""
    grouped = rewards.float().view(-1, group_size)
    keep = torch.ones_like(grouped) if valid is None else valid.view(-1, group_size).to(grouped.dtype)
    total = (grouped * keep).sum(dim=1, keepdim=True)
    others = keep.sum(dim=1, keepdim=True) - keep
    baseline = (total - grouped * keep) / others.clamp(min=1)
    return ((grouped - baseline) * keep * (others > 0)).reshape(-1)


def reinforce_advantages(
    rewards: Tensor, group_size: int, baseline: Baseline = "rloo", valid: Tensor | None = None
) -> Tensor:
    """``[B]`` advantages of REINFORCE with the named ``baseline`` (see the module docstring)."""
    keep = torch.ones_like(rewards, dtype=torch.bool) if valid is None else valid.bool()
    if baseline == "none":
        return torch.where(keep, rewards.float(), torch.zeros_like(rewards, dtype=torch.float32))
    if baseline == "rloo":
        return rloo_advantages(rewards, group_size, valid)
    if baseline == "mean":
        grouped = rewards.float().view(-1, group_size)
        k = keep.view(-1, group_size).to(grouped.dtype)
        mean = (grouped * k).sum(1, keepdim=True) / k.sum(1, keepdim=True).clamp(min=1)
        return ((grouped - mean) * k).reshape(-1)
    raise ValueError(f"baseline must be 'none', 'mean' or 'rloo', got {baseline!r}")


def reinforce_loss(
    logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    loss_type: LossType = "dapo",
    max_completion_length: int | None = None,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    num_rows: float | None = None,
    num_tokens: float | None = None,
    importance_weights: Tensor | None = None,
    sequence_tokens: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Policy-gradient loss ``-w * A * log pi(a)`` per token (+ ``beta`` * k3 KL), aggregated.

    Args:
        logprobs: ``[B, T]`` log-probs of the taken tokens under the policy being trained.
        advantages: ``[B]`` per sequence or ``[B, T]`` per token (0 off the mask).
        mask: ``[B, T]`` 1 on the policy's own tokens.
        loss_type, max_completion_length, num_rows, num_tokens, sequence_tokens: token aggregation, as
            :func:`lit_codeRL.algorithms.grpo.aggregate_token_loss`.
        ref_logprobs, beta: optional KL penalty to a frozen reference.
        importance_weights: ``[B, T]`` per-token weights ``w`` of the policy-gradient term (no
            gradient; 1 without them), e.g. truncated importance weights to a sampler that ran in
            another precision (``algorithms/importance.py``); the KL term is not weighted.

    On-policy (one update per rollout) this has the gradient of the clipped surrogate at ratio 1.
    """
    keep = mask != 0
    adv = advantages.to(logprobs.dtype)
    adv = adv[:, None].expand_as(logprobs) if adv.dim() == 1 else adv
    per_token = -torch.where(keep, adv * logprobs, torch.zeros_like(logprobs))
    if importance_weights is not None:
        per_token = per_token * importance_weights.detach().to(per_token.dtype)
    per_token, kl = add_kl_penalty(per_token, logprobs, ref_logprobs, keep, beta)
    loss = aggregate_token_loss(
        per_token, mask, loss_type, max_completion_length, num_rows, num_tokens, sequence_tokens
    )
    m = mask.to(logprobs.dtype)
    stats = {
        "kl": masked_mean(kl.detach(), m) if kl is not None else logprobs.new_zeros(()),
        "logprob": masked_mean(logprobs.detach(), m),
    }
    return loss, stats
