"""SWE episodes through the real episode runner, rollout dump and regrade, with a scripted policy.

A random model never writes a valid ``<execute>`` block, so the policy here is a scripted engine
(the :class:`GenerationEngine` protocol, real tokenizer, real token ids): what it says per turn is
fixed, everything after it is real (runner, ContainerEnv, bwrap workspaces, grading, trajectory
rows, the JSONL dump, ``lit-coderl regrade``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.envs.swe.reference import apply_patch_action
from lit_codeRL.policy.output import GenerationOutput, left_pad
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.problems.swe import load_swe_tasks, to_problem
from lit_codeRL.rollout.dataset import RolloutWriter, episode_batch
from lit_codeRL.rollout.episodes import EpisodeRunner
from lit_codeRL.sandbox.workspace import WorkspaceConfig

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")


class ScriptedEngine:
    """Says ``scripts[episode][turn]`` (episodes in the runner's order; an episode ends after
    ``<submit/>`` or its last scripted turn)."""

    def __init__(self, tokenizer, scripts: list[list[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.turn = [0] * len(scripts)
        self.ended: set[int] = set()
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )

    def pad_prompts(self, prompts):
        return left_pad(prompts, self.pad_token_id)

    def generate(
        self, prompt_ids, prompt_mask, sampling, num_generations=1, generator=None, on_finished=None
    ):
        live = [e for e in range(len(self.scripts)) if e not in self.ended]
        rows = prompt_ids.size(0) * num_generations
        assert len(live) == rows, (live, rows)
        texts, ids = [], []
        for e in live:
            text = self.scripts[e][self.turn[e]]
            self.turn[e] += 1
            if "<submit/>" in text or self.turn[e] == len(self.scripts[e]):
                self.ended.add(e)
            texts.append(text)
            ids.append(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        width = max(len(i) for i in ids)
        completion = torch.full((rows, width), self.pad_token_id)
        mask = torch.zeros(rows, width, dtype=torch.long)
        for r, row in enumerate(ids):
            completion[r, : len(row)], mask[r, : len(row)] = torch.tensor(row), 1
        reasons = ["stop_string"] * rows
        if on_finished is not None:
            on_finished(list(range(rows)), ids, reasons)
        return GenerationOutput(
            prompt_ids.repeat_interleave(num_generations, 0),
            prompt_mask.repeat_interleave(num_generations, 0),
            completion,
            mask,
            torch.full((rows, width), -0.5) * mask,
            texts,
            torch.ones(rows, dtype=torch.bool),
            reasons,
        )


@pytest.fixture(scope="module")
def swe_env(tmp_path_factory):
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("cache")), workspace=WorkspaceConfig(backend="bwrap")
    )
    with ContainerEnv(data_name_or_path=None, settings=settings) as env:
        yield env


def test_scripted_episodes_are_graded_dumped_and_regraded(swe_env, tiny_model, tmp_path):
    _, tokenizer = tiny_model
    tasks = load_swe_tasks("embedded", "train")[:2]
    a, b = tasks
    scripts = [
        [apply_patch_action(a.patch), "Done. <submit/>"],  # resolves, submits
        ["<execute>ls</execute>", "<execute>ls</execute>", "<execute>ls</execute>"],  # no edit, cut
        ["<execute>rm -rf tests</execute>", "<submit/>"],  # a hack: 0
        [
            "<execute>cat README.md | head -3</execute>",
            apply_patch_action(b.patch),
            "<execute>git status</execute>",
        ],
    ]  # the last one fixes b but never submits: cut at max_turns and graded as it stands
    engine = ScriptedEngine(tokenizer, scripts)
    runner = EpisodeRunner(engine, swe_env, SamplingParams(max_new_tokens=4000), max_turns=3)
    assert "</execute>" in runner.sampling.stop, "the env's stop string reaches the sampler"
    episodes = runner.run([to_problem(a), to_problem(b)], num_generations=2)

    assert [e.episode_return for e in episodes] == [1.0, 0.0, 0.0, 1.0]
    assert [e.end_reason for e in episodes] == ["terminated", "max_turns", "terminated", "max_turns"]
    assert all(e.valid for e in episodes)
    assert [len(e.turns) for e in episodes] == [2, 3, 2, 3]
    # rewards land on the last action only
    assert [t.reward for t in episodes[3].turns] == [0.0, 0.0, 1.0]

    batch = episode_batch(episodes, engine.pad_token_id)
    for row, episode in enumerate(episodes):
        trained = batch.input_ids[row][batch.trainable_mask[row].bool()].tolist()
        sampled = [t for turn in episode.turns for t in turn.action_ids]
        assert trained == sampled, "only the policy's own tokens train; observations are masked"
    records = batch.records
    assert records[0]["grade"]["verdict"] == "resolved" and "diff --git" in records[0]["diff"]
    assert records[2]["grade"]["restored"] and records[2]["reward"] == 0.0
    assert records[3]["num_commands"] == 3 and records[3]["turns"][0]["command"] == "cat README.md | head -3"
    assert records[3]["turns"][0]["exit_code"] == 0 and records[3]["turns"][0]["output"]

    dump = tmp_path / "rollouts.jsonl"
    RolloutWriter(dump).write(records, step=0, rank=0)
    out = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "regrade", str(dump), "--parallel", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["episodes"] == 4 and summary["resolved"] == 2 and summary["changed"] == 0
    regraded = [json.loads(line) for line in (tmp_path / "rollouts.regraded.jsonl").read_text().splitlines()]
    assert [r["reward"] for r in regraded] == [1.0, 0.0, 0.0, 1.0]


def test_env_time_limit_masks_the_episode(tmp_path_factory):
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("cache")),
        workspace=WorkspaceConfig(backend="bwrap"),
        command_timeout_s=5,
        max_episode_command_s=1.0,
    )
    task = load_swe_tasks("embedded", "train")[0]
    with ContainerEnv(data_name_or_path=None, settings=settings) as env:
        env.reset(task)
        message, reward, done, extra = env.step("<execute>sleep 3</execute>")
        assert done and reward == 0.0 and extra["masked"] and extra["verdict"] == "env_time_limit"


def test_validation_drops_a_task_whose_reference_does_not_resolve_it(swe_env):
    good = load_swe_tasks("embedded", "train")[0]
    other = load_swe_tasks("embedded", "train")[1]
    broken = type(good)(**{**good.__dict__, "instance_id": "broken-1", "patch": other.patch})
    kept = swe_env.validate_problems([to_problem(good), to_problem(broken)])
    assert [p.task_id for p in kept] == [good.instance_id]


def test_reference_trajectories_for_bc(tiny_model):
    from lit_codeRL.rollout.demonstrations import DemonstrationSettings, load_demonstrations

    _, tokenizer = tiny_model
    tasks = load_swe_tasks("embedded", "train")
    rows = load_demonstrations(
        DemonstrationSettings(source="swe", split="train", max_length=16384), tokenizer
    )
    assert len(rows) == len(tasks), "every shipped reference trajectory resolves its task"
    for segs, task in zip(rows, tasks, strict=True):
        turns = sum(s.trainable for s in segs)
        assert [s.trainable for s in segs] == [False, *[True, False] * (turns - 1), True]
        actions = [tokenizer.decode(s.ids) for s in segs if s.trainable]
        tests = f"<execute>{task.test_command} -q "
        assert tests in actions[0] and tests in actions[-2] and "<submit/>" in actions[-1]
        assert all(a.rstrip().endswith("</execute>") for a in actions[:-1])
        assert any("<execute>python3 - <<'EOF'" in a for a in actions), "a targeted edit, not git apply"
        observation = tokenizer.decode(segs[-2].ids)  # after the second test run
        assert "Exit code: 0" in observation and "diff --git" in observation
