"""GRPO math as pure tensor functions: group-relative advantages and the clipped policy loss.

References: GRPO (Shao et al. 2024, DeepSeekMath), DAPO (Yu et al. 2025: clip-higher, token-level
aggregation, dynamic sampling) and Dr. GRPO (Liu et al. 2025: no std scaling, constant
normaliser). Knob names and defaults follow TRL's ``GRPOConfig`` / ``GRPOTrainer`` where the
meaning is the same (``scale_rewards``, ``epsilon``, ``epsilon_high``, ``loss_type``, ``beta``,
``max_completion_length``).

Layout convention: a batch of ``B = num_groups * group_size`` completions is group-contiguous
(rows ``g * G .. g * G + G - 1`` answer prompt ``g``), as the rollout dataset produces it.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from lit_codeRL.algorithms.kl import add_kl_penalty, masked_mean

ScaleRewards = Literal["group", "batch", "none"]
LossType = Literal["grpo", "dapo", "dr_grpo"]


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(
            f"batch of {rewards.numel()} rewards is not a whole number of groups of {group_size}"
        )
    return rewards.view(-1, group_size)


def group_advantages(
    rewards: Tensor,
    group_size: int,
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
    valid: Tensor | None = None,
    batch_std: Tensor | float | None = None,
) -> Tensor:
    """Group-relative advantages ``[B] -> [B]``: each reward minus its group's mean, optionally scaled.

    Args:
        rewards: ``[B]`` scalar rewards, group-contiguous.
        group_size: Completions per prompt (TRL's ``num_generations``).
        scale_rewards: ``group`` divides by the group's std (GRPO); ``batch`` by the std of the
            whole batch (more robust when a group's rewards are nearly equal); ``none`` does not
            scale (Dr. GRPO: std scaling over-weights easy and hopeless prompts).
        eps: Added to the std, so zero-std groups get advantage 0 instead of NaN.
        valid: ``[B]`` bool, False for samples without a reward (the sandbox failed): they are left
            out of every mean and std and get advantage 0. ``None``: all valid.
        batch_std: For ``scale_rewards="batch"``, the std to divide by when the batch is one
            rank's part of a larger one (data-parallel training passes the global batch's);
            ``None``: the std of this batch's valid rewards.

    The std is the unbiased one (``torch.std`` default, as TRL); a group with one valid sample
    has an undefined std: its advantage is 0 by construction and it is not divided.
    """
    grouped = _grouped(rewards, group_size).float()
    if valid is None:
        keep = torch.ones_like(grouped)
    else:
        keep = _grouped(valid, group_size).to(grouped.dtype)
    count = keep.sum(dim=1, keepdim=True)
    mean = (grouped * keep).sum(dim=1, keepdim=True) / count.clamp(min=1)
    centered = (grouped - mean) * keep
    if scale_rewards == "none":
        return centered.reshape(-1)
    if scale_rewards == "group":
        var = (centered**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)
        std = torch.where(count > 1, var.sqrt(), torch.zeros_like(var))
    elif scale_rewards == "batch" and batch_std is not None:
        std = torch.as_tensor(batch_std, dtype=grouped.dtype, device=grouped.device)
    elif scale_rewards == "batch":
        flat, flat_keep = grouped.reshape(-1), keep.reshape(-1) > 0
        std = flat[flat_keep].std() if int(flat_keep.sum()) > 1 else flat.new_zeros(())
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    return (centered / (std + eps)).reshape(-1)


def zero_std_groups(rewards: Tensor, group_size: int, valid: Tensor | None = None) -> Tensor:
    """``[num_groups]`` bool: True where a group carries no learning signal, i.e. its valid rewards
    are all the same, or fewer than two of them are valid (:func:`group_advantages` gives such a
    group advantage 0). ``rewards`` ``[B]``; ``valid`` ``[B]`` bool, ``None``: all valid.

    The one zero-std rule: the ``train/frac_zero_std_groups`` metric and DAPO's dynamic sampling
    (drop and refill, ``RolloutDataset``) both use it.
    """
    grouped = _grouped(rewards, group_size)
    keep = torch.ones_like(grouped, dtype=torch.bool) if valid is None else _grouped(valid.bool(), group_size)
    highest = grouped.masked_fill(~keep, float("-inf")).max(dim=1).values
    lowest = grouped.masked_fill(~keep, float("inf")).min(dim=1).values
    # one valid reward makes highest == lowest, none makes it -inf - inf: both count as no signal
    return (highest - lowest) <= 1e-9


def rows_with_signal(advantages: Tensor, mask: Tensor, group_size: int) -> Tensor:
    """``[B]`` bool: the rows of the groups that carry a gradient, ``B`` = rows of ``[B, T]``.

    A token whose advantage is 0 adds exactly 0 to the clipped surrogate and to its gradient
    (whatever the ratio, clipping or importance weight), so without a KL term a whole group of
    zero-advantage rows can skip the forward and backward pass; the loss normalisers stay
    whole-batch counts, so loss and gradient are unchanged. Whole groups are kept or skipped
    (a kept group's prompt still runs once). All False when no row carries a gradient: the
    caller then needs no forward at all (``PolicyModule.update`` with ``batch=None``). Rows that
    do not split into groups of ``group_size`` are all kept.
    """
    rows = advantages.size(0)
    if group_size < 1 or rows % group_size:
        return torch.ones(rows, dtype=torch.bool, device=advantages.device)
    signal = ((advantages * mask).abs().sum(-1) > 0).view(rows // group_size, group_size).any(-1)
    return signal.repeat_interleave(group_size)


def normaliser_rows(mask: Tensor, loss_type: LossType, sequence_ids: Tensor | None = None) -> int:
    """The ``B`` a per-sequence normaliser divides by, for a ``[B, T]`` ``mask``.

    ``grpo`` averages over the sequences in the loss, so it counts sequences with a masked token.
    ``dr_grpo``'s normaliser is a constant (Liu et al. 2025; TRL divides by
    ``per_token_loss.size(0)``): every sequence of the batch counts, also those that left the
    loss (sandbox failures, masked truncations), so the loss scale of the rows that stay does not
    depend on how many were dropped. ``dapo`` divides by tokens; its row count is unused.

    ``sequence_ids`` ``[B]``: rows with one id are parts of one sequence (an agent episode whose
    rewritten history was laid out as several rows) and count once; ``None``: a row is a sequence.
    """
    if sequence_ids is None:
        if loss_type == "dr_grpo":
            return int(mask.size(0))
        return int((mask.sum(1) > 0).sum())
    if loss_type == "dr_grpo":
        return int(sequence_ids.unique().numel())
    return int(sequence_ids[mask.sum(1) > 0].unique().numel())


def sequence_token_counts(mask: Tensor, sequence_ids: Tensor) -> Tensor:
    """``[B]`` float: the masked tokens of the whole sequence each row of ``mask`` ``[B, T]`` is
    part of (``sequence_ids`` ``[B]``, as :func:`normaliser_rows`). ``grpo`` divides each row's
    token sum by it, so a sequence split over k rows weighs what it weighs as one row."""
    ids = sequence_ids.to(mask.device).long()
    _, slot = ids.unique(return_inverse=True)
    totals = torch.zeros(int(slot.max()) + 1 if slot.numel() else 0, device=mask.device)
    totals.index_add_(0, slot, mask.sum(1).float())
    return totals[slot]


def aggregate_token_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    num_rows: float | None = None,
    num_tokens: float | None = None,
    sequence_tokens: Tensor | None = None,
) -> Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar over the ``mask``-ed tokens.

    * ``grpo``: mean over each sequence's tokens, then mean over sequences (long completions
      weigh less per token: the length bias Dr. GRPO points out).
    * ``dapo``: sum over all tokens / number of tokens in the batch (every token weighs the same).
    * ``dr_grpo``: sum over all tokens / (B * ``max_completion_length``), a constant normaliser;
      without ``max_completion_length`` the padded width ``T`` is used.

    ``num_rows`` / ``num_tokens`` replace this tensor's own B and token count when it is one
    micro-batch of a larger batch: with the whole batch's counts, the micro-batch losses add up
    to exactly the whole-batch loss, whatever the split. Rows count as :func:`normaliser_rows`
    says: for ``grpo`` only rows with a masked token, for ``dr_grpo`` every row.

    ``sequence_tokens`` ``[B]`` (:func:`sequence_token_counts`): for ``grpo``, each row's tokens
    are averaged over its whole sequence's, rows split from one sequence being parts of one mean
    (``num_rows`` then counts sequences); ``None``: over the row's own.
    """
    mask = mask.to(per_token_loss.dtype)
    kept = torch.where(mask != 0, per_token_loss * mask, torch.zeros_like(per_token_loss))
    if loss_type == "grpo":
        rows = float(normaliser_rows(mask, loss_type)) if num_rows is None else num_rows
        if sequence_tokens is not None:
            per_row = kept.sum(1) / sequence_tokens.to(kept.dtype).clamp(min=1.0)
            return per_row.sum() / max(rows, 1.0)
        return masked_mean(per_token_loss, mask, dim=1).sum() / max(rows, 1.0)
    if loss_type == "dapo":
        tokens = float(mask.sum()) if num_tokens is None else num_tokens
        return kept.sum() / max(tokens, 1.0)
    if loss_type == "dr_grpo":
        rows = float(normaliser_rows(mask, loss_type)) if num_rows is None else num_rows
        length = max_completion_length if max_completion_length is not None else per_token_loss.size(1)
        return kept.sum() / (max(rows, 1.0) * length)
    raise ValueError(f"loss_type must be 'grpo', 'dapo' or 'dr_grpo', got {loss_type!r}")


def broadcast_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """``[B]`` sequence advantages (or ``[B, T]`` per-token ones) as ``[B, T]``, 0 off the mask."""
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(mask)
    return torch.where(
        mask != 0, advantages.to(torch.float32), torch.zeros_like(advantages, dtype=torch.float32)
    )


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    completion_mask: Tensor,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    num_rows: float | None = None,
    num_tokens: float | None = None,
    importance_weights: Tensor | None = None,
    sequence_tokens: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped surrogate loss of GRPO/DAPO/Dr. GRPO (+ ``beta`` * k3 KL), and its diagnostics.

    Args:
        logprobs: ``[B, T]`` log-probs of the sampled tokens under the policy being trained.
        old_logprobs: ``[B, T]`` the same under the policy that sampled them (no gradient).
        advantages: ``[B]`` one advantage per sequence, broadcast over its tokens, or ``[B, T]``
            one per token (multi-turn credit, GAE).
        completion_mask: ``[B, T]`` 1 on tokens the loss covers (policy tokens), 0 elsewhere.
        epsilon: Lower clip range: the ratio is clipped below at ``1 - epsilon``.
        epsilon_high: Upper clip range (DAPO clip-higher); ``None`` uses ``epsilon``.
        loss_type: Token aggregation, see :func:`aggregate_token_loss`.
        max_completion_length: Normaliser of ``dr_grpo``.
        ref_logprobs: ``[B, T]`` log-probs under the frozen reference; with ``beta > 0`` the
            per-token ``beta * k3_kl`` is added before aggregation (as in TRL).
        beta: KL coefficient.
        num_rows, num_tokens, sequence_tokens: Whole-batch counts when this is a micro-batch,
            and each row's sequence's tokens, see :func:`aggregate_token_loss`.
        importance_weights: ``[B, T]`` per-token weights of the surrogate (no gradient), e.g.
            truncated importance weights between the trainer and a sampler that ran in another
            precision (``algorithms/importance.py``); the KL term is not weighted.

    Per token: ``-w * min(r * A, clip(r, 1 - eps, 1 + eps_high) * A)`` with ``r = exp(lp - old)``
    and ``w`` the importance weight (1 without one).

    Returns:
        ``(loss, stats)``; ``stats`` (detached scalars): ``clip_ratio/low`` (tokens with ``A < 0``
        and ``r < 1 - eps``), ``clip_ratio/high`` (``A > 0`` and ``r > 1 + eps_high``),
        ``clip_ratio`` (either: where the clipped branch is the one taken and carries no
        gradient), ``ratio`` (mean importance ratio) and ``kl`` (mean k3 KL to the reference, 0
        without one), all averaged over masked tokens.
    """
    if logprobs.shape != old_logprobs.shape or logprobs.shape != completion_mask.shape:
        raise ValueError(
            f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and "
            f"completion_mask {tuple(completion_mask.shape)} must have the same [B, T] shape"
        )
    if advantages.shape not in (logprobs.shape[:1], logprobs.shape):
        raise ValueError(
            f"advantages must be [B]={logprobs.shape[0]} or [B, T]={tuple(logprobs.shape)}, "
            f"got {tuple(advantages.shape)}"
        )
    eps_low = epsilon
    eps_high = epsilon if epsilon_high is None else epsilon_high
    mask = completion_mask.to(logprobs.dtype)
    keep = mask != 0
    adv = advantages.to(logprobs.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else torch.where(keep, adv, torch.zeros_like(adv))

    # Masked positions (padding, prompt) may hold anything; zeroing their log-ratio before exp()
    # keeps an inf there from turning into 0 * inf = NaN in the loss or its gradient.
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    if importance_weights is not None:
        per_token = per_token * importance_weights.detach().to(per_token.dtype)

    per_token, kl = add_kl_penalty(per_token, logprobs, ref_logprobs, keep, beta)

    loss = aggregate_token_loss(
        per_token, mask, loss_type, max_completion_length, num_rows, num_tokens, sequence_tokens
    )

    with torch.no_grad():
        low = (ratio < 1.0 - eps_low) & (adv < 0)
        high = (ratio > 1.0 + eps_high) & (adv > 0)
        stats = {
            "clip_ratio/low": masked_mean(low.to(mask.dtype), mask),
            "clip_ratio/high": masked_mean(high.to(mask.dtype), mask),
            "clip_ratio": masked_mean((low | high).to(mask.dtype), mask),
            "ratio": masked_mean(ratio.detach(), mask),
            "kl": masked_mean(kl.detach(), mask) if kl is not None else logprobs.new_zeros(()),
        }
    return loss, stats
