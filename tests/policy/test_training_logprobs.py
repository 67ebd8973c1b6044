"""The shared-prompt training forward must equal the row-by-row forward, values and gradients."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.policy.logprobs import (
    grouped_prompt_token_logprobs,
    shares_prompts,
    token_logprobs,
)

G, P, T = 4, 7, 6


def _batch(groups: int = 2):
    torch.manual_seed(0)
    prompts = torch.randint(5, 100, (groups, P))
    prompt_mask = torch.ones(groups, P, dtype=torch.long)
    prompt_mask[1, :3] = 0  # a shorter, left-padded prompt
    ids = torch.cat([prompts.repeat_interleave(G, 0), torch.randint(5, 100, (groups * G, T))], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(G, 0), torch.ones(groups * G, T, dtype=torch.long)], 1)
    mask[0, -2:] = 0  # a completion that ended early (right padding)
    return ids, mask


def _grads(model):
    out = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_grouped_prompt_forward_matches_full_forward(tiny_model, temperature):
    model, _ = tiny_model
    model.train()
    ids, mask = _batch()
    weights = torch.randn(ids.size(0), T)  # an arbitrary loss, so every token's gradient counts
    full, full_ent = token_logprobs(model, ids, mask, P, temperature, with_entropy=True)
    (full * weights * mask[:, P:]).sum().backward()
    full_grads = _grads(model)
    shared, shared_ent = grouped_prompt_token_logprobs(model, ids, mask, P, G, temperature, with_entropy=True)
    (shared * weights * mask[:, P:]).sum().backward()
    shared_grads = _grads(model)

    real = mask[:, P:].bool()
    torch.testing.assert_close(shared[real], full[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared_ent[real], full_ent[real], atol=1e-4, rtol=1e-4)
    assert len(full_grads) == len(shared_grads) > 0
    for a, b in zip(full_grads, shared_grads, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_prompt_sharing_detection_and_fallback(tiny_model):
    model, _ = tiny_model
    ids, mask = _batch()
    assert shares_prompts(ids, mask, P, G)
    assert not shares_prompts(ids, mask, P, 3)  # 8 rows do not split into groups of 3
    broken = ids.clone()
    broken[1, P - 1] += 1  # one row of group 0 has a different prompt
    assert not shares_prompts(broken, mask, P, G)
    # Not shared -> the row-by-row forward, still correct.
    got, _ = grouped_prompt_token_logprobs(model, broken, mask, P, G)
    want, _ = token_logprobs(model, broken, mask, P)
    torch.testing.assert_close(got, want)


def test_single_completion_token(tiny_model):
    model, _ = tiny_model
    ids, mask = _batch()
    ids, mask = ids[:, : P + 1], mask[:, : P + 1]
    got, _ = grouped_prompt_token_logprobs(model, ids, mask, P, G)
    want, _ = token_logprobs(model, ids, mask, P)
    assert got.shape == (ids.size(0), 1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
