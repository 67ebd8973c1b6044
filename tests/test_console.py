"""What a run prints: no third-party notices (each silenced by message and emitting module), every
other warning still shown, ``[lit-coderl]`` log lines also when a script runs ``CodeRLCLI``
in-process, and the evaluation's progress while it runs."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from tests.modules.test_grpo_module import REPO

# A script that runs the CLI in-process (not through `lit-coderl`/main()), with a callback that
# warns as user code does: once in its own words, once in the words of a notice the console
# silences (from another module, so it must still show).
SCRIPT = textwrap.dedent(
    """
    import warnings
    from lightning.fabric.utilities.warnings import PossibleUserWarning
    from lightning.pytorch import Callback
    from lit_codeRL.cli import CodeRLCLI

    class Loud(Callback):
        def on_train_start(self, trainer, pl_module):
            warnings.warn("a genuine warning from user code")
            warnings.warn("You are using the `dataloader_iter` step flavor (user code)", PossibleUserWarning)

    CodeRLCLI(trainer_defaults={"callbacks": [Loud()]})  # arguments from sys.argv
    """
)

TINY_FIT = [
    "fit",
    "--config",
    "configs/quickstart.yaml",
    "--model.init_args.model.name_or_path",
    "tiny-random",
    "--model.init_args.sampling.max_new_tokens",
    "8",
    "--model.init_args.num_generations",
    "2",
    "--model.init_args.prompts_per_step",
    "1",
    "--model.init_args.sandbox.workers",
    "1",
    "--model.init_args.save_hf_model",
    "false",
    "--trainer.max_steps",
    "1",
    "--trainer.logger",
    "false",
    "--trainer.enable_checkpointing",
    "false",
    "--trainer.callbacks",
    '[{"class_path": "lit_codeRL.callbacks.MBPPEvalCallback", "init_args": {"source": "embedded", '
    '"split": "eval", "limit": 2, "batch_size": 1, "max_new_tokens": 8, "eval_at_end": false, '
    '"sandbox": {"workers": 1}}}]',
]


@pytest.fixture(scope="module")
def in_process_fit(tmp_path_factory) -> str:
    """stderr of one tiny GRPO fit run by a script that calls ``CodeRLCLI`` in-process."""
    root = tmp_path_factory.mktemp("console")
    script = root / "run.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONWARNINGS", "LIT_CODERL_LOG"))}
    env |= {"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(script), *TINY_FIT, "--trainer.default_root_dir", str(root / "run")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stderr + out.stdout


def test_third_party_notices_are_silenced_and_real_warnings_show(in_process_fit):
    printed = in_process_fit
    for notice in (
        "💡 Tip",
        "configuration_validator.py",  # where Lightning's `dataloader_iter` notice comes from
        "Found `dataloader_iter` argument",
        "LeafSpec",
    ):
        assert notice not in printed, notice
    assert "a genuine warning from user code" in printed
    # the same words as a silenced notice, from another module: a filter by message alone would hide it
    assert "You are using the `dataloader_iter` step flavor (user code)" in printed


def test_log_lines_and_evaluation_progress_in_a_script_running_the_cli(in_process_fit):
    """`[lit-coderl]` lines print without the entry point, and the interval MBPP evaluation says
    after each batch how far it is, the running pass rate and the time left."""
    lines = [
        line for line in in_process_fit.splitlines() if line.startswith("[lit-coderl] mbpp_eval step 0:")
    ]
    assert [line.split(",")[0] for line in lines[:2]] == [
        "[lit-coderl] mbpp_eval step 0: 1/2 problems",
        "[lit-coderl] mbpp_eval step 0: 2/2 problems",
    ], in_process_fit[-3000:]
    assert "pass@1 0.000 so far" in lines[0] and "elapsed, ETA " in lines[0]
    assert "(0/2 problems)" in lines[2]  # then the result


def test_setup_console_is_idempotent_and_respects_configured_logging(monkeypatch):
    from lit_codeRL import console

    log = logging.getLogger("lit_codeRL")
    monkeypatch.setattr(log, "level", log.level)
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(log, "propagate", True)
    with warnings.catch_warnings():
        console.setup_console()
        count = len(warnings.filters)
        console.setup_console()
        assert len(warnings.filters) == count
    assert len(log.handlers) == 1
    # it writes to the sys.stderr of the moment (a live Rich bar swaps in a proxy above the bar)
    swapped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", swapped)
    log.info("a line")
    assert swapped.getvalue() == "[lit-coderl] a line\n"
    monkeypatch.setattr(log, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    console.setup_console()  # the process configured logging itself: ours propagates to it
    assert log.handlers == []
