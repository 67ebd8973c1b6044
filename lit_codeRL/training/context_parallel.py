"""Sequence (context) parallelism for the training forward: one long row split across ranks.

A 20-30k-token multi-turn episode does not fit one rank's activation memory: every layer keeps
``L x hidden`` activations, attention ``L x L`` scores per head and the loss ``L x vocab`` logits.
Here the ``P`` ranks of a group each run the forward on one contiguous chunk of ``C = L / P``
positions of the *same* rows, so all of those shrink by ``P``:

* **Attention with all-gathered keys and values** (Llama 3's context parallelism): each rank's
  queries are its chunk's, its keys and values are all-gathered along the sequence (``L`` per
  rank, but only ``num_key_value_heads`` of them: 3 of SmolLM2's 9 heads), and the mask is the
  global causal + padding mask cut to the chunk's rows. Why not Ulysses' head all-to-all: it
  needs the head count divisible by ``P`` (SmolLM2-135M has 9 heads: no split over 2 ranks).
  Why not a ring: it computes the same thing with the transfer overlapped with compute, which
  buys nothing on gloo/CPU and costs an online-softmax backward of our own; the all-gather keeps
  transformers' own SDPA attention and autograd for the backward.
* **Positions are global** (``position_ids`` of the chunk), so RoPE is that of the whole row.
* **Log-probs** of the chunk's next tokens are computed locally (every rank holds the whole row's
  ids, so the token after the chunk's last position is known) and all-gathered into the whole
  row's ``[B, L - start]``: the caller's loss is unchanged and every rank computes the same value.

Gradients: the all-gather of keys/values sums, in its backward, what every rank's queries sent
to this rank's keys; the all-gather of the log-probs gives each rank the gradient of its own
chunk only (every rank's loss is the same function of the gathered log-probs). Each rank's
parameter gradient is then its chunk's share, and their **sum** over the group is the unsharded
gradient (``tests/training/test_context_parallel.py`` checks both against the unsharded forward
on 2 gloo processes).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

ATTENTION_NAME = "lit_context_parallel"
_STATE = threading.local()


@dataclass
class _Chunk:
    group: dist.ProcessGroup | None
    offset: int
    mask: Tensor
    """``[B, L]`` the whole row's padding mask."""


class _GatherSequence(torch.autograd.Function):
    """All-gather along ``dim``. Backward: the sum over ranks of their gradients for this rank's
    slice (``reduce=True``: every rank used every slice, as keys) or this rank's own gradient of
    its slice (``reduce=False``: every rank computed the same loss from the gathered tensor)."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int, group, reduce: bool) -> Tensor:
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)
        ctx.dim, ctx.group, ctx.reduce, ctx.rank, ctx.size = dim, group, reduce, rank, x.size(dim)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad: Tensor):
        grad = grad.contiguous()
        if ctx.reduce:
            dist.all_reduce(grad, group=ctx.group)
        return grad.narrow(ctx.dim, ctx.rank * ctx.size, ctx.size), None, None, None


def gather_sequence(x: Tensor, dim: int, group=None, reduce: bool = True) -> Tensor:
    return _GatherSequence.apply(x, dim, group, reduce)


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers attention function: this rank's queries against all-gathered keys/values."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    chunk: _Chunk = _STATE.chunk
    key = gather_sequence(key, 2, chunk.group)
    value = gather_sequence(value, 2, chunk.group)
    c, length = query.size(2), key.size(2)
    rows = torch.arange(chunk.offset, chunk.offset + c, device=query.device)[:, None]
    cols = torch.arange(length, device=query.device)[None, :]
    allowed = (cols <= rows) & chunk.mask[:, None, None, :length].bool()
    allowed = allowed | (cols == rows)  # a padded query row keeps itself: no empty softmax row
    return sdpa_attention_forward(
        module, query, key, value, allowed, dropout=dropout, scaling=scaling, is_causal=False, **kwargs
    )


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTENTION_NAME, _attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)  # built by the model, unused
    _REGISTERED = True


@contextlib.contextmanager
def _context_parallel_attention(model: torch.nn.Module, chunk: _Chunk) -> Iterator[None]:
    _register()
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = ATTENTION_NAME
    _STATE.chunk = chunk
    try:
        yield
    finally:
        config._attn_implementation = before
        _STATE.chunk = None


_CHECKPOINTING_REFUSAL = (
    "model.sequence_parallel_size > 1 does not support model.gradient_checkpointing (backward's "
    "recomputation would run without the context-parallel attention): turn one of them off"
)
"""Why not keep the attention bound through backward: the recomputation runs layer by layer inside
the caller's ``backward()``, long after this forward returned, and transformers picks the attention
by ``config._attn_implementation`` at that time; keeping the swap installed until every backward is
done would leak it into every other forward of the model (the reference, rollouts)."""


def context_parallel_logprobs(
    model: torch.nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    start: int,
    temperature: float = 1.0,
    group: dist.ProcessGroup | None = None,
    pad_token_id: int = 0,
    with_entropy: bool | str = False,
) -> tuple[Tensor, Tensor | None]:
    """``([B, L - start]`` log-probs of ``input_ids[:, start:]``, entropies or ``None)``, as
    ``policy.logprobs.token_logprobs`` computes them, with the sequence split over ``group``'s
    ranks (every rank passes the same rows and gets the same result; see the module docstring
    for the gradients). A model with gradient checkpointing on is refused (a ``ConfigError``)."""
    from lit_codeRL.errors import ConfigError
    from lit_codeRL.policy.logprobs import _checkpointing, _from_logits

    if _checkpointing(model):
        # Checked before any collective, so every rank refuses alike (no rank left waiting).
        raise ConfigError(_CHECKPOINTING_REFUSAL)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    rows, length = input_ids.shape
    pad = (-length) % world
    if pad:  # right padding: after every real token, so causally invisible to them
        input_ids = F.pad(input_ids, (0, pad), value=pad_token_id)
        attention_mask = F.pad(attention_mask, (0, pad), value=0)
    total = input_ids.size(1)
    c = total // world
    lo, hi = rank * c, (rank + 1) * c
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with _context_parallel_attention(model, _Chunk(group, lo, attention_mask)):
        logits = model(input_ids=input_ids[:, lo:hi], position_ids=positions[:, lo:hi]).logits
    # position p predicts token p + 1; the chunk's last target is the next rank's first token
    targets = F.pad(input_ids[:, lo + 1 : hi + 1], (0, c - (min(hi + 1, total) - (lo + 1))), value=0)
    local, entropy = _from_logits(logits, targets, temperature, with_entropy)
    gathered = gather_sequence(local, 1, group, reduce=False)  # [B, total]: logp of token p + 1
    if entropy is not None:
        entropy = gather_sequence(entropy, 1, group, reduce=False)[:, start - 1 : length - 1]
    return gathered[:, start - 1 : length - 1], entropy


__all__ = ["ATTENTION_NAME", "context_parallel_logprobs", "gather_sequence"]
