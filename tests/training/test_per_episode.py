"""Episodes with several rows (an agent program that rewrote its history): the group baseline
compares episodes, each of an episode's rows gets its episode's advantage, and a per-sequence
loss counts the episode once."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.algorithms.grpo import group_advantages
from lit_codeRL.problems.record import Problem
from lit_codeRL.rollout.dataset import episode_batch
from lit_codeRL.rollout.episodes import Episode, Turn
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch
from lit_codeRL.training.step_setup import has_extra_rows, per_episode, prepare_step


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


def _episode(group: int, reward: float, rows: list[list[float]]) -> Episode:
    """An episode whose rewritten history gave one row per entry of ``rows``: each row a prompt
    and one action, whose sampler log-probs are the entry."""
    first, *extra = rows
    episode = Episode(Problem("t/1", "p", tests=[]), group, [1, 2], "p")
    episode.turns = [Turn([3] * len(first), first, "a", "stop", reward=reward)]
    episode.extra_rows = [[Segment([1, 2, 3]), Segment([3] * len(lp), True, lp, 0)] for lp in extra]
    return episode


def test_an_episode_split_over_rows_weighs_one_sequence_in_the_grpo_loss():
    """Under ``loss_type: grpo`` (a mean per sequence, then over sequences), an episode that a
    rewritten history laid out as 3 rows weighs one sequence, as it would unsplit, whatever the
    micro-batches: not 3."""
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.rollout.prompts import ProblemSettings

    module = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        problems=ProblemSettings(task_ids=["coderl/square"]),
        num_generations=2,
        prompts_per_step=1,
    )
    split = [[-1.0, -2.0], [-0.5], [-3.0, -0.2, -1.0]]  # episode 0: 6 tokens over 3 rows
    joined = [[lp for row in split for lp in row]]
    other = [[-0.7, -0.1]]

    def loss(rows: list[list[float]], micro: int) -> float:
        b = episode_batch([_episode(0, 1.0, rows), _episode(0, 0.0, other)], pad_token_id=0)
        seq_adv = per_episode(b, lambda r, v: group_advantages(r, 2, "none", valid=v))
        setup = prepare_step(
            module, b, sampling=module.sampling, num_generations=2, share_prompt_forward=False,
            beta=0.0, sequence_advantages=seq_adv, loss_type="grpo",
        )  # fmt: skip
        total = 0.0
        for mb in b.micro_batches(micro, trim_from=setup.start):
            trainer_logps = mb.old_logprobs[:, setup.start :] * 0.9  # ratios off 1, token by token
            value, _, _ = module.clipped_policy_loss(
                trainer_logps, mb, setup.start, setup.counts, epsilon=10.0, loss_type="grpo"
            )
            total += float(value)
        return total

    whole = loss(joined, 2)
    assert whole != 0.0
    for micro in (1, 2, 4):
        assert loss(split, micro) == pytest.approx(whole, rel=1e-6)
