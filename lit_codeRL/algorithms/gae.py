"""Generalized advantage estimation and the clipped value loss (PPO), over token sequences.

GAE (Schulman et al. 2016) on a ``[B, T]`` layout where only ``mask``-ed positions are steps of
the policy (its own tokens); positions off the mask (prompt, environment output, padding) are
skipped, so a multi-turn row is one chain of steps from its first to its last policy token.
``terminated`` and ``truncated`` stay apart (as TorchRL's ``generalized_advantage_estimate``): a
terminated episode bootstraps from 0, a truncated one from ``bootstrap_value``.

The two refinements the long-output papers found decisive, as plain functions:

* **decoupled lambda** (VC-PPO, Yuan et al. 2025, arXiv 2503.01491): the critic's targets use
  ``lam_critic`` (1.0: Monte-Carlo returns, no reward decay along a long response) while the
  actor's advantages use a smaller ``lam_actor`` (less variance) -- :func:`gae` is called once for
  each;
* **length-adaptive lambda** (VAPO, Yue et al. 2025, arXiv 2504.05118):
  ``lam_actor = 1 - 1 / (alpha * l)`` per episode of ``l`` policy tokens
  (:func:`length_adaptive_lambda`), so the sum of the GAE weights grows with the length instead
  of being capped at ``1 / (1 - lam)``.

Rewards in RL for code come at the end of an episode: :func:`terminal_token_rewards` puts each
row's reward on its *last policy token*, never on an observation token that GAE would skip (and
so lose, as verl's does for an episode ending on a tool output).
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
    lam: float | Tensor = 0.95,
    terminated: Tensor | None = None,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Advantages and returns ``[B, T]`` (0 off the mask).

    Args:
        rewards: ``[B, T]`` reward received after each step (usually 0 except the last policy
            token of a turn or episode).
        values: ``[B, T]`` value estimate at each step.
        mask: ``[B, T]`` 1 on policy steps.
        gamma, lam: discount and GAE lambda; ``lam`` may be a ``[B]`` tensor (one per row,
            :func:`length_adaptive_lambda`).
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
    lam_t = torch.as_tensor(lam, dtype=values.dtype, device=values.device)
    for t in reversed(range(width)):
        m = keep[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam_t * next_adv
        advantages[:, t] = torch.where(m, adv_t, torch.zeros_like(adv_t))
        next_adv = torch.where(m, adv_t, next_adv)
        next_value = torch.where(m, values[:, t], next_value)
    returns = torch.where(keep, advantages + values, torch.zeros_like(values))
    return advantages, returns


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_range: float | None = 0.2,
    num_tokens: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO's clipped value loss ``0.5 * max((V - R)^2, (clip(V, V_old +- c) - R)^2)``, mean over
    the masked tokens.

    ``clip_range=None`` gives the plain squared error. ``num_tokens`` replaces this tensor's own
    token count when it is one micro-batch of a larger batch (the micro-batch losses then add up
    to the whole-batch loss, as ``aggregate_token_loss`` does for the policy). Stats:
    ``value_clip_frac`` (where the clipped term is the larger one). The critic's explained
    variance is a statistic of the whole rollout batch (:func:`explained_variance_of_moments`),
    not of one micro-batch.
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
    if num_tokens is None:
        loss = 0.5 * masked_mean(per_token, keep)
    else:
        kept = torch.where(keep != 0, per_token * keep, torch.zeros_like(per_token))
        loss = 0.5 * kept.sum() / max(float(num_tokens), 1.0)
    return loss, {"value_clip_frac": clipped_frac}


def length_adaptive_lambda(lengths: Tensor, alpha: float = 0.05) -> Tensor:
    """VAPO's per-episode actor lambda ``1 - 1 / (alpha * l)`` for ``lengths`` ``[B]`` (policy
    tokens per episode), clipped to ``[0, 1]``: episodes shorter than ``1 / alpha`` tokens get 0
    (one-step TD), long ones approach 1."""
    length = lengths.to(torch.float32).clamp(min=1.0)
    return (1.0 - 1.0 / (alpha * length)).clamp(0.0, 1.0)


def terminal_token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]`` token rewards: each row's ``rewards[b]`` on its last ``mask``-ed (policy)
    token, 0 elsewhere. A row with no policy token (left out of the loss) gets none."""
    keep = mask != 0
    width = mask.size(1)
    positions = torch.arange(width, device=mask.device).expand_as(mask)
    last = torch.where(keep, positions, torch.full_like(positions, -1)).max(dim=1).values
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rows = (last >= 0).nonzero().squeeze(-1)
    out[rows, last[rows]] = rewards.to(torch.float32)[rows]
    return out


