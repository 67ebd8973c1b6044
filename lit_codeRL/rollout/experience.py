"""DQN experience: a collector that steps envs with the live Q-network, and the IterableDataset that
turns "collect a little, then sample a replay batch" into an endless training stream.

The collector takes the policy as an argument (a function from observations to Q-values), so it
never imports a module; the dataset only iterates. ``num_workers`` must be 0: a worker process
would hold a stale copy of the Q-network and its own copy of the buffer (enforced in ``__iter__``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from lit_codeRL.rollout.replay import ReplayBuffer

QFunction = Callable[[torch.Tensor], torch.Tensor]
"""``[N, obs_dim]`` float observations -> ``[N, n_actions]`` Q-values."""


def select_actions(
    q_values: np.ndarray, masks: np.ndarray, epsilon: float | np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """ε-greedy over allowed actions: with probability ε a uniform allowed action, else the allowed
    action of highest value. ``q_values`` ``[N, A]``, ``masks`` ``[N, A]`` bool, ``epsilon`` a float
    or one value per row."""
    greedy = np.where(masks, q_values, -np.inf).argmax(axis=1)
    explore = rng.random(len(q_values)) < epsilon
    actions = greedy.copy()
    for i in np.flatnonzero(explore):
        actions[i] = rng.choice(np.flatnonzero(masks[i]))
    return actions


class ExperienceCollector:
    """Steps ``envs`` (gymnasium envs with ``action_masks()``) in lockstep, one batched Q forward per
    round, and pushes every transition into a replay buffer. Finished envs reset at once."""

    def __init__(
        self,
        envs: Sequence[Any],
        seed: int = 0,
        stats_window: int = 200,
        n_step: int = 1,
        gamma: float = 0.99,
    ):
        if n_step < 1:
            raise ValueError("n_step must be >= 1")
        self.envs = list(envs)
        self.n_step = n_step
        """Transitions carry ``sum_k γ^k r_{t+k}`` over up to ``n_step`` rewards and the state ``n_step``
        later (bootstrap with ``γ^n_step``); shorter at episode ends, where nothing is bootstrapped."""
        self.gamma = gamma
        self._pending: list[deque[tuple[np.ndarray, int, float]]] = [deque() for _ in self.envs]
        self.rng = np.random.default_rng(seed)
        self.env_steps = 0
        self.episodes = 0
        self.recent_returns: deque[float] = deque(maxlen=stats_window)
        self.recent_success: deque[float] = deque(maxlen=stats_window)
        self.recent_lengths: deque[int] = deque(maxlen=stats_window)
        self.timings = {"policy_s": 0.0, "env_s": 0.0}
        self.epsilon_floors: np.ndarray | None = None
        """Per problem index: the least ε of an episode on that problem (None = the schedule's ε)."""
        self._seed = seed
        self._obs: np.ndarray | None = None
        self._returns = np.zeros(len(self.envs))

    def _ensure_started(self) -> None:
        if self._obs is None:
            self._obs = np.stack([env.reset(seed=self._seed + i)[0] for i, env in enumerate(self.envs)])
            self._returns[:] = 0.0

    def set_progress(self, progress: float) -> None:
        for env in self.envs:
            env.set_progress(progress)

    def set_problem_weights(self, weights: Sequence[float] | None) -> None:
        """Relative problem sampling weights of every env (``CodeGenerationEnv.set_problem_weights``)."""
        for env in self.envs:
            env.set_problem_weights(weights)

    def set_epsilon_floors(self, floors: Sequence[float] | None) -> None:
        """Least ε per problem index (each env explores at ``max(ε, floor of its problem)``); None = off."""
        self.epsilon_floors = None if floors is None else np.asarray(floors, dtype=np.float64)

    def collect(self, q_fn: QFunction, epsilon: float, buffer: ReplayBuffer, rounds: int = 1) -> None:
        """``rounds`` lockstep steps of every env (``rounds * len(envs)`` transitions)."""
        self._ensure_started()
        assert self._obs is not None
        for _ in range(rounds):
            t0 = time.perf_counter()
            masks = np.stack([env.action_masks() for env in self.envs])
            with torch.no_grad():
                q = q_fn(torch.from_numpy(self._obs)).float().cpu().numpy()
            eps: float | np.ndarray = epsilon
            if self.epsilon_floors is not None:
                problems = [env.problem_index for env in self.envs]
                eps = np.maximum(epsilon, self.epsilon_floors[problems])
            actions = select_actions(q, masks, eps, self.rng)
            t1 = time.perf_counter()
            for i, env in enumerate(self.envs):
                next_obs, reward, terminated, truncated, info = env.step(int(actions[i]))
                self._pending[i].append((self._obs[i].copy(), int(actions[i]), float(reward)))
                self._emit(i, buffer, next_obs, terminated, truncated, info["action_mask"])
                self._returns[i] += reward
                if terminated or truncated:
                    self.episodes += 1
                    self.recent_returns.append(float(self._returns[i]))
                    self.recent_success.append(float(info.get("all_passed", False)))
                    self.recent_lengths.append(int(info["steps"]))
                    self._returns[i] = 0.0
                    next_obs, _ = env.reset()
                self._obs[i] = next_obs
            self.env_steps += len(self.envs)
            self.timings["policy_s"] += t1 - t0
            self.timings["env_s"] += time.perf_counter() - t1

    def _emit(
        self,
        i: int,
        buffer: ReplayBuffer,
        next_obs: np.ndarray,
        terminated: bool,
        truncated: bool,
        next_mask: np.ndarray,
    ) -> None:
        """Push env ``i``'s ready n-step transitions: the oldest pending one once ``n_step`` rewards
        are known, or all of them when the episode ends (they bootstrap from nothing)."""
        pending = self._pending[i]
        done = terminated or truncated
        while pending and (done or len(pending) == self.n_step):
            ret = sum(self.gamma**k * r for k, (_, _, r) in enumerate(pending))
            obs, action, _ = pending.popleft()
            buffer.add(obs, action, ret, next_obs, terminated, truncated, next_mask)
            if not done:
                break

    def stats(self) -> dict[str, float]:
        def mean(xs: deque) -> float:
            return float(np.mean(xs)) if xs else 0.0

        return {
            "env_steps": float(self.env_steps),
            "episodes": float(self.episodes),
            "episode_return": mean(self.recent_returns),
            "success_rate": mean(self.recent_success),
            "episode_length": mean(self.recent_lengths),
        }

    # -- checkpointing ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "rng": self.rng.bit_generator.state,
            "envs": [env.get_state() for env in self.envs],
            "obs": None if self._obs is None else torch.from_numpy(self._obs.copy()),
            "returns": self._returns.tolist(),
            "pending": [[(torch.from_numpy(o), a, r) for o, a, r in pending] for pending in self._pending],
            "recent_returns": list(self.recent_returns),
            "recent_success": list(self.recent_success),
            "recent_lengths": list(self.recent_lengths),
            "epsilon_floors": None if self.epsilon_floors is None else self.epsilon_floors.tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["envs"]) != len(self.envs):
            raise ValueError(f"checkpoint has {len(state['envs'])} envs, this run {len(self.envs)}")
        self.env_steps = int(state["env_steps"])
        self.episodes = int(state["episodes"])
        self.rng.bit_generator.state = state["rng"]
        for env, env_state in zip(self.envs, state["envs"], strict=True):
            if env.np_random is None:  # gymnasium creates the generator lazily
                env.reset(seed=self._seed)
            env.set_state(env_state)
        self._obs = None if state["obs"] is None else state["obs"].numpy().copy()
        self._returns = np.asarray(state["returns"], dtype=np.float64)
        self._pending = [
            deque((o.numpy().copy(), int(a), float(r)) for o, a, r in pending) for pending in state["pending"]
        ]
        self.recent_returns.clear()
        self.recent_returns.extend(state["recent_returns"])
        self.recent_success.clear()
        self.recent_success.extend(state["recent_success"])
        self.recent_lengths.clear()
        self.recent_lengths.extend(state["recent_lengths"])
        self.set_epsilon_floors(state.get("epsilon_floors"))


