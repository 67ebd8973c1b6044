"""The GPU check's plan (``scripts/gpu_check.py run --dry-run``): the agent recipe (#49) is a call of
its own, run only when named, on the tasks staged from the dev machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _plan(tmp_path: Path, *extra: str) -> str:
    env = {**os.environ, "GPU_CHECK_TMP": str(tmp_path)}
    cmd = [sys.executable, "scripts/gpu_check.py", "run", ".gpu2", "--dry-run", *extra]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_agent_recipe_runs_only_when_named_and_reads_the_staged_tasks(tmp_path):
    default = _plan(tmp_path)
    assert "# quickstart" in default and "scripts/agent_recipe.py" not in default
    alone = _plan(tmp_path, "--only", "agent_recipe", "--budget-s", "570")
    assert [line for line in alone.splitlines() if line.startswith("# ") and "env:" not in line] == [
        line for line in alone.splitlines() if line.startswith("# agent_recipe")
    ]
    assert "scripts/agent_recipe.py" in alone and "--debug-heldout 200" in alone
    assert "--swe-tasks" not in alone  # nothing staged: the recipe synthesizes its own
    tasks = tmp_path / "lcr_stage" / "agent_recipe" / "synth" / "swe" / "tasks.jsonl"
    tasks.parent.mkdir(parents=True)
    tasks.write_text("")
    assert f"--swe-tasks {tasks}" in _plan(tmp_path, "--only", "agent_recipe")
