"""A lean decode forward for Llama-family models (Llama, SmolLM2, Qwen2): the engine's CPU sampler.

Why: a decode step of a small model on a CPU is not bound by its matmuls but by how many tensor
operations run per layer and by how each weight is laid out for the product. transformers' Llama
layer issues ~65 operations per token step (RMSNorm as seven ops, rotary embedding as a dozen,
``repeat_kv`` copies, module calls); at ~25 us each on a 2-core box that is two thirds of a
batch-16 step of SmolLM2-135M in bf16. This forward does the same math in ~35: ``F.rms_norm``, one
q/k/v projection, one gate/up projection, rotary on q and k together, grouped-query attention
without repeating the key/value heads, and a preallocated KV cache written in place.

It is the same function as transformers' forward (cos/sin tables cast to the model dtype, RMSNorm
upcast to fp32 and back; a decode step's softmax in fp32 as the eager path, a prefill through
``F.scaled_dot_product_attention`` as transformers' default SDPA path), so its log-probs differ
from the module's own forward only by rounding order; ``tests/policy/test_fast_decode.py`` checks the logits against
transformers.

It runs in the dtype of the module it reads (the live fp32 policy, or the engine's bf16 replica)
and keeps its own copies of the projection weights, never touching the module's parameters: q/k/v
and gate/up fused into one tensor each and, where oneDNN can (:func:`packing_available`: an x86
CPU, in fp32, and in bf16 only where the CPU computes in it natively), prepacked into oneDNN's
blocked layout. A plain ``F.linear`` reorders its weight into that layout on every call, which for
a decode step's few rows costs as much as the product: prepacked, a batch-16 bf16 decode of
SmolLM2-135M ran 22-27% faster on a CPU with AVX-512-BF16, and the fp32 projections 20-40% faster
on an AVX2-only CPU (``scripts/bench_generation.py``). The copies are rebuilt whenever the
module's parameters change: the engine's ``sync_weights`` (after every optimizer step)
invalidates them, and before every new sequence :meth:`LeanLlama.refresh_if_stale` also compares
the parameters' storage and version counters, which catches in-place updates made elsewhere
(``load_state_dict``, a test's ``mul_``; fused AdamW does not bump the counters, hence the
explicit invalidation).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from lit_codeRL.policy import precision
from lit_codeRL.policy.kv_cache import KVCache

_BUILDS = itertools.count(1)
"""Numbers every build of weight copies (a kept prefix's keys belong to one build)."""

PACK_BATCH_HINT = 16
"""Rows oneDNN's prepacked layout is chosen for (decode batches are about this size)."""


SUPPORTED = ("llama", "qwen2")
"""``config.model_type`` values with the layer layout this forward implements."""


def supports(model: torch.nn.Module) -> bool:
    """A plain (not adapter-wrapped) Llama-layout model with default rotary embedding and SiLU MLP."""
    config = getattr(model, "config", None)
    inner = getattr(model, "model", None)
    if config is None or inner is None or getattr(config, "model_type", None) not in SUPPORTED:
        return False
    rope = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    if (rope.get("rope_type") or rope.get("type") or "default") != "default":
        return False
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "mlp_bias", False):
        return False
    if getattr(config, "use_sliding_window", False):
        return False
    if hasattr(model, "peft_config") or any("lora" in name for name, _ in model.named_modules()):
        return False  # adapters would be silently skipped
    return bool(getattr(inner, "layers", None))


@dataclass
class _Layer:
    norm_in: Tensor
    qkv: Tensor
    qkv_bias: Tensor | None
    o: Tensor
    norm_post: Tensor
    gate_up: Tensor
    down: Tensor


@dataclass
class _Output:
    logits: Tensor


