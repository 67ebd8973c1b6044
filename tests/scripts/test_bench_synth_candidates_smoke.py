"""The candidate-generation benchmark on the shipped SWE repositories: both ways give the same
mutants on every site (it exits otherwise) and the JSON holds a row per repository (the times are
the benchmark's to report, not this test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bench_synth_candidates_on_the_shipped_repositories(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_synth_candidates.py"),
            "swe",
            "--per-site-limit",
            "4",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.read_text())
    rows = result["results"]
    assert {r["repository"] for r in rows} == {
        "lit-coderl/calckit",
        "lit-coderl/confkit",
        "lit-coderl/numkit",
        "lit-coderl/textkit",
    }
    for row in rows:  # at most 4 sites of each file timed the old way
        assert row["sites"] > 10 and 0 < row["per_site_timed_sites"] <= 4 * row["files"]
    assert "| repository |" in result["table"] and result["cpu"]


def test_bench_synth_candidates_scaling(tmp_path: Path) -> None:
    out = tmp_path / "scaling.json"
    script = str(REPO / "scripts" / "bench_synth_candidates.py")
    subprocess.run([sys.executable, script, "--scaling", "10", "20", "--out", str(out)], check=True)
    rows = json.loads(out.read_text())["results"]
    assert [(r["functions"], r["final_newline"]) for r in rows] == [
        (10, True),
        (10, False),
        (20, True),
        (20, False),
    ]
    # the same candidates with and without a final newline; more with more functions
    assert rows[0]["candidates"] == rows[1]["candidates"] < rows[2]["candidates"] == rows[3]["candidates"]
