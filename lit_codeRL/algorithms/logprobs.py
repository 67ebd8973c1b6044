"""Per-token log-probs and entropies from logits without materialising a second ``[B, T, V]`` tensor.

With a 49k-152k vocabulary, ``log_softmax(logits)`` over a whole batch doubles the activation
memory of the LM head. Both functions here work one row at a time, like TRL's
``selective_log_softmax`` / ``entropy_from_logits``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def selective_log_softmax(logits: Tensor, index: Tensor) -> Tensor:
    """``log_softmax(logits, -1).gather(-1, index)`` for logits ``[B, T, V]`` and ids ``[B, T]`` -> ``[B, T]``.

    fp32/fp64: ``logit[id] - logsumexp(logits)``, with the logsumexp taken one row at a time (a
    ``[T, V]`` temporary instead of ``[B, T, V]``). Half precision: ``logsumexp`` in low precision
    loses too much, so each row's ``log_softmax`` is computed in its own dtype (still one row at a
    time).
    """
    if logits.dtype in (torch.float32, torch.float64):
        picked = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
        lse = torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
        return picked - lse
    out = []
    for row_logits, row_ids in zip(logits, index, strict=True):
        row_logps = torch.log_softmax(row_logits, dim=-1)
        out.append(row_logps.gather(-1, row_ids.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out)


def entropy_from_logits(logits: Tensor, chunk_size: int = 256) -> Tensor:
    """Entropy ``-sum_v p_v log p_v`` of each position's categorical, ``[..., V]`` -> ``[...]``.

    Uses ``log_softmax`` (max-subtracted: no overflow for large logits) in fp32, ``chunk_size``
    positions at a time; ``p = 0`` entries (``-inf`` logits) contribute exactly 0 instead of the
    ``0 * -inf = NaN`` of the textbook formula.
    """
    flat = logits.reshape(-1, logits.size(-1))
    out = []
    for chunk in flat.split(max(1, chunk_size)):
        logps = torch.log_softmax(chunk.float(), dim=-1)
        p = logps.exp()
        out.append(-(p * torch.where(p > 0, logps, torch.zeros_like(logps))).sum(-1))
    if not out:
        return logits.new_zeros(logits.shape[:-1])
    return torch.cat(out).reshape(logits.shape[:-1]).to(logits.dtype)
