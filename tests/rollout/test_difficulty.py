"""Online difficulty filtering: tasks whose recent groups all had equal returns are skipped before
any generation is spent on them, revisited now and then, resumed exactly from a checkpoint."""

from __future__ import annotations

import pytest

from lit_codeRL.problems import Problem
from lit_codeRL.rollout.dataset import RolloutDataset
from lit_codeRL.rollout.difficulty import DifficultyFilter, DifficultySettings
from lit_codeRL.rollout.prompts import ProblemSettings, ProblemStream
from tests.rollout.test_dynamic_sampling import ScriptedRunner

RETURNS = {
    "always": [1.0, 1.0],  # solved by every sample: no signal
    "never": [0.0, 0.0],  # solved by none: no signal
    "learnable": [0.0, 1.0],
    "flaky": [1.0, None],  # one valid sample: no signal
}


def _dataset(after: int = 1, revisit: float = 0.0, seed: int = 0):
    problems = [Problem(task_id=t, prompt=t) for t in RETURNS]
    runner = ScriptedRunner(RETURNS)
    filt = DifficultyFilter(DifficultySettings(enabled=True, after_groups=after, revisit=revisit), seed)
    data = RolloutDataset(ProblemStream(problems, shuffle=False), runner, 2, 2, difficulty=filt)
    return data, runner, filt


def test_streaks_count_signal_less_groups_and_reset_on_signal():
    f = DifficultyFilter(DifficultySettings(enabled=True, after_groups=2))
    f.record("t", [1.0, 1.0])
    assert not f.dead("t")
    f.record("t", [0.0, 0.0])
    assert f.dead("t") and f.last_mean["t"] == 0.0
    f.record("t", [0.0, 1.0])  # signal again: learnable
    assert not f.dead("t")
    f.record("u", [1.0, 0.0], [True, False])  # one valid sample: equal among the valid
    f.record("u", [0.5, 0.5])
    assert f.dead("u")
    f.record("v", [1.0, 0.0], [False, False])  # no valid sample: no evidence
    assert "v" not in f.streak


def test_dead_tasks_are_skipped_before_generation():
    data, runner, filt = _dataset(after=1)
    data.collect()  # first pass: always, never
    data.collect()  # learnable, flaky
    runner.calls.clear()
    batch = data.collect()  # second pass: only 'learnable' is alive, so it fills the batch
    assert runner.calls == [["learnable", "learnable"]]
    assert filt.counts() == {"dead_tasks": 3.0, "dead_solved": 2.0, "skipped": pytest.approx(filt.skipped)}
    assert batch.stats["difficulty_dead_tasks"] == 3.0 and batch.stats["difficulty_skipped"] >= 3


def test_a_stream_whose_every_task_is_dead_still_yields():
    data, runner, filt = _dataset(after=1)
    runner.returns = {**RETURNS, "learnable": [1.0, 1.0]}  # now every task is signal-less
    for _ in range(2):
        data.collect()
    assert filt.counts()["dead_tasks"] == 4.0
    runner.calls.clear()
    batch = data.collect()
    assert batch.batch_size == 4 and len(runner.calls) == 1


def test_revisits_give_dead_tasks_another_chance():
    data, runner, _ = _dataset(after=1, revisit=1.0)  # always revisit: nothing is skipped
    for _ in range(4):
        data.collect()
    assert [t for call in runner.calls for t in call] == list(RETURNS) * 2


def test_the_filter_resumes_exactly_from_its_state():
    a, ra, _ = _dataset(after=1, revisit=0.3, seed=7)
    b, rb, _ = _dataset(after=1, revisit=0.3, seed=7)
    for _ in range(3):
        a.collect()
        b.collect()
    state = b.state_dict()
    c, rc, _ = _dataset(after=1, revisit=0.3, seed=99)
    c.load_state_dict(state)
    for _ in range(5):
        a.collect()
        c.collect()
    assert ra.calls[3:] == rc.calls


def test_settings_are_typed_and_checked():
    assert ProblemSettings(difficulty={"enabled": True}).difficulty.after_groups == 2
    with pytest.raises(ValueError):
        DifficultySettings(after_groups=0)
    with pytest.raises(ValueError):
        DifficultySettings(revisit=1.5)


def test_a_run_filters_from_the_config(tmp_path):
    """``problems.difficulty.enabled`` from the CLI: a tiny random policy never solves anything, so
    after one group per task every task is dead and later draws are skipped (then taken anyway)."""
    from tests.modules.test_grpo_module import cli, read_metrics
    from tests.modules.test_reinforce_bc import TINY_RL, csv_logger

    run = tmp_path / "run"
    cli(
        "fit", "--config", "configs/quickstart.yaml", *TINY_RL,
        "--model.init_args.problems.difficulty.enabled", "true",
        "--model.init_args.problems.difficulty.after_groups", "1",
        "--model.init_args.problems.difficulty.revisit", "0.0",
        "--model.init_args.problems.limit", "2",
        "--trainer.max_steps", "3", *csv_logger(run),
    )  # fmt: skip
    rows = [r for r in read_metrics(run) if r.get("train/difficulty_dead_tasks")]
    assert len(rows) == 3
    assert float(rows[-1]["train/difficulty_dead_tasks"]) == 2.0
    assert float(rows[-1]["train/difficulty_skipped"]) > 0
