"""The weights an engine with its own copy is pushed (vLLM): full tensors, HF names, LoRA merged
into the exported copy without touching the trainable adapters."""

from __future__ import annotations

import copy

import torch

from lit_codeRL.policy.loading import LoraSettings, load_model
from lit_codeRL.policy.weights import export_weights, exported_state_dict


def _ids() -> torch.Tensor:
    return torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4]])


def test_a_plain_model_exports_its_own_state_dict_names():
    model, _ = load_model(name_or_path="tiny-random")
    exported = exported_state_dict(model)
    params = dict(model.named_parameters())
    assert set(exported) == set(params)
    for name, tensor in exported.items():
        assert torch.equal(tensor, params[name])
    half = exported_state_dict(model, torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in half.values())


def test_lora_is_merged_into_the_exported_copy_only():
    torch.manual_seed(0)
    base, _ = load_model(name_or_path="tiny-random")
    plain = copy.deepcopy(base)  # the architecture vLLM has: no adapters
    policy, _ = load_model(name_or_path="tiny-random", lora=LoraSettings(r=4, alpha=8))
    # a trained adapter: B is zero at init (the merge would be a no-op), so give it weight
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.2)
    adapters = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}
    bases = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" not in n}
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}

    exported = exported_state_dict(policy)

    # HF names, no adapter parameters, every parameter of the plain model
    assert set(exported) == set(dict(plain.named_parameters()))
    assert not any("lora" in n or "base_layer" in n for n in exported)
    # the plain model loaded with the export computes what the adapted policy computes
    plain.load_state_dict(exported, strict=False)
    with torch.no_grad():
        want = policy(input_ids=_ids()).logits
        got = plain(input_ids=_ids()).logits
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()
    # and the policy is untouched: same adapters, same base weights, same trainable set, unmerged
    for n, p in policy.named_parameters():
        ref = adapters.get(n, bases.get(n))
        assert torch.equal(p, ref), n
    assert {n for n, p in policy.named_parameters() if p.requires_grad} == trainable
    assert not any(getattr(m, "merged", False) for m in policy.modules())
    # a merged export differs from the bare base weights where adapters are
    up = next(n for n in exported if n.endswith("mlp.up_proj.weight"))
    assert not torch.equal(exported[up], dict(base.named_parameters())[up])


def test_export_streams_one_tensor_at_a_time():
    model, _ = load_model(name_or_path="tiny-random")
    stream = export_weights(model)
    name, tensor = next(stream)
    assert isinstance(name, str) and isinstance(tensor, torch.Tensor)
