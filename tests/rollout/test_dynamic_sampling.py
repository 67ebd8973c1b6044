"""DAPO's dynamic sampling in ``RolloutDataset``: groups without learning signal (the zero-std rule of
``algorithms.grpo.zero_std_groups``, invalid samples left out) are dropped and refilled."""

from __future__ import annotations

import time
from types import SimpleNamespace

from lit_codeRL.problems import Problem
from lit_codeRL.rollout.dataset import RolloutDataset
from lit_codeRL.rollout.episodes import Episode, Turn
from lit_codeRL.rollout.prompts import ProblemStream


class ScriptedRunner:
    """Gives each problem's group the returns (``None`` = a sandbox failure) scripted for its id."""

    def __init__(self, returns: dict[str, list[float | None]]):
        self.returns = returns
        self.engine = SimpleNamespace(pad_token_id=0)
        self.calls: list[list[str]] = []

    def run(self, problems, n, generator=None, stats=None):
        self.calls.append([p.task_id for p in problems])
        episodes = []
        for p in problems:
            for r in self.returns[p.task_id][:n]:
                turn = Turn(action_ids=[5, 6], logprobs=[-0.1, -0.2], text="x", finish_reason="stop")
                turn.reward = 0.0 if r is None else r
                episodes.append(
                    Episode(p, 0, [1, 2], "prompt", turns=[turn], terminated=True, valid=r is not None)
                )
        return episodes


def test_groups_without_signal_are_dropped_and_refilled():
    returns = {
        "same": [1.0, 1.0],  # all equal: no signal
        "one_valid": [1.0, None],  # a single valid sample: no signal either
        "mixed": [0.0, 1.0],
        "mixed_too": [0.5, 0.0],
    }
    problems = [Problem(task_id=t, prompt=t) for t in returns]
    runner = ScriptedRunner(returns)
    stream = ProblemStream(problems, shuffle=False)
    dataset = RolloutDataset(
        stream, runner, num_generations=2, prompts_per_step=2, filter_zero_std_groups=True
    )
    batch = dataset.collect()
    assert runner.calls == [["same", "one_valid"], ["mixed", "mixed_too"]]
    assert batch.stats["filtered_groups"] == 2.0
    assert [r["problem_id"] for r in batch.records] == ["mixed", "mixed", "mixed_too", "mixed_too"]


def test_a_batch_counts_its_whole_rollout_time():
    """``rollout_s`` is the batch's wall time over every refill round, beside the parts the runner
    times itself (generation, the reward wait): the rest is the env's own (workspaces, grading)."""

    class SlowRunner(ScriptedRunner):
        def run(self, problems, n, generator=None, stats=None):
            time.sleep(0.05)  # an env opening and grading workspaces, untimed by the runner
            stats["generate_s"] += 0.01
            return super().run(problems, n, generator, stats)

    returns = {"same": [1.0, 1.0], "mixed": [0.0, 1.0], "mixed_too": [0.5, 0.0]}
    runner = SlowRunner(returns)
    stream = ProblemStream([Problem(task_id=t, prompt=t) for t in returns], shuffle=False)
    batch = RolloutDataset(stream, runner, 2, 2, filter_zero_std_groups=True).collect()
    assert len(runner.calls) == batch.stats["rollout_rounds"] == 2
    assert batch.stats["rollout_s"] >= 0.1 > batch.stats["generate_s"] + batch.stats["reward_wait_s"]
