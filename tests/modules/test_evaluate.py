"""``lit-coderl validate`` with the EvaluationModule: any model source or a training checkpoint,
the same metrics as the interval callback, env-var overrides, DDP sharding."""

from __future__ import annotations

import copy
import json

import pytest

from tests.modules.test_grpo_module import cli, read_metrics
from tests.modules.test_reinforce_bc import csv_logger

EVAL_PROBLEMS = [
    "--model.init_args.source",
    "embedded",
    "--model.init_args.split",
    "eval",
    "--model.init_args.limit",
    "4",
    "--model.init_args.max_new_tokens",
    "24",
    "--model.init_args.batch_size",
    "4",
]
EVAL_TINY = ["--model.init_args.model.name_or_path", "tiny-random", *EVAL_PROBLEMS]


def _result(run) -> dict:
    (path,) = list(run.rglob("mbpp_eval/embedded_eval.json"))
    return json.loads(path.read_text())


def test_validate_scores_a_model_and_reports_the_training_metric_names(tmp_path):
    out = cli(
        "validate",
        "--config",
        "configs/eval_mbpp.yaml",
        *EVAL_TINY,
        "--model.init_args.batch_size",
        "2",
        *csv_logger(tmp_path),
    )
    result = _result(tmp_path)
    assert result["metrics"]["mbpp_eval/num_problems"] == 4
    sample = result["problems"][0]["samples"][0]
    assert {"completion", "code", "verdict", "failed_test"} <= set(sample)
    assert result["problems"][0]["prompt"].endswith("assistant\n")
    row = [r for r in read_metrics(tmp_path) if r.get("mbpp_eval/pass_rate")]
    assert row and float(row[0]["mbpp_eval/num_problems"]) == 4
    assert "| pass@1" in out.stdout and "| problems passed" in out.stdout
    # where the loop's time went: the model's generates, the wait on the env after them, the
    # env's own start and end of episodes; the parts fit inside the loop's wall time
    metrics = result["metrics"]
    parts = [
        metrics[f"mbpp_eval/time/{p}"] for p in ("generate_s", "reward_wait_s", "env_reset_s", "env_finish_s")
    ]
    assert parts[0] > 0 and 0 <= min(parts) and sum(parts) <= metrics["mbpp_eval/seconds"]
    assert "| of which " in out.stdout and "generate_s" in out.stdout
    # progress while it runs: output to a pipe has no live bar, so a line per batch
    progress = [line for line in out.stderr.splitlines() if line.startswith("[lit-coderl] evaluation: ")]
    assert [line.split(",")[0] for line in progress] == [
        "[lit-coderl] evaluation: 2/4 problems",
        "[lit-coderl] evaluation: 4/4 problems",
    ], out.stderr[-3000:]
    assert "so far" in progress[0] and "ETA" in progress[0]
    # and no warning caused by the evaluation's own setup (its batches, its seed)
    assert "IterableDataset" not in out.stderr and "No seed" not in out.stderr


def test_validate_and_the_interval_callback_share_one_set_of_defaults(monkeypatch, tiny_model):
    """Built with no arguments, `lit-coderl validate` and MBPPEvalCallback evaluate the same
    problems the same way; every shared knob is an argument of both, defaulting to the one
    CodeEvalSettings value."""
    import dataclasses
    import inspect

    from lit_codeRL.callbacks import MBPPEvalCallback
    from lit_codeRL.modules import evaluate
    from lit_codeRL.rollout.evaluation import CodeEvalSettings

    for name in ("MBPP_DATASET_PATH", "MBPP_EVAL_NUM_QUESTIONS"):
        monkeypatch.delenv(name, raising=False)
    # a copy: EvaluationModule freezes its policy, and tiny_model is shared by the whole session
    policy, tokenizer = tiny_model
    monkeypatch.setattr(evaluate, "load_policy", lambda model, checkpoint: (copy.deepcopy(policy), tokenizer))
    callback, module = MBPPEvalCallback(), evaluate.EvaluationModule()
    assert callback.settings == module.settings == CodeEvalSettings()
    assert callback.problem_settings == module.problem_settings
    assert (callback.problem_settings.source, callback.problem_settings.split) == ("mbpp", "test")
    assert callback.sampling == module.sampling and callback.sampling.temperature == 0
    assert (callback.k, callback.batch_size, callback.sandbox_config) == (
        module.k,
        module.batch_size,
        module.sandbox_config,
    )
    for owner in (MBPPEvalCallback, evaluate.EvaluationModule):
        parameters = inspect.signature(owner).parameters
        for field in dataclasses.fields(CodeEvalSettings):
            default = field.default_factory() if field.default is dataclasses.MISSING else field.default
            assert parameters[field.name].default == default, (owner.__name__, field.name)


