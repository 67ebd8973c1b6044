"""Replay buffers: storage, wrap-around, prioritized sampling, and exact round trips through state_dict."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from lit_codeRL.rollout.experience import select_actions
from lit_codeRL.rollout.replay import PrioritizedReplayBuffer, ReplayBuffer

OBS_DIM, N_ACTIONS = 5, 11  # 11 actions: the packed mask spans two bytes


def fill(buffer, n, start=0):
    for i in range(start, start + n):
        mask = np.zeros(N_ACTIONS, dtype=bool)
        mask[i % N_ACTIONS] = True
        mask[-1] = True
        buffer.add(
            np.full(OBS_DIM, i, np.float32),
            i % N_ACTIONS,
            float(i),
            np.full(OBS_DIM, i + 1, np.float32),
            i % 3 == 0,
            i % 5 == 0,
            mask,
        )


def test_sample_returns_stored_transitions():
    buffer = ReplayBuffer(16, OBS_DIM, N_ACTIONS, seed=0)
    fill(buffer, 10)
    assert len(buffer) == 10
    batch = buffer.sample(32)
    i = batch["rewards"].long()
    assert (batch["obs"][:, 0].long() == i).all() and (batch["next_obs"][:, 0].long() == i + 1).all()
    assert (batch["actions"] == i % N_ACTIONS).all()
    assert (batch["terminated"] == (i % 3 == 0)).all() and (batch["truncated"] == (i % 5 == 0)).all()
    expected_mask = torch.zeros(32, N_ACTIONS, dtype=torch.bool)
    expected_mask[torch.arange(32), i % N_ACTIONS] = True
    expected_mask[:, -1] = True
    assert torch.equal(batch["next_mask"], expected_mask)
    assert (batch["indices"] == i).all() and (batch["weights"] == 1).all()


def test_wraps_around_at_capacity():
    buffer = ReplayBuffer(8, OBS_DIM, N_ACTIONS)
    fill(buffer, 13)
    assert len(buffer) == 8 and buffer.pos == 5
    assert sorted(buffer.rewards.tolist()) == [float(i) for i in range(5, 13)]


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_state_dict_round_trip_through_torch_save(cls):
    buffer = cls(32, OBS_DIM, N_ACTIONS, seed=1)
    fill(buffer, 20)
    if cls is PrioritizedReplayBuffer:
        buffer.update_priorities(torch.tensor([3, 7]), torch.tensor([5.0, -2.0]))
    blob = io.BytesIO()
    torch.save(buffer.state_dict(), blob)
    blob.seek(0)
    restored = cls(32, OBS_DIM, N_ACTIONS, seed=999)
    restored.load_state_dict(torch.load(blob, weights_only=True))
    assert len(restored) == len(buffer) and restored.pos == buffer.pos
    a, b = buffer.sample(16), restored.sample(16)  # same data and same RNG state -> same sample
    for key in a:
        assert torch.equal(a[key], b[key]), key
    fill(buffer, 1, 100)
    fill(restored, 1, 100)
    assert np.array_equal(buffer.obs, restored.obs)


def test_load_rejects_other_shapes():
    buffer = ReplayBuffer(8, OBS_DIM, N_ACTIONS)
    with pytest.raises(ValueError, match="shape mismatch"):
        ReplayBuffer(8, OBS_DIM + 1, N_ACTIONS).load_state_dict(buffer.state_dict())


def test_prioritized_sampling_follows_priorities():
    buffer = PrioritizedReplayBuffer(64, OBS_DIM, N_ACTIONS, alpha=1.0, seed=0)
    fill(buffer, 50)
    priorities = np.full(50, 0.01)
    priorities[7] = 10.0
    buffer.update_priorities(np.arange(50), priorities)
    assert buffer.tree[1] == pytest.approx(priorities.sum() + 50 * buffer.eps)
    counts = np.bincount(
        np.concatenate([buffer.sample(64)["indices"].numpy() for _ in range(50)]), minlength=50
    )
    share = counts[7] / counts.sum()
    expected = (10.0 + buffer.eps) / (priorities.sum() + 50 * buffer.eps)
    assert share == pytest.approx(expected, abs=0.05)
    batch = buffer.sample(64)
    weights = batch["weights"].numpy()
    assert weights.max() == pytest.approx(1.0)
    hot = batch["indices"].numpy() == 7
    assert weights[hot].max() < weights[~hot].min()  # over-sampled item weighs least


def test_new_transitions_get_max_priority():
    buffer = PrioritizedReplayBuffer(8, OBS_DIM, N_ACTIONS, alpha=1.0)
    fill(buffer, 2)
    buffer.update_priorities(np.array([0]), np.array([4.0]))
    fill(buffer, 1, 2)
    leaf = buffer.tree[buffer._leaves + 2]
    assert leaf == pytest.approx(4.0 + buffer.eps)


def test_select_actions_respects_mask_and_epsilon():
    rng = np.random.default_rng(0)
    q = np.array([[5.0, 1.0, 9.0], [0.0, 2.0, 1.0]])
    mask = np.array([[True, True, False], [True, False, True]])
    assert select_actions(q, mask, 0.0, rng).tolist() == [0, 2]
    per_row = np.stack([select_actions(q, mask, np.array([0.0, 1.0]), rng) for _ in range(200)])
    assert set(per_row[:, 0]) == {0} and set(per_row[:, 1]) == {0, 2}  # ε per row: greedy, random
    picks = np.stack([select_actions(q, mask, 1.0, rng) for _ in range(200)])
    assert set(picks[:, 0]) == {0, 1} and set(picks[:, 1]) == {0, 2}


class _CountingEnv:
    """Four-step episodes with rewards 1, 2, 3, 4; the observation is the step index."""

    def __init__(self):
        self.t = 0
        self.np_random = None

    def reset(self, seed=None):
        self.t = 0
        return np.full(OBS_DIM, 0, np.float32), {}

    def action_masks(self):
        return np.ones(N_ACTIONS, dtype=bool)

    def step(self, action):
        self.t += 1
        done = self.t == 4
        info = {"action_mask": np.ones(N_ACTIONS, dtype=bool), "steps": self.t, "all_passed": done}
        return np.full(OBS_DIM, self.t, np.float32), float(self.t), done, False, info

    def set_progress(self, progress):
        pass

    def get_state(self):
        return {"t": self.t}


def test_collector_n_step_returns_by_hand():
    from lit_codeRL.rollout.experience import ExperienceCollector

    buffer = ReplayBuffer(16, OBS_DIM, N_ACTIONS)
    collector = ExperienceCollector([_CountingEnv()], n_step=2, gamma=0.5)
    collector.collect(lambda obs: torch.zeros(len(obs), N_ACTIONS), 0.0, buffer, rounds=4)
    # s0: 1 + .5*2 -> s2 ; s1: 2 + .5*3 -> s3 ; episode ends at s4: s2: 3 + .5*4, s3: 4 (both terminal)
    assert buffer.rewards[:4].tolist() == [2.0, 3.5, 5.0, 4.0]
    assert buffer.obs[:4, 0].tolist() == [0, 1, 2, 3]
    assert buffer.next_obs[:4, 0].tolist() == [2, 3, 4, 4]
    assert buffer.terminated[:4].tolist() == [False, False, True, True]
    assert collector.episodes == 1 and collector.stats()["episode_return"] == 10.0
    collector.collect(lambda obs: torch.zeros(len(obs), N_ACTIONS), 0.0, buffer, rounds=1)
    assert len(buffer) == 4  # one pending step of the new episode, not yet emitted
    state = collector.state_dict()
    assert len(state["pending"][0]) == 1
