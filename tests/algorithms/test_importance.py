"""Truncated importance weights and how the clipped surrogate applies them, against hand values."""

from __future__ import annotations

import math

import torch

from lit_codeRL.algorithms.grpo import policy_loss
from lit_codeRL.algorithms.importance import truncated_importance_weights


def test_weights_are_capped_ratios_on_the_mask_and_one_elsewhere():
    train = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    sampler = torch.tensor([[-1.2, -1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_importance_weights(train, sampler, mask, cap=2.0)
    want = torch.tensor([[math.exp(0.2), math.exp(-1.0), 2.0, 1.0]])  # exp(1.5) = 4.48 is capped
    torch.testing.assert_close(w, want)
    assert not w.requires_grad


def test_surrogate_weights_each_token_but_not_the_kl():
    # one sequence of 3 tokens, ratio 1 (old = new), advantage 2: per token -2 * w
    logps = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    old = logps.detach()
    mask = torch.ones(1, 3)
    adv = torch.tensor([2.0])
    weights = torch.tensor([[1.0, 0.5, 2.0]])
    loss, _ = policy_loss(logps, old, adv, mask, loss_type="dapo", importance_weights=weights)
    torch.testing.assert_close(loss, torch.tensor(-2.0 * (1.0 + 0.5 + 2.0) / 3))
    loss.backward()
    # d/dlogp of -A * w * exp(lp - old) at ratio 1 is -A * w, over 3 tokens
    torch.testing.assert_close(logps.grad, torch.tensor([[-2 / 3, -1 / 3, -4 / 3]]))
    # the k3 KL term is added unweighted: with ref == logps it is 0 whatever the weights
    loss_kl, _ = policy_loss(
        logps.detach(),
        old,
        adv,
        mask,
        loss_type="dapo",
        importance_weights=weights,
        ref_logprobs=old,
        beta=1.0,
    )
    torch.testing.assert_close(loss_kl, loss.detach())


def test_unit_weights_leave_the_loss_unchanged():
    torch.manual_seed(0)
    logps = torch.randn(4, 5)
    old = logps + 0.1 * torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.2).float()
    adv = torch.randn(4)
    plain, _ = policy_loss(logps, old, adv, mask)
    weighted, _ = policy_loss(logps, old, adv, mask, importance_weights=torch.ones(4, 5))
    torch.testing.assert_close(weighted, plain)
