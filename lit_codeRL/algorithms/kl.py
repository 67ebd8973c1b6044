"""KL estimators between the policy and a frozen reference, per token, plus a masked mean.

Shapes: ``[B, T]`` per-token log-probs of the sampled tokens; everything is elementwise, so any
shape works as long as the inputs agree.
"""

from __future__ import annotations

import torch
from torch import Tensor


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref) per token: ``exp(d) - d - 1`` with ``d = ref - lp``.

    Unbiased for the KL when tokens are sampled from ``pi``, always >= 0 and low-variance; this is
    the estimator of GRPO (Shao et al. 2024, eq. 4) and TRL's ``GRPOTrainer``. Gradients flow
    through ``logprobs`` only when the caller passes a detached reference.
    """
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1.0


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the positions where ``mask`` is non-zero (all of them, or along ``dim``).

    ``mask`` may be fractional (a weight). An all-zero mask gives 0 rather than NaN, so empty rows
    (fully truncated or padded sequences) never poison a loss or a logged metric.
    """
    # where(), not x * mask: a non-finite value at a masked position must not leak in as NaN.
    kept = torch.where(mask != 0, x * mask.to(x.dtype), torch.zeros_like(x))
    mask = mask.to(x.dtype)
    if dim is None:
        return kept.sum() / mask.sum().clamp(min=1.0)
    return kept.sum(dim) / mask.sum(dim).clamp(min=1.0)


def add_kl_penalty(
    per_token: Tensor, logprobs: Tensor, ref_logprobs: Tensor | None, keep: Tensor, beta: float
) -> tuple[Tensor, Tensor | None]:
    """``per_token + beta * k3_kl`` on the kept tokens, and the per-token KL (``None`` without a
    reference). Off the mask the reference is set equal to the policy, so the KL there is 0."""
    if ref_logprobs is None:
        return per_token, None
    ref = torch.where(keep, ref_logprobs.to(logprobs.dtype), logprobs.detach())
    kl = k3_kl(logprobs, ref)
    return (per_token + beta * kl if beta != 0.0 else per_token), kl
