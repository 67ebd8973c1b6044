"""The vLLM engine.

On CPU (always): what the engine does around vLLM, against ``fake_vllm`` (vLLM's documented
semantics, not vLLM): the weights it pushes and when (in ``sync_weights`` only, never inside
``generate``), the sleep/wake order, log-probs, stops, closing, the memory share, and the
training layer sleeping it once per step and closing it in teardown.
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
from lit_codeRL.policy.vllm_engine import VLLMEngine, check_memory_share, finish_reason, vllm_available
from lit_codeRL.training.rollout_module import context_limit
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
def _trainer_logprobs(model, out, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """What the trainer computes for the sampled tokens: log_softmax(logits / T); with ``top_k`` /
    ``top_p``, of the filtered distribution (what vLLM's processed log-probs are)."""
    device = next(model.parameters()).device
    rows = []
    for r in range(out.completion_ids.size(0)):
        prompt = out.prompt_ids[r][out.prompt_mask[r].bool()]
        n = int(out.completion_mask[r].sum())
        comp = out.completion_ids[r, :n]
        ids = torch.cat([prompt, comp])[None].to(device)
        logits = model(input_ids=ids).logits[0].float()[len(prompt) - 1 : -1] / temperature
        if top_k or top_p < 1.0:
            logits = logits.masked_fill(~_kept(logits, top_k, top_p), float("-inf"))
        logps = torch.log_softmax(logits, -1)
        row = torch.zeros(out.completion_ids.size(1))
        row[:n] = logps.gather(1, comp[:, None].to(device))[:, 0].cpu()
        rows.append(row)
    return torch.stack(rows)


def _kept(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """``[T, V]`` tokens top-k then top-p keep (the smallest set whose mass reaches ``top_p``)."""
    keep = torch.ones_like(logits, dtype=torch.bool)
    if top_k:
        keep = logits >= logits.topk(top_k, -1).values[:, -1:]
    probs = torch.softmax(logits.masked_fill(~keep, float("-inf")), -1)
    for t in range(logits.size(0)):
        ranked, order = probs[t].sort(descending=True)
        n_keep = int((ranked.cumsum(0) < top_p).sum()) + 1  # the first n reaching top_p
        keep[t, order[n_keep:]] = False
    return keep


def _sgd_step(model) -> None:
    """A real optimizer step big enough to change greedy tokens."""
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=5.0)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]], device=next(model.parameters()).device)
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
    _greedy(engine, tok)
    _greedy(engine, tok)  # another turn of the same step: no sleep, no push in between
    assert fake.CALLS.count("load_weights") == 1 and f"sleep({level})" not in fake.CALLS
    engine.sleep()  # the step's rollouts are done: the training step has the GPU
    engine.sleep()  # once only
    assert fake.CALLS.count(f"sleep({level})") == 1
    _sgd_step(model)
    fake.CALLS.clear()
    engine.sync_weights(model)
    # weights woken, pushed, KV cache still released
    assert fake.CALLS == ["wake_up(weights)", "load_weights", "reset_prefix_cache"]
    out = _greedy(engine, tok)
    assert fake.CALLS[3:] == ["wake_up(kv_cache)", "generate"]
    assert torch.isfinite(out.logprobs).all()
    assert torch.equal(out.completion_ids, _hf_greedy(model, tok).completion_ids)


def test_generate_never_pushes_and_refuses_discarded_weights(fake):
    # under FSDP2 a push is a collective: ranks generate different numbers of times (turns,
    # refill rounds, evaluation shards), so a push inside generate would hang the job
    model, tok = _policy()
    engine = _engine(tok, sleep_level=2)
    with pytest.raises(RuntimeError, match=r"call sync_weights\(model\) on every rank"):
        _greedy(engine, tok)  # nothing built or pushed yet: no build inside generate either
    assert fake.CALLS == []
    engine.sync_weights(model)
    _greedy(engine, tok)
    engine.sleep()
    fake.CALLS.clear()
    with pytest.raises(RuntimeError, match="discarded the weights"):
        _greedy(engine, tok)
    assert fake.CALLS == []  # no wake, no push: one line and nothing sampled
    engine.sync_weights(model)
    assert torch.equal(_greedy(engine, tok).completion_ids, _hf_greedy(model, tok).completion_ids)


def test_a_level_one_engine_wakes_its_offloaded_weights_without_a_push(fake):
    # evaluation after a sleep with no optimizer step between: the offloaded weights are current
    model, tok = _policy()
    engine = _engine(tok, sleep_level=1)
    engine.sync_weights(model)
    first = _greedy(engine, tok)
    engine.sleep()
    fake.CALLS.clear()
    second = _greedy(engine, tok)
    assert fake.CALLS == ["wake_up(weights)", "wake_up(kv_cache)", "generate"]
    assert torch.equal(first.completion_ids, second.completion_ids)


