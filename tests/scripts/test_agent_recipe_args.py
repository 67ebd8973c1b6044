"""The agent recipe's ``--score`` check, made before any stage runs: it names the stages scored,
refuses one it does not know and a selection with nothing to score, and counts an RL stage that
an earlier, interrupted call finished (``--resume``) as one to score; and the RL stage's overrides
(``--rl-tasks``, the budget to the second)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import agent_recipe  # noqa: E402


def finish(out_dir: Path, name: str, policy: bool = True) -> Path:
    run = out_dir / name / "run"
    run.mkdir(parents=True)
    (run / "stage.json").write_text("{}")
    if policy:
        (run / "hf_model").mkdir()
    return run


def test_finished_runs_are_stages_that_saved_their_policy_and_record(tmp_path: Path) -> None:
    assert agent_recipe.finished_runs(tmp_path) == {}
    bc = finish(tmp_path, "bc")
    finish(tmp_path, "rl", policy=False)  # stopped before it saved its policy: not finished
    assert agent_recipe.finished_runs(tmp_path) == {"bc": bc}
    (tmp_path / "rl" / "run" / "hf_model").mkdir()
    assert set(agent_recipe.finished_runs(tmp_path)) == {"bc", "rl"}


def test_stages_to_score() -> None:
    assert agent_recipe.stages_to_score("base,bc,rl", False, True, False) == {"base", "bc", "rl"}
    assert agent_recipe.stages_to_score("base, bc,rl", True, True, False) == {"bc", "rl"}
    assert agent_recipe.stages_to_score("rl", False, True, False) == {"rl"}
    # rl without an RL stage: nothing to score; with others it leaves them
    assert agent_recipe.stages_to_score("bc,rl", False, False, False) == {"bc", "rl"}
    with pytest.raises(SystemExit, match="no stage to score"):
        agent_recipe.stages_to_score("rl", False, False, False)
    with pytest.raises(SystemExit, match="no stage to score"):
        agent_recipe.stages_to_score("base", True, True, False)
    with pytest.raises(SystemExit, match="name base, bc, rl"):
        agent_recipe.stages_to_score("bc,sft", False, True, False)
    assert agent_recipe.stages_to_score("rl", False, False, True) == {"rl"}  # --prepare scores nothing


def recipe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "scripts/agent_recipe.py", "--out-dir", str(tmp_path / "runs"), *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


class Scored(Exception):
    """Raised by the stand-in for an evaluation: the policy the recipe went on to score."""


def test_score_rl_without_rl_stops_before_any_stage_unless_resume_finds_one(tmp_path, monkeypatch) -> None:
    refused = recipe(tmp_path, "--score", "rl", "--rl-minutes", "0", "--resume")
    assert refused.returncode == 1 and "no stage to score" in refused.stderr
    assert not (tmp_path / "runs").exists(), "refused after a stage ran"
    # an earlier call finished BC and RL under --out-dir: --resume reuses both and scores RL's
    # policy (the evaluation, a CLI run of minutes, stands in here)
    finish(tmp_path / "runs", "bc")
    rl = finish(tmp_path / "runs", "rl")

    def evaluate(policy: str, *args, **kwargs):
        raise Scored(policy)

    monkeypatch.setattr(agent_recipe, "evaluate", evaluate)
    argv = ["agent_recipe.py", "--out-dir", str(tmp_path / "runs"), "--score", "rl", "--rl-minutes", "0"]
    argv += ["--resume", "--envs", "debug", "--swe-tasks", str(tmp_path / "absent.jsonl")]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(Scored) as scored:
        agent_recipe.main()
    assert scored.value.args == (str(rl / "hf_model"),)


def test_rl_stage_args_limit_the_training_tasks_and_keep_the_budget_to_the_second() -> None:
    src = "debug:mbpp:/d?per_problem=3"
    assert agent_recipe.rl_stage_args(src, 3.5, 100, "--x 1") == [
        "--model.init_args.problems.source", src,
        "--trainer.max_time", "00:00:03:30",
        "--model.init_args.problems.limit", "100",
        "--x", "1",
    ]  # fmt: skip
    # 0 tasks: all of them (no limit); 90 minutes: an hour and a half
    assert agent_recipe.rl_stage_args(src, 90, 0, "") == [
        "--model.init_args.problems.source", src, "--trainer.max_time", "00:01:30:00"
    ]  # fmt: skip


class Started(Exception):
    """Raised by the stand-ins for stage 0 and a training stage: what the recipe started first."""


@pytest.mark.parametrize("envs", ["debug", "swe", "debug,swe"])
def test_stage_0_synthesizes_swe_tasks_only_where_an_swe_env_is_trained_or_scored(
    envs, tmp_path, monkeypatch
) -> None:
    """``--envs debug`` trains on and scores MBPP debugging tasks alone: synthesizing the shipped
    repositories' SWE tasks (stage 0, about 15 minutes of a 2-core staging) is skipped and BC starts
    with no SWE demonstration; an SWE env still gets them."""

    def synth(out_dir: Path, extra: list[str]) -> dict:
        raise Started("synth")

    def train_stage(name: str, config: str, run_dir: Path, extra: list[str]) -> dict:
        raise Started(name, extra)

    monkeypatch.setattr(agent_recipe, "synth", synth)
    monkeypatch.setattr(agent_recipe, "train_stage", train_stage)
    argv = ["agent_recipe.py", "--out-dir", str(tmp_path / "runs"), "--envs", envs, "--rl-minutes", "0"]
    monkeypatch.setattr(sys, "argv", [*argv, "--swe-mbpp-per-problem", "0", "--swe-mbpp-heldout", "0"])
    with pytest.raises(Started) as started:
        agent_recipe.main()
    if "swe" in envs:
        assert started.value.args == ("synth",)
        return
    name, extra = started.value.args
    also = extra[extra.index("--model.init_args.demonstrations.also") + 1]
    assert name == "bc" and also == "[]" and "swe:" not in " ".join(extra), extra
