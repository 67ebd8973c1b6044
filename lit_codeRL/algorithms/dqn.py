"""Deep Q-learning math as pure functions: TD targets (plain and Double DQN), Huber loss, ε schedules.

References: Mnih et al. 2015 (DQN, Huber/"error clipping", target network), van Hasselt et al. 2016
(Double DQN: the online network picks the next action, the target network scores it), Schaul et al.
2016 (prioritized replay importance weights, applied here as per-sample loss weights). The shapes
follow CleanRL's ``dqn.py``: ``B`` transitions, ``A`` discrete actions.
"""

from __future__ import annotations

import math

import torch

EPSILON_SCHEDULES = ("linear", "exponential", "constant")


def masked_q(q: torch.Tensor, action_mask: torch.Tensor | None) -> torch.Tensor:
    """``q`` with invalid actions set to ``-inf`` so that ``max``/``argmax`` ignore them.

    Args:
        q: ``[B, A]`` action values.
        action_mask: ``[B, A]`` bool, True where the action is allowed; ``None`` allows all. A row with
            no allowed action is left unmasked (such rows only occur for terminal transitions, whose
            bootstrap term is zeroed anyway, and ``-inf`` there would turn into NaN).
    """
    if action_mask is None:
        return q
    mask = action_mask.bool()
    mask = mask | ~mask.any(dim=-1, keepdim=True)
    return q.masked_fill(~mask, float("-inf"))


def td_target(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
    double: bool = True,
    next_action_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One-step TD target ``r + γ (1 - done) Q̂(s', a*)``.

    Args:
        rewards: ``[B]`` rewards of the transitions.
        dones: ``[B]`` 1 where no bootstrap follows (the episode ended at ``s'``).
        next_q_online: ``[B, A]`` online-network values at ``s'`` (used only when ``double``).
        next_q_target: ``[B, A]`` target-network values at ``s'``.
        gamma: discount factor.
        double: Double DQN: ``a* = argmax_a Q_online(s', a)`` scored by ``Q_target``; otherwise
            ``max_a Q_target(s', a)`` (vanilla DQN, which overestimates under noise).
        next_action_mask: optional ``[B, A]`` bool of actions allowed at ``s'``.

    Returns:
        ``[B]`` targets (no gradient flows through them).
    """
    with torch.no_grad():
        target_q = masked_q(next_q_target, next_action_mask)
        if double:
            best = masked_q(next_q_online, next_action_mask).argmax(dim=-1, keepdim=True)
            next_value = target_q.gather(-1, best).squeeze(-1)
        else:
            next_value = target_q.max(dim=-1).values
        not_done = 1.0 - dones.to(rewards.dtype)
        # -inf * 0 would be NaN: a terminal row's bootstrap value is irrelevant, so zero it first.
        next_value = torch.where(not_done > 0, next_value, torch.zeros_like(next_value))
        return rewards + gamma * not_done * next_value


def huber_loss(
    prediction: torch.Tensor,
    target: torch.Tensor,
    delta: float = 1.0,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean Huber loss: quadratic for ``|error| <= delta``, linear beyond (bounded gradients).

    Args:
        prediction, target: ``[B]``.
        delta: the switch point between the quadratic and linear parts.
        weights: optional ``[B]`` per-sample weights (prioritized-replay importance weights).
    """
    error = prediction - target
    abs_error = error.abs()
    quadratic = torch.clamp(abs_error, max=delta)
    per_sample = 0.5 * quadratic**2 + delta * (abs_error - quadratic)
    if weights is not None:
        per_sample = per_sample * weights
    return per_sample.mean()


def epsilon_schedule(
    step: int,
    start: float = 1.0,
    end: float = 0.05,
    decay_steps: int = 10_000,
    kind: str = "linear",
) -> float:
    """Exploration rate after ``step`` environment steps.

    ``linear`` goes from ``start`` to ``end`` in ``decay_steps`` and stays there; ``exponential``
    decays ``end + (start - end) * exp(-5 step / decay_steps)`` (within 1% of ``end``'s gap at
    ``decay_steps``); ``constant`` is always ``start``.
    """
    if kind not in EPSILON_SCHEDULES:
        raise ValueError(f"unknown epsilon schedule {kind!r}; choose one of {EPSILON_SCHEDULES}")
    if kind == "constant":
        return float(start)
    if decay_steps <= 0:
        return float(end)
    if kind == "linear":
        fraction = min(max(step, 0) / decay_steps, 1.0)
        return float(start + fraction * (end - start))
    return float(end + (start - end) * math.exp(-5.0 * max(step, 0) / decay_steps))


def linear_schedule(step: int, start: float, end: float, duration: int) -> float:
    """``start`` → ``end`` linearly over ``duration`` steps, then constant (PER's β annealing)."""
    if duration <= 0:
        return float(end)
    return float(start + min(max(step, 0) / duration, 1.0) * (end - start))
