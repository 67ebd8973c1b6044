"""Per-role moving-average baselines (SPIRAL's role-conditioned advantage estimation, RAE).

One baseline per key (``(game, seat)``, or any hashable role), updated after use:
``A = R - b`` with the *old* ``b``, then ``b <- alpha * b + (1 - alpha) * R`` for each sample in
order (Liu et al. 2025, "SPIRAL", alg. 1, alpha = 0.95). The state is checkpointed.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
from torch import Tensor


def ema_update(baseline: float, reward: float, alpha: float) -> float:
    """``alpha * baseline + (1 - alpha) * reward``."""
    return alpha * baseline + (1.0 - alpha) * reward


class RoleBaselines:
    """Moving-average baselines keyed by role; :meth:`advantages` reads, then updates.

    Args:
        alpha: EMA decay (closer to 1 = slower).
        initial: Baseline of a role before its first sample.
    """

    def __init__(self, alpha: float = 0.95, initial: float = 0.0) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {alpha}")
        self.alpha, self.initial = alpha, initial
        self.values: dict[Hashable, float] = {}

    def advantages(self, rewards: Tensor, roles: Sequence[Hashable]) -> Tensor:
        """``[B]`` float64 advantages ``R_i - b(role_i)`` with each role's baseline as it was before this
        batch; then every sample updates its role's baseline, in batch order."""
        if len(roles) != rewards.numel():
            raise ValueError(f"{rewards.numel()} rewards but {len(roles)} roles")
        before = {role: self.values.get(role, self.initial) for role in roles}
        adv = torch.tensor(
            [float(r) - before[k] for r, k in zip(rewards.tolist(), roles, strict=True)], dtype=torch.float64
        )
        for reward, role in zip(rewards.tolist(), roles, strict=True):
            self.values[role] = ema_update(self.values.get(role, self.initial), float(reward), self.alpha)
        return adv

    def state_dict(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "initial": self.initial,
            "values": [[k, v] for k, v in self.values.items()],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.alpha, self.initial = state["alpha"], state["initial"]
        self.values = {(tuple(k) if isinstance(k, list) else k): v for k, v in state["values"]}
