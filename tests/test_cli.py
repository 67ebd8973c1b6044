"""The ``lit-coderl`` command: help, print_config for every shipped config, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )


def test_help_lists_subcommands():
    out = run_cli("--help")
    assert out.returncode == 0, out.stderr
    for sub in ("fit", "validate", "test", "predict"):
        assert sub in out.stdout


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_print_config_for_every_shipped_config(config):
    out = run_cli("fit", "--config", str(config), "--print_config")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "class_path: lit_codeRL.modules" in out.stdout
    # Every knob appears with its value, including nested dataclass defaults.
    if "grpo" in config.name or "quickstart" in config.name:
        for knob in (
            "num_generations",
            "epsilon_high",
            "scale_rewards",
            "max_new_tokens",
            "timeout_s",
            "name_or_path",
        ):
            assert knob in out.stdout


def test_dotted_override_reaches_the_config():
    out = run_cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--model.init_args.learning_rate",
        "3e-7",
        "--print_config",
    )
    assert out.returncode == 0 and "learning_rate: 3.0e-07" in out.stdout


def _assert_one_line_error(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode != 0
    err_lines = [line for line in out.stderr.strip().splitlines() if "error" in line.lower()]
    assert err_lines, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    for needle in needles:
        assert needle in out.stderr, out.stderr[-2000:]


def test_wrong_config_key_is_one_clear_error():
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--model.init_args.learnin_rate", "1e-6")
    _assert_one_line_error(out, "learnin_rate")


def test_missing_data_file_is_one_clear_error(tmp_path):
    out = run_cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--model.init_args.model.name_or_path",
        "tiny-random",
        "--model.init_args.problems.source",
        str(tmp_path / "nope.jsonl"),
        "--trainer.logger",
        "false",
        "--trainer.callbacks",
        "[]",
        "--trainer.max_steps",
        "1",
    )
    _assert_one_line_error(out, "nope.jsonl")


def test_unknown_model_offline_is_one_clear_error():
    out = run_cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--model.init_args.model.name_or_path",
        "nobody/no-such-model",
        "--trainer.max_steps",
        "1",
    )
    _assert_one_line_error(out, "nobody/no-such-model", "offline")


def test_step_limited_run_has_no_negative_epoch_bound_in_its_progress_bar():
    from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

    from lit_codeRL.callbacks.progress import StepLimitedRichProgressBar
    from lit_codeRL.cli import CodeRLTrainer

    trainer = CodeRLTrainer(max_steps=3, logger=False, accelerator="cpu")
    bar = trainer.progress_bar_callback
    assert isinstance(bar, StepLimitedRichProgressBar)
    bar._trainer = trainer  # Lightning sets it in setup()
    trainer.fit_loop.max_epochs = -1  # what Trainer.fit sets for a step-limited run
    assert bar._get_train_description(0).strip() == "Epoch 0"
    # An epoch-limited run keeps Lightning's "Epoch i/last"; a user's own bar is left alone.
    epochs = CodeRLTrainer(max_epochs=2, logger=False)
    epochs.progress_bar_callback._trainer = epochs
    assert epochs.progress_bar_callback._get_train_description(0).strip() == "Epoch 0/1"
    own = TQDMProgressBar()
    trainer = CodeRLTrainer(max_steps=3, logger=False, callbacks=[own])
    assert [cb for cb in trainer.callbacks if isinstance(cb, ProgressBar)] == [own]
    assert CodeRLTrainer(max_steps=3, logger=False, enable_progress_bar=False).progress_bar_callback is None
