"""Multi-turn prompts that extend a decoded sequence reuse its keys/values (``policy/prefix_cache.py``):
the second turn of a batch prefills only the new tokens, decodes what a full prefill decodes, with
the trainer's log-probs; rows of different prefix lengths, rows without one, a group of samples,
a weight change and the memory bound each behave."""

from __future__ import annotations

import copy

import pytest
import torch

from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.logprobs import token_logprobs
from lit_codeRL.policy.prefix_cache import Prefix, PrefixStore
from lit_codeRL.policy.sampling import SamplingParams

GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)


def _engine(tiny_model, mib: float = 64.0) -> HFGenerationEngine:
    model, tokenizer = tiny_model
    engine = HFGenerationEngine(tokenizer, copy.deepcopy(model), dtype=torch.float32, prefix_cache_mib=mib)
    assert engine._lean is not None
    # one token id in seven ends a row: rows finish at different steps, some hit max_new_tokens
    engine.stop_token_ids = list(range(3, model.config.vocab_size, 7))
    return engine


def _turn(engine, prompts: list[list[int]], sampling=GREEDY, n: int = 1):
    ids, mask = engine.pad_prompts(prompts)
    out = engine.generate(ids, mask, sampling, n, torch.Generator().manual_seed(0))
    return [
        out.completion_ids[r, : int(out.completion_mask[r].sum())].tolist() for r in range(len(out.texts))
    ], out


def _episodes(engine, turns: int = 3, n: int = 1) -> tuple[list[list[list[int]]], list]:
    """``turns`` turns of 4 rows (prompts of different lengths), each next prompt the last one +
    the action + an observation of a different length per row."""
    torch.manual_seed(1)
    contexts = [torch.randint(10, 400, (length,)).tolist() for length in (9, 23, 5, 16)]
    actions_by_turn, outs = [], []
    for t in range(turns):
        actions, out = _turn(engine, contexts, n=n if t == 0 else 1)
        if t == 0 and n > 1:
            contexts = [c for c in contexts for _ in range(n)]
        actions_by_turn.append(actions)
        outs.append(out)
        contexts = [
            c + a + torch.randint(10, 400, (3 + 2 * r + t,)).tolist()
            for r, (c, a) in enumerate(zip(contexts, actions, strict=True))
        ]
    return actions_by_turn, outs


@pytest.mark.parametrize("n", [1, 2])
def test_later_turns_prefill_only_new_tokens_and_decode_as_a_full_prefill(tiny_model, n):
    cached, off = _engine(tiny_model), _engine(tiny_model, mib=0)
    got, outs = _episodes(cached, n=n)
    want, _ = _episodes(off, n=n)
    assert got == want
    assert cached.prefixes.reused_tokens > 0 and off.prefixes is None
    # the log-probs of a reused turn are the trainer's forward over the full context
    out = outs[-1]
    full = torch.cat([out.prompt_ids, out.completion_ids], 1)
    full_mask = torch.cat([out.prompt_mask, out.completion_mask], 1)
    with torch.no_grad():
        logp, _ = token_logprobs(cached.sampler, full, full_mask, out.prompt_ids.size(1), 1.0)
    torch.testing.assert_close(out.logprobs, logp * out.completion_mask, atol=1e-4, rtol=1e-4)


def test_every_row_of_a_later_turn_is_served_from_its_own_sequence(tiny_model):
    engine = _engine(tiny_model)
    engine.stop_token_ids = []  # every row decodes max_new_tokens
    prompts = [[11, 12, 13], [21, 22, 23, 24, 25]]
    actions, _ = _turn(engine, prompts)
    kept = {len(p) + GREEDY.max_new_tokens - 1 for p in prompts}  # the last sampled token is not fed
    assert {len(t) for t in engine.prefixes._entries} == kept
    before = engine.prefixes.reused_tokens
    _turn(engine, [p + a + [7, 8] for p, a in zip(prompts, actions, strict=True)] + [[31, 32]])
    assert engine.prefixes.reused_tokens - before == sum(kept)
    assert len(engine.prefixes) == 3  # one entry per row: the extended sequences replaced theirs


def test_a_weight_change_drops_every_kept_prefix(tiny_model):
    engine = _engine(tiny_model)
    prompts = [[11, 12, 13, 14]]
    engine.stop_token_ids = []
    actions, _ = _turn(engine, prompts)
    assert len(engine.prefixes) == 1
    with torch.no_grad():
        for p in engine.model.parameters():
            p.mul_(1.01)
    engine.sync_weights(engine.model)
    before = engine.prefixes.reused_tokens
    _turn(engine, [prompts[0] + actions[0] + [5]])
    assert engine.prefixes.reused_tokens == before  # stale keys never served


def test_the_store_keeps_the_newest_entries_within_its_bytes_and_picks_the_longest_prefix():
    def entry(tokens):
        t = torch.zeros(1, len(tokens), 2)
        return Prefix(tuple(tokens), [t], [t.clone()])

    one = entry([1, 2, 3]).nbytes
    store = PrefixStore(max_bytes=int(2.5 * one))
    store.put(entry([1, 2, 3]))
    store.put(entry([1, 2, 4]))
    assert store.longest([1, 2, 3, 9]).tokens == (1, 2, 3)
    assert store.longest([1, 2, 3]) is None  # nothing would be left to prefill
    store.put(entry([5, 6, 7]))  # over the budget: the oldest unused entry goes
    assert store.longest([1, 2, 4, 0]) is None and store.longest([5, 6, 7, 0]) is not None
    store.put(Prefix((1, 2), [torch.zeros(1, 2, 2)], [torch.zeros(1, 2, 2)]))
    store.put(Prefix((1, 2, 3, 9, 9), [torch.zeros(1, 5, 2)], [torch.zeros(1, 5, 2)]))
    assert store.longest([1, 2, 3, 9, 9, 1]).tokens == (1, 2, 3, 9, 9)
    assert PrefixStore(max_bytes=0).longest([1]) is None
