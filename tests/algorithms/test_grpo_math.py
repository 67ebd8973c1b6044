"""GRPO math against hand-computed numbers (the arithmetic is in the comments), plus invariances."""

from __future__ import annotations

import math

import pytest
import torch

from lit_codeRL.algorithms.grpo import aggregate_token_loss, group_advantages, policy_loss, zero_std_groups
from lit_codeRL.algorithms.kl import k3_kl, masked_mean

# Two groups of 3: [0, 1, 2] (mean 1, unbiased std sqrt((1 + 0 + 1) / 2) = 1) and [5, 5, 5].
REWARDS = torch.tensor([0.0, 1.0, 2.0, 5.0, 5.0, 5.0])


def test_group_advantages_group_scaling():
    adv = group_advantages(REWARDS, 3, "group")
    # (r - mean) / (std + 1e-4): [-1, 0, 1] / 1.0001; the zero-std group -> 0 / 1e-4 = 0.
    expected = torch.tensor([-1 / 1.0001, 0.0, 1 / 1.0001, 0.0, 0.0, 0.0])
    torch.testing.assert_close(adv, expected)


def test_group_advantages_batch_scaling():
    adv = group_advantages(REWARDS, 3, "batch")
    # batch mean 18 / 6 = 3; squared deviations 9 + 4 + 1 + 4 + 4 + 4 = 26; std = sqrt(26 / 5) = 2.2803509
    std = 2.2803509
    expected = torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]) / (std + 1e-4)
    torch.testing.assert_close(adv, expected)


def test_group_advantages_unscaled_dr_grpo():
    # Only the group mean is subtracted: [0, 1, 2] - 1 and [5, 5, 5] - 5.
    adv = group_advantages(REWARDS, 3, "none")
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0, 0.0, 0.0, 0.0]))


def test_group_advantages_pair_and_eps():
    # [1, 3]: mean 2, unbiased std sqrt((1 + 1) / 1) = 1.4142136; eps = 0 -> -+0.7071068.
    adv = group_advantages(torch.tensor([1.0, 3.0]), 2, "group", eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-0.7071068, 0.7071068]))


def test_group_advantages_rejects_bad_shapes():
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError):
        group_advantages(REWARDS, 3, "bogus")  # type: ignore[arg-type]


def test_zero_std_groups():
    assert zero_std_groups(REWARDS, 3).tolist() == [False, True]
    assert zero_std_groups(torch.tensor([1.0, 1.0, 0.0, 1.0]), 2).tolist() == [True, False]
    # invalid samples (the sandbox failed on them) are no signal: only valid rewards are compared,
    # and a group with fewer than two valid ones has none
    rewards = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 5.0, 0.0, 1.0, 7.0])
    valid = torch.tensor([False, True, True, True, True, False, False, False, True])
    assert zero_std_groups(rewards, 3, valid).tolist() == [True, False, True]


# ---------------------------------------------------------------------------------- the loss
# Ratios r per token, seq 0 with A = +1, seq 1 with A = -2; seq 1's middle token is masked.
RATIOS = torch.tensor([[1.0, 1.5, 0.5], [1.0, 1.5, 0.5]])
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -2.2]])
# Per-token -min(r A, clip(r, 0.8, 1.2) A):
#   seq 0 (A = 1):  r=1 -> -1;  r=1.5 -> -min(1.5, 1.2) = -1.2 (clipped);  r=0.5 -> -min(0.5, 0.8) = -0.5
#   seq 1 (A = -2): r=1 -> 2;   (masked);  r=0.5 -> -min(-1, -1.6) = 1.6 (clipped)
# masked sums: seq 0 = -2.7 (3 tokens), seq 1 = 3.6 (2 tokens); total 0.9 over 5 tokens.


def _loss(**kw):
    logprobs = (OLD + RATIOS.log()).requires_grad_(True)
    loss, stats = policy_loss(logprobs, OLD, ADV, MASK, **kw)
    return loss, stats, logprobs


