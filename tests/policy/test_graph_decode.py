"""Static-step decoding (``policy/graph_decode.py``): the GPU sampler, eager on a CPU, captured on CUDA.

The CPU tests run the very loop the GPU runs (static KV buffers, device-side write column, rows
that keep decoding after they end, ends read one step late); the ``gpu`` tests check that the
captured graphs draw bit for bit what the eager steps draw, and agree with the trainer's forward.
"""

from __future__ import annotations

import copy

import pytest
import torch

from lit_codeRL.policy.fast_decode import LeanLlama
from lit_codeRL.policy.graph_decode import GraphDecoder, row_bucket
from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.logprobs import token_logprobs
from lit_codeRL.policy.sampling import SamplingParams

PROMPTS = ["hello there", "a much longer prompt, padded on the left of the short one"]


def _generate(decoder, engine, sampling, n=3, seed=0, stops=None, calls=None):
    ids, mask = engine.encode_prompts(PROMPTS)
    device = decoder.lean.embed.device
    generator = torch.Generator(device=device).manual_seed(seed)
    record = None if calls is None else (lambda rows, toks, reasons: calls.append((rows, toks, reasons)))
    return decoder.generate(
        ids.to(device),
        mask.to(device),
        sampling,
        n,
        generator,
        record,
        engine.tokenizer,
        engine.stop_token_ids if stops is None else stops,
        engine.pad_token_id,
    )


@pytest.fixture
def setup(tiny_model):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, model=model, dtype="model")
    return model, engine


def test_static_steps_sample_what_the_engine_samples(setup):
    """Same generator, no row ending early: the CPU engine's lean loop and the static steps draw
    the same tokens, with the same log-probs up to summation order."""
    model, engine = setup
    sampling = SamplingParams(max_new_tokens=16)
    want = engine.generate(*engine.encode_prompts(PROMPTS), sampling, 3, torch.Generator().manual_seed(0))
    got = _generate(GraphDecoder(LeanLlama(model), capture=False), engine, sampling, stops=[])
    assert got.completion_ids.shape == (6, 16)
    assert torch.equal(got.completion_ids, want.completion_ids)
    torch.testing.assert_close(got.logprobs, want.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.prompt_ids, want.prompt_ids, atol=0, rtol=0)


def test_rows_end_at_their_first_stop_token_though_read_a_step_late(setup):
    """Rows keep decoding after they end, so each row's tokens are the no-stop run's up to its
    first stop token; its length, reason, mask and its one ``on_finished`` call say exactly that."""
    model, engine = setup
    sampling = SamplingParams(max_new_tokens=24)
    decoder = GraphDecoder(LeanLlama(model), capture=False)
    free = _generate(decoder, engine, sampling, stops=[])
    # stop tokens that end some rows early and leave at least one running to the end
    candidates = free.completion_ids[:, 3:12].flatten().tolist()
    stops = sorted(set(candidates[::7]))
    calls: list = []
    got = _generate(decoder, engine, sampling, stops=stops, calls=calls)
    expected_lengths, seen = [], {}
    for row in free.completion_ids.tolist():
        hit = next((i for i, t in enumerate(row) if t in stops), None)
        expected_lengths.append(24 if hit is None else hit + 1)
    assert any(n < 24 for n in expected_lengths), "the test needs a row that ends early"
    assert got.completion_mask.sum(1).tolist() == expected_lengths
    for r, length in enumerate(expected_lengths):
        assert got.completion_ids[r, :length].tolist() == free.completion_ids[r, :length].tolist()
        assert got.finish_reasons[r] == ("length" if length == 24 else "stop")
        assert bool(got.finished[r]) == (length < 24)
        assert (got.logprobs[r, length:] == 0).all()
    for rows, toks, reasons in calls:
        for r, t, reason in zip(rows, toks, reasons, strict=True):
            assert r not in seen, "on_finished told twice about one row"
            seen[r] = (t, reason)
    assert sorted(seen) == list(range(6))
    for r, (t, reason) in seen.items():
        assert t == got.completion_ids[r, : expected_lengths[r]].tolist() and reason == got.finish_reasons[r]


def test_a_stop_string_ends_a_row_on_the_token_that_completes_it(setup):
    model, engine = setup
    tok = engine.tokenizer
    sampling = SamplingParams(max_new_tokens=20)
    decoder = GraphDecoder(LeanLlama(model), capture=False)
    free = _generate(decoder, engine, sampling, stops=[])
    text = tok.decode(free.completion_ids[1, 4:6].tolist())
    stop = text.strip()[:3] or text
    got = _generate(decoder, engine, SamplingParams(max_new_tokens=20, stop=[stop]), stops=[])
    for r, row in enumerate(free.completion_ids.tolist()):
        end = next((i + 1 for i in range(20) if stop in tok.decode(row[: i + 1])), 20)
        assert int(got.completion_mask[r].sum()) == end
        assert got.finish_reasons[r] == ("stop_string" if end < 20 else "length")
    assert got.finish_reasons[1] == "stop_string"


def test_in_place_weight_updates_are_seen_without_moving_any_weight(setup, monkeypatch):
    """An optimizer step updates parameters in place: the next batch samples from the new
    weights, and every tensor the steps read stays where it was (a captured graph stays valid).
    Unpacked weights, as on a GPU (CPU-prepacked ones are opaque and rebuilt)."""
    monkeypatch.setattr("lit_codeRL.policy.fast_decode.packing_available", lambda dtype: False)
    model, engine = setup
    model = copy.deepcopy(model)  # the fixture's model is shared by the session: update a copy
    sampling = SamplingParams(max_new_tokens=12)
    lean = LeanLlama(model)
    decoder = GraphDecoder(lean, capture=False)
    before = _generate(decoder, engine, sampling, stops=[])
    addresses = lean.addresses()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    after = _generate(decoder, engine, sampling, stops=[])
    assert lean.addresses() == addresses
    fresh = _generate(GraphDecoder(LeanLlama(model), capture=False), engine, sampling, stops=[])
    assert not torch.equal(after.logprobs, before.logprobs)
    assert torch.equal(after.completion_ids, fresh.completion_ids)
    assert torch.equal(after.logprobs, fresh.logprobs)


