"""The HF engine: same tokens as transformers' generate, log-probs equal to the training forward."""

from __future__ import annotations

import torch

from lit_codeRL.policy.generation import (
    HFGenerationEngine,
    SamplingParams,
    concat_generation_outputs,
    inverse_cdf,
    sample_categorical,
)


def _prompts(tokenizer):
    texts = ["Write a function add(a, b).", "Reverse a string s in Python, please, with a function."]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
        )
        for t in texts
    ]


def test_greedy_matches_transformers_generate(smollm2):
    model, tokenizer = smollm2
    engine = HFGenerationEngine(tokenizer, model)
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    out = engine.generate(ids, mask, SamplingParams(max_new_tokens=24, temperature=0))
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24, do_sample=False)
    for row in range(2):
        n = int(out.completion_mask[row].sum())
        assert torch.equal(out.completion_ids[row, :n], ref[row, ids.size(1) : ids.size(1) + n])


def test_sampling_logprobs_match_training_forward_and_finish_hook(tiny_model):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, model)
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    finished_rows: list[int] = []
    out = engine.generate(
        ids,
        mask,
        SamplingParams(max_new_tokens=12, temperature=0.7, top_p=0.9),
        num_generations=3,
        generator=torch.Generator().manual_seed(0),
        on_finished=lambda rows, toks, reasons: finished_rows.extend(rows),
    )
    assert out.completion_ids.size(0) == 6 and sorted(finished_rows) == list(range(6))
    full = torch.cat([out.prompt_ids, out.completion_ids], 1)
    full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=full, attention_mask=full_mask, position_ids=pos).logits
    logits = logits[:, out.prompt_ids.size(1) - 1 : -1].float() / 0.7
    lp = (
        torch.log_softmax(logits, -1).gather(-1, out.completion_ids[..., None]).squeeze(-1)
        * out.completion_mask
    )
    torch.testing.assert_close(lp, out.logprobs, atol=1e-4, rtol=1e-4)
    # Rows of a group share the prompt; the group layout is contiguous.
    assert torch.equal(out.prompt_ids[0], out.prompt_ids[2]) and not torch.equal(
        out.prompt_ids[0], out.prompt_ids[3]
    )


def test_eos_rows_are_dropped_and_padded(tiny_model):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(
        tokenizer, model, stop_token_ids=list(range(len(tokenizer)))
    )  # every token stops
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    out = engine.generate(ids, mask, SamplingParams(max_new_tokens=8, temperature=1.0), num_generations=2)
    assert out.completion_ids.size(1) == 1 and bool(out.finished.all())
    merged = concat_generation_outputs([out, out], engine.pad_token_id)
    assert merged.completion_ids.size(0) == 8


def test_preallocated_cache_layer_behaves_like_dynamic_layer():
    from transformers.cache_utils import DynamicLayer

    from lit_codeRL.policy.generation import _decode_cache, _PreallocatedLayer

    torch.manual_seed(0)
    ours, ref = _PreallocatedLayer(reserve=2), DynamicLayer()
    steps = [torch.randn(3, 2, n, 4) for n in (5, 1, 1, 1, 1)]  # prefill, then decode (grows twice)
    for i in range(len(steps)):
        k = steps[i]
        got, want = ours.update(k, -k), ref.update(k, -k)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
        if i == 1:
            ours.batch_repeat_interleave(2), ref.batch_repeat_interleave(2)
            steps = [s.repeat_interleave(2, 0) for s in steps]
        if i == 2:
            keep = torch.tensor([0, 3, 5])
            ours.batch_select_indices(keep), ref.batch_select_indices(keep)
            steps = [s[keep] for s in steps]
    assert ours.get_seq_length() == ref.get_seq_length() == 9
    assert isinstance(_decode_cache(8).layer_class_to_replicate(), _PreallocatedLayer)


def test_sample_categorical_matches_distribution_and_skips_zero_mass():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 0.0, 2.0, 0.0]])  # row 2 unnormalised
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_categorical(probs, g) for _ in range(20_000)])
    freq = torch.bincount(draws[:, 0], minlength=5).float() / draws.size(0)
    assert torch.allclose(freq, probs[0], atol=0.01)
    assert freq[1] == 0 and freq[4] == 0
    assert bool((draws[:, 1] == 3).all())
    # u at the ends of [0, 1] lands on the first / last entry with mass, never on a zero.
    edge = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.0, 0.5, 0.5, 0.0]])
    assert inverse_cdf(edge, torch.tensor([0.0, 1.0])).tolist() == [1, 2]
    assert inverse_cdf(edge, torch.tensor([0.49, 0.51])).tolist() == [1, 2]
