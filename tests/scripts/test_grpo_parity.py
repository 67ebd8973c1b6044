"""The fast-vs-fp32 learning parity script: its per-run summary and comparison (hand-computed), and
that the fp32 path's overrides are real CLI knobs with the values it means."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import grpo_parity  # noqa: E402


def _fake_run(tmp_path: Path, rewards: list[float], gaps: list[float]) -> Path:
    csv = tmp_path / "metrics.csv"
    lines = ["epoch,step,train/reward,train/tis/logprob_diff,time/generate_s,time/train_s"]
    lines += [f"0,{i},{r},{g},2.0,{3.0 + i}" for i, (r, g) in enumerate(zip(rewards, gaps, strict=True))]
    csv.write_text("\n".join(lines) + "\n")
    result = tmp_path / "run.json"
    result.write_text(
        json.dumps(
            {
                "rewards": rewards,
                "rolling_mean": rewards,
                "evals": [{"pass_rate": 0.5}, {"pass_rate": 0.75}],
                "metrics_csv": str(csv),
                "wall_s": 60.0,
            }
        )
    )
    return result


def test_run_summary_windows_and_sampler_gap(tmp_path):
    rewards = [0.0] * 10 + [0.5] * 10 + [1.0] * 10  # 30 steps: halves split at step 15
    gaps = [0.02] * 10 + [0.03] * 10 + [0.05] * 10
    s = grpo_parity.run_summary(_fake_run(tmp_path, rewards, gaps))
    assert s["first10"] == 0.0
    assert s["last10"] == 1.0
    assert math.isclose(s["second_half"], (5 * 0.5 + 10 * 1.0) / 15)
    assert math.isclose(s["logprob_gap_first10"], 0.02)
    assert math.isclose(s["logprob_gap_last10"], 0.05)
    assert s["median_train_s"] == 3.0 + 14.5
    assert s["evals"] == [0.5, 0.75]


def test_compare_is_welch_difference_of_means():
    d = grpo_parity.compare([0.9, 0.8, 1.0], [0.7, 0.9])
    assert math.isclose(d["diff"], 0.9 - 0.8)
    # sample variances 0.01 and 0.02 over 3 and 2 runs
    assert math.isclose(d["se"], math.sqrt(0.01 / 3 + 0.02 / 2))
    assert grpo_parity.compare([0.9], [0.7, 0.8])["se"] is None


def test_fp32_path_overrides_reach_the_module():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lit_codeRL.cli",
            "fit",
            "--config",
            str(REPO / "configs/quickstart.yaml"),
            *grpo_parity.PATHS["fp32"],
            "--print_config",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "dtype: model" in out
    assert "skip_zero_advantage_groups: false" in out


def test_mean_curve_covers_the_steps_every_run_has():
    assert grpo_parity.mean_curve([[0.0, 1.0, 1.0], [1.0, 0.5]]) == [0.5, 0.75]
