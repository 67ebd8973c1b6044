"""Generation in another precision than training: the bf16 replica, its refresh, and how far its
log-probs may be from the trainer's."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.algorithms.importance import truncated_importance_weights
from lit_codeRL.policy import precision
from lit_codeRL.policy.engine import EngineSettings, make_engine
from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.logprobs import token_logprobs
from lit_codeRL.policy.sampling import SamplingParams


def _prompts(tokenizer, texts=("Write a function add(a, b).", "Reverse a string s in Python.")):
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
        )
        for t in texts
    ]


@pytest.fixture
def fresh_detection():
    """Detection results are cached per process: clear them around a test that fakes the CPU."""

    def clear() -> None:
        precision.generation_dtype.cache_clear()
        getattr(precision.cpu_has_native_bf16, "cache_clear", lambda: None)()  # may be monkeypatched

    clear()
    yield
    clear()


@pytest.mark.parametrize("native", [True, False])
def test_auto_is_bf16_only_where_the_cpu_has_it(monkeypatch, fresh_detection, native):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert precision.generation_dtype("auto", "cpu") == (torch.bfloat16 if native else None)
    assert precision.generation_dtype("float32", "cpu") is torch.float32
    assert precision.generation_dtype("model", "cpu") is None


def test_unknown_engine_dtype_is_a_config_error(fresh_detection):
    from lit_codeRL.errors import ConfigError

    with pytest.raises(ConfigError, match="engine dtype 'int8'"):
        precision.generation_dtype("int8", "cpu")


def test_bf16_replica_samples_while_the_live_module_stays_fp32(tiny_model):
    model, tokenizer = tiny_model
    engine = make_engine(EngineSettings(dtype="bfloat16"), tokenizer, model)
    sampler = engine.sampler
    assert sampler is not model and engine.dtype is torch.bfloat16
    assert all(p.dtype is torch.bfloat16 for p in sampler.parameters())
    assert all(p.dtype is torch.float32 for p in model.parameters())
    # buffers (rotary inv_freq) keep their precision: only parameters are cast
    assert {n: b.dtype for n, b in sampler.named_buffers()} == {n: b.dtype for n, b in model.named_buffers()}
    assert not any(p.requires_grad for p in sampler.parameters())
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    out = engine.generate(
        ids, mask, SamplingParams(max_new_tokens=8), generator=torch.Generator().manual_seed(0)
    )
    assert out.num_completion_tokens > 0 and torch.isfinite(out.logprobs).all()
    assert out.logprobs.dtype is torch.float32


def test_sync_weights_refreshes_the_replica_in_place(tiny_model):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, model, dtype=torch.bfloat16)
    replica = engine.sampler
    saved = [p.detach().clone() for p in model.parameters()]
    try:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)
        stale = next(replica.parameters()).detach().clone()
        assert not torch.equal(stale, next(model.parameters()).to(torch.bfloat16))
        engine.sync_weights(model)
        assert engine.sampler is replica  # refreshed, not rebuilt
        for dst, src in zip(replica.parameters(), model.parameters(), strict=True):
            assert torch.equal(dst, src.detach().to(torch.bfloat16))
    finally:
        with torch.no_grad():
            for p, s in zip(model.parameters(), saved, strict=True):
                p.copy_(s)


@pytest.mark.parametrize("dtype", ["model", None, torch.float32])
def test_the_policys_own_dtype_samples_from_the_live_module(tiny_model, dtype):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, model, dtype=dtype)
    assert engine.sampler is model


@pytest.mark.slow
def test_bf16_sampler_logprobs_are_close_to_the_fp32_trainers(smollm2):
    """The stated tolerance of bf16 generation (SmolLM2-135M, 384 sampled tokens at T=1):
    mean |log p_train - log p_sampler| < 0.05 and every token < 0.5; the truncated importance
    weights average 1 within 0.02. The fp32 path matches the trainer to float rounding."""
    model, tokenizer = smollm2
    texts = (
        "Write a function add(a, b).",
        "Reverse a string s in Python.",
        "Write a function that checks whether n is prime.",
        "Sum the digits of an integer.",
    )
    for dtype, mean_tol, max_tol in ((torch.bfloat16, 0.05, 0.5), ("model", 1e-4, 1e-3)):
        engine = HFGenerationEngine(tokenizer, model, dtype=dtype)
        ids, mask = engine.encode_prompts(_prompts(tokenizer, texts))
        sampling = SamplingParams(max_new_tokens=48, temperature=1.0)
        out = engine.generate(
            ids, mask, sampling, num_generations=2, generator=torch.Generator().manual_seed(0)
        )
        full = torch.cat([out.prompt_ids, out.completion_ids], 1)
        full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
        with torch.no_grad():
            train, _ = token_logprobs(model, full, full_mask, out.prompt_ids.size(1), 1.0)
        real = out.completion_mask.bool()
        diff = (train - out.logprobs)[real].abs()
        assert real.sum() > 100
        assert diff.mean() < mean_tol and diff.max() < max_tol, (dtype, diff.mean(), diff.max())
        weights = truncated_importance_weights(train, out.logprobs, out.completion_mask)[real]
        assert abs(float(weights.mean()) - 1.0) < 0.02


def test_only_the_decision_used_is_logged_once_per_device(monkeypatch, fresh_detection, caplog):
    """``generation_dtype`` is asked at setup, while the model is still on the CPU: it must say
    nothing. ``log_generation_dtype`` (the engine's first generate on a device) logs once per
    (setting, device type)."""
    import logging

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(precision, "_GENERATION_LOGGED", set())
    with caplog.at_level(logging.INFO, logger=precision.log.name):
        assert precision.generation_dtype("auto", "cpu") is torch.bfloat16
        assert precision.generation_dtype("auto", "cuda") is torch.bfloat16
        assert not [r for r in caplog.records if "engine dtype" in r.getMessage()]
        for _ in range(3):
            precision.log_generation_dtype("auto", "cuda")
        precision.log_generation_dtype("float32", "cuda")  # the user's own words: not repeated
    lines = [r.getMessage() for r in caplog.records if "engine dtype" in r.getMessage()]
    assert lines == ["engine dtype auto -> bfloat16 on NVIDIA H100 80GB HBM3"]
