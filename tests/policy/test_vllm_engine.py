"""The vLLM engine.

On CPU (always): what the engine does around vLLM, against ``fake_vllm`` (vLLM's documented
semantics, not vLLM): the weights it pushes and when, the sleep/wake order, log-probs, stops.
On a GPU with vLLM installed (``-m gpu``; skipped cleanly otherwise): the same claims against real
vLLM: greedy parity with the HF engine, per-token log-probs within a tolerance of the trainer's,
the engine following the weights after an optimizer step, also across a sleep/wake cycle.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.engine import EngineSettings, make_engine
from lit_codeRL.policy.loading import LoraSettings, load_model
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.policy.vllm_engine import VLLMEngine, finish_reason, vllm_available
from tests.policy import fake_vllm

PROMPTS = ["def add(a, b):", "print('hello"]


@pytest.fixture
def fake():
    module = fake_vllm.install()
    yield module
    fake_vllm.uninstall()


def _policy(lora: bool = False):
    torch.manual_seed(0)
    kwargs = {"lora": LoraSettings(r=4, alpha=8)} if lora else {}
    model, tok = load_model(name_or_path="tiny-random", **kwargs)
    return model, tok


def _engine(tok, sleep_level: int = 0) -> VLLMEngine:
    return VLLMEngine(tok, sleep_level=sleep_level, device="cpu")


def _greedy(engine, tok, n_tokens: int = 8):
    ids, mask = engine.encode_prompts(PROMPTS)
    return engine.generate(ids, mask, SamplingParams(max_new_tokens=n_tokens, temperature=0.0))


def _hf_greedy(model, tok, n_tokens: int = 8):
    hf = make_engine(EngineSettings(dtype="model", fast_decode=False), tok, model)
    hf.sync_weights(model)
    return _greedy(hf, tok, n_tokens)


@torch.no_grad()
def _trainer_logprobs(model, out, temperature: float) -> torch.Tensor:
    """What the trainer computes for the sampled tokens: log_softmax(logits / T)."""
    device = next(model.parameters()).device
    rows = []
    for r in range(out.completion_ids.size(0)):
        prompt = out.prompt_ids[r][out.prompt_mask[r].bool()]
        n = int(out.completion_mask[r].sum())
        comp = out.completion_ids[r, :n]
        ids = torch.cat([prompt, comp])[None].to(device)
        logits = model(input_ids=ids).logits[0].float()
        logps = torch.log_softmax(logits[len(prompt) - 1 : -1] / temperature, -1)
        row = torch.zeros(out.completion_ids.size(1))
        row[:n] = logps.gather(1, comp[:, None].to(device))[:, 0].cpu()
        rows.append(row)
    return torch.stack(rows)


def _sgd_step(model) -> None:
    """A real optimizer step big enough to change greedy tokens."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=5.0)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


# ---------------------------------------------------------------------- CPU, fake vLLM


