"""The debugging-gym step benchmark end to end on three MBPP problems: the scripted fixes resolve,
the episode whose edit loops forever is graded ``timeout`` under both limits, and the JSON names
the limits each mode ran with (the times are the benchmark's to report, not this test's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_debug_step as bench  # noqa: E402

from tests.sandbox.conftest import require_bwrap  # noqa: E402

MBPP = REPO.parent / "shared" / "data" / "mbpp"


@pytest.mark.skipif(not (MBPP / "mbpp.jsonl").is_file(), reason="needs ../shared/data/mbpp")
def test_bench_debug_step_small(tmp_path: Path) -> None:
    require_bwrap()
    lines = (MBPP / "mbpp.jsonl").read_text().splitlines()
    data = tmp_path / "mbpp"
    data.mkdir()
    (data / "mbpp.jsonl").write_text(
        "\n".join(line for line in lines if json.loads(line)["task_id"] in range(511, 516)) + "\n"
    )
    out = tmp_path / "step.json"
    args = ["--data", str(data), "--tasks", "2", "--generations", "2", "--hangs", "1", "--parallel", "2"]
    # a hang costs the limits: small ones here (the recipe's 20 s made this test 90 s long)
    args += ["--eval-timeout-s", "3", "--grade-min-timeout-s", "6"]
    result = bench.main([*args, "--out", str(out)])
    assert json.loads(out.read_text()) == result
    limited, wall = result["results"]["cpu limit (default)"], result["results"]["wall clock only"]
    assert min(limited["cpu_limit_s"]) >= 5.0 and wall["cpu_limit_s"] == [0.0]
    assert result["workload"]["env"]["eval_timeout_s"] == 3.0 and min(wall["wall_limit_s"]) >= 6.0
    for mode in (limited, wall):
        assert mode["no hang"]["verdicts"] == {"hang": {}, "other": {"passed": 4}}
        assert mode["1 hanging"]["verdicts"] == {"hang": {"timeout": 1}, "other": {"passed": 3}}
        assert mode["1 hanging"]["step_s"] > 0
    assert "| cpu limit (default) | 1 hanging |" in result["table"]
