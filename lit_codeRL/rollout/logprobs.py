"""Training-time forward: per-token log-probs (and entropy) of the trainable tokens of a batch."""

from __future__ import annotations

import torch
from torch import Tensor


def token_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    start: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of ``input_ids[:, start:]`` given everything before them, ``[B, L - start]``.

    Only the logits that predict those tokens are materialised (``logits_to_keep``): with a 49k
    vocabulary the prompt's logits would otherwise dominate activation memory. ``temperature``
    must match sampling so these agree with the engine's sampling log-probs.
    """
    from lit_codeRL.algorithms.logprobs import entropy_from_logits, selective_log_softmax

    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    keep = input_ids.size(1) - start + 1
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, logits_to_keep=keep
    ).logits[:, :-1, :]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logprobs = selective_log_softmax(logits, input_ids[:, start:])
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return logprobs, entropy
