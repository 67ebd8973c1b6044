"""KV caches for the decode loop.

transformers' ``DynamicCache`` appends by ``torch.cat``-ing the whole cache every decode step; the
layer here appends into spare capacity. :class:`KVCache` is the plain preallocated cache of the
lean forward (``policy/fast_decode.py``). Both speak the engine's cache protocol:
``batch_repeat_interleave`` (a prompt's cache repeated for its group) and ``batch_select_indices``
(finished rows dropped).
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch import Tensor
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A KV-cache layer that appends into spare capacity instead of ``torch.cat``-ing the cache.

    ``DynamicLayer`` copies the whole cache every decode step (O(L^2) bytes per sequence); here a
    step writes one token's keys/values into a buffer sized for the whole completion and returns a
    view. Row selection (finished sequences) and group repetition act on the buffer.
    """

    def __init__(self, reserve: int = 256) -> None:
        super().__init__()
        self.reserve = reserve
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._len = 0

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new_len = self._len + key_states.size(-2)
        if self._k is None or new_len > self._k.size(-2):
            self._grow(key_states, value_states, new_len + self.reserve)
        self._k[..., self._len : new_len, :] = key_states
        self._v[..., self._len : new_len, :] = value_states
        self._len = new_len
        self.keys, self.values = self._k[..., :new_len, :], self._v[..., :new_len, :]
        return self.keys, self.values

    def _grow(self, key_states: Tensor, value_states: Tensor, capacity: int) -> None:
        def grown(old: Tensor | None, like: Tensor) -> Tensor:
            buf = like.new_empty(*like.shape[:-2], capacity, like.size(-1))
            if old is not None:
                buf[..., : self._len, :] = old[..., : self._len, :]
            return buf

        self._k, self._v = grown(self._k, key_states), grown(self._v, value_states)

    def get_seq_length(self) -> int:
        return self._len

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self._k is not None:
            self._k = self._k.repeat_interleave(repeats, dim=0)
            self._v = self._v.repeat_interleave(repeats, dim=0)
            self.keys, self.values = self._k[..., : self._len, :], self._v[..., : self._len, :]

    def batch_select_indices(self, indices: Tensor) -> None:
        if self._k is not None:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[..., : self._len, :], self._v[..., : self._len, :]


def decode_cache(reserve: int) -> DynamicCache:
    """A cache whose layers append in place; plain ``DynamicCache`` where transformers differs."""
    try:
        cache = DynamicCache()
        cache.layer_class_to_replicate = functools.partial(PreallocatedLayer, reserve)
        return cache
    except (AttributeError, TypeError):
        return DynamicCache()


class KVCache:
    """Per-layer key/value buffers ``[B, H_kv, capacity, d]`` written in place (the lean forward's)."""

    def __init__(self, layers: int, batch: int, heads: int, head_dim: int, capacity: int, like: Tensor):
        shape = (batch, heads, capacity, head_dim)
        self.k = [like.new_empty(shape) for _ in range(layers)]
        self.v = [like.new_empty(shape) for _ in range(layers)]
        self.length = 0

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append ``[B, H_kv, T, d]`` keys/values at the current length; views of everything so far."""
        end = self.length + k.size(2)
        self.k[layer][:, :, self.length : end] = k
        self.v[layer][:, :, self.length : end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.k = [t.repeat_interleave(repeats, dim=0) for t in self.k]
        self.v = [t.repeat_interleave(repeats, dim=0) for t in self.v]

    def batch_select_indices(self, indices: Tensor) -> None:
        self.k = [t[indices] for t in self.k]
        self.v = [t[indices] for t in self.v]


@functools.cache
def _forward_takes_cache(cls: type) -> bool:
    try:
        return "cache" in inspect.signature(cls.forward).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def cache_keyword(model: torch.nn.Module) -> str:
    """The keyword ``model``'s forward takes its KV cache by: ``cache`` (transformers >= 5.24,
    which deprecates ``past_key_values`` with a warning on every call) or ``past_key_values``
    (older transformers, where ``cache=`` would silently run without a cache). A PEFT wrapper's
    ``forward(*args, **kwargs)`` says nothing: its base model's forward is asked."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if _forward_takes_cache(type(base)) else "past_key_values"