def kl_reward_penalty(
    token_rewards: Tensor, logprobs: Tensor, ref_logprobs: Tensor, mask: Tensor, beta: float
) -> tuple[Tensor, Tensor]:
    """KL in the reward (Ziegler et al. 2019; verl's ``use_kl_in_reward``, OpenRLHF's default):
    ``r_t - beta * (log pi_old(a_t) - log pi_ref(a_t))`` on policy tokens (the k1 estimator,
    whose sum over an episode is an unbiased estimate of its sequence KL). Returns the new token
    rewards and the per-token k1 KL (0 off the mask)."""
    keep = mask != 0
    kl = torch.where(keep, (logprobs - ref_logprobs).float(), torch.zeros_like(logprobs, dtype=torch.float32))
    return token_rewards - beta * kl, kl


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """``1 - Var[R - V] / Var[R]`` over the masked positions: 1 for a perfect critic, 0 for one
    that predicts the mean, negative for worse; 0 when the returns have no variance."""
    sel = mask != 0
    if int(sel.sum()) < 2:
        return values.new_zeros(())
    r, v = returns[sel].float(), values[sel].float()
    var = r.var()
    return 1 - (r - v).var() / var if float(var) > 0 else values.new_zeros(())


def explained_variance_moments(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """``[5]`` float64 sums over the masked positions from which :func:`explained_variance_of_moments`
    gives the explained variance: count, sum and sum of squares of the returns, sum and sum of
    squares of the residuals ``R - V``. Summed over data-parallel ranks (one all-reduce) they give
    the statistic of the global batch, the same number on every rank."""
    count, r_sum, r_squares = masked_moments(returns, mask)
    _, d_sum, d_squares = masked_moments(returns.float() - values.float(), mask)
    return torch.stack([count, r_sum, r_squares, d_sum, d_squares])


def explained_variance_of_moments(moments: Tensor) -> Tensor:
    """:func:`explained_variance` from :func:`explained_variance_moments` sums (of one rank or
    of all): ``1 - Var[R - V] / Var[R]``, 0 with fewer than 2 tokens or returns without variance."""
    count, r_sum, r_squares, d_sum, d_squares = moments.double().unbind()
    if float(count) < 2:
        return moments.new_zeros((), dtype=torch.float32)
    _, var_r = moments_to_stats(count, r_sum, r_squares)
    _, var_d = moments_to_stats(count, d_sum, d_squares)
    if float(var_r) <= 0:
        return moments.new_zeros((), dtype=torch.float32)
    return 1 - var_d / var_r


def masked_whiten(x: Tensor, mask: Tensor, mean: Tensor, var: Tensor, eps: float = 1e-8) -> Tensor:
    """``(x - mean) / sqrt(var + eps)`` on the mask, 0 elsewhere. ``mean``/``var`` are passed in
    so that data-parallel ranks whiten with the statistics of the global batch."""
    out = (x - mean) * torch.rsqrt(var + eps)
    return torch.where(mask != 0, out, torch.zeros_like(out))


def masked_moments(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(count, sum, sum of squares)`` of ``x`` on the mask, float64: summed over ranks they give
    the global mean and variance (:func:`moments_to_stats`)."""
    sel = mask != 0
    v = x[sel].double()
    return v.new_tensor(float(v.numel())), v.sum(), (v * v).sum()


def moments_to_stats(count: Tensor, total: Tensor, squares: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and (unbiased) variance from :func:`masked_moments` sums."""
    n = count.clamp(min=1)
    mean = total / n
    var = (squares - n * mean * mean) / (n - 1).clamp(min=1)
    return mean.float(), var.clamp(min=0).float()
