"""scripts/sampler_parity.py end to end on the tiny random model: both algorithms under both
samplers, and the mismatch metric telling the bf16 sampler from the trainer's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # four training processes: ~1 min of CPU
def test_smoke_bf16_sampler_shows_a_mismatch_the_fp32_one_does_not(tmp_path):
    out = tmp_path / "parity.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts/sampler_parity.py"),
            "--model",
            "tiny-random",
            "--steps",
            "1",
            "--window",
            "1",
            "--jobs",
            "1",
            "--out-dir",
            str(tmp_path / "runs"),
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"reinforce", "spiral"} and all(set(r) == {"bf16", "fp32"} for r in runs.values())
    for algo, by_sampler in runs.items():
        for run in by_sampler.values():
            assert len(run["curve"]) == 1, algo
        # the fp32 sampler is the trainer (float rounding only); bf16 rounding moves log-probs
        assert by_sampler["fp32"]["tis/logprob_diff"]["mean"] < 1e-5, algo
        assert by_sampler["bf16"]["tis/logprob_diff"]["mean"] > 1e-4, algo
    # REINFORCE weights tokens; SPIRAL (2 epochs) takes the ratio to the trainer's pi_old (1 in its
    # first epoch) and weights tokens by pi_old / pi_sampler
    assert runs["reinforce"]["bf16"]["tis/weight"] is not None and runs["reinforce"]["bf16"]["ratio"] is None
    spiral = runs["spiral"]["bf16"]
    assert spiral["tis/weight"] is not None and spiral["ratio"]["mean"] == pytest.approx(1.0, abs=1e-4)
    assert "| reinforce | bf16 |" in done.stdout
