"""A lean forward for the engine's sampling replica of a Llama-family model (Llama, SmolLM2, Qwen2).

Why: a decode step of a small model on a CPU is not bound by its matmuls but by how many tensor
operations run per layer. transformers' Llama layer issues ~65 of them per token step (RMSNorm as
seven ops, rotary embedding as a dozen, ``repeat_kv`` copies, module calls); at ~25 us each on a
2-core box that is two thirds of a batch-16 step of SmolLM2-135M in bf16. This forward does the
same math in ~35: ``F.rms_norm``, one q/k/v projection, one gate/up projection, rotary on q and k
together, grouped-query attention without repeating the key/value heads, and a preallocated KV
cache written in place.

It is the same function as transformers' eager path (fp32 softmax, cos/sin tables cast to the
model dtype, RMSNorm upcast to fp32 and back), so its log-probs differ from the HF replica's only
by rounding order; ``tests/policy/test_fast_decode.py`` checks the logits against transformers.

The fused weights *are* the replica's parameters: ``q_proj``/``k_proj``/``v_proj`` and
``gate_proj``/``up_proj`` are re-pointed at slices of one fused tensor each, so the engine's
``sync_weights`` (which copies the trainer's parameters into the replica's) refreshes this forward
too, and the replica's own transformers forward stays usable.

In bf16 on an x86 CPU the projections also run from oneDNN-prepacked copies of those weights
(:meth:`LeanLlama.refresh`, called by the engine after every weight sync). A plain ``F.linear``
reorders its weight into oneDNN's blocked layout on every call; for a decode step's few rows that
reorder costs as much as the product: prepacked, a batch-16 decode of SmolLM2-135M ran 22-27%
faster (271 -> 337-371 tokens/s on 2 cores), the LM head alone 7.0 -> 3.8 ms. The packed copy is
the same values in another layout (rounding may differ in the last bit, as any GEMM blocking).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

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


class KVCache:
    """Per-layer key/value buffers ``[B, H_kv, capacity, d]`` written in place; the engine's cache
    protocol (``batch_repeat_interleave``, ``batch_select_indices``)."""

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


def _fuse(modules: list[torch.nn.Linear], attr: str) -> Tensor | None:
    """One tensor holding the modules' ``attr`` back to back; the modules' own parameters become
    views of it (same values), so copying into them updates the fused tensor."""
    parts = [getattr(m, attr) for m in modules]
    if any(p is None for p in parts):
        return None
    fused = torch.cat([p.detach() for p in parts], dim=0)
    start = 0
    for m, p in zip(modules, parts, strict=True):
        getattr(m, attr).data = fused[start : start + p.size(0)]
        start += p.size(0)
    return fused


class LeanLlama:
    """Callable like the HF model for the engine's sampling loop: ``(input_ids, attention_mask,
    position_ids, past_key_values, logits_to_keep)`` -> an object with ``.logits``."""

    def __init__(self, model: torch.nn.Module) -> None:
        if not supports(model):
            raise ValueError("LeanLlama needs a plain llama/qwen2-layout model")
        cfg, inner = model.config, model.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.groups = self.heads // self.kv_heads
        self.scale = self.head_dim**-0.5
        self.eps = cfg.rms_norm_eps
        self.hidden = cfg.hidden_size
        self.embed = inner.embed_tokens.weight
        self.lm_head = model.get_output_embeddings().weight
        self.norm = inner.norm.weight
        self.rotary = inner.rotary_emb
        self.layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            projections = [attn.q_proj, attn.k_proj, attn.v_proj]
            self.layers.append(
                _Layer(
                    norm_in=layer.input_layernorm.weight,
                    qkv=_fuse(projections, "weight"),
                    qkv_bias=_fuse(projections, "bias"),
                    o=attn.o_proj.weight,
                    norm_post=layer.post_attention_layernorm.weight,
                    gate_up=_fuse([mlp.gate_proj, mlp.up_proj], "weight"),
                    down=mlp.down_proj.weight,
                )
            )
        # rotate_half(x) = cat(-x2, x1) = roll(x, d/2) * sign: the sign folds into the sin table
        half = self.head_dim // 2
        self.sign = torch.cat([-torch.ones(half), torch.ones(half)]).to(self.embed)
        self._packed: dict[int, Tensor] = {}
        self.refresh()

    def refresh(self, batch_hint: int = 16) -> None:
        """Re-pack the projection weights after they changed (the engine calls this after every
        ``sync_weights``). Packs only where oneDNN computes in the weights' dtype natively (bf16
        on an x86 CPU); elsewhere, or if packing fails, the plain ``F.linear`` path runs."""
        self._packed = {}
        if not _can_pack(self.embed):
            return
        weights = [w for layer in self.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)]
        try:
            for w in [*weights, self.lm_head]:
                self._packed[id(w)] = torch.ops.mkldnn._reorder_linear_weight(w.detach(), batch_hint)
        except (RuntimeError, AttributeError):
            self._packed = {}

    def _linear(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        packed = self._packed.get(id(weight))
        if packed is None:
            return F.linear(x, weight, bias)
        rows = x.reshape(-1, x.size(-1))
        out = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")
        return out.view(*x.shape[:-1], out.size(-1))

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), batch, self.kv_heads, self.head_dim, capacity, self.embed)

    @torch.no_grad()
    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        position_ids: Tensor,
        past_key_values: KVCache,
        logits_to_keep: int = 0,
        **_: object,
    ) -> _Output:
        cache, (batch, steps) = past_key_values, input_ids.shape
        dtype = self.embed.dtype
        x = F.embedding(input_ids, self.embed)
        cos, sin = self.rotary(x, position_ids)  # [B, T, d] in the model dtype, as transformers
        cos, sin = cos[:, None], (sin * self.sign)[:, None]
        total = cache.length + steps
        mask = self._mask(attention_mask[:, :total].bool(), cache.length, steps, dtype)
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
            keys, values = cache.write(i, qk[:, heads:], qkv[:, heads + kv :])
            # query head h reads key/value head h // groups: [B, kv, groups * T, d] against [B, kv, L, d]
            q = qk[:, :heads].reshape(batch, kv, groups * steps, d)
            scores = torch.matmul(q, keys.transpose(2, 3)) * self.scale + mask
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(dtype)
            out = torch.matmul(probs, values).view(batch, heads, steps, d).transpose(1, 2)
            x = x + self._linear(out.reshape(batch, steps, heads * d), layer.o)
            h = F.rms_norm(x, (self.hidden,), layer.norm_post, self.eps)
            gate, up = self._linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + self._linear(F.silu(gate) * up, layer.down)
        cache.length = total
        if logits_to_keep:
            x = x[:, -logits_to_keep:]
        x = F.rms_norm(x, (self.hidden,), self.norm, self.eps)
        return _Output(logits=self._linear(x, self.lm_head))

    def _mask(self, keys_valid: Tensor, past: int, steps: int, dtype: torch.dtype) -> Tensor:
        """Additive ``[B, 1, groups * T, L]`` mask: padding keys and (prefill) future keys get the
        dtype's minimum, as transformers' eager mask, so an all-padding query row stays finite."""
        allowed = keys_valid[:, None, None, :]  # [B, 1, 1, L]
        if steps > 1:
            total = keys_valid.size(1)
            query_pos = torch.arange(past, past + steps, device=keys_valid.device)[:, None]
            causal = torch.arange(total, device=keys_valid.device)[None, :] <= query_pos  # [T, L]
            allowed = allowed & causal[None, None]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=keys_valid.device)
        mask = mask.masked_fill(~allowed, torch.finfo(dtype).min)
        return mask.repeat(1, 1, self.groups, 1) if steps > 1 else mask


def _can_pack(like: Tensor) -> bool:
    """oneDNN prepacking: bf16 weights on a CPU with the mkldnn backend (x86 builds of torch)."""
    return (
        like.device.type == "cpu"
        and like.dtype == torch.bfloat16
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )
