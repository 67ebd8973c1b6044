"""The lean Llama forward of the sampling replica computes what transformers computes."""

from __future__ import annotations

import copy

import pytest
import torch

from lit_codeRL.policy.fast_decode import LeanLlama, packing_available, supports
from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.kv_cache import decode_cache
from lit_codeRL.policy.logprobs import token_logprobs
from lit_codeRL.policy.sampling import SamplingParams


def _eager(model):
    ref = copy.deepcopy(model).eval()
    ref.set_attn_implementation("eager")
    return ref


def _left_padded(batch: int = 3, length: int = 9):
    torch.manual_seed(0)
    ids = torch.randint(5, 500, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, :4] = 0
    mask[2, :1] = 0
    return ids, mask


def test_prefill_and_decode_equal_transformers_in_fp32(tiny_model):
    model, _ = tiny_model
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA is exercised
    ref, lean = _eager(model), LeanLlama(copy.deepcopy(model))
    ids, mask = _left_padded()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    hf_cache, lean_cache = decode_cache(8), lean.new_cache(ids.size(0), ids.size(1) + 8)
    with torch.no_grad():
        want = ref(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=hf_cache).logits
        got = lean(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=lean_cache).logits
        real = mask.bool()
        torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
        nxt = pos[:, -1:] + 1
        for _ in range(4):
            token = torch.randint(5, 500, (ids.size(0), 1))
            mask = torch.cat([mask, mask.new_ones(ids.size(0), 1)], 1)
            want = ref(
                input_ids=token, attention_mask=mask, position_ids=nxt, past_key_values=hf_cache
            ).logits
            got = lean(
                input_ids=token, attention_mask=mask, position_ids=nxt, past_key_values=lean_cache
            ).logits
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            nxt = nxt + 1


def test_engine_samples_through_the_lean_forward_and_its_logprobs_are_the_replicas(tiny_model):
    """A bf16 policy with an fp32 sampling replica: the lean forward runs (prefill, group repeat,
    finished-row pruning) and its sampling log-probs equal the replica's transformers forward."""
    model, tokenizer = tiny_model
    policy = copy.deepcopy(model).to(torch.bfloat16)
    engine = HFGenerationEngine(tokenizer, policy, dtype=torch.float32)
    assert engine._lean is not None
    # one token id in eight ends a row: rows finish at different steps, so the cache is pruned
    engine.stop_token_ids = list(range(0, policy.config.vocab_size, 8))
    texts = ["Write a function add(a, b).", "Reverse a string s in Python, please."]
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
        )
        for t in texts
    ]
    ids, mask = engine.encode_prompts(prompts)
    out = engine.generate(
        ids,
        mask,
        SamplingParams(max_new_tokens=16, temperature=0.8),
        num_generations=3,
        generator=torch.Generator().manual_seed(0),
    )
    lengths = out.completion_mask.sum(1)
    assert out.num_completion_tokens > 10 and len(set(lengths.tolist())) > 2  # pruned at several steps
    full = torch.cat([out.prompt_ids, out.completion_ids], 1)
    full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        want, _ = token_logprobs(engine.sampler, full, full_mask, out.prompt_ids.size(1), 0.8)
    torch.testing.assert_close(out.logprobs, want * out.completion_mask, atol=1e-4, rtol=1e-4)


def test_sync_weights_refreshes_the_fused_projections(tiny_model):
    model, tokenizer = tiny_model
    live = copy.deepcopy(model)
    engine = HFGenerationEngine(tokenizer, live, dtype=torch.bfloat16)
    lean = engine._lean
    assert lean is not None
    ids, mask = _left_padded()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)

    def logits(forward: LeanLlama) -> torch.Tensor:
        cache = forward.new_cache(ids.size(0), ids.size(1) + 1)
        return forward(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache).logits

    before = logits(lean)
    with torch.no_grad():
        for layer in live.model.layers:  # the projections that live in fused tensors
            for proj in (layer.self_attn.k_proj, layer.mlp.up_proj):
                proj.weight.mul_(-1.5)
    engine.sync_weights(live)
    assert engine._lean is lean  # refreshed in place, not rebuilt
    fresh = HFGenerationEngine(tokenizer, live, dtype=torch.bfloat16)._lean
    after = logits(lean)
    assert not torch.allclose(after, before)
    torch.testing.assert_close(after, logits(fresh))


@pytest.mark.skipif(not packing_available(torch.bfloat16), reason="no native bf16 oneDNN packing on this CPU")
def test_prepacked_bf16_projections_compute_the_plain_product(tiny_model, monkeypatch):
    _check_packed_equals_plain(tiny_model[0], torch.bfloat16, monkeypatch, atol=0.05, rtol=0.02)


@pytest.mark.skipif(not packing_available(torch.float32), reason="no oneDNN on this torch build")
def test_prepacked_fp32_projections_compute_the_plain_product(tiny_model, monkeypatch):
    _check_packed_equals_plain(tiny_model[0], torch.float32, monkeypatch, atol=1e-5, rtol=1e-5)


