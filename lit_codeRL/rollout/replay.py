"""Replay buffers for DQN: uniform and proportional prioritized (Schaul et al. 2016), checkpointable.

Storage is preallocated numpy (observations float32, next-state action masks bit-packed, so a
5,000-action space costs 626 bytes per mask). ``state_dict``/``load_state_dict`` carry the filled
part and the sampling RNG as tensors and plain Python values, so a checkpoint restores the exact
buffer and the exact next sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated", "next_mask")


class ReplayBuffer:
    """Circular buffer of transitions ``(s, a, r, s', terminated, truncated, mask(s'))``."""

    def __init__(self, capacity: int, obs_dim: int, n_actions: int, seed: int = 0):
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        # Plain ints: numpy scalars would make the checkpoint unloadable with torch.load(weights_only=True).
        self.capacity, self.obs_dim, self.n_actions = int(capacity), int(obs_dim), int(n_actions)
        self.obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), dtype=np.float32)
        self.actions = np.zeros(capacity, dtype=np.int64)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.truncated = np.zeros(capacity, dtype=bool)
        self.next_mask = np.zeros((capacity, (n_actions + 7) // 8), dtype=np.uint8)
        self.pos = 0
        self.size = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(
        self,
        obs: np.ndarray,
        action: int,
        reward: float,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
        next_mask: np.ndarray,
    ) -> int:
        """Store one transition; returns its slot."""
        i = self.pos
        self.obs[i] = obs
        self.actions[i] = action
        self.rewards[i] = reward
        self.next_obs[i] = next_obs
        self.terminated[i] = terminated
        self.truncated[i] = truncated
        self.next_mask[i] = np.packbits(np.asarray(next_mask, dtype=bool))
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        return i

    def _batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        mask = np.unpackbits(self.next_mask[idx], axis=1, count=self.n_actions).astype(bool)
        return {
            "obs": torch.from_numpy(self.obs[idx]),
            "actions": torch.from_numpy(self.actions[idx]),
            "rewards": torch.from_numpy(self.rewards[idx]),
            "next_obs": torch.from_numpy(self.next_obs[idx]),
            "terminated": torch.from_numpy(self.terminated[idx]),
            "truncated": torch.from_numpy(self.truncated[idx]),
            "next_mask": torch.from_numpy(mask),
            "indices": torch.from_numpy(idx.astype(np.int64)),
            "weights": torch.ones(len(idx), dtype=torch.float32),
        }

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        """Uniform sample with replacement (tensors on CPU; importance ``weights`` are all 1)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        return self._batch(self.rng.integers(0, self.size, size=batch_size))

    def update_priorities(
        self, indices: np.ndarray | torch.Tensor, td_errors: np.ndarray | torch.Tensor
    ) -> None:
        """No-op for the uniform buffer (same call site as the prioritized one)."""

    # -- checkpointing ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        state: dict[str, Any] = {name: torch.from_numpy(getattr(self, name)[:n].copy()) for name in _FIELDS}
        state.update(
            capacity=self.capacity,
            obs_dim=self.obs_dim,
            n_actions=self.n_actions,
            pos=self.pos,
            size=n,
            rng=self.rng.bit_generator.state,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["capacity"], state["obs_dim"], state["n_actions"]) != (
            self.capacity,
            self.obs_dim,
            self.n_actions,
        ):
            raise ValueError(
                "replay buffer shape mismatch: checkpoint has capacity/obs_dim/n_actions "
                f"{state['capacity']}/{state['obs_dim']}/{state['n_actions']}, this run "
                f"{self.capacity}/{self.obs_dim}/{self.n_actions}"
            )
        n = int(state["size"])
        for name in _FIELDS:
            getattr(self, name)[:n] = state[name].numpy()
        self.size, self.pos = n, int(state["pos"])
        self.rng.bit_generator.state = state["rng"]


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay: ``P(i) ∝ p_i^α``, importance weights ``(N P(i))^-β``
    normalized by the batch maximum (as in most reference implementations), new transitions at the
    running maximum priority so each is replayed at least about once."""

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        n_actions: int,
        alpha: float = 0.6,
        seed: int = 0,
        eps: float = 1e-3,
    ):
        super().__init__(capacity, obs_dim, n_actions, seed)
        self.alpha = alpha
        self.eps = eps
        self.beta = 0.4
        """Importance-sampling exponent; the owner anneals it toward 1."""
        self._leaves = 1 << max(capacity - 1, 1).bit_length()
        self.tree = np.zeros(2 * self._leaves, dtype=np.float64)  # sum tree, root at index 1
        self.max_priority = 1.0

    def add(self, *args: Any, **kwargs: Any) -> int:
        i = super().add(*args, **kwargs)
        self._set(np.array([i]), np.array([self.max_priority**self.alpha]))
        return i

    def _set(self, idx: np.ndarray, values: np.ndarray) -> None:
        nodes = idx + self._leaves
        self.tree[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes.size and nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        total = self.tree[1]
        # Stratified: one uniform draw per equal slice of the total mass.
        targets = (np.arange(batch_size) + self.rng.random(batch_size)) * (total / batch_size)
        nodes = np.ones(batch_size, dtype=np.int64)
        while nodes[0] < self._leaves:
            left = 2 * nodes
            go_right = targets > self.tree[left]
            targets = np.where(go_right, targets - self.tree[left], targets)
            nodes = left + go_right
        idx = np.minimum(nodes - self._leaves, self.size - 1)
        probs = self.tree[idx + self._leaves] / total
        weights = (self.size * np.maximum(probs, 1e-12)) ** (-self.beta)
        batch = self._batch(idx)
        batch["weights"] = torch.from_numpy((weights / weights.max()).astype(np.float32))
        return batch

    def update_priorities(
        self, indices: np.ndarray | torch.Tensor, td_errors: np.ndarray | torch.Tensor
    ) -> None:
        idx = torch.as_tensor(indices).cpu().numpy().astype(np.int64)
        priorities = np.abs(torch.as_tensor(td_errors).detach().cpu().numpy().astype(np.float64)) + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max()))
        # Duplicates in one batch: the last write wins, which is what a sequential update would do.
        self._set(idx, priorities**self.alpha)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            tree=torch.from_numpy(self.tree.copy()),
            max_priority=self.max_priority,
            alpha=self.alpha,
            beta=self.beta,
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.tree[:] = state["tree"].numpy()
        self.max_priority = float(state["max_priority"])
        self.alpha, self.beta = float(state["alpha"]), float(state["beta"])
