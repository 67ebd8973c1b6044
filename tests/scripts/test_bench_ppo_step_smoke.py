"""The PPO step benchmark end to end on the tiny model: every variant trains the same batch and the
JSON holds the phases the closing notes quote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_ppo_step_quick(mbpp_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ppo_step.json"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_ppo_step.py"),
            "--quick",
            "--mbpp-path",
            str(mbpp_dir / "mbpp.jsonl"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"grpo", "ppo_grpo", "ppo_gae_head", "ppo_gae_model"}
    medians = {v: r["median"] for v, r in result["results"].items()}
    assert all(m["time/forward_backward_s"] > 0 for m in medians.values())
    # only the critics compute values before the update
    assert (
        medians["ppo_gae_model"]["time/old_values_s"] > 0 and medians["ppo_gae_head"]["time/old_values_s"] > 0
    )
    assert medians["grpo"]["time/old_values_s"] == 0 == medians["ppo_grpo"]["time/old_values_s"]
    assert result["workload"]["rows"] == 16 and "cpu" in result["cpu_path"]
    assert "| ppo_gae_model |" in run.stdout
