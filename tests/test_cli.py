"""The ``lit-coderl`` command: help, one-line errors, subcommands a module has no loop for.

``--print_config`` of every shipped config, and every documented command run for real:
``tests/test_documented_commands.py``."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli_process import run_cli

REPO = Path(__file__).resolve().parents[1]


def test_help_lists_subcommands():
    out = run_cli("--help")
    assert out.returncode == 0, out.stderr
    for sub in ("fit", "validate", "test", "predict"):
        assert sub in out.stdout


def test_dotted_override_reaches_the_config():
    out = run_cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--model.init_args.optimizer.learning_rate",
        "3e-7",
        "--print_config",
    )
    assert out.returncode == 0 and "learning_rate: 3.0e-07" in out.stdout


def _assert_one_line_error(out: subprocess.CompletedProcess, *needles: str, max_lines: int = 2) -> str:
    """The run failed with a short ``lit-coderl: error:`` message ending stderr: at most
    ``max_lines`` lines (the error and a hint), no usage, no traceback. Returns the message."""
    assert out.returncode != 0
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("lit-coderl: error:")]
    assert len(starts) == 1, out.stderr[-3000:]
    message = lines[starts[0] :]
    assert len(message) <= max_lines, "\n".join(message)
    assert "Traceback" not in out.stderr and "usage:" not in out.stderr, out.stderr[-3000:]
    text = "\n".join(message)
    for needle in needles:
        assert needle in text, text
    return text


def test_wrong_config_key_is_one_clear_error():
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--model.init_args.learnin_rate", "1e-6")
    _assert_one_line_error(out, "learnin_rate", "did you mean `model.init_args.optimizer.learning_rate`?")
    assert out.returncode == 2


def test_a_flat_optimizer_key_from_before_the_group_names_its_new_key(tmp_path):
    """``learning_rate`` & co. moved into ``optimizer`` (README, "Optimizer settings"): the old
    key, on the command line or in a YAML, says where it went (``fused_optimizer`` -> ``fused``)."""
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--model.init_args.fused_optimizer", "false")
    _assert_one_line_error(out, "moved into a group, use `model.init_args.optimizer.fused`")
    config = (REPO / "configs" / "quickstart.yaml").read_text()
    new = "    optimizer:\n      learning_rate:"
    assert new in config
    old = tmp_path / "old.yaml"
    old.write_text(config.replace(new, "    learning_rate:"))
    out = run_cli("fit", "--config", str(old), "--print_config")
    _assert_one_line_error(
        out, "`model.init_args.learning_rate`", "use `model.init_args.optimizer.learning_rate`"
    )


def test_a_prefix_of_a_key_is_an_error_not_that_key():
    # argparse's abbreviations would take --trainer.max_step for --trainer.max_steps and start a run
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--trainer.max_step", "3", "--print_config")
    _assert_one_line_error(out, "trainer.max_step", "did you mean `trainer.max_steps`?")
    assert out.returncode == 2


def test_wrong_key_in_a_yaml_config_names_the_closest_valid_key(tmp_path):
    config = (REPO / "configs" / "quickstart.yaml").read_text()
    good = "    sampling:\n      max_new_tokens: 128"
    assert good in config
    bad = tmp_path / "bad.yaml"
    bad.write_text(config.replace(good, good.replace("max_new_tokens", "max_new_token")))
    out = run_cli("fit", "--config", str(bad), "--print_config")
    _assert_one_line_error(
        out,
        "`model.init_args.sampling.max_new_token`",
        "did you mean `model.init_args.sampling.max_new_tokens`?",
        "--model.help GRPOModule",
    )


def test_wrong_trainer_key_names_the_closest_valid_key():
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--trainer.max_stepz", "3", "--print_config")
    _assert_one_line_error(out, "did you mean `trainer.max_steps`?", "lit-coderl fit --help")


def test_rejected_value_names_its_key_and_reason():
    out = run_cli("fit", "--config", "configs/quickstart.yaml", "--model.init_args.loss_type", "foo")
    _assert_one_line_error(out, "model.init_args.loss_type:", "'dapo'", "foo", max_lines=1)


def test_module_check_gives_its_message_not_a_namespace_dump():
    out = run_cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        "--model.init_args.num_generations",
        "1",
        "--trainer.max_steps",
        "0",
    )
    _assert_one_line_error(out, "GRPOModule: num_generations must be >= 2", max_lines=1)
    assert "Namespace(" not in out.stderr


def test_misspelt_model_class_names_the_closest_one():
    out = run_cli("fit", "--model", "GRPOModul", "--print_config")
    _assert_one_line_error(out, "did you mean `GRPOModule`?")


def test_dataclass_field_docstrings_are_help_and_config_comments():
    """A settings field's docstring (the string under it) is its --help text and YAML comment."""
    from lit_codeRL.policy.engine import SamplingParams

    assert SamplingParams.__dataclass_fields__["max_new_tokens"]  # the knob this test reads
    # three processes at once: each spends its ~8 s importing Lightning
    with ThreadPoolExecutor(3) as pool:
        out, top, printed = pool.map(
            lambda args: run_cli(*args),
            [
                ("fit", "--model.help", "GRPOModule"),
                ("fit", "--config", "configs/grpo_mbpp.yaml", "--help"),
                ("fit", "--config", "configs/grpo_mbpp.yaml", "--print_config=comments"),
            ],
        )
    assert out.returncode == 0, out.stderr[-2000:]
    help_text = " ".join(out.stdout.split())
    assert "--model.sampling.max_new_tokens MAX_NEW_TOKENS Maximum completion length in tokens" in help_text
    assert "--model.sandbox.timeout_s TIMEOUT_S Default wall-clock limit per program" in help_text
    # Module __init__ args come from the class docstring's Args section.
    assert "--model.num_generations NUM_GENERATIONS Episodes per prompt (the group size G)" in help_text
    assert "--model.help NAME" in top.stdout
    assert printed.returncode == 0, printed.stderr[-2000:]
    lines = printed.stdout.splitlines()
    sampling = lines.index("    sampling:")
    at = next(i for i in range(sampling, len(lines)) if lines[i].strip() == "max_new_tokens: 512")
    assert "# Maximum completion length in tokens" in lines[at - 1], lines[at - 3 : at + 1]


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