def test_close_releases_the_engine_and_a_later_sync_builds_a_fresh_one(fake):
    model, tok = _policy()
    engine = _engine(tok, sleep_level=2)
    engine.sync_weights(model)
    config_dir = engine._config_dir.name
    engine.close()
    engine.close()  # idempotent (teardown after an exception, then again)
    assert engine.llm is None and fake.CALLS.count("shutdown") == 1
    assert not __import__("os").path.exists(config_dir)
    with pytest.raises(RuntimeError, match="call sync_weights"):
        _greedy(engine, tok)
    engine.sync_weights(model)
    assert fake.CALLS.count("init") == 2
    assert torch.equal(_greedy(engine, tok).completion_ids, _hf_greedy(model, tok).completion_ids)


def test_the_memory_share_is_checked_against_free_memory_at_build(fake, monkeypatch):
    gib = 2**30
    check_memory_share(0.3, free_bytes=30 * gib, total_bytes=80 * gib)  # fits
    with pytest.raises(ConfigError, match=r"0\.85 asks for 68\.0 GiB .* set it to 0\.37 or less"):
        check_memory_share(0.85, free_bytes=30 * gib, total_bytes=80 * gib)
    model, tok = _policy()
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 * gib, 80 * gib))
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        VLLMEngine(tok, gpu_memory_utilization=0.85, device="cuda").sync_weights(model)
    assert "init" not in fake.CALLS  # refused before vLLM starts
    assert EngineSettings().gpu_memory_utilization == 0.3  # TRL's colocated default


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


def test_the_stand_in_filters_top_k_and_top_p_like_vllm(fake):
    # vLLM's processed log-probs are of the filtered, renormalised distribution: the stand-in's too
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    ids, mask = engine.encode_prompts(PROMPTS)
    params = SamplingParams(max_new_tokens=6, temperature=0.7, top_k=5, top_p=0.9)
    with pytest.warns(UserWarning, match="filtered"):
        out = engine.generate(ids, mask, params, 2, torch.Generator().manual_seed(0))
    unfiltered = _trainer_logprobs(model, out, 0.7) * out.completion_mask
    filtered = _trainer_logprobs(model, out, 0.7, top_k=5, top_p=0.9) * out.completion_mask
    assert torch.allclose(out.logprobs, filtered, atol=1e-4)
    assert (out.logprobs - unfiltered).sum() > 0.1  # renormalised over fewer tokens: higher


def test_the_stand_in_fuses_projections_and_takes_hf_names_like_vllm(fake):
    model, tok = _policy()
    engine = _engine(tok)
    engine.sync_weights(model)
    worker = engine.llm.model
    names = set(worker.params)
    assert "model.layers.0.self_attn.qkv_proj.weight" in names
    assert "model.layers.0.mlp.gate_up_proj.weight" in names
    assert not any(".q_proj." in n or ".up_proj." in n for n in names)
    hf = dict(model.named_parameters())
    k = hf["model.layers.0.self_attn.k_proj.weight"]
    with torch.no_grad():
        loaded = worker.load_weights([("model.layers.0.self_attn.k_proj.weight", k + 1.0)])
    assert loaded == {"model.layers.0.self_attn.qkv_proj.weight"}
    q_rows = hf["model.layers.0.self_attn.q_proj.weight"].shape[0]
    fused = worker.params["model.layers.0.self_attn.qkv_proj.weight"]
    assert torch.equal(fused[q_rows : q_rows + k.shape[0]], k + 1.0)
    with pytest.raises(KeyError):
        worker.load_weights([("base_model.model.model.norm.weight", hf["model.norm.weight"])])


def test_setup_checks_the_env_context_against_max_model_len():
    assert context_limit(None, 128, None) is None  # the HF engine: no limit of its own
    assert context_limit(None, 128, 2048) == 2048  # unset: the engine's
    assert context_limit(1024, 128, 2048) == 1024
    with pytest.raises(ConfigError, match="env.max_context_tokens 4096 exceeds engine.max_model_len 2048"):
        context_limit(4096, 128, 2048)
    with pytest.raises(ConfigError, match="max_new_tokens 2048 leaves no room"):
        context_limit(None, 2048, 2048)


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


def test_training_sleeps_the_engine_once_a_step_pushes_after_each_update_and_closes_it(fake, tmp_path):
    """A GRPO fit on the stand-in: one push at fit start and one per optimizer step (never in a
    rollout), one sleep per step once its rollouts are done, the engine closed in teardown."""
    from lightning import Trainer

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.sandbox import SandboxConfig

    module = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        engine=EngineSettings(name="vllm", sleep_level=2, max_model_len=512),
        sampling=SamplingParams(max_new_tokens=8),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=2,
        save_hf_model=False,
    )
    module.engine.device_setting = "cpu"  # the stand-in runs anywhere
    trainer = Trainer(
        accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module)
    calls = [c for c in fake.CALLS if c in ("load_weights", "generate", "sleep(2)", "shutdown")]
    assert calls.count("load_weights") == 3 and calls.count("sleep(2)") == 2, calls
    # per step: rollouts, then one sleep, then the optimizer step's push
    step = calls[1:].index("load_weights") + 1
    assert calls[1:step] == [*(["generate"] * (step - 2)), "sleep(2)"], calls
    assert calls[-1] == "shutdown" and module.engine.llm is None