def test_policy_loss_grpo_aggregation():
    loss, _, _ = _loss(loss_type="grpo")
    # per-sequence means -2.7 / 3 = -0.9 and 3.6 / 2 = 1.8; their mean 0.45
    torch.testing.assert_close(loss, torch.tensor(0.45))


def test_policy_loss_dapo_aggregation():
    loss, _, _ = _loss(loss_type="dapo")
    torch.testing.assert_close(loss, torch.tensor(0.18))  # 0.9 / 5 tokens


def test_policy_loss_dr_grpo_aggregation():
    loss, _, _ = _loss(loss_type="dr_grpo", max_completion_length=4)
    torch.testing.assert_close(loss, torch.tensor(0.1125))  # 0.9 / (2 sequences * 4)
    loss, _, _ = _loss(loss_type="dr_grpo")
    torch.testing.assert_close(loss, torch.tensor(0.15))  # 0.9 / (2 * T=3)


def test_policy_loss_clip_stats_and_ratio():
    _, stats, _ = _loss()
    # low: A < 0 and r < 0.8 -> seq 1 token 2 (1 of 5 masked tokens); high: A > 0 and r > 1.2 ->
    # seq 0 token 1 (1 of 5); the masked seq 1 token 1 (r = 1.5, A < 0) counts for neither.
    torch.testing.assert_close(stats["clip_ratio/low"], torch.tensor(0.2))
    torch.testing.assert_close(stats["clip_ratio/high"], torch.tensor(0.2))
    torch.testing.assert_close(stats["clip_ratio"], torch.tensor(0.4))
    torch.testing.assert_close(stats["ratio"], torch.tensor(0.9))  # (1 + 1.5 + 0.5 + 1 + 0.5) / 5
    torch.testing.assert_close(stats["kl"], torch.tensor(0.0))


def test_policy_loss_epsilon_high():
    loss, stats, _ = _loss(epsilon_high=0.6)
    # clip range [0.8, 1.6]: seq 0's r = 1.5 is no longer clipped -> seq 0 mean -(1 + 1.5 + 0.5) / 3 = -1
    # seq 1 unchanged (1.8): (-1 + 1.8) / 2 = 0.4
    torch.testing.assert_close(loss, torch.tensor(0.4))
    torch.testing.assert_close(stats["clip_ratio/high"], torch.tensor(0.0))


def test_policy_loss_gradient_zero_on_clipped_and_masked_tokens():
    loss, _, logprobs = _loss(loss_type="dapo")
    loss.backward()
    # d(-r A)/d lp = -r A, / 5 tokens, only where the unclipped branch is taken and unmasked:
    #   seq 0: -1*1/5 = -0.2, clipped 0, -0.5*1/5 = -0.1;  seq 1: 2/5 = 0.4, masked 0, clipped 0
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.2, 0.0, -0.1], [0.4, 0.0, 0.0]]))


def test_masked_tokens_change_nothing():
    lp = OLD + RATIOS.log()
    lp[1, 1] = 123.0  # garbage where the mask is 0
    old = OLD.clone()
    old[1, 1] = -55.0
    lp.requires_grad_(True)
    ref = OLD.clone()
    ref[1, 1] = 80.0
    for loss_type in ("grpo", "dapo", "dr_grpo"):
        loss, stats, _ = _loss(loss_type=loss_type, ref_logprobs=OLD, beta=0.1)
        loss2, stats2 = policy_loss(lp, old, ADV, MASK, loss_type=loss_type, ref_logprobs=ref, beta=0.1)
        torch.testing.assert_close(loss, loss2)
        for key in stats:
            torch.testing.assert_close(stats[key], stats2[key])
        (grad,) = torch.autograd.grad(loss2, lp)
        assert torch.isfinite(grad).all() and grad[1, 1] == 0


