"""The gateway benchmark end to end on the tiny model: the JSON holds the figures the closing note
quotes, the gateway and the direct engine sampled identical tokens, and the harness episodes ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]


def test_bench_gateway_quick(tmp_path: Path) -> None:
    require_bwrap()
    out = tmp_path / "gateway.json"
    run = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "bench_gateway.py"), "--model", "tiny-random",
         "--calls", "3", "--concurrency", "3", "--episodes", "2", "--max-tokens", "16", "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["overhead"]["identical_tokens"] is True
    assert data["overhead"]["calls"] == 3 and data["overhead"]["gateway_ms_p50"] > 0
    assert data["concurrency"]["concurrent"]["calls"] == 3
    assert (
        data["concurrency"]["concurrent"]["generate_calls"]
        <= data["concurrency"]["sequential"]["generate_calls"]
    )
    assert data["harness"]["episodes"] == 2 and data["harness"]["gateway_calls"] >= 2
    assert "gateway overhead per call" in run.stdout
