"""PPO math against hand computation: GAE with both lambdas and the length-adaptive one, where the
terminal reward lands, the KL in the reward, the clipped value loss, explained variance and
whitening; and GAE against a slow per-row reference."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.algorithms.gae import (
    explained_variance,
    explained_variance_moments,
    explained_variance_of_moments,
    gae,
    kl_reward_penalty,
    length_adaptive_lambda,
    masked_moments,
    masked_whiten,
    moments_to_stats,
    terminal_token_rewards,
    value_loss,
)
from lit_codeRL.algorithms.grpo import policy_loss


def test_gae_by_hand_skips_tokens_off_the_mask() -> None:
    # policy tokens at columns 1, 2, 4 (3 is an observation); reward 1 after the last one
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[9.0, 0.2, 0.4, 9.0, 0.5]])  # off-mask values must not matter
    mask = torch.tensor([[0, 1, 1, 0, 1]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    # backwards over the chain 4 -> 2 -> 1:
    d4 = 1.0 + 0.9 * 0.0 - 0.5  # 0.5
    a4 = d4
    d2 = 0.0 + 0.9 * 0.5 - 0.4  # 0.05
    a2 = d2 + 0.9 * 0.5 * a4  # 0.275
    d1 = 0.0 + 0.9 * 0.4 - 0.2  # 0.16
    a1 = d1 + 0.9 * 0.5 * a2  # 0.28375
    torch.testing.assert_close(adv, torch.tensor([[0.0, a1, a2, 0.0, a4]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, a1 + 0.2, a2 + 0.4, 0.0, a4 + 0.5]]))


def test_critic_lambda_one_gives_monte_carlo_returns_and_actor_lambda_zero_one_step_td() -> None:
    rewards = torch.tensor([[0.0, 0.0, 0.0, 2.0]])
    values = torch.tensor([[0.3, -0.1, 0.7, 1.2]])
    mask = torch.ones(1, 4)
    _, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    torch.testing.assert_close(returns, torch.full((1, 4), 2.0))  # whatever the values
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=0.0)
    # lam 0: A_t = r_t + V_{t+1} - V_t
    torch.testing.assert_close(adv, torch.tensor([[-0.1 - 0.3, 0.7 + 0.1, 1.2 - 0.7, 2.0 - 1.2]]))


def test_gae_per_row_lambda_equals_one_call_per_row() -> None:
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(3, 7, generator=g), torch.randn(3, 7, generator=g)
    mask = (torch.rand(3, 7, generator=g) > 0.3).long()
    lam = torch.tensor([0.0, 0.6, 1.0])
    adv, ret = gae(rewards, values, mask, 0.95, lam)
    for b in range(3):
        a, r = gae(rewards[b : b + 1], values[b : b + 1], mask[b : b + 1], 0.95, float(lam[b]))
        torch.testing.assert_close(adv[b : b + 1], a)
        torch.testing.assert_close(ret[b : b + 1], r)


def _slow_gae(rewards, values, mask, gamma, lam):
    """Textbook GAE on each row's policy tokens taken out as a plain list."""
    adv = torch.zeros_like(values)
    for b in range(rewards.size(0)):
        idx = mask[b].nonzero().squeeze(-1).tolist()
        running, next_v = 0.0, 0.0
        for t in reversed(idx):
            # rewards off the mask are dropped (GAE never visits them): the reason rewards go on
            # the last policy token
            delta = float(rewards[b, t]) + gamma * next_v - float(values[b, t])
            running = delta + gamma * lam * running
            adv[b, t] = running
            next_v = float(values[b, t])
    return adv


def test_gae_matches_the_textbook_loop() -> None:
    g = torch.Generator().manual_seed(1)
    rewards, values = torch.randn(4, 11, generator=g), torch.randn(4, 11, generator=g)
    mask = (torch.rand(4, 11, generator=g) > 0.4).long()
    adv, _ = gae(rewards * mask, values, mask, 0.97, 0.9)
    torch.testing.assert_close(adv, _slow_gae(rewards * mask, values, mask, 0.97, 0.9))