def _check_packed_equals_plain(model, dtype: torch.dtype, monkeypatch, atol: float, rtol: float) -> None:
    """The oneDNN-prepacked weights hold the module's values: logits as with plain ``F.linear``
    (rounding apart), prefill and decode, and re-packed when the module's weights change. The
    gate that skips this test is the one the forward asks (``packing_available``), so where it
    says yes the forward packs."""
    from lit_codeRL.policy import fast_decode

    module = copy.deepcopy(model).to(dtype)
    packed = LeanLlama(module)
    assert packed.packed
    with monkeypatch.context() as m:
        m.setattr(fast_decode, "packing_available", lambda dtype: False)
        plain = LeanLlama(module)
    assert not plain.packed
    ids, mask = _left_padded()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)

    def run(lean: LeanLlama) -> torch.Tensor:
        cache = lean.new_cache(ids.size(0), ids.size(1) + 1)
        prefill = lean(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache)
        step = lean(
            input_ids=ids[:, :1],
            attention_mask=torch.cat([mask, mask.new_ones(ids.size(0), 1)], 1),
            position_ids=pos[:, -1:] + 1,
            cache=cache,
        )
        return torch.cat([prefill.logits[mask.bool()], step.logits[:, 0]]).float()

    before = run(packed)
    torch.testing.assert_close(before, run(plain), atol=atol, rtol=rtol)
    with torch.no_grad():
        module.model.layers[0].mlp.up_proj.weight.mul_(-2.0)
    after = run(packed)  # its prefill sees the changed parameter and re-packs
    assert packed.packed and not torch.allclose(before, after, atol=atol, rtol=rtol)
    with monkeypatch.context() as m:
        m.setattr(fast_decode, "packing_available", lambda dtype: False)
        plain_after = run(plain)
    torch.testing.assert_close(after, plain_after, atol=atol, rtol=rtol)


def test_fp32_engine_samples_the_live_module_through_the_lean_forward(tiny_model):
    """``dtype: model`` on a CPU (what ``auto`` means without native bf16): no replica, the lean
    forward reads the live fp32 module, its log-probs are the module's own, and an optimizer-style
    in-place update is seen by the next ``generate`` without any call to ``sync_weights``."""
    model, tokenizer = tiny_model
    live = copy.deepcopy(model)
    engine = HFGenerationEngine(tokenizer, live, dtype="model")
    assert engine._replica is None and engine._lean is not None and engine._lean.model is live
    ids, mask = engine.encode_prompts(["Write a function add(a, b).", "Reverse a string s."])
    sampling = SamplingParams(max_new_tokens=12, temperature=0.9)

    def sample_and_check() -> torch.Tensor:
        out = engine.generate(ids, mask, sampling, 2, generator=torch.Generator().manual_seed(0))
        full = torch.cat([out.prompt_ids, out.completion_ids], 1)
        full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
        with torch.no_grad():
            want, _ = token_logprobs(live, full, full_mask, out.prompt_ids.size(1), 0.9)
        torch.testing.assert_close(out.logprobs, want * out.completion_mask, atol=1e-4, rtol=1e-4)
        return out.completion_ids

    before = sample_and_check()
    with torch.no_grad():
        for p in live.parameters():
            p.add_(torch.randn_like(p) * 0.5)  # in place, outside any optimizer
    after = sample_and_check()  # log-probs are the *updated* module's
    assert not torch.equal(before, after)
    # fused AdamW updates in place without bumping version counters: sync_weights (called after
    # every optimizer step) is what tells the lean forward
    for p in live.parameters():
        p.grad = torch.randn_like(p)
    torch.optim.AdamW(live.parameters(), lr=0.5, fused=True).step()
    engine.sync_weights(live)
    assert not torch.equal(after, sample_and_check())


def test_supports_only_what_it_implements(tiny_model):
    model, _ = tiny_model
    assert supports(model)
    scaled = copy.deepcopy(model)
    scaled.config.rope_scaling = {"rope_type": "linear", "factor": 2.0}
    scaled.config.rope_parameters = {"rope_type": "linear", "factor": 2.0}
    assert not supports(scaled)
    gelu = copy.deepcopy(model)
    gelu.config.hidden_act = "gelu"
    assert not supports(gelu)
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert not supports(lora)


def test_an_engine_built_under_inference_mode_samples_there_and_after_it(tiny_model):
    """``trainer.validate`` runs its hooks under ``torch.inference_mode``: an engine whose sampling
    replica (another dtype than the policy's) is first made there must still decode there, and
    decode the trained weights after a training step outside it (the GPU recipe's evaluation of an
    fp32 BC policy with a bf16 engine failed: inference tensors keep no version counter)."""
    model, tokenizer = tiny_model
    live = copy.deepcopy(model)  # fp32 policy, bf16 engine: a replica
    engine = HFGenerationEngine(tokenizer, live, dtype=torch.float32)
    engine.dtype_setting = torch.bfloat16
    ids, mask = _left_padded()
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    with torch.inference_mode():
        engine.sync_weights(live)
        assert engine._lean is not None
        before = engine.generate(ids, mask, params, num_generations=1).completion_ids
    with torch.no_grad():
        for p in live.parameters():
            p.mul_(-1.0)
    engine.sync_weights(live)  # outside inference mode: the replica's weights are written in place
    after = engine.generate(ids, mask, params, num_generations=1).completion_ids
    fresh = HFGenerationEngine(tokenizer, copy.deepcopy(live), dtype=torch.bfloat16)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, fresh.generate(ids, mask, params, num_generations=1).completion_ids)