class LeanLlama:
    """Callable like the HF model for the engine's sampling loop: ``(input_ids, attention_mask,
    position_ids, cache, logits_to_keep)`` -> an object with ``.logits``, computed from
    ``model``'s current weights in their dtype (see the module docstring)."""

    def __init__(self, model: torch.nn.Module) -> None:
        if not supports(model):
            raise ValueError("LeanLlama needs a plain llama/qwen2-layout model")
        cfg, inner = model.config, model.model
        self.model = model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.scale = self.head_dim**-0.5
        self.eps = cfg.rms_norm_eps
        self.hidden = cfg.hidden_size
        self.rotary = inner.rotary_emb
        # rotate_half(x) = cat(-x2, x1) = roll(x, d/2) * sign: the sign folds into the sin table
        half = self.head_dim // 2
        self.sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(inner.embed_tokens.weight)
        self.packed = False
        """True when the projections run from oneDNN-prepacked copies."""
        self.layers: list[_Layer] = []
        self._seen: tuple[tuple[int, int], ...] = ()
        self.refresh()

    def _versions(self) -> tuple[tuple[int, int], ...]:
        # In-place updates (optimizer steps, copy_, load_state_dict) bump a tensor's version
        # counter; a reassigned ``.data`` moves its storage.
        return tuple((p.data_ptr(), p._version) for p in self.model.parameters())

    def invalidate(self) -> None:
        """Rebuild the weight copies before the next sequence (the engine's ``sync_weights``: a
        fused optimizer updates parameters in place without bumping their version counters)."""
        self._seen = ()

    def refresh_if_stale(self) -> bool:
        """Rebuild the weight copies if :meth:`invalidate` was called or a parameter's storage or
        version counter changed since the last build."""
        if self._versions() == self._seen:
            return False
        self.refresh()
        return True

    @torch.no_grad()
    def refresh(self) -> None:
        """Rebuild the fused, and where :func:`packing_available` prepacked, projection weights
        from the module's current parameters.

        Unpacked, every weight keeps the address it had: new values are written into the tensors
        of the last build. A captured decode graph (``policy/graph_decode.py``) replays kernels
        that read those addresses, so it stays valid across optimizer steps without a recapture."""
        inner = self.model.model
        self.build = next(_BUILDS)
        was_packed, old_layers = self.packed, self.layers
        self.packed = inner.embed_tokens.weight.device.type == "cpu" and packing_available(
            inner.embed_tokens.weight.dtype
        )
        keep = _refill if not (self.packed or was_packed) else _replace
        prepare = _pack if self.packed else _plain
        self.embed = keep(getattr(self, "embed", None), inner.embed_tokens.weight.detach())
        self.norm = keep(getattr(self, "norm", None), inner.norm.weight.detach())
        layers = []
        for i, layer in enumerate(inner.layers):
            attn, mlp = layer.self_attn, layer.mlp
            old = old_layers[i] if i < len(old_layers) else None
            layers.append(
                _Layer(
                    norm_in=keep(old and old.norm_in, layer.input_layernorm.weight.detach()),
                    qkv=keep(
                        old and old.qkv,
                        prepare(attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight),
                    ),
                    qkv_bias=keep(old and old.qkv_bias, _fused_bias(attn.q_proj, attn.k_proj, attn.v_proj)),
                    o=keep(old and old.o, prepare(attn.o_proj.weight)),
                    norm_post=keep(old and old.norm_post, layer.post_attention_layernorm.weight.detach()),
                    gate_up=keep(old and old.gate_up, prepare(mlp.gate_proj.weight, mlp.up_proj.weight)),
                    down=keep(old and old.down, prepare(mlp.down_proj.weight)),
                )
            )
        self.layers = layers
        self.lm_head = keep(
            getattr(self, "lm_head", None), prepare(self.model.get_output_embeddings().weight)
        )
        self._seen = self._versions()

    def addresses(self) -> tuple[int, ...]:
        """Where every weight the forward reads lives (a captured graph is valid while these hold)."""
        tensors = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            tensors += [layer.norm_in, layer.qkv, layer.o, layer.norm_post, layer.gate_up, layer.down]
            tensors += [layer.qkv_bias] if layer.qkv_bias is not None else []
        # prepacked (opaque, storage-less) tensors are only ever replaced: their identity will do
        return tuple(id(t) if self.packed else t.data_ptr() for t in tensors)

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        if not self.packed:
            return F.linear(x, weight, bias)
        rows = x.reshape(-1, x.size(-1))
        out = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
        return out.view(*x.shape[:-1], out.size(-1))

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), batch, self.kv_heads, self.head_dim, capacity, self.embed)

    @torch.no_grad()
    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        cache: KVCache | None = None,
        logits_to_keep: int = 0,
        past_key_values: KVCache | None = None,
        **_: object,
    ) -> _Output:
        cache = cache if cache is not None else past_key_values
        if cache.length == 0:  # a new sequence: read the module's current weights
            self.refresh_if_stale()
        steps = input_ids.size(1)
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.rotary_tables(x, position_ids)
        total = cache.length + steps
        mask = self._mask(attention_mask[:, :total].bool(), cache.length, steps, self.embed.dtype)
        x = self.layers_forward(x, cos, sin, mask, cache.write)
        cache.length = total
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        return _Output(logits=self.head(x))

    def rotary_tables(self, x: Tensor, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        """``cos, sin`` ``[B, 1, T, d]`` for ``position_ids`` ``[B, T]``, in the model dtype as
        transformers computes them, the rotate-half sign folded into ``sin``."""
        cos, sin = self.rotary(x, position_ids)
        return cos[:, None], (sin * self.sign)[:, None]

    def layers_forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Tensor,
        write: Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor]],
    ) -> Tensor:
        """The decoder layers over hidden states ``x`` ``[B, T, hidden]``; ``write(layer, k, v)``
        stores this step's keys/values ``[B, H_kv, T, d]`` and returns every key/value the queries
        attend to, against which ``mask`` applies (additive: ``[B, 1, T, L]`` for a prefill of
        ``T > 1`` tokens, through the fused attention kernel; ``[B, 1, 1, L]`` or broadcastable to
        ``[B, H_kv, groups, L]`` for a decode step)."""
        batch, steps = x.shape[:2]
        heads, kv, groups, d = self.heads, self.kv_heads, self.groups, self.head_dim
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (self.hidden,), layer.norm_in, self.eps)
            qkv = (
                self._linear(h, layer.qkv, layer.qkv_bias)
                .view(batch, steps, heads + 2 * kv, d)
                .transpose(1, 2)
            )
            qk = qkv[:, : heads + kv]
            qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin
            keys, values = write(i, qk[:, heads:], qkv[:, heads + kv :])
            if steps > 1:
                # A prefill: the fused kernel never materialises the fp32 [T, L] scores (its attention
                # 3.5x faster; 10 x 1,500 tokens prefilled in 36 s instead of 64 s on 2 cores).
                out = F.scaled_dot_product_attention(
                    qk[:, :heads], keys, values, attn_mask=mask, scale=self.scale, enable_gqa=True
                ).transpose(1, 2)
            else:
                # query head h reads key/value head h // groups: [B, kv, groups, d] against [B, kv, L, d]
                q = qk[:, :heads].reshape(batch, kv, groups * steps, d)
                scores = torch.matmul(q, keys.transpose(2, 3)) * self.scale + mask
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(x.dtype)
                out = torch.matmul(probs, values).view(batch, heads, steps, d).transpose(1, 2)
            x = x + self._linear(out.reshape(batch, steps, heads * d), layer.o)
            h = F.rms_norm(x, (self.hidden,), layer.norm_post, self.eps)
            gate, up = self._linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + self._linear(F.silu(gate) * up, layer.down)
        return x

    def head(self, x: Tensor) -> Tensor:
        """Final norm and LM head: hidden states -> logits."""
        return self._linear(F.rms_norm(x, (self.hidden,), self.norm, self.eps), self.lm_head)

    def _mask(self, keys_valid: Tensor, past: int, steps: int, dtype: torch.dtype) -> Tensor:
        """Additive ``[B, 1, T, L]`` mask: padding keys and (prefill) future keys get the
        dtype's minimum, as transformers' eager mask, so an all-padding query row stays finite."""
        allowed = keys_valid[:, None, None, :]  # [B, 1, 1, L]
        if steps > 1:
            total = keys_valid.size(1)
            query_pos = torch.arange(past, past + steps, device=keys_valid.device)[:, None]
            causal = torch.arange(total, device=keys_valid.device)[None, :] <= query_pos  # [T, L]
            allowed = allowed & causal[None, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=keys_valid.device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
        return mask


def _plain(*weights: Tensor) -> Tensor:
    """The weights stacked into one ``[sum(out), in]`` tensor (a view of the one weight alone)."""
    parts = [w.detach() for w in weights]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)