def test_length_adaptive_lambda_by_hand() -> None:
    lam = length_adaptive_lambda(torch.tensor([10, 20, 100, 1000]), alpha=0.05)
    torch.testing.assert_close(lam, torch.tensor([0.0, 0.0, 0.8, 0.98]))  # 1 - 1/(0.05 l), floor 0


def test_terminal_reward_lands_on_the_last_policy_token_not_on_the_observation_after_it() -> None:
    # prompt | action (2) | observation (2) | action (1) | observation (2): the episode ends on an
    # observation (the env's last feedback) -- the reward must still reach the policy
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0, 0], [0, 0, 1, 1, 1, 0, 0, 0]])
    rewards = torch.tensor([1.0, -0.5])
    token = terminal_token_rewards(rewards, mask)
    assert token[0].tolist() == [0, 0, 0, 0, 0, 1.0, 0, 0]
    assert token[1].tolist() == [0, 0, 0, 0, -0.5, 0, 0, 0]
    adv, _ = gae(token, torch.zeros(2, 8), mask, 1.0, 1.0)
    torch.testing.assert_close(adv[0, mask[0].bool()], torch.ones(3))  # every action token is credited
    # the mistake this guards against: the reward on the last attended (observation) token is lost
    lost = torch.zeros(2, 8)
    lost[0, 7] = 1.0
    assert gae(lost, torch.zeros(2, 8), mask, 1.0, 1.0)[0].abs().sum() == 0
    # a row out of the loss (no policy token) gets no reward anywhere
    assert terminal_token_rewards(torch.tensor([3.0]), torch.zeros(1, 4)).abs().sum() == 0