def test_k3_kl_hand_values():
    lp = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.25)])
    ref = torch.tensor([math.log(0.25), math.log(0.3), math.log(0.5)])
    # d = ref - lp: log 0.5 -> 0.5 + 0.693147 - 1 = 0.193147; 0 -> 0; log 2 -> 2 - 0.693147 - 1 = 0.306853
    torch.testing.assert_close(k3_kl(lp, ref), torch.tensor([0.1931472, 0.0, 0.3068528]))
    assert (k3_kl(torch.randn(100), torch.randn(100)) >= 0).all()


def test_policy_loss_adds_beta_kl_before_aggregation():
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.3, 0.5]]))
    mask = torch.ones(1, 3)
    # ratio 1 and A = 0: the surrogate is 0, the loss is beta * mean kl = 0.1 * (0.193147 + 0 + 0.306853) / 3
    loss, stats = policy_loss(lp, lp, torch.zeros(1), mask, ref_logprobs=ref, beta=0.1)
    torch.testing.assert_close(loss, torch.tensor(0.1 * 0.5 / 3))
    torch.testing.assert_close(stats["kl"], torch.tensor(0.5 / 3))
    # beta = 0 still reports the KL but does not add it
    loss0, stats0 = policy_loss(lp, lp, torch.zeros(1), mask, ref_logprobs=ref, beta=0.0)
    assert loss0.item() == 0.0 and stats0["kl"].item() == pytest.approx(0.5 / 3)


def test_masked_mean():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    mask = torch.tensor([[1, 0], [1, 1], [0, 0]])
    torch.testing.assert_close(masked_mean(x, mask), torch.tensor(8.0 / 3))  # (1 + 3 + 4) / 3
    torch.testing.assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.0, 3.5, 0.0]))  # empty row -> 0


def test_grpo_aggregation_matches_a_loop():
    g = torch.Generator().manual_seed(0)
    per_token = torch.randn(5, 7, generator=g)
    mask = (torch.rand(5, 7, generator=g) > 0.3).float()
    mask[:, 0] = 1
    loop = sum((per_token[i] * mask[i]).sum() / mask[i].sum() for i in range(5)) / 5
    torch.testing.assert_close(aggregate_token_loss(per_token, mask, "grpo"), loop)


def test_dapo_micro_batches_weighted_by_tokens_equal_full_batch():
    # The GRPO module re-weights micro-batch dapo losses by their token share; that must add up.
    g = torch.Generator().manual_seed(1)
    lp, old = torch.randn(6, 5, generator=g), torch.randn(6, 5, generator=g)
    adv = torch.randn(6, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.4).float()
    full, _ = policy_loss(lp, old, adv, mask, loss_type="dapo")
    total = mask.sum()
    parts = sum(
        policy_loss(lp[s], old[s], adv[s], mask[s], loss_type="dapo")[0] * mask[s].sum() / total
        for s in (slice(0, 2), slice(2, 6))
    )
    torch.testing.assert_close(parts, full)


def test_rows_with_signal_keeps_whole_groups_with_a_nonzero_advantage():
    from lit_codeRL.algorithms.grpo import rows_with_signal

    mask = torch.ones(6, 3)
    adv = torch.tensor([0.0, 0.0, 0.5, -0.5, 0.0, 0.0])[:, None].expand(6, 3).clone()
    assert rows_with_signal(adv, mask, 2).tolist() == [False, False, True, True, False, False]
    # a group whose only nonzero advantage sits off the trainable mask carries no gradient
    adv[0, 0], mask[0, 0] = 1.0, 0.0
    assert rows_with_signal(adv, mask, 2).tolist() == [False, False, True, True, False, False]
    # nothing to train: no row (the module then steps the optimizer on zero gradients)
    assert not rows_with_signal(torch.zeros(4, 3), torch.ones(4, 3), 2).any()
    # rows that do not form whole groups are all kept
    assert rows_with_signal(torch.zeros(5, 3), torch.ones(5, 3), 2).all()
