"""The PPO learning-curve script end to end on the tiny model: the selection scan, both runs, and
the JSON the closing notes quote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ppo_learning_curve_tiny(mbpp_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "curve.json"
    common = [
        sys.executable,
        str(REPO / "scripts" / "ppo_learning_curve.py"),
        "--model", "tiny-random",
        "--mbpp", str(mbpp_dir),
        "--steps", "2",
        "--pretrain-steps", "1",
        "--prompts", "2",
        "--generations", "2",
        "--max-new-tokens", "8",
        "--run-root", str(tmp_path / "runs"),
        "--out", str(out),
    ]  # fmt: skip
    scan = subprocess.run(
        [*common, "--scan", "3", "--variants", "grpo"], capture_output=True, text=True, timeout=900
    )
    assert scan.returncode == 1 and "nothing to train on" in scan.stderr  # a random model passes no test
    run = subprocess.run(
        [*common, "--task-ids", '["mbpp/601", "mbpp/602"]'],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["task_ids"] == ["mbpp/601", "mbpp/602"]
    gae, grpo = result["runs"]
    assert gae["variant"] == "gae" and grpo["variant"] == "grpo"
    assert len(gae["rewards"]) == 2 and gae["value_pretraining"] == [1.0, 0.0]
    assert grpo["explained_variance"] == [None, None]  # no critic
    assert Path(gae["curve_png"]).is_file()