class ReplayDataset(IterableDataset):
    """Endless stream of replay batches: each item first runs ``rounds_per_batch`` collector rounds
    with the current policy and ε, then samples ``batch_size`` transitions (after ``learning_starts``
    transitions have been collected). Use with ``DataLoader(dataset, batch_size=None)``."""

    def __init__(
        self,
        collector: ExperienceCollector,
        buffer: ReplayBuffer,
        q_fn: QFunction,
        epsilon_fn: Callable[[int], float],
        batch_size: int,
        rounds_per_batch: int = 1,
        learning_starts: int = 0,
    ):
        self.collector = collector
        self.buffer = buffer
        self.q_fn = q_fn
        self.epsilon_fn = epsilon_fn
        self.batch_size = batch_size
        self.rounds_per_batch = rounds_per_batch
        self.learning_starts = learning_starts

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        if get_worker_info() is not None:
            raise RuntimeError("ReplayDataset must run in the main process (DataLoader num_workers=0)")
        while True:
            self.collector.collect(
                self.q_fn, self.epsilon_fn(self.collector.env_steps), self.buffer, self.rounds_per_batch
            )
            while len(self.buffer) < max(self.learning_starts, 1):
                self.collector.collect(self.q_fn, self.epsilon_fn(self.collector.env_steps), self.buffer, 1)
            yield self.buffer.sample(self.batch_size)
