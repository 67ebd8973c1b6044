"""Debugging-gym episodes through the real episode runner, trajectory rows, rollout dump and
``lit-coderl episode``, with a scripted policy (real tokenizer and token ids; everything after
the text is real: runner, DebugEnv, pdb in bwrap workspaces, grading in fresh ones)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.problems.debug import debug_problem, load_debug_tasks
from lit_codeRL.rollout.dataset import RolloutWriter, episode_batch
from lit_codeRL.rollout.episodes import EpisodeRunner
from tests.rollout.test_swe_episodes import ScriptedEngine

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")

FIX = '<edit path="stats.py" lines="19-19">    return (ordered[middle - 1] + ordered[middle]) / 2\n</edit>'


def test_scripted_debug_episodes_are_graded_dumped_and_readable(tmp_path, tiny_model):
    _, tokenizer = tiny_model
    (median,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median"]
    scripts = [
        ["<pdb>b stats.py:19</pdb>", "<pdb>c</pdb>", "<pdb>p ordered</pdb>", FIX, "<eval/>", "<submit/>"],
        ["<view>stats.py</view>", "I would rather not.", "<submit/>"],  # no fix: 0
        ["<listdir/>", FIX, "<view>stats.py 19-19</view>", "<eval/>", "<eval/>", "<eval/>"],  # cut, graded
    ]
    engine = ScriptedEngine(tokenizer, scripts)
    with DebugEnv(DebugSettings(repo_cache=str(tmp_path / "cache"), workspace={"backend": "bwrap"})) as env:
        runner = EpisodeRunner(engine, env, SamplingParams(max_new_tokens=4000), max_turns=6)
        assert "</pdb>" in runner.sampling.stop and "<submit/>" in runner.sampling.stop
        stats: dict[str, float] = {}
        episodes = runner.run([debug_problem(median)], num_generations=3, stats=stats)

    assert [e.episode_return for e in episodes] == [1.0, 0.0, 1.0]
    assert [e.end_reason for e in episodes] == ["terminated", "terminated", "max_turns"]
    assert [t.reward for t in episodes[2].turns] == [0.0] * 5 + [1.0]  # on the last action only
    batch = episode_batch(episodes, engine.pad_token_id)
    for row, episode in enumerate(episodes):
        trained = batch.input_ids[row][batch.trainable_mask[row].bool()].tolist()
        assert trained == [t for turn in episode.turns for t in turn.action_ids]
    first = batch.records[0]
    assert [t["tool"] for t in first["turns"][:5]] == ["pdb", "pdb", "pdb", "edit", "eval"]
    assert "stats.py(19)median()" in first["turns"][1]["output"]
    assert first["grade"]["resolved"] and first["num_edits"] == 1 and "+    return" in first["diff"]
    # the env's own time outside the turns is counted: three workspaces opened, and the episode
    # cut at its last turn graded when the runner finished it
    assert stats["env_reset_s"] > 0 and stats["env_finish_s"] >= batch.records[2]["grade"]["wall_s"] > 0

    dump = tmp_path / "rollouts.jsonl"
    RolloutWriter(dump).write(batch.records, step=0, rank=0)
    out = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "episode", str(dump), "--index", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert text.startswith("# Episode debug/median (step 0")
    assert "**Reward 1**" in text and "## Task" in text and "median(values)" in text
    for k in range(1, 7):
        assert f"## Turn {k}" in text
    assert "**Tool call:** `pdb`" in text and "b stats.py:19" in text and "stats.py(19)median()" in text
    assert "**Diff after this turn:**" in text and "## Result" in text and "Grade: `resolved`" in text
    assert "test_stats.py::test_median_of_even_count: passed" in text
    best = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "episode", str(dump), "--problem", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert best.returncode == 2 and "no episode" in best.stderr
