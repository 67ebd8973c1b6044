"""The GRPO-vs-TRL benchmark: its statistics (fast) and an end-to-end smoke run on a tiny model (slow)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import bench_grpo_vs_trl as bench  # noqa: E402


def _run(fw: str, times: list[float], tokens: list[int], round_idx: int = 0) -> dict:
    steps = [
        {
            "step": i,
            "time_s": t,
            "tokens": n,
            "task_ids": [f"mbpp/{601 + 4 * i + j}" for j in range(4)],
            "generate_s": 0.5 * t,
            "reward_s": 0.1 * t,
            "forward_backward_s": 0.2 * t,
            "optimizer_s": 0.1 * t,
        }
        for i, (t, n) in enumerate(zip(times, tokens, strict=True))
    ]
    return {"framework": fw, "round": round_idx, "steps": steps}


def test_summary_drops_warmup_and_compares_medians():
    runs = [
        # the 100 s warm-up steps must not count
        _run("ours", [100.0, 2.0, 4.0, 3.0], [999, 1000, 1000, 1000]),
        _run("trl", [100.0, 9.0, 7.5, 8.0], [999, 1050, 1050, 1050]),
        _run("ours", [100.0, 5.0, 1.0, 3.0], [999, 1000, 1000, 1000], round_idx=1),
        _run("trl", [100.0, 8.0, 7.5, 8.5], [999, 1050, 1050, 1050], round_idx=1),
    ]
    s = bench.summarize(runs, warmup=1)
    assert s["ours"]["steps_measured"] == 6
    assert s["ours"]["median_step_s"] == pytest.approx(3.0)
    assert s["trl"]["median_step_s"] == pytest.approx(8.0)
    assert s["ours"]["round_medians_s"] == [3.0, 3.0]
    assert s["ours"]["tokens_per_step"] == pytest.approx(1000)
    assert s["ours"]["median_phase_s"]["generate_s"] == pytest.approx(1.5)
    # 10% of the step is in none of the four phases
    assert s["ours"]["median_phase_s"]["other_s"] == pytest.approx(0.3)
    c = s["comparison"]
    assert c["speedup_median_step"] == pytest.approx(8.0 / 3.0)  # above the 2.5x target
    assert c["tokens_per_step_gap"] == pytest.approx(50 / 1050)
    assert c["tokens_match"] and c["enough_steps"] and c["meets_target"]
    table = bench.render_table(s)
    assert "| ours | 3.00 |" in table and "| trl | 8.00 |" in table and "2.67x" in table


def test_summary_flags_unequal_work_and_missing_speedup():
    runs = [_run("ours", [1.0, 5.0, 5.0], [10, 1000, 1000]), _run("trl", [1.0, 6.0, 6.0], [10, 1500, 1500])]
    c = bench.summarize(runs, warmup=1)["comparison"]
    assert not c["tokens_match"]  # 1000 vs 1500 tokens/step is not the same work
    assert not c["meets_target"]
    assert not c["enough_steps"]  # 2 measured steps < 5


def test_same_prompt_check():
    a, b = _run("ours", [1.0, 1.0], [1, 1]), _run("trl", [1.0, 1.0], [1, 1])
    assert bench.check_same_prompts([a, b])
    b["steps"][1]["task_ids"] = list(reversed(b["steps"][1]["task_ids"]))
    assert not bench.check_same_prompts([a, b])


@pytest.mark.slow
def test_quick_benchmark_end_to_end(tmp_path, mbpp_dir):
    if importlib.util.find_spec("trl") is None:
        pytest.skip("TRL is not installed (pip install trl)")
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "bench_grpo_vs_trl.py"),
            "--quick",
            "--mbpp-path",
            str(mbpp_dir / "mbpp.jsonl"),
            "--max-completion-length",
            "16",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    summary = result["summary"]
    for fw in ("ours", "trl"):
        assert summary[fw]["steps_measured"] == 2
        assert summary[fw]["median_step_s"] > 0
        # a random 2-layer model almost never emits EOS: completions run to the 16-token limit
        assert 0.9 * 16 * 16 <= summary[fw]["tokens_per_step"] <= 16 * 16
    assert summary["comparison"]["same_prompts"]
    assert "| ours |" in proc.stdout and "| trl |" in proc.stdout
