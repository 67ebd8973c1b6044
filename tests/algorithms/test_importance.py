"""Truncated importance weights and how the clipped surrogate applies them, against hand values."""

from __future__ import annotations

import math

import pytest
import torch

from lit_codeRL.algorithms.grpo import policy_loss
from lit_codeRL.algorithms.importance import sampler_correction, truncated_importance_weights
from lit_codeRL.algorithms.reinforce import reinforce_loss


def test_weights_are_capped_ratios_on_the_mask_and_one_elsewhere():
    train = torch.tensor([[-1.0, -2.0, -0.5, 0.0]])
    sampler = torch.tensor([[-1.2, -1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    w = truncated_importance_weights(train, sampler, mask, cap=2.0)
    want = torch.tensor([[math.exp(0.2), math.exp(-1.0), 2.0, 1.0]])  # exp(1.5) = 4.48 is capped
    torch.testing.assert_close(w, want)
    assert not w.requires_grad


def test_surrogate_weights_each_token():
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


# Reference log-probs 0.5 above and below the policy's: the k3 KL is > 0 on every token.
_REF = torch.tensor([[-0.5, -1.5, -0.5]])


def _k3_and_grad(lp: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k3 = exp(ref - lp) - (ref - lp) - 1 and its derivative 1 - exp(ref - lp), by hand."""
    d = ref - lp
    return torch.exp(d) - d - 1, 1 - torch.exp(d)


@pytest.mark.parametrize("loss", ["clipped", "reinforce"])
def test_importance_weights_multiply_the_policy_term_but_not_the_kl(loss):
    """Loss and gradient by hand with a KL that is not 0: ``(-w * A + beta * k3) / tokens`` and
    ``(-w * A + beta * (1 - exp(ref - lp))) / tokens`` per token. Weighting the KL too (the
    mistake this guards against) changes both."""
    lp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    mask, adv, beta = torch.ones(1, 3), torch.tensor([2.0]), 0.5
    weights = torch.tensor([[1.0, 0.5, 2.0]])
    if loss == "clipped":
        value, stats = policy_loss(
            lp,
            lp.detach(),
            adv,
            mask,
            loss_type="dapo",
            importance_weights=weights,
            ref_logprobs=_REF,
            beta=beta,
        )
    else:
        value, stats = reinforce_loss(
            lp, adv, mask, loss_type="dapo", importance_weights=weights, ref_logprobs=_REF, beta=beta
        )
    value.backward()
    k3, dk3 = _k3_and_grad(lp.detach(), _REF)
    assert float(k3.min()) > 0.1
    # reinforce: -w * A * lp has value -w * A * lp; the clipped surrogate at ratio 1 is -w * A
    policy_value = -weights * 2.0 * (lp.detach() if loss == "reinforce" else 1.0)
    torch.testing.assert_close(value.detach(), ((policy_value + beta * k3).sum() / 3))
    torch.testing.assert_close(lp.grad, (-weights * 2.0 + beta * dk3) / 3)
    torch.testing.assert_close(stats["kl"], k3.mean())


def test_sampler_correction_with_one_update_weights_tokens_and_reports_the_mismatch():
    lp = torch.tensor([[-1.0, -2.0, -0.5, 0.0]], requires_grad=True)
    sampler = torch.tensor([[-1.2, -1.0, -2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    old, w, stats = sampler_correction(lp, sampler, mask, cap=2.0)
    torch.testing.assert_close(old, lp.detach())  # ratio 1
    assert not old.requires_grad
    torch.testing.assert_close(w, torch.tensor([[math.exp(0.2), math.exp(-1.0), 2.0, 1.0]]))
    # mismatch over the 3 masked tokens: |0.2|, |-1|, |1.5|; the masked 5.0 is left out
    assert float(stats["tis/logprob_diff"]) == pytest.approx((0.2 + 1.0 + 1.5) / 3)
    assert float(stats["tis/weight"]) == pytest.approx((math.exp(0.2) + math.exp(-1.0) + 2.0) / 3)
    assert float(stats["tis/capped"]) == pytest.approx(1 / 3)
    # cap 0: no weight, the mismatch is still measured
    old, w, stats = sampler_correction(lp, sampler, mask, cap=0.0)
    assert w is None and set(stats) == {"tis/logprob_diff"}


def test_sampler_correction_with_several_updates_takes_the_sampler_as_the_old_policy():
    lp = torch.tensor([[-1.0, -2.0]])
    sampler = torch.tensor([[-1.1, -1.5]])
    old, w, stats = sampler_correction(lp, sampler, torch.ones(1, 2), cap=2.0, num_updates=2)
    torch.testing.assert_close(old, sampler)
    assert w is None and float(stats["tis/logprob_diff"]) == pytest.approx(0.3)


def test_sampler_correction_with_the_trainers_old_policy_keeps_the_weight_to_the_sampler():
    """PPO with several updates (verl, OpenRLHF): the ratio is to the trainer's pi_old, and the
    truncated weight min(pi_old / pi_sampler, cap) corrects the sampler, the same in every update."""
    lp = torch.tensor([[-0.9, -2.5, -0.4]], requires_grad=True)  # the policy after an update
    trainer_old = torch.tensor([[-1.0, -2.0, -0.5]])
    sampler = torch.tensor([[-1.2, -1.0, -2.0]])
    mask = torch.ones(1, 3)
    old, w, stats = sampler_correction(lp, sampler, mask, cap=2.0, num_updates=4, old_logprobs=trainer_old)
    torch.testing.assert_close(old, trainer_old)
    torch.testing.assert_close(w, torch.tensor([[math.exp(0.2), math.exp(-1.0), 2.0]]))
    assert float(stats["tis/capped"]) == pytest.approx(1 / 3)
    # the mismatch metric still compares the policy being trained with the sampler
    assert float(stats["tis/logprob_diff"]) == pytest.approx((0.3 + 1.5 + 1.6) / 3)


def test_unit_weights_leave_the_loss_unchanged():
    torch.manual_seed(0)
    logps = torch.randn(4, 5)
    old = logps + 0.1 * torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.2).float()
    adv = torch.randn(4)
    plain, _ = policy_loss(logps, old, adv, mask)
    weighted, _ = policy_loss(logps, old, adv, mask, importance_weights=torch.ones(4, 5))
    torch.testing.assert_close(weighted, plain)
