"""Truncated importance weights between the sampler and the trainer.

When another engine samples (vLLM, a bf16 decode, an older policy), its token log-probs differ
from the trainer's, and the on-policy gradient is biased. Truncated importance sampling (TIS;
Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training")
multiplies each token's loss by ``min(pi_train(a) / pi_sampler(a), cap)``: the weight corrects the
mismatch, the cap bounds its variance. Weights carry no gradient.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
