"""Truncated importance weights between the sampler and the trainer.

When another engine samples (vLLM, a bf16 decode, an older policy), its token log-probs differ
from the trainer's, and the on-policy gradient is biased. Truncated importance sampling (TIS;
Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training")
multiplies each token's loss by ``min(pi_train(a) / pi_sampler(a), cap)``: the weight corrects the
mismatch, the cap bounds its variance. Weights carry no gradient.

:func:`sampler_correction` is the one rule every policy-gradient module applies (through
``PolicyModule.sampler_correction``): which log-probs the clipped ratio compares with, which
importance weight multiplies the surrogate, and the mismatch metrics.

What it corrects: the sampler's log-probs are those of the temperature-scaled, *unfiltered*
distribution (``policy/output.py``), so the weight corrects what the sampler's precision (or
staleness) changes in each sampled token's probability. With ``top_p`` < 1 or ``top_k`` > 0 the
tokens are drawn from the filtered distribution, which neither the weight nor the trainer's loss
accounts for: the gradient stays that of the unfiltered policy evaluated on filtered samples (the
usual, uncorrected bias of nucleus sampling in RL), and under a bf16 sampler the filter's cut-off
is also decided in bf16.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_codeRL.algorithms.kl import masked_mean


def truncated_importance_weights(
    train_logprobs: Tensor, sampler_logprobs: Tensor, mask: Tensor, cap: float = 2.0
) -> Tensor:
    """``[B, T]`` ``min(exp(train - sampler), cap)`` on the mask, 1 elsewhere; detached."""
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    with torch.no_grad():
        keep = mask != 0
        log_w = torch.where(
            keep,
            train_logprobs.float() - sampler_logprobs.float(),
            torch.zeros_like(train_logprobs, dtype=torch.float32),
        )
        return torch.exp(log_w).clamp(max=cap)


def sampler_correction(
    logprobs: Tensor,
    sampler_logprobs: Tensor,
    mask: Tensor,
    cap: float,
    num_updates: int = 1,
    old_logprobs: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, dict[str, Tensor]]:
    """Old log-probs, importance weights and mismatch metrics of a policy-gradient loss.

    Args:
        logprobs: ``[B, T]`` log-probs of the sampled tokens under the policy being trained.
        sampler_logprobs: ``[B, T]`` the log-probs the sampler recorded for the same tokens.
        mask: ``[B, T]`` 1 on the tokens the loss covers.
        cap: Truncation of the importance weight; 0 turns the weight off.
        num_updates: Optimizer steps taken on this batch.
        old_logprobs: ``[B, T]`` the trainer's own log-probs before the first update (PPO's
            pi_old, recomputed in one no-grad pass), or ``None``.

    Returns ``(old, weights, stats)``:

    * ``old_logprobs`` given (PPO with several updates, as verl and OpenRLHF): ``old`` is the
      trainer's pi_old, so the clipped ratio measures how far the updates moved the policy and
      not how far the sampler's precision is from the trainer's; ``weights`` =
      ``min(pi_old / pi_sampler, cap)`` (one per token, the same in every update) corrects the
      sampler on top;
    * one update: ``old`` is ``logprobs`` detached (ratio 1: the policy being trained is the
      one whose gradient is wanted), and ``weights`` = ``min(pi_train / pi_sampler, cap)`` moves
      the on-policy gradient from the sampler's distribution to the trainer's;
    * more updates without ``old_logprobs``: ``old`` is the sampler's log-probs and ``weights``
      is ``None``: the clipped ratio ``pi_theta / pi_sampler`` is the importance weight to the
      distribution that drew the tokens, with PPO's clip in place of the cap (GRPO's
      ``num_iterations``, SPIRAL's ``ppo_epochs``, as TRL's GRPO with ``num_iterations`` > 1);
    * ``stats``: ``tis/logprob_diff`` (mean ``|log pi_train - log pi_sampler|`` over the mask,
      the mismatch, always), and with weights ``tis/weight`` (their mean) and ``tis/capped``
      (the share of tokens at the cap). Detached scalars.
    """
    sampler = sampler_logprobs.to(logprobs.dtype)
    m = mask.to(torch.float32)
    with torch.no_grad():
        diff = (logprobs.float() - sampler.float()).abs()
        stats = {"tis/logprob_diff": masked_mean(diff, m)}
    if old_logprobs is not None:
        old = old_logprobs.to(logprobs.dtype).detach()
    elif num_updates > 1:
        return sampler, None, stats
    else:
        old = logprobs.detach()
    weights = None
    if cap > 0:
        weights = truncated_importance_weights(old, sampler, mask, cap)
        stats["tis/weight"] = masked_mean(weights, m)
        stats["tis/capped"] = masked_mean((weights >= cap).to(m.dtype), m)
    return old, weights, stats
