"""The MBPP recipe script end to end on a tiny random policy and 3 evaluation tasks: both stages
run through the real CLI, stage 2 starts from stage 1's exported policy, and the report holds the
before/after rows, the commands, the picture and a policy that plain ``transformers`` loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MBPP = REPO.parent / "shared" / "data" / "mbpp"
TINY = (
    "--model.init_args.model.name_or_path tiny-random --trainer.max_steps 2 --trainer.accelerator cpu "
    "--trainer.devices 1 --trainer.callbacks.init_args.limit 3 --trainer.callbacks.init_args.max_new_tokens 8"
)


@pytest.mark.slow
@pytest.mark.skipif(not MBPP.is_dir(), reason="needs ../shared/data/mbpp")
def test_recipe_runs_both_stages_and_reports_before_and_after(tmp_path):
    out = tmp_path / "recipe.json"
    grpo = "--model.init_args.sampling.max_new_tokens 8 --model.init_args.prompts_per_step 2 --model.init_args.num_generations 2"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/mbpp_recipe.py",
            "--data",
            str(MBPP),
            "--out-dir",
            str(tmp_path / "runs"),
            "--out",
            str(out),
            "--grpo-minutes",
            "1",
            "--bc-args",
            TINY,
            "--grpo-args",
            f"{TINY} {grpo}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["after"] for r in report["rows"]] == ["base", "BC", "BC + GRPO"]
    assert all(r["num_problems"] == 3 for r in report["rows"])
    bc, grpo_stage = report["stages"]
    assert bc["command"].startswith("lit-coderl fit --config configs/mbpp_recipe_bc.yaml")
    # stage 2 trains the policy stage 1 exported, not the base model
    assert (
        f"--model.init_args.model.name_or_path {tmp_path / 'runs' / 'bc' / 'run' / 'hf_model'}"
        in grpo_stage["command"]
    )
    assert report["final_policy"] == str(tmp_path / "runs" / "grpo" / "run" / "hf_model")
    assert report["transformers_sample"].startswith("def add(a, b):")
    assert Path(report["picture"]).stat().st_size > 10_000
    for stage in ("bc", "grpo"):
        assert (tmp_path / "runs" / stage / "run" / "learning_curve.png").is_file()
    assert len(report["curves"]["bc"]) == 2 and len(report["curves"]["grpo"]) == 2
    assert "| BC + GRPO |" in proc.stdout
