"""The HF engine: same tokens as transformers' generate, log-probs equal to the training forward."""

from __future__ import annotations

import torch

from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.output import concat_generation_outputs
from lit_codeRL.policy.sampling import SamplingParams, filter_logits, inverse_cdf, sample_categorical


def _prompts(tokenizer):
    texts = ["Write a function add(a, b).", "Reverse a string s in Python, please, with a function."]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False
        )
        for t in texts
    ]


def nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``[..., V]`` bool: the smallest set of most likely tokens whose mass reaches ``top_p``
    (a token is in when the mass of the tokens ranked before it is still below ``top_p``)."""
    probs = logits.float().softmax(-1)
    sorted_probs, order = probs.sort(-1, descending=True)
    keep_sorted = (sorted_probs.cumsum(-1) - sorted_probs) < top_p
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def test_greedy_matches_transformers_generate(smollm2):
    model, tokenizer = smollm2
    engine = HFGenerationEngine(tokenizer, model)
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    max_new = 24
    out = engine.generate(ids, mask, SamplingParams(max_new_tokens=max_new, temperature=0))
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False)
    ref_new = ref[:, ids.size(1) :]
    for row in range(2):
        n = int(out.completion_mask[row].sum())
        # Both prompts ask for code: the model answers at length, so a short row means the
        # engine stopped early (and an empty one would make the comparison below vacuous).
        assert n == max_new, f"row {row}: {n} tokens generated, transformers generated {ref_new.size(1)}"
        assert torch.equal(out.completion_ids[row], ref_new[row])
        assert not bool(out.finished[row]) and out.finish_reasons[row] == "length"
        assert out.texts[row] == tokenizer.decode(ref_new[row], skip_special_tokens=True)


def test_top_p_and_top_k_keep_only_the_nucleus_renormalised():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    # Mass before each token (by rank): 0, 0.5, 0.8, 0.95 -> top_p=0.7 keeps the first two.
    torch.testing.assert_close(
        filter_logits(logits, 0, 0.7).softmax(-1), torch.tensor([[0.625, 0.375, 0.0, 0.0]])
    )
    torch.testing.assert_close(
        filter_logits(logits, 3, 1.0).softmax(-1), torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95
    )
    # The most likely token always stays, even when it alone exceeds top_p.
    assert filter_logits(logits, 0, 0.1).softmax(-1).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    # Unsorted vocabulary order: the mask follows the ranks, not the positions.
    shuffled = torch.tensor([[0.05, 0.3, 0.15, 0.5]]).log()
    torch.testing.assert_close(
        filter_logits(shuffled, 0, 0.7).softmax(-1), torch.tensor([[0.0, 0.375, 0.0, 0.625]])
    )


def test_sampling_logprobs_match_training_forward_and_finish_hook(tiny_model):
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, model)
    ids, mask = engine.encode_prompts(_prompts(tokenizer))
    finished_rows: list[int] = []
    top_p = 0.5
    out = engine.generate(
        ids,
        mask,
        SamplingParams(max_new_tokens=12, temperature=0.7, top_p=top_p),
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
    # Log-probs are the unfiltered tempered distribution's (what training recomputes, see the
    # engine's docstring); the draws must come from the filtered one: only the nucleus has mass.
    torch.testing.assert_close(lp, out.logprobs, atol=1e-4, rtol=1e-4)
    in_nucleus = nucleus(logits, top_p).gather(-1, out.completion_ids[..., None]).squeeze(-1)
    real = out.completion_mask.bool()
    assert int(real.sum()) >= 30, "too few sampled tokens to test the nucleus"
    assert bool(in_nucleus[real].all()), f"{int((~in_nucleus[real]).sum())} tokens outside the nucleus"
    # ...and the nucleus is a real restriction here (an unfiltered sampler would leave it).
    assert float(nucleus(logits, top_p)[real].float().mean()) < 0.9
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

    from lit_codeRL.policy.kv_cache import PreallocatedLayer, decode_cache

    torch.manual_seed(0)
    ours, ref = PreallocatedLayer(reserve=2), DynamicLayer()
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
    assert isinstance(decode_cache(8).layer_class_to_replicate(), PreallocatedLayer)


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


def test_a_nan_distribution_draws_an_id_inside_the_vocabulary_with_a_nan_logprob():
    """NaN logits (a policy whose weights went NaN) must not draw an id past the vocabulary: the
    gather of its log-prob, and the next step's embedding, would fail with a device-side assert
    on a GPU. The NaN log-prob is what reaches the trainer."""
    from lit_codeRL.policy.sampling import draw

    logits = torch.randn(3, 7)
    logits[1] = float("nan")
    for sampling in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=0.9)):
        token, logprob = draw(logits, sampling, torch.Generator().manual_seed(0))
        assert ((token >= 0) & (token < 7)).all(), token
        assert torch.isnan(logprob[1]) and torch.isfinite(logprob[[0, 2]]).all()


def test_cache_passes_by_the_keyword_the_model_takes_so_no_deprecation_per_call(tiny_model):
    """transformers >= 5.24 renamed ``past_key_values`` to ``cache`` and warns on every call with
    the old name (46 warnings in one quickstart): the engine's transformers path and the shared-
    prompt training forward pass the cache by the name the model's forward takes."""
    import inspect
    import warnings

    from lit_codeRL.policy.kv_cache import cache_keyword
    from lit_codeRL.policy.logprobs import grouped_prompt_token_logprobs

    model, tokenizer = tiny_model
    takes_cache = "cache" in inspect.signature(type(model).forward).parameters
    assert cache_keyword(model) == ("cache" if takes_cache else "past_key_values")
    engine = HFGenerationEngine(tokenizer, model, dtype="model", fast_decode=False)
    ids, mask = engine.encode_prompts(["Write a function add(a, b).", "Reverse a string."])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = engine.generate(
            ids, mask, SamplingParams(max_new_tokens=4), 2, torch.Generator().manual_seed(0)
        )
        full = torch.cat([out.prompt_ids, out.completion_ids], 1)
        full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
        with torch.no_grad():
            grouped_prompt_token_logprobs(model.eval(), full, full_mask, out.prompt_ids.size(1), 2, 1.0)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
