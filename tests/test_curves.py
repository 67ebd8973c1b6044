"""Learning curves as pictures: every run draws one, and `lit-coderl curves` redraws any run."""

from __future__ import annotations

import json
import subprocess
import sys

from lit_codeRL.callbacks.curves import PANELS, pick_series, read_metrics_csv
from tests.modules.test_grpo_module import REPO, cli
from tests.modules.test_reinforce_bc import TINY_RL, csv_logger

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_metrics_csv_with_sparse_rows_becomes_series(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text(
        "epoch,step,train/reward,mbpp_eval/pass@1,time/generate_s,time/train_s\n"
        "0,0,,0.25,,\n"
        "0,0,0.1,,2.0,1.0\n"
        "0,1,0.4,,2.5,1.5\n"
        "0,2,,0.5,,\n"
    )
    h = read_metrics_csv(path)
    assert h["train/reward"] == [(0, 0.1), (1, 0.4)]
    assert h["mbpp_eval/pass@1"] == [(0, 0.25), (2, 0.5)]
    assert pick_series(h, ("train/reward", "train/loss")) == ["train/reward"]
    assert pick_series(h, ("time/step_s", "time/generate_s|time/train_s")) == [
        "time/generate_s",
        "time/train_s",
    ]
    assert pick_series(h, ("game_eval/*/win",)) == []
    # a run from before train/groups_with_signal still fills the panel, with its complement
    signal = dict(PANELS)["Groups with learning signal"]
    assert pick_series({"train/frac_zero_std_groups": [(0, 0.5)]}, signal) == ["train/frac_zero_std_groups"]


def test_every_run_draws_its_learning_curve_and_the_cli_redraws_it(tmp_path):
    run = tmp_path / "run"
    out = cli(
        "fit", "--config", "configs/quickstart.yaml", *TINY_RL, "--trainer.max_steps", "2", *csv_logger(run)
    )
    log_dir = next(run.glob("version_*"))
    png = log_dir / "learning_curve.png"
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert f"learning curve: {png}" in out.stdout and "rollouts.jsonl" in out.stdout
    panels = json.loads(png.with_suffix(".json").read_text())["panels"]
    assert [s for s, _ in panels["Training reward"]["train/reward"]] == [0, 1]
    assert len(panels["Evaluation"]["mbpp_eval/pass_rate"]) == 2  # at start and at the end
    signal = panels["Groups with learning signal"]["train/groups_with_signal"]
    assert [s for s, _ in signal] == [0, 1] and all(0.0 <= v <= 1.0 for _, v in signal)
    assert set(panels["Step time (s)"]) == {"time/generate_s", "time/train_s"}

    redrawn = tmp_path / "redrawn.png"
    done = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "curves", str(run), "--out", str(redrawn)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert redrawn.read_bytes()[:8] == PNG_MAGIC
    again = json.loads(redrawn.with_suffix(".json").read_text())["panels"]
    assert again["Training reward"]["train/reward"] == panels["Training reward"]["train/reward"]
    assert again["Evaluation"]["mbpp_eval/pass_rate"] == panels["Evaluation"]["mbpp_eval/pass_rate"]

    missing = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "curves", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2 and "no run directory" in missing.stderr
