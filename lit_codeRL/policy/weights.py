"""The policy's weights as an inference engine wants them: full tensors, LoRA merged, HF names.

An engine that keeps its own copy of the weights (vLLM) is refreshed after every optimizer step
from :func:`export_weights`: one ``(name, tensor)`` at a time, so the whole model is never held
twice in memory. The names are those of the plain HF model (``model.layers.0.mlp.up_proj.weight``),
whatever wraps the policy:

* **FSDP2 shards** are all-gathered one parameter at a time (:func:`full_tensor`, a collective:
  every rank iterates, in the same order).
* **LoRA** (PEFT) is merged into the *exported copy* only: ``W + scale * B @ A`` for every
  active adapter, computed by PEFT's own ``get_delta_weight``; the trainable adapters and the
  base weights of the live module are not touched (no merge/unmerge round trip on the module,
  which in bf16 would drift the base weights by a rounding error every step). The adapters'
  own parameters are not exported.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from lit_codeRL.policy.dtensor import full_tensor

_PEFT_PREFIX = "base_model.model."


def _lora_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Module name -> PEFT LoRA layer (``lora_A``/``lora_B`` beside a ``base_layer``)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # peft is a dependency; this only guards odd installs
        return {}
    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def _plain_name(name: str) -> str:
    """The HF name of a parameter of a PEFT-wrapped model."""
    if name.startswith(_PEFT_PREFIX):
        name = name[len(_PEFT_PREFIX) :]
    return name.replace(".base_layer.", ".")


@torch.no_grad()
def export_weights(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[tuple[str, Tensor]]:
    """``(hf_name, full tensor)`` of every parameter of the policy as a plain HF model would have
    it, LoRA merged (see the module docstring), cast to ``dtype`` when given. Tied parameters come
    once (``named_parameters`` de-duplicates: an engine loading the tied embedding fills both)."""
    lora = _lora_layers(model)
    for name, param in model.named_parameters():
        if ".lora_" in name:  # lora_A / lora_B / lora_embedding_*: merged below, not exported
            continue
        tensor = full_tensor(param.detach())
        owner = name.rsplit(".", 2)[0] if name.endswith(".base_layer.weight") else None
        layer = lora.get(owner) if owner is not None else None
        if layer is not None and not getattr(layer, "merged", False):
            merged = tensor.clone()
            for adapter in layer.active_adapters:
                if adapter in getattr(layer, "lora_A", {}):
                    merged += full_tensor(layer.get_delta_weight(adapter)).to(merged.dtype)
            tensor = merged
        yield _plain_name(name), tensor if dtype is None else tensor.to(dtype)


def exported_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, Tensor]:
    """:func:`export_weights` as a dict (tests, small models)."""
    return dict(export_weights(model, dtype))


__all__ = ["export_weights", "exported_state_dict"]
