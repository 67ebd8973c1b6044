"""Behavioural cloning: the negative log-likelihood of demonstration tokens.

Only the demonstrator's own tokens (the trainable mask: answers, never prompts or environment
output) count; the mean is over all of them in the batch (every token weighs the same), with the
whole batch's token count as the normaliser so micro-batches add up exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lit_codeRL.algorithms.kl import masked_mean


def nll_loss(
    logprobs: Tensor, mask: Tensor, num_tokens: float | None = None
) -> tuple[Tensor, dict[str, Tensor]]:
    """``-sum(logprobs * mask) / num_tokens`` (``num_tokens`` defaults to ``mask.sum()``).

    Stats: ``nll`` (per-token NLL of this micro-batch) and ``token_prob`` (mean probability the
    policy gives the demonstrated token)."""
    m = mask.to(logprobs.dtype)
    total = float(m.sum()) if num_tokens is None else num_tokens
    kept = torch.where(m != 0, logprobs, torch.zeros_like(logprobs))
    loss = -kept.sum() / max(total, 1.0)
    with torch.no_grad():
        stats = {
            "nll": -masked_mean(logprobs.detach(), m),
            "token_prob": masked_mean(logprobs.detach().exp(), m),
        }
    return loss, stats
