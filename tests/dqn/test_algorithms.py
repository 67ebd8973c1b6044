"""DQN math against hand computation: TD targets (vanilla, Double, masked), Huber loss, ε schedules."""

from __future__ import annotations

import math

import pytest
import torch

from lit_codeRL.algorithms.dqn import epsilon_schedule, huber_loss, linear_schedule, masked_q, td_target

# Two transitions, three actions. Online prefers action 2 in row 0 and action 0 in row 1; the target
# net disagrees, which is exactly where Double DQN and vanilla DQN differ.
REWARDS = torch.tensor([1.0, 0.5])
NEXT_ONLINE = torch.tensor([[0.0, 1.0, 5.0], [3.0, 2.0, 1.0]])
NEXT_TARGET = torch.tensor([[10.0, 2.0, 4.0], [1.0, 7.0, 0.0]])


def test_double_dqn_target_uses_online_argmax_and_target_value():
    target = td_target(REWARDS, torch.tensor([0.0, 0.0]), NEXT_ONLINE, NEXT_TARGET, gamma=0.9, double=True)
    # row 0: argmax online = 2 -> target 4.0 -> 1 + 0.9*4 = 4.6; row 1: argmax online = 0 -> 1.0 -> 0.5 + 0.9
    torch.testing.assert_close(target, torch.tensor([4.6, 1.4]))


def test_vanilla_target_uses_target_max():
    target = td_target(REWARDS, torch.tensor([0.0, 0.0]), NEXT_ONLINE, NEXT_TARGET, gamma=0.9, double=False)
    torch.testing.assert_close(target, torch.tensor([1.0 + 0.9 * 10.0, 0.5 + 0.9 * 7.0]))


def test_done_transitions_do_not_bootstrap():
    target = td_target(REWARDS, torch.tensor([1.0, 0.0]), NEXT_ONLINE, NEXT_TARGET, gamma=0.9, double=True)
    torch.testing.assert_close(target, torch.tensor([1.0, 1.4]))
    # bool dones work too
    target_b = td_target(REWARDS, torch.tensor([True, False]), NEXT_ONLINE, NEXT_TARGET, gamma=0.9)
    torch.testing.assert_close(target_b, target)


def test_masked_next_actions_are_ignored():
    mask = torch.tensor([[True, True, False], [False, True, True]])
    # row 0: online over {0,1} -> 1 -> target 2.0; row 1: online over {1,2} -> 1 -> target 7.0
    double = td_target(REWARDS, torch.zeros(2), NEXT_ONLINE, NEXT_TARGET, 0.5, True, next_action_mask=mask)
    torch.testing.assert_close(double, torch.tensor([1.0 + 0.5 * 2.0, 0.5 + 0.5 * 7.0]))
    vanilla = td_target(REWARDS, torch.zeros(2), NEXT_ONLINE, NEXT_TARGET, 0.5, False, next_action_mask=mask)
    torch.testing.assert_close(vanilla, torch.tensor([1.0 + 0.5 * 10.0, 0.5 + 0.5 * 7.0]))


def test_terminal_row_with_empty_mask_is_finite():
    mask = torch.tensor([[False, False, False], [True, True, True]])
    target = td_target(
        REWARDS, torch.tensor([1.0, 0.0]), NEXT_ONLINE, NEXT_TARGET, 0.9, True, next_action_mask=mask
    )
    assert torch.isfinite(target).all()
    torch.testing.assert_close(target, torch.tensor([1.0, 1.4]))
    assert masked_q(NEXT_ONLINE, mask)[0].tolist() == NEXT_ONLINE[0].tolist()


def test_target_has_no_gradient():
    online = NEXT_ONLINE.clone().requires_grad_(True)
    assert not td_target(REWARDS, torch.zeros(2), online, NEXT_TARGET, 0.9).requires_grad


def test_huber_loss_by_hand():
    pred = torch.tensor([0.0, 0.0, 0.0])
    target = torch.tensor([0.5, 2.0, -3.0])
    # 0.5*0.25 = 0.125 ; |2| > 1 -> 1*(2-0.5) = 1.5 ; |3| -> 2.5
    torch.testing.assert_close(huber_loss(pred, target), torch.tensor((0.125 + 1.5 + 2.5) / 3))
    torch.testing.assert_close(huber_loss(pred, target, delta=2.0), torch.tensor((0.125 + 2.0 + 4.0) / 3))
    weights = torch.tensor([1.0, 0.0, 2.0])
    torch.testing.assert_close(
        huber_loss(pred, target, weights=weights), torch.tensor((0.125 + 0.0 + 5.0) / 3)
    )


def test_huber_gradient_is_bounded():
    pred = torch.tensor([0.0, 0.0], requires_grad=True)
    huber_loss(pred, torch.tensor([100.0, 0.3])).backward()
    torch.testing.assert_close(pred.grad, torch.tensor([-1.0, -0.3]) / 2)


def test_epsilon_schedules():
    assert epsilon_schedule(0, 1.0, 0.1, 100, "linear") == pytest.approx(1.0)
    assert epsilon_schedule(50, 1.0, 0.1, 100, "linear") == pytest.approx(0.55)
    assert epsilon_schedule(100, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)
    assert epsilon_schedule(10_000, 1.0, 0.1, 100, "linear") == pytest.approx(0.1)
    assert epsilon_schedule(50, 1.0, 0.1, 100, "exponential") == pytest.approx(0.1 + 0.9 * math.exp(-2.5))
    assert epsilon_schedule(10_000, 0.3, 0.1, 100, "constant") == pytest.approx(0.3)
    assert epsilon_schedule(5, 1.0, 0.1, 0, "linear") == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown epsilon schedule"):
        epsilon_schedule(0, kind="cosine")


def test_linear_schedule():
    assert linear_schedule(0, 0.4, 1.0, 10) == pytest.approx(0.4)
    assert linear_schedule(5, 0.4, 1.0, 10) == pytest.approx(0.7)
    assert linear_schedule(50, 0.4, 1.0, 10) == pytest.approx(1.0)
