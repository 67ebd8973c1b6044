"""Advantages of episodes with several rows (an agent program that rewrote its history): the group
baseline compares episodes, each of an episode's rows gets its episode's advantage."""

from __future__ import annotations

import torch

from lit_codeRL.algorithms.grpo import group_advantages
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch
from lit_codeRL.training.step_setup import has_extra_rows, per_episode


def batch(rewards: list[float], episode_ids: list[int], valid: list[bool] | None = None) -> TrajectoryBatch:
    rows = [[Segment([1, 2]), Segment([3], True, [0.0], 0)] for _ in rewards]
    return TrajectoryBatch.from_segments(
        rows,
        0,
        rewards=torch.tensor(rewards),
        group_ids=torch.zeros(len(rewards), dtype=torch.long),
        episode_ids=torch.tensor(episode_ids),
        valid=torch.tensor(valid) if valid is not None else None,
    )


def test_one_row_per_episode_is_the_plain_function():
    b = batch([1.0, 0.0, 0.0, 1.0], [0, 1, 2, 3])
    assert not has_extra_rows(b)
    out = per_episode(b, lambda r, v: group_advantages(r, 2, "none", valid=v))
    assert out.tolist() == [0.5, -0.5, -0.5, 0.5]


def test_extra_rows_share_their_episodes_advantage():
    # episodes 0 (reward 1, two rows) and 1 (reward 0, three rows) form one group of 2
    b = batch([1.0, 1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1, 1])
    assert has_extra_rows(b)
    out = per_episode(b, lambda r, v: group_advantages(r, 2, "none", valid=v))
    # by hand: group mean 0.5 -> +0.5 for episode 0, -0.5 for episode 1, on every row
    assert out.tolist() == [0.5, 0.5, -0.5, -0.5, -0.5]
    # std-scaled: the std of the two episodes' rewards (0.7071), not of the five rows'
    scaled = per_episode(b, lambda r, v: group_advantages(r, 2, "group", valid=v))
    assert torch.allclose(scaled, torch.tensor([0.7070, 0.7070, -0.7070, -0.7070, -0.7070]), atol=1e-3)


def test_invalid_episode_is_left_out_of_its_groups_baseline():
    b = batch([1.0, 1.0, 0.0, 0.5], [0, 0, 1, 2], valid=[True, True, False, True])
    out = per_episode(b, lambda r, v: group_advantages(r, 3, "none", valid=v))
    # valid episodes 0 (1.0) and 2 (0.5): mean 0.75; the invalid one gets 0
    assert out.tolist() == [0.25, 0.25, 0.0, -0.25]