def test_the_engine_samples_the_pushed_weights_never_its_dummy_ones(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    assert fake.CALLS[:3] == ["init", "load_weights", "reset_prefix_cache"]
    out = _greedy(engine, tok)
    ref = _hf_greedy(model, tok)
    assert torch.equal(out.completion_ids, ref.completion_ids)
    assert torch.equal(out.completion_mask, ref.completion_mask)


def test_sampling_logprobs_are_the_trainers_at_the_temperature(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    ids, mask = engine.encode_prompts(PROMPTS)
    out = engine.generate(
        ids, mask, SamplingParams(max_new_tokens=10, temperature=0.7), 3, torch.Generator().manual_seed(0)
    )
    assert out.completion_ids.size(0) == 6 and out.prompt_ids.size(0) == 6
    want = _trainer_logprobs(model, out, 0.7) * out.completion_mask
    assert torch.allclose(out.logprobs, want, atol=1e-4), (out.logprobs - want).abs().max()
    # the three samples of a prompt differ (one seed per prompt, n samples from it)
    assert len({tuple(r.tolist()) for r in out.completion_ids[:3]}) > 1


def test_after_an_optimizer_step_the_engine_follows_the_new_weights(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    before = _greedy(engine, tok)
    _sgd_step(model)
    engine.sync_weights(model)
    after = _greedy(engine, tok)
    assert not torch.equal(before.completion_ids, after.completion_ids)
    assert torch.equal(after.completion_ids, _hf_greedy(model, tok).completion_ids)


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_and_wake_never_serve_stale_or_discarded_weights(fake, level):
    model, tok = _policy()
    engine = _engine(tok, sleep_level=level)
    engine.sync_weights(model)
    _greedy(engine, tok)  # sleeps afterwards: the training step has the GPU
    assert fake.CALLS[-1] == f"sleep({level})"
    _sgd_step(model)
    fake.CALLS.clear()
    engine.sync_weights(model)
    # weights woken, pushed, KV cache still released
    assert fake.CALLS == ["wake_up(weights)", "load_weights", "reset_prefix_cache"]
    out = _greedy(engine, tok)
    assert fake.CALLS[3:] == ["wake_up(kv_cache)", "generate", f"sleep({level})"]
    assert torch.isfinite(out.logprobs).all()
    assert torch.equal(out.completion_ids, _hf_greedy(model, tok).completion_ids)


def test_a_discarded_engine_pushes_before_it_samples_even_without_a_sync(fake):
    # evaluation generates twice with no optimizer step between: level 2 discarded the weights
    model, tok = _policy()
    engine = _engine(tok, sleep_level=2)
    engine.sync_weights(model)
    first = _greedy(engine, tok)
    fake.CALLS.clear()
    second = _greedy(engine, tok)
    assert fake.CALLS == [
        "wake_up(weights)", "load_weights", "reset_prefix_cache", "wake_up(kv_cache)", "generate", "sleep(2)",
    ]  # fmt: skip
    assert torch.equal(first.completion_ids, second.completion_ids)


def test_lora_is_merged_into_the_pushed_copy(fake):
    model, tok = _policy(lora=True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    adapters = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    engine = _engine(tok)
    engine.sync_weights(model)
    out = _greedy(engine, tok)
    assert torch.equal(out.completion_ids, _hf_greedy(model, tok).completion_ids)
    base_only = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in base_only.named_parameters():
            if "lora_B" in name:
                p.zero_()
    assert not torch.equal(out.completion_ids, _hf_greedy(base_only, tok).completion_ids)
    for n, p in model.named_parameters():
        if n in adapters:
            assert torch.equal(p, adapters[n]) and p.requires_grad


def test_stop_strings_end_a_completion_and_stay_in_it(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    ids, mask = engine.encode_prompts(PROMPTS[:1])
    free = engine.generate(ids, mask, SamplingParams(max_new_tokens=12, temperature=0.0))
    text = free.texts[0]
    assert len(text) > 4
    stop = text[2:4]
    out = engine.generate(ids, mask, SamplingParams(max_new_tokens=12, temperature=0.0, stop=[stop]))
    assert out.finish_reasons == ["stop_string"] and out.texts[0].endswith(stop)
    assert bool(out.finished[0])
    n = int(out.completion_mask[0].sum())
    assert torch.equal(out.completion_ids[0, :n], free.completion_ids[0, :n])


def test_filtering_warns_that_logprobs_differ_from_the_trainers(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    ids, mask = engine.encode_prompts(PROMPTS[:1])
    with pytest.warns(UserWarning, match="filtered"):
        engine.generate(ids, mask, SamplingParams(max_new_tokens=2, temperature=1.0, top_p=0.9))


def test_finish_reasons():
    assert finish_reason("length", None) == "length"
    assert finish_reason("stop", None) == "stop"  # EOS
    assert finish_reason("stop", 7) == "stop"  # a stop token id
    assert finish_reason("stop", "```") == "stop_string"


def test_settings_and_clear_errors(monkeypatch):
    model, tok = _policy()
    with pytest.raises(ConfigError, match="sleep_level"):
        VLLMEngine(tok, sleep_level=3)
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VLLMEngine(tok, gpu_memory_utilization=1.5)
    engine = make_engine(EngineSettings(name="vllm", sleep_level=1, max_model_len=1024), tok, model)
    assert isinstance(engine, VLLMEngine) and engine.sleep_level == 1 and engine.max_model_len == 1024
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="needs a CUDA GPU"):
            engine.sync_weights(model)
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)  # not installed
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[vllm\]'"):
        VLLMEngine(tok, device="cpu").sync_weights(model)


# ---------------------------------------------------------------------- GPU, real vLLM

gpu = pytest.mark.skipif(not vllm_available(), reason="needs CUDA and vllm (pip install -e '.[vllm]')")


@pytest.fixture(scope="module")
def smol_on_gpu():
    if not vllm_available():
        pytest.skip("needs CUDA and vllm")
    model, tok = load_model(name_or_path="smollm2-135m-instruct", dtype="bfloat16")
    return model.cuda(), tok


@pytest.mark.gpu
@gpu
def test_real_vllm_greedy_parity_logprobs_and_weight_sync(smol_on_gpu):
    model, tok = smol_on_gpu
    engine = VLLMEngine(tok, gpu_memory_utilization=0.3, sleep_level=2, dtype="model", enforce_eager=True)
    engine.sync_weights(model)
    out = _greedy(engine, tok, 32)
    ref = _hf_greedy(model, tok, 32)
    # same tokens except at near-ties: compare the prefix up to the first divergence
    agree = (out.completion_ids == ref.completion_ids).float().mean()
    assert agree > 0.9, agree
    sampled = engine.generate(
        *engine.encode_prompts(PROMPTS),
        SamplingParams(max_new_tokens=32, temperature=0.7),
        4,
        torch.Generator().manual_seed(0),
    )
    want = _trainer_logprobs(model, sampled.to_cpu() if hasattr(sampled, "to_cpu") else sampled, 0.7)
    diff = (
        (sampled.logprobs - want.cpu()).abs() * sampled.completion_mask
    ).sum() / sampled.completion_mask.sum()
    assert diff < 0.02, diff  # mean |logp_vllm - logp_trainer| per token, bf16
    # an optimizer step, a sleep/wake cycle in between: the engine follows the new weights
    _sgd_step(model)
    engine.sync_weights(model)
    after = _greedy(engine, tok, 32)
    assert (after.completion_ids == _hf_greedy(model, tok, 32).completion_ids).float().mean() > 0.9
    assert not torch.equal(after.completion_ids, out.completion_ids)
    # a level-2 sleep/wake cycle with no optimizer step in between: still the policy's weights
    again = _greedy(engine, tok, 32)
    assert torch.equal(again.completion_ids, after.completion_ids)