def test_a_longer_prompt_grows_the_cache_and_a_shorter_one_reuses_it(setup):
    model, engine = setup
    sampling = SamplingParams(max_new_tokens=8)
    decoder = GraphDecoder(LeanLlama(model), capture=False)
    small = _generate(decoder, engine, sampling, n=1, stops=[])
    _generate(decoder, engine, SamplingParams(max_new_tokens=300), n=4, stops=[])
    again = _generate(decoder, engine, sampling, n=1, stops=[])
    assert torch.equal(small.completion_ids, again.completion_ids)
    assert torch.equal(small.logprobs, again.logprobs)


def test_logprobs_are_the_trainers(setup):
    """What the static steps record is what the trainer's forward computes for those tokens."""
    model, engine = setup
    sampling = SamplingParams(max_new_tokens=16, temperature=0.7)
    out = _generate(GraphDecoder(LeanLlama(model), capture=False), engine, sampling, n=2, stops=[])
    ids = torch.cat([out.prompt_ids, out.completion_ids], 1)
    mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        want, _ = token_logprobs(model, ids, mask, out.prompt_ids.size(1), temperature=0.7)
    torch.testing.assert_close(out.logprobs, want * out.completion_mask, atol=1e-5, rtol=0)


def test_row_buckets():
    assert [row_bucket(n) for n in (1, 3, 8, 9, 64, 65, 256)] == [1, 4, 8, 16, 64, 96, 256]
    assert row_bucket(257) is None


# ------------------------------------------------------------------------------------- CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _cuda_engine(model, tokenizer, dtype, cuda_graphs):
    module = copy.deepcopy(model).cuda().to(dtype)
    return HFGenerationEngine(tokenizer, model=module, dtype="model", cuda_graphs=cuda_graphs), module


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_captured_graphs_draw_bit_for_bit_what_the_eager_steps_draw(tiny_model, dtype):
    model, tokenizer = tiny_model
    engines = {graphs: _cuda_engine(model, tokenizer, dtype, graphs)[0] for graphs in (True, False)}
    prompts = engines[False].encode_prompts(PROMPTS)
    engines[False].stop_token_ids = []
    free = engines[False].generate(
        *prompts, SamplingParams(max_new_tokens=40), 3, torch.Generator().manual_seed(1)
    )
    # tokens this very seed draws mid-way: rows end at different steps, some run to the end
    stops = sorted(set(free.completion_ids[:, 5:20].flatten().tolist()[::9]))
    runs = {}
    for graphs, engine in engines.items():
        engine.stop_token_ids = stops
        runs[graphs] = engine.generate(
            *prompts, SamplingParams(max_new_tokens=40), 3, torch.Generator().manual_seed(1)
        )
        assert engine._graphs is not None and (engine._graphs.captures > 0) == graphs
    assert "stop" in runs[True].finish_reasons
    captured, eager = runs[True], runs[False]
    assert captured.finish_reasons == eager.finish_reasons
    assert torch.equal(captured.completion_ids, eager.completion_ids)
    diff = (captured.logprobs - eager.logprobs).abs().max().item()
    assert torch.equal(captured.logprobs, eager.logprobs), f"log-probs differ by up to {diff}"


@pytest.mark.gpu
@cuda
def test_captured_graphs_follow_optimizer_steps_without_a_recapture(tiny_model):
    model, tokenizer = tiny_model
    engine, module = _cuda_engine(model, tokenizer, torch.float32, True)
    prompts = engine.encode_prompts(PROMPTS)
    engine.generate(*prompts, SamplingParams(max_new_tokens=16), 2, torch.Generator().manual_seed(0))
    captures = engine._graphs.captures
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-2)
    ids, mask = prompts[0].cuda(), prompts[1].cuda()
    module(input_ids=ids, attention_mask=mask).logits.float().logsumexp(-1).mean().backward()
    optimizer.step()
    engine.sync_weights(module)
    got = engine.generate(*prompts, SamplingParams(max_new_tokens=16), 2, torch.Generator().manual_seed(0))
    assert engine._graphs.captures == captures
    reference, _ = _cuda_engine(module, tokenizer, torch.float32, False)
    want = reference.generate(
        *prompts, SamplingParams(max_new_tokens=16), 2, torch.Generator().manual_seed(0)
    )
    assert torch.equal(got.completion_ids, want.completion_ids)
    assert torch.equal(got.logprobs, want.logprobs)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_captured_logprobs_agree_with_the_trainers_forward_on_the_gpu(tiny_model, dtype):
    model, tokenizer = tiny_model
    engine, module = _cuda_engine(model, tokenizer, dtype, True)
    out = engine.generate(
        *engine.encode_prompts(PROMPTS),
        SamplingParams(max_new_tokens=24),
        3,
        torch.Generator().manual_seed(2),
    )
    ids = torch.cat([out.prompt_ids, out.completion_ids], 1)
    mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        want, _ = token_logprobs(module.eval(), ids, mask, out.prompt_ids.size(1))
    tol = 1e-4 if dtype == torch.float32 else 0.08  # bf16: rounding of a different op order
    real = out.completion_mask.bool()
    err = (out.logprobs - want)[real].abs()
    assert err.max().item() < tol * 10 and err.mean().item() < tol, (err.max().item(), err.mean().item())
