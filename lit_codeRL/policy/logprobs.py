"""Training-time forward: per-token log-probs (and entropy, and the final hidden states a value
head reads) of the trainable tokens of a batch.

``with_entropy``: ``False``, ``True`` (a detached diagnostic) or ``"grad"`` (an entropy bonus
backpropagates through it). ``with_hidden``: also return the last layer's (normed) hidden states
``[B, L - start, H]`` at the positions whose logits give the log-probs, i.e. the state *before*
each token: a critic on the policy's backbone reads them (``modules/ppo.py``).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor
from transformers import DynamicCache

from lit_codeRL.policy.kv_cache import cache_keyword

EntropyMode = bool | Literal["grad"]


def token_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    start: int,
    temperature: float = 1.0,
    with_entropy: EntropyMode = False,
    with_hidden: bool = False,
) -> tuple[Tensor, ...]:
    """Log-probs of ``input_ids[:, start:]`` given everything before them, ``[B, L - start]``.

    Only the logits that predict those tokens are materialised (``logits_to_keep``): with a 49k
    vocabulary the prompt's logits would otherwise dominate activation memory. ``temperature``
    must match sampling so these agree with the engine's sampling log-probs.
    """
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    keep = input_ids.size(1) - start + 1
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        logits_to_keep=keep,
        **({"output_hidden_states": True} if with_hidden else {}),
    )
    logprobs, entropy = _from_logits(out.logits[:, :-1, :], input_ids[:, start:], temperature, with_entropy)
    if not with_hidden:
        return logprobs, entropy
    return logprobs, entropy, out.hidden_states[-1][:, start - 1 : -1]


def shares_prompts(input_ids: Tensor, attention_mask: Tensor, start: int, group_size: int) -> bool:
    """True when every run of ``group_size`` rows has identical columns ``[0, start)``."""
    rows = input_ids.size(0)
    if group_size < 2 or start < 1 or rows % group_size:
        return False
    for t in (input_ids[:, :start], attention_mask[:, :start]):
        grouped = t.view(rows // group_size, group_size, start)
        if not torch.equal(grouped, grouped[:, :1].expand_as(grouped)):
            return False
    return True


def grouped_prompt_token_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    start: int,
    group_size: int,
    temperature: float = 1.0,
    with_entropy: EntropyMode = False,
    with_hidden: bool = False,
) -> tuple[Tensor, ...]:
    """:func:`token_logprobs` for batches whose groups share their prompt (GRPO), prompt run once.

    The prompt of each group goes through the model once, with gradients; its KV cache is
    repeated for the group's rows and the completions attend to it. Backpropagation sums the
    rows' gradients into the one prompt pass, so values and gradients equal the row-by-row
    forward; the saving is ``(G - 1) / G`` of the prompt tokens' forward and backward. Falls back
    to :func:`token_logprobs` when the rows of a group do not share ``[0, start)``, or under
    gradient checkpointing (which turns the KV cache off in training).
    """
    if (
        _checkpointing(model)
        and model.training
        or not shares_prompts(input_ids, attention_mask, start, group_size)
    ):
        return token_logprobs(model, input_ids, attention_mask, start, temperature, with_entropy, with_hidden)
    hidden_kw = {"output_hidden_states": True} if with_hidden else {}
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    cache_kw = cache_keyword(model)
    head = slice(None, None, group_size)
    prompt_out = model(
        input_ids=input_ids[head, :start],
        attention_mask=attention_mask[head, :start],
        position_ids=positions[head, :start],
        use_cache=True,
        logits_to_keep=1,
        **{cache_kw: cache},
        **hidden_kw,
    )
    prompt_logits = prompt_out.logits
    hidden = [prompt_out.hidden_states[-1][:, -1:].repeat_interleave(group_size, 0)] if with_hidden else []
    targets = input_ids[:, start:]
    # The prompt pass predicts the first completion token; log-probs are taken per part and
    # joined, so the [B, T, V] logits are never copied into one tensor.
    parts = [
        _from_logits(
            prompt_logits.repeat_interleave(group_size, 0), targets[:, :1], temperature, with_entropy
        )
    ]
    if input_ids.size(1) - start > 1:
        cache.batch_repeat_interleave(group_size)  # out-of-place: the graph reaches the prompt pass
        out = model(
            input_ids=input_ids[:, start:-1],
            attention_mask=attention_mask[:, :-1],
            position_ids=positions[:, start:-1],
            use_cache=True,
            **{cache_kw: cache},
            **hidden_kw,
        )
        parts.append(_from_logits(out.logits, targets[:, 1:], temperature, with_entropy))
        if with_hidden:
            hidden.append(out.hidden_states[-1])
    logprobs = torch.cat([lp for lp, _ in parts], dim=1)
    entropy = torch.cat([e for _, e in parts], dim=1) if with_entropy else None
    if not with_hidden:
        return logprobs, entropy
    return logprobs, entropy, torch.cat(hidden, dim=1)


def _checkpointing(model: torch.nn.Module) -> bool:
    # transformers renamed the flag; PEFT wrappers forward attribute lookups to the base model.
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or name in dir(model):
            return bool(getattr(model, name))
    return False


def _from_logits(
    logits: Tensor, targets: Tensor, temperature: float, with_entropy: EntropyMode
) -> tuple[Tensor, Tensor | None]:
    from lit_codeRL.algorithms.logprobs import entropy_from_logits, selective_log_softmax

    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logprobs = selective_log_softmax(logits, targets)
    entropy = None
    if with_entropy == "grad":
        entropy = entropy_from_logits(logits)
    elif with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits.detach())
    return logprobs, entropy
