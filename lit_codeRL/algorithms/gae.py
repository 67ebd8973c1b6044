"""Generalized advantage estimation and the clipped value loss (PPO), over token sequences.

GAE (Schulman et al. 2016) on a ``[B, T]`` layout where only ``mask``-ed positions are steps of
the policy (its own tokens); positions off the mask (prompt, environment output, padding) are
skipped, so a multi-turn row is one chain of steps from its first to its last policy token.
``terminated`` and ``truncated`` stay apart (as TorchRL's ``generalized_advantage_estimate``): a
terminated episode bootstraps from 0, a truncated one from ``bootstrap_value``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_codeRL.algorithms.kl import masked_mean


def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
    terminated: Tensor | None = None,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns ``[B, T]`` (0 off the mask).

    Args:
        rewards: ``[B, T]`` reward received after each step (usually 0 except the last policy
            token of a turn or episode).
        values: ``[B, T]`` value estimate at each step.
        mask: ``[B, T]`` 1 on policy steps.
        gamma, lam: discount and GAE lambda.
        terminated: ``[B]`` bool; True (default) bootstraps the last step from 0.
        bootstrap_value: ``[B]`` value after the last step of a non-terminated (truncated) row.

    ``delta_t = r_t + gamma * V(next step) - V_t``; ``A_t = delta_t + gamma * lam * A_next``;
    returns ``A_t + V_t``.
    """
    batch, width = rewards.shape
    keep = mask != 0
    rewards, values = rewards.float(), values.float()
    done = torch.ones(batch, dtype=torch.bool) if terminated is None else terminated.bool().cpu()
    boot = torch.zeros(batch) if bootstrap_value is None else bootstrap_value.float().cpu()
    next_value = torch.where(done, torch.zeros_like(boot), boot).to(values.device)
    next_adv = torch.zeros(batch, device=values.device)
    advantages = torch.zeros_like(values)
    for t in reversed(range(width)):
        m = keep[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(m, adv_t, torch.zeros_like(adv_t))
        next_adv = torch.where(m, adv_t, next_adv)
        next_value = torch.where(m, values[:, t], next_value)
    returns = torch.where(keep, advantages + values, torch.zeros_like(values))
    return advantages, returns


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_range: float | None = 0.2
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2)``, masked mean.

    ``clip_range=None`` gives the plain squared error. Stats: ``value_clip_frac`` (where the
    clipped term is the larger one) and ``explained_variance`` of the returns by ``old_values``.
    """
    keep = mask.to(values.dtype)
    unclipped = (values - returns) ** 2
    if clip_range is None:
        per_token = unclipped
        clipped_frac = values.new_zeros(())
    else:
        clipped_values = old_values + (values - old_values).clamp(-clip_range, clip_range)
        clipped = (clipped_values - returns) ** 2
        per_token = torch.maximum(unclipped, clipped)
        clipped_frac = masked_mean((clipped > unclipped).to(values.dtype).detach(), keep)
    loss = 0.5 * masked_mean(per_token, keep)
    with torch.no_grad():
        sel = keep != 0
        residual = (returns - old_values)[sel]
        var = returns[sel].var() if int(sel.sum()) > 1 else returns.new_zeros(())
        explained = 1 - residual.var() / var if float(var) > 0 else returns.new_zeros(())
    return loss, {"value_clip_frac": clipped_frac, "explained_variance": explained}
