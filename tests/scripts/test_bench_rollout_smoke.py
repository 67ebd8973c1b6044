"""The rollout benchmark end to end on the tiny model: each engine it can run is measured, the ones
it cannot are reported as not run with a reason, and the JSON has the CPU path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_rollout_tiny(tmp_path: Path) -> None:
    out = tmp_path / "rollout.json"
    run = subprocess.run(
        [
            sys.executable, str(REPO / "scripts" / "bench_rollout.py"), "--model", "tiny-random",
            "--prompts", "2", "--generations", "2", "--new-tokens", "8", "--rounds", "1",
            "--engines", "hf-fp32,openai,vllm", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    hf = report["engines"]["hf-fp32"]
    assert hf["tokens_per_s"] > 0 and 0 < hf["tokens"] <= 2 * 2 * 8
    assert "GGUF" in report["engines"]["openai"]["not_run"]  # tiny-random has no GGUF file for a server
    assert "CUDA" in report["engines"]["vllm"]["not_run"]
    assert "native_bf16" in report["cpu_path"] and "| hf-fp32 |" in report["table"]