def test_only_constructor_checks_lose_their_traceback():
    """A module's argument check is the user's to fix; a ValueError from a library is a bug
    report and keeps its traceback."""
    from lit_codeRL.cli import _describe, _user_error
    from lit_codeRL.modules.grpo import GRPOModule

    with pytest.raises(ValueError) as check:
        GRPOModule(num_generations=1)
    wrapped = RuntimeError("jsonargparse could not instantiate")
    wrapped.__cause__ = check.value
    assert _user_error(wrapped) is check.value
    assert _describe(check.value).startswith("GRPOModule: num_generations must be >= 2")
    with pytest.raises(ValueError) as library:
        int("not a number")
    assert _user_error(library.value) is None


# ---------------------------------------------------------------------------- subcommands
@pytest.mark.parametrize(
    "subcommand, config, needles",
    [
        (
            "test",
            "quickstart",
            ["GRPOModule has no `test` loop", "lit-coderl validate --config configs/eval_mbpp.yaml"],
        ),
        ("predict", "spiral_self_play", ["SpiralModule has no `predict` loop", "lit-coderl validate"]),
        ("validate", "reinforce_repair", ["REINFORCEModule has no `validate` loop"]),
        (
            "predict",
            "eval_mbpp",
            ["EvaluationModule has no `predict` loop", "`lit-coderl validate`, `lit-coderl test`"],
        ),
        ("fit", "eval_mbpp", ["EvaluationModule has no `fit` loop", "`lit-coderl validate`"]),
        (
            "validate",
            "dqn_codegen",
            ["DQNModule has no `validate` loop", "`lit-coderl fit`, `lit-coderl test`"],
        ),
    ],
)
def test_a_subcommand_the_module_has_no_loop_for_is_refused_before_the_model_loads(
    subcommand, config, needles
):
    """Lightning would load the model and then stop with a traceback at the missing hook; the
    model named here does not exist, so the refusal came before any loading."""
    from lit_codeRL.cli import CodeRLCLI
    from lit_codeRL.errors import ConfigError

    args = [subcommand, "--config", f"{REPO}/configs/{config}.yaml", "--trainer.logger", "false"]
    if config != "dqn_codegen":
        args += ["--model.init_args.model.name_or_path", "nobody/no-such-model"]
    with pytest.raises(ConfigError) as refused:
        CodeRLCLI(args=args)
    for needle in needles:
        assert needle in str(refused.value)


def test_the_refusal_is_one_line_through_the_console_script():
    out = run_cli("predict", "--config", "configs/quickstart.yaml")
    _assert_one_line_error(out, "GRPOModule has no `predict` loop", max_lines=1)


def test_test_of_the_evaluation_module_is_its_evaluation(tmp_path):
    """``lit-coderl test --config configs/eval_mbpp.yaml`` scores the policy (held-out scoring is
    what Lightning's ``test`` means), through the same loop as ``validate``."""
    import json

    from lit_codeRL.cli import CodeRLCLI

    cli = CodeRLCLI(
        args=[
            "test",
            "--config",
            f"{REPO}/configs/eval_mbpp.yaml",
            *("--model.init_args.model.name_or_path", "tiny-random"),
            *("--model.init_args.source", "embedded", "--model.init_args.split", "eval"),
            *("--model.init_args.limit", "2", "--model.init_args.max_new_tokens", "8"),
            *("--trainer.logger", "false", "--trainer.enable_progress_bar", "false"),
            *("--model.init_args.output_dir", str(tmp_path), "--trainer.default_root_dir", str(tmp_path)),
        ]
    )
    result = json.loads((tmp_path / "embedded_eval.json").read_text())
    assert result["metrics"]["mbpp_eval/num_problems"] == 2 and len(result["problems"]) == 2
    assert cli.model.last_metrics["mbpp_eval/num_problems"] == 2


def test_bot_opponent_where_no_game_has_a_bot_is_one_line(capsys, monkeypatch, tmp_path):
    """``opponent.kind bot`` plays each game's library bot and random moves where a game has none
    (tests/rollout/test_selfplay.py; the README's multi-game command runs in
    tests/test_documented_commands.py); with no bot in any game it is refused at setup."""
    from lit_codeRL.cli import main

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("lit_codeRL.policy.platform._CURRENT", None)  # as in a fresh process
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "lit-coderl",
            "fit",
            *("--config", "configs/spiral_self_play.yaml"),
            *("--model.init_args.model.name_or_path", "tiny-random"),
            *("--model.init_args.opponent.kind", "bot"),
            *("--model.init_args.games.games", "[simple_negotiation]"),
            *("--trainer.callbacks", "[]", "--trainer.logger", "false", "--trainer.max_steps", "1"),
            *("--trainer.default_root_dir", str(tmp_path)),
        ],
    )
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-coderl: error:")]
    assert err == [
        "lit-coderl: error: opponent.kind bot: no library bot for simple_negotiation (games with one: "
        "tictactoe, kuhn_poker); use opponent.kind random or frozen"
    ]
