"""The shared policy-gradient math against hand-computed values, loops and invariances."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.algorithms.baselines import RoleBaselines
from lit_codeRL.algorithms.bc import nll_loss
from lit_codeRL.algorithms.gae import gae, value_loss
from lit_codeRL.algorithms.grpo import (
    aggregate_token_loss,
    group_advantages,
    normaliser_rows,
    policy_loss,
    sequence_token_counts,
)
from lit_codeRL.algorithms.importance import truncated_importance_weights
from lit_codeRL.algorithms.reinforce import reinforce_advantages, reinforce_loss, rloo_advantages


def test_rloo_by_hand():
    # group 1: [1, 0, 0, 1] -> others' means [1/3, 2/3, 2/3, 1/3]; group 2: [2, 4] -> [4, 2]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    torch.testing.assert_close(rloo_advantages(rewards, 4), torch.tensor([2 / 3, -2 / 3, -2 / 3, 2 / 3]))
    torch.testing.assert_close(rloo_advantages(torch.tensor([2.0, 4.0]), 2), torch.tensor([-2.0, 2.0]))
    # RLOO = G/(G-1) * (R - mean)
    r = torch.randn(12)
    mean_adv = reinforce_advantages(r, 4, "mean")
    torch.testing.assert_close(rloo_advantages(r, 4), mean_adv * 4 / 3)


def test_rloo_leaves_invalid_samples_out():
    rewards = torch.tensor([1.0, 0.0, 5.0, 1.0])
    valid = torch.tensor([True, True, False, True])
    # valid rewards [1, 0, 1]: baselines (others) [0.5, 1, -, 0.5]
    torch.testing.assert_close(rloo_advantages(rewards, 4, valid), torch.tensor([0.5, -1.0, 0.0, 0.5]))
    # a lone valid sample has no baseline: advantage 0
    torch.testing.assert_close(
        rloo_advantages(torch.tensor([3.0, 1.0]), 2, torch.tensor([True, False])), torch.zeros(2)
    )
    torch.testing.assert_close(
        reinforce_advantages(rewards, 4, "none", valid), torch.tensor([1.0, 0.0, 0.0, 1.0])
    )


def test_group_advantages_with_invalid_equal_the_group_without_them():
    rewards = torch.tensor([1.0, 0.0, 7.0, 0.5, 2.0, 2.0])
    valid = torch.tensor([True, True, False, True, True, True])
    adv = group_advantages(rewards, 3, "group", valid=valid)
    ref = group_advantages(torch.tensor([1.0, 0.0]), 2, "group")
    torch.testing.assert_close(adv[:2], ref)
    assert adv[2] == 0
    torch.testing.assert_close(adv[3:], group_advantages(torch.tensor([0.5, 2.0, 2.0]), 3, "group"))


def _loop_gae(rewards, values, mask, gamma, lam, terminated, boot):
    out = torch.zeros_like(values)
    for b in range(rewards.size(0)):
        steps = [t for t in range(rewards.size(1)) if mask[b, t]]
        next_v = 0.0 if terminated[b] else float(boot[b])
        adv = 0.0
        for t in reversed(steps):
            delta = float(rewards[b, t]) + gamma * next_v - float(values[b, t])
            adv = delta + gamma * lam * adv
            out[b, t] = adv
            next_v = float(values[b, t])
    return out


def test_gae_by_hand_and_against_a_loop():
    # one row, steps at t=0,1 (t=2 masked env token), t=3; gamma=1, lam=1: A_t = sum(r_>=t) - V_t
    rewards = torch.tensor([[0.0, 0.0, 9.0, 1.0]])
    values = torch.tensor([[0.5, 0.2, 9.0, 0.4]])
    mask = torch.tensor([[1, 1, 0, 1]])
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.8, 0.0, 0.6]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 0.0, 1.0]]))
    # random, gamma/lam < 1, a truncated row bootstrapping from a value
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(5, 9, generator=g), torch.randn(5, 9, generator=g)
    mask = (torch.rand(5, 9, generator=g) > 0.3).long()
    terminated = torch.tensor([True, False, True, False, True])
    boot = torch.randn(5, generator=g)
    adv, _ = gae(rewards, values, mask, 0.9, 0.8, terminated, boot)
    torch.testing.assert_close(adv, _loop_gae(rewards, values, mask, 0.9, 0.8, terminated, boot))


def test_value_loss_by_hand():
    values, old = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 0.0]])
    returns, mask = torch.tensor([[0.0, 1.0]]), torch.tensor([[1, 1]])
    # token 0: unclipped (1-0)^2=1, clipped (0.7-0)^2=0.49 -> 1; token 1: 1 -> 0.5 * mean(1, 1) = 0.5
    loss, stats = value_loss(values, old, returns, mask, clip_range=0.2)
    assert float(loss) == pytest.approx(0.5)
    values = torch.tensor([[0.0, 0.0]])  # token 0: unclipped 0, clipped (0.3)^2 = 0.09 -> max 0.09
    loss, stats = value_loss(values, old, returns, mask, clip_range=0.2)
    assert float(loss) == pytest.approx(0.5 * (0.09 + 1.0) / 2)
    assert float(stats["value_clip_frac"]) == pytest.approx(0.5)


def test_role_baselines_use_the_old_value_then_update():
    b = RoleBaselines(alpha=0.5)
    adv = b.advantages(torch.tensor([1.0, -1.0, 1.0]), [("ttt", 0), ("ttt", 1), ("ttt", 0)])
    # both seat-0 samples see the baseline before the batch (0); seat 0: 0 -> 0.5 -> 0.75
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64))
    assert b.values[("ttt", 0)] == pytest.approx(0.75) and b.values[("ttt", 1)] == pytest.approx(-0.5)
    adv = b.advantages(torch.tensor([1.0]), [("ttt", 0)])
    assert float(adv[0]) == pytest.approx(0.25)
    restored = RoleBaselines()
    restored.load_state_dict(b.state_dict())
    assert restored.values == b.values and restored.alpha == 0.5


def test_truncated_importance_weights():
    train = torch.tensor([[0.0, -1.0, -3.0]])
    sampler = torch.tensor([[0.0, -2.0, -1.0]])
    w = truncated_importance_weights(train, sampler, torch.tensor([[1, 1, 0]]), cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 2.0, 1.0]]))  # e^1 capped at 2; masked -> 1


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_with_whole_batch_counts_add_up_to_the_whole_loss(loss_type):
    g = torch.Generator().manual_seed(1)
    per_token = torch.randn(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.4).long()
    mask[2] = 0  # a row left out of the loss (sandbox error): a row for dr_grpo only
    whole = aggregate_token_loss(per_token, mask, loss_type, 5)
    rows, tokens = float(normaliser_rows(mask, loss_type)), float(mask.sum())
    parts = sum(
        aggregate_token_loss(per_token[i : i + 2], mask[i : i + 2], loss_type, 5, rows, tokens)
        for i in range(0, 6, 2)
    )
    torch.testing.assert_close(parts, whole)


def test_dr_grpo_normaliser_counts_rows_that_left_the_loss():
    """Dr. GRPO divides by a constant, B x max_completion_length: a row that leaves the loss
    (sandbox failure, masked truncation) must not raise the weight of the rows that stay."""
    per_token = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [4.0, 4.0, 4.0], [5.0, 6.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    # all four rows in the loss: (3 + 3 + 12 + 11) / (4 rows x 8 tokens)
    assert float(aggregate_token_loss(per_token, mask, "dr_grpo", 8)) == pytest.approx(29 / 32)
    mask[2] = 0  # row 2 leaves the loss; the normaliser stays 4 x 8
    assert float(aggregate_token_loss(per_token, mask, "dr_grpo", 8)) == pytest.approx(17 / 32)
    assert normaliser_rows(mask, "dr_grpo") == 4
    # grpo's per-sequence mean averages over the rows still in the loss: (1.5 + 3 + 5.5) / 3
    assert float(aggregate_token_loss(per_token, mask, "grpo")) == pytest.approx(10 / 3)
    assert normaliser_rows(mask, "grpo") == 3


def test_a_sequence_split_over_rows_weighs_what_it_weighs_as_one_row():
    """An agent episode whose history was rewritten is laid out as several rows; under the
    per-sequence aggregations it is still one sequence, not one per row."""
    # sequence 0: tokens 1, 2 | 3 over two rows; sequence 1: token 6 in one row
    per_token = torch.tensor([[1.0, 2.0], [3.0, 0.0], [6.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    ids = torch.tensor([0, 0, 1])
    tokens = sequence_token_counts(mask, ids)
    assert tokens.tolist() == [3.0, 3.0, 1.0]
    assert normaliser_rows(mask, "grpo", ids) == 2 and normaliser_rows(mask, "dr_grpo", ids) == 2
    # by hand, as if unsplit: (mean(1, 2, 3) + 6) / 2 = 4; per row it would be (1.5 + 3 + 6) / 3
    assert float(aggregate_token_loss(per_token, mask, "grpo", num_rows=2.0, sequence_tokens=tokens)) == 4.0
    assert float(aggregate_token_loss(per_token, mask, "grpo")) == pytest.approx(3.5)
    # dr_grpo: (1 + 2 + 3 + 6) / (2 sequences x 4 tokens)
    assert float(aggregate_token_loss(per_token, mask, "dr_grpo", 4, num_rows=2.0)) == 1.5
    # micro-batches of one row each, with the whole batch's counts, add up to the same loss
    parts = sum(
        aggregate_token_loss(per_token[i : i + 1], mask[i : i + 1], "grpo", None, 2.0, 4.0, tokens[i : i + 1])
        for i in range(3)
    )
    assert float(parts) == 4.0
    # a row left out of the loss leaves its sequence's count; a sequence with none is not counted
    mask[2] = 0
    assert normaliser_rows(mask, "grpo", ids) == 1 and normaliser_rows(mask, "dr_grpo", ids) == 2


def test_per_token_advantages_equal_broadcast_sequence_advantages():
    g = torch.Generator().manual_seed(2)
    lp = torch.randn(4, 6, generator=g)
    mask = (torch.rand(4, 6, generator=g) > 0.3).long()
    seq = torch.randn(4, generator=g)
    a, _ = policy_loss(lp, lp, seq, mask, loss_type="dapo")
    b, _ = policy_loss(lp, lp, seq[:, None].expand(4, 6) * mask, mask, loss_type="dapo")
    torch.testing.assert_close(a, b)


def test_reinforce_loss_gradient_is_minus_advantage_on_the_mask_only():
    lp = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    loss, _ = reinforce_loss(lp, adv, mask, loss_type="dapo")
    loss.backward()
    expected = -(adv[:, None] * mask) / mask.sum()
    torch.testing.assert_close(lp.grad, expected)


def test_nll_loss_by_hand():
    lp = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    loss, stats = nll_loss(lp, torch.tensor([[1, 1, 0]]))
    assert float(loss) == pytest.approx(
        -(torch.log(torch.tensor(0.5)) + torch.log(torch.tensor(0.25))).item() / 2
    )
    assert float(stats["token_prob"]) == pytest.approx(0.375)