def test_evaluating_a_saved_run_equals_its_last_interval_evaluation(tmp_path):
    """A training run's end-of-training MBPP evaluation and `validate` on its last checkpoint: the
    same completions, verdicts and metrics, problem for problem. The run is SPIRAL on the random
    model, whose advantages are never zero, so the checkpoint's weights differ from a fresh
    model's (a `validate` that ignored the checkpoint would generate other completions)."""
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lit_codeRL.callbacks import MBPPEvalCallback
    from lit_codeRL.policy.loading import load_model
    from tests.modules.test_spiral import _module, _trainer

    interval = MBPPEvalCallback(
        source="embedded", split="eval", limit=4, max_new_tokens=24, batch_size=4, eval_at_start=False
    )
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_train_steps=4)
    module = _module()
    _trainer(4, tmp_path / "train", callbacks=[ckpt, interval]).fit(module)
    logged = json.loads(sorted((tmp_path / "train").rglob("mbpp_eval/step_*.json"))[-1].read_text())
    assert logged["step"] == 4
    fresh, _ = load_model(name_or_path="tiny-random")
    name = "model.embed_tokens.weight"
    assert not torch.equal(fresh.state_dict()[name], module.policy.state_dict()[name])

    evaluated = tmp_path / "eval"
    cli(
        "validate",
        "--config",
        "configs/eval_mbpp.yaml",
        "--model.init_args.checkpoint",
        str(tmp_path / "ckpt" / "last.ckpt"),
        *EVAL_PROBLEMS,
        *csv_logger(evaluated),
    )
    result = _result(evaluated)
    assert [p["task_id"] for p in result["problems"]] == [p["task_id"] for p in logged["problems"]]
    for mine, theirs in zip(result["problems"], logged["problems"], strict=True):
        assert mine["prompt"] == theirs["prompt"]
        assert [s["completion"] for s in mine["samples"]] == [s["completion"] for s in theirs["samples"]]
        assert [s["verdict"] for s in mine["samples"]] == [s["verdict"] for s in theirs["samples"]]
    for key in ("mbpp_eval/pass_rate", "mbpp_eval/problems_passed", "mbpp_eval/num_problems"):
        assert result["metrics"][key] == logged["metrics"][key]


def test_environment_overrides_apply_only_where_the_config_is_silent(monkeypatch, tmp_path):
    from lit_codeRL.rollout.evaluation import resolve_limit, resolve_source

    monkeypatch.setenv("MBPP_DATASET_PATH", "/data/mbpp")
    monkeypatch.setenv("MBPP_EVAL_NUM_QUESTIONS", "7")
    assert resolve_source(None) == "/data/mbpp" and resolve_limit(None) == 7
    assert resolve_source("embedded") == "embedded" and resolve_limit(3) == 3
    monkeypatch.setenv("MBPP_EVAL_NUM_QUESTIONS", "seven")
    from lit_codeRL.errors import ConfigError

    with pytest.raises(ConfigError, match="MBPP_EVAL_NUM_QUESTIONS"):
        resolve_limit(None)
    monkeypatch.delenv("MBPP_DATASET_PATH")
    assert resolve_source(None) == "mbpp"


def test_env_overrides_drive_a_real_run(tmp_path, mbpp_dir):
    import os
    import subprocess
    import sys

    from tests.modules.test_grpo_module import REPO

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lit_codeRL.cli",
            "validate",
            "--config",
            "configs/eval_mbpp.yaml",
            "--model.init_args.model.name_or_path",
            "tiny-random",
            "--model.init_args.max_new_tokens",
            "8",
            *csv_logger(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "MBPP_DATASET_PATH": str(mbpp_dir), "MBPP_EVAL_NUM_QUESTIONS": "3"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    (path,) = list(tmp_path.rglob("mbpp_eval/mbpp_test.json"))
    result = json.loads(path.read_text())
    assert [str(p["task_id"]) for p in result["problems"]] == ["mbpp/11", "mbpp/12", "mbpp/13"]


def test_validate_shards_over_ddp_ranks_without_duplicates(tmp_path):
    single = tmp_path / "one"
    cli(
        "validate",
        "--config",
        "configs/eval_mbpp.yaml",
        *EVAL_TINY,
        "--model.init_args.limit",
        "5",
        *csv_logger(single),
    )
    double = tmp_path / "two"
    cli(
        "validate",
        "--config",
        "configs/eval_mbpp.yaml",
        *EVAL_TINY,
        "--model.init_args.limit",
        "5",
        "--trainer.accelerator",
        "cpu",
        "--trainer.strategy",
        "ddp",
        "--trainer.devices",
        "2",
        *csv_logger(double),
    )
    one, two = _result(single), _result(double)
    assert [p["task_id"] for p in two["problems"]] == [p["task_id"] for p in one["problems"]]
    assert two["metrics"]["mbpp_eval/num_problems"] == 5
    for a, b in zip(one["problems"], two["problems"], strict=True):
        assert [s["completion"] for s in a["samples"]] == [s["completion"] for s in b["samples"]]


def test_a_non_policy_checkpoint_is_a_clear_error(tmp_path):
    import torch

    from lit_codeRL.errors import ConfigError
    from lit_codeRL.policy.loading import ModelSettings, load_policy

    path = tmp_path / "dqn.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {"env": {}}}, path)
    with pytest.raises(ConfigError, match="not a lit-coderl language-policy checkpoint"):
        load_policy(ModelSettings(), str(path))
    with pytest.raises(ConfigError, match="does not exist"):
        load_policy(ModelSettings(), str(tmp_path / "missing.ckpt"))