def test_kl_in_the_reward_is_k1_on_policy_tokens() -> None:
    mask = torch.tensor([[0, 1, 1]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    logp = torch.tensor([[5.0, -1.0, -2.0]])
    ref = torch.tensor([[0.0, -1.5, -1.0]])
    out, kl = kl_reward_penalty(rewards, logp, ref, mask, beta=0.1)
    torch.testing.assert_close(kl, torch.tensor([[0.0, 0.5, -1.0]]))
    torch.testing.assert_close(out, torch.tensor([[0.0, -0.05, 1.1]]))


def test_value_loss_by_hand_and_micro_batch_normaliser() -> None:
    values = torch.tensor([[1.0, 0.0, 2.0, 5.0]])
    old = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    returns = torch.tensor([[1.5, -1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, stats = value_loss(values, old, returns, mask, clip_range=0.5)
    # clipped values: 0.5, 0.0, 0.5; max of the squared errors: (0.25 vs 1.0), (1 vs 1), (4 vs 0.25)
    assert float(loss) == pytest.approx(0.5 * (1.0 + 1.0 + 4.0) / 3)
    assert float(stats["value_clip_frac"]) == pytest.approx(1 / 3)
    plain, _ = value_loss(values, old, returns, mask, clip_range=None)
    assert float(plain) == pytest.approx(0.5 * (0.25 + 1.0 + 4.0) / 3)
    # two micro-batches normalised by the whole batch's token count add up to the whole loss
    halves = [
        value_loss(values[:, s], old[:, s], returns[:, s], mask[:, s], 0.5, num_tokens=3)[0]
        for s in (slice(0, 2), slice(2, 4))
    ]
    assert float(sum(halves)) == pytest.approx(float(loss))


def test_explained_variance_by_hand() -> None:
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    assert float(explained_variance(returns, returns, mask)) == pytest.approx(1.0)
    assert float(explained_variance(torch.full((1, 4), 2.5), returns, mask)) == pytest.approx(0.0)
    # residual [1, 1, 1, 1] - 1 ... residual var 0 after a constant offset: still 1
    assert float(explained_variance(returns - 1, returns, mask)) == pytest.approx(1.0)
    worse = torch.tensor([[4.0, 3.0, 2.0, 1.0]])  # residual var 20/3 vs 5/3
    assert float(explained_variance(worse, returns, mask)) == pytest.approx(1 - 4.0)


def test_explained_variance_of_summed_moments_is_the_global_batchs() -> None:
    """Two "ranks" whose own explained variances are 0 (constant returns) and 1 - 4 = -3: the
    global statistic comes from the summed moments, not from either rank's number."""
    returns = torch.tensor([[2.0, 2.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]])
    values = torch.tensor([[2.0, 2.0, 0.0, 0.0], [4.0, 3.0, 2.0, 1.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    ranks = [
        explained_variance_moments(values[i : i + 1], returns[i : i + 1], mask[i : i + 1]) for i in (0, 1)
    ]
    assert float(explained_variance_of_moments(ranks[0])) == 0.0  # constant returns
    assert float(explained_variance_of_moments(ranks[1])) == pytest.approx(1 - 4.0)
    # by hand: returns [2, 2, 1, 2, 3, 4] (mean 7/3, squared deviations 48/9, var 16/15),
    # residuals [0, 0, -3, -1, 1, 3] (mean 0, var 20/5 = 4): 1 - 4 / (16/15) = -2.75
    glob = explained_variance_of_moments(ranks[0] + ranks[1])
    assert float(glob) == pytest.approx(-2.75)
    assert float(glob) == pytest.approx(float(explained_variance(values, returns, mask)))
    assert float(explained_variance_of_moments(torch.zeros(5, dtype=torch.float64))) == 0.0


def test_whitening_with_global_moments_equals_the_plain_statistics() -> None:
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 6, generator=g)
    mask = (torch.rand(3, 6, generator=g) > 0.3).long()
    # two "ranks" holding rows [0] and [1, 2]: moments summed = the whole batch's
    parts = [masked_moments(x[:1], mask[:1]), masked_moments(x[1:], mask[1:])]
    summed = [a + b for a, b in zip(*parts, strict=True)]
    mean, var = moments_to_stats(*summed)
    sel = x[mask.bool()]
    torch.testing.assert_close(mean, sel.mean())
    torch.testing.assert_close(var, sel.var())
    out = masked_whiten(x, mask, mean, var)
    assert float(out[mask.bool()].mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(out[mask.bool()].std()) == pytest.approx(1.0, abs=1e-4)
    assert out[~mask.bool()].abs().sum() == 0


def test_ppo_clipped_loss_with_token_advantages_by_hand() -> None:
    logp = torch.tensor([[0.0, -1.0, -1.0]], requires_grad=True)
    old = torch.tensor([[0.0, -1.2, -0.9]])  # ratios e^0.2 = 1.221 (clipped at 1.2), e^-0.1 = 0.905
    adv = torch.tensor([[0.0, 2.0, -1.0]])
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = policy_loss(logp, old, adv, mask, epsilon=0.2, loss_type="dapo")
    r1, r2 = torch.exp(torch.tensor(0.2)), torch.exp(torch.tensor(-0.1))
    want = (-min(r1 * 2.0, 1.2 * 2.0) + -min(r2 * -1.0, 0.8 * -1.0)) / 2
    assert float(loss.detach()) == pytest.approx(float(want), rel=1e-6)
    loss.backward()
    # the clipped token (ratio above 1 + eps with A > 0) and the prompt get no gradient
    assert logp.grad[0, 0] == 0 and logp.grad[0, 1] == 0
    assert float(logp.grad[0, 2]) == pytest.approx(float(r2) / 2, rel=1e-5)  # d(-r*A)/dlp = -r*A = r
    assert float(stats["clip_ratio/high"]) == pytest.approx(0.5)
    # the same token with A < 0 and a ratio under 1 - eps is clipped too: no gradient
    low = torch.tensor([[0.0, -1.0, -1.0]], requires_grad=True)
    loss, stats = policy_loss(
        low, torch.tensor([[0.0, -1.0, -0.5]]), adv, mask, epsilon=0.2, loss_type="dapo"
    )
    loss.backward()
    assert low.grad[0, 2] == 0 and float(stats["clip_ratio/low"]) == pytest.approx(0.5)
