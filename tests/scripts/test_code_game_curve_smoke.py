"""The code-game curve script end to end on the tiny model: a 2-step run through the shipped config,
after a 1-step predictor warm start, and the JSON, PNG and table the closing notes quote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]


def test_code_game_curve_tiny(tmp_path: Path) -> None:
    require_bwrap()
    out = tmp_path / "curve.json"
    run = subprocess.run(
        [
            sys.executable, str(REPO / "scripts" / "code_game_curve.py"),
            "--model", "tiny-random", "--steps", "2", "--prompts", "2", "--programs", "2",
            "--warm-start-steps", "1", "--warm-start-rounds", "0", "--warm-start-seeds", "4",
            "--warm-start-eval", "2",
            "--run-dir", str(tmp_path / "run"), "--out", str(out), "--",
            "--model.init_args.sampling.max_new_tokens", "12",
            "--model.init_args.game.prediction_max_new_tokens", "6",
        ],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["steps"] == [0, 1]  # self-play steps, counted after the warm start
    warm = result["warm_start"]
    assert warm["steps"] == 1 and len(warm["loss"]) == 1
    assert warm["pairs"] == 2 and warm["held_out"] == 2 and warm["pairs_from_seeds"] == 4
    assert set(warm["before"]) == set(warm["after"]) == {"accuracy", "format_rate", "answer_tokens", "nll"}
    assert out.with_suffix(".png").stat().st_size > 0
    assert "warm start: 1 steps on 2 pairs" in run.stdout
    assert len(result["series"]["validity"]) == 2 and all(v == 0.0 for v in result["series"]["validity"])
    assert result["rejected_share_mean"] and sum(result["rejected_share_mean"].values()) == pytest.approx(1.0)
    assert "| step | validity |" in run.stdout
    again = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "code_game_curve.py"), "--log-dir", result["log_dir"],
         "--out", str(tmp_path / "again.json")],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert (
        again.returncode == 0
        and json.loads((tmp_path / "again.json").read_text())["series"] == result["series"]
    )