def _pack(*weights: Tensor) -> Tensor:
    """The stacked weights in oneDNN's prepacked layout, for ``torch.ops.mkldnn._linear_pointwise``."""
    return torch.ops.mkldnn._reorder_linear_weight(_plain(*weights), PACK_BATCH_HINT)


def _refill(old: Tensor | None, new: Tensor | None) -> Tensor | None:
    """``new``'s values at ``old``'s address where the layouts match (see ``LeanLlama.refresh``)."""
    if old is None or new is None or old.data_ptr() == new.data_ptr():
        return new
    if old.shape != new.shape or old.dtype != new.dtype or old.device != new.device:
        return new
    old.copy_(new)
    return old


def _replace(old: Tensor | None, new: Tensor | None) -> Tensor | None:
    """``new`` itself (prepacked weights are opaque: rebuilt, never written in place)."""
    return new


def _fused_bias(*modules: torch.nn.Linear) -> Tensor | None:
    biases = [m.bias for m in modules]
    return None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])


@functools.cache
def packing_available(dtype: torch.dtype) -> bool:
    """Can (and should) the lean forward run ``dtype`` projections from oneDNN-prepacked weights here?

    The one gate for packing, asked by the forward and by the tests alike. It tries it: pack a
    small weight, multiply, compare with ``F.linear`` (a torch without the mkldnn ops, or a CPU
    where oneDNN cannot reorder that dtype, says no by raising). bf16 additionally needs a CPU that
    computes in bf16 natively (``precision.cpu_has_native_bf16``): emulated bf16 is no faster."""
    if dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    if dtype == torch.bfloat16:
        if not precision.cpu_has_native_bf16():
            return False
    try:
        generator = torch.Generator().manual_seed(0)
        w = torch.randn(48, 32, generator=generator).to(dtype)
        x = torch.randn(4, 32, generator=generator).to(dtype)
        got = torch.ops.mkldnn._linear_pointwise(x, _pack(w), None, "none", [], "")
        return bool(torch.allclose(got.float(), F.linear(x, w).float(), atol=0.05, rtol=0.02))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
