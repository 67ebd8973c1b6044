"""REINFORCE and BC through the real entry point on a tiny model; BC warm-starts RL."""

from __future__ import annotations

import json

import pytest
import torch

from tests.modules.test_grpo_module import cli, read_metrics

TINY_RL = [
    "--model.init_args.model.name_or_path",
    "tiny-random",
    "--model.init_args.sampling.max_new_tokens",
    "12",
    "--model.init_args.num_generations",
    "2",
    "--model.init_args.prompts_per_step",
    "2",
    "--model.init_args.sandbox.workers",
    "2",
    "--trainer.callbacks.init_args.limit",
    "3",
    "--trainer.callbacks.init_args.max_new_tokens",
    "12",
    "--trainer.callbacks.init_args.eval_interval_steps",
    "0",
]


def csv_logger(run) -> list[str]:
    return [
        "--trainer.default_root_dir",
        str(run),
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir",
        str(run),
        "--trainer.logger.name",
        "",
    ]


@pytest.fixture(scope="module")
def repair_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("reinforce_repair")
    cli(
        "fit",
        "--config",
        "configs/reinforce_repair.yaml",
        *TINY_RL,
        "--trainer.max_steps",
        "2",
        *csv_logger(run),
    )
    return run


def test_reinforce_multi_turn_repair_through_the_cli(repair_run):
    rows = read_metrics(repair_run)
    train = [r for r in rows if r.get("train/reward")]
    assert [int(r["step"]) for r in train] == [0, 1]
    for key in (
        "train/loss",
        "train/success_after_turn_1",
        "train/success_after_turn_2",
        "train/num_turns",
        "sandbox/errors",
    ):
        assert all(r.get(key) not in (None, "") for r in train), key
    # A random model never solves: every episode used both turns.
    assert all(float(r["train/num_turns"]) == 2.0 for r in train)
    evals = [r for r in rows if r.get("mbpp_eval/pass_rate")]
    assert evals and all(r.get("mbpp_eval/pass_rate_turn_2") not in (None, "") for r in evals)
    version = next(repair_run.glob("version_*"))
    dumps = [json.loads(line) for line in (version / "rollouts.jsonl").read_text().splitlines()]
    assert len(dumps) == 2 * 2 * 2
    d = dumps[0]
    assert d["num_turns"] == 2 and len(d["turns"]) == 2 and d["turns"][0]["observation"]
    assert len(d["trainable_spans"]) == 2 and d["trainable_spans"][0][0] < d["trainable_spans"][1][0]
    assert (version / "hf_model" / "config.json").is_file()


def test_reinforce_step_follows_the_advantage_weighted_gradient():
    """A REINFORCE step with non-zero advantages (the CLI runs above use a random model that never
    earns reward, so their gradient is exactly 0): rewards [1, 0 | 0, 1 | 1, 0] give RLOO
    advantages [1, -1 | -1, 1 | 1, -1], and the gradient is ``-sum A * grad log pi / tokens``
    on the policy before the step (the sampler is the trainer here: every weight is 1). Then
    AdamW moves the parameters."""
    from tests.training.test_sampler_correction import (
        assert_gradients_equal,
        expected_gradient,
        train_one_batch,
    )

    run = train_one_batch("reinforce")
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, -1.0])[:, None]
    tokens = float(run["mask"].sum())
    want = expected_gradient(run, lambda lp, m: -(adv * lp * m).sum() / tokens)
    assert_gradients_equal(run["module"].grads[0], want)
    assert run["metrics"]["train/tis/logprob_diff"] < 1e-6  # float rounding of the shared-prompt forward
    assert run["metrics"]["train/advantage_abs"] == 1.0
    after = dict(run["module"].policy.named_parameters())
    moved = [n for n, p in run["initial"].named_parameters() if not torch.equal(p, after[n])]
    assert len(moved) == len(after), f"only {len(moved)} of {len(after)} tensors moved"


def test_grpo_trains_multi_turn_repair_from_its_shipped_config(tmp_path):
    run = tmp_path / "grpo_repair"
    # a random model earns no reward: with nothing to learn GRPO would skip the forward altogether
    # (skip_zero_advantage_groups); run it, so that the multi-turn loss path is what is tested
    skip = ("--model.init_args.skip_zero_advantage_groups", "false")
    cli(
        "fit",
        "--config",
        "configs/grpo_repair.yaml",
        *TINY_RL,
        *skip,
        "--trainer.max_steps",
        "1",
        *csv_logger(run),
    )
    train = [r for r in read_metrics(run) if r.get("train/reward")]
    assert len(train) == 1 and float(train[0]["train/num_turns"]) == 2.0
    assert train[0].get("train/clip_ratio") not in (None, "")


def test_bc_learns_demonstrations_from_a_multi_turn_dump(repair_run, tmp_path):
    """BC on the token-level dump of the repair run: trains exactly the policy's spans."""
    from lit_codeRL.policy.loading import load_tokenizer
    from lit_codeRL.rollout.demonstrations import DemonstrationSettings, load_demonstrations

    dump = next(repair_run.glob("version_*")) / "rollouts.jsonl"
    rows = load_demonstrations(DemonstrationSettings(source=str(dump)), load_tokenizer("tiny-random"))
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert len(rows) == len(records)
    for segs, rec in zip(rows, records, strict=True):
        assert [t for s in segs for t in s.ids] == rec["input_ids"]
        trained = [s.ids for s in segs if s.trainable]
        assert trained == [rec["input_ids"][a:b] for a, b in rec["trainable_spans"]]
    run = tmp_path / "bc"
    cli(
        "fit",
        "--model",
        "BCModule",
        "--model.init_args.model.name_or_path",
        "tiny-random",
        "--model.init_args.demonstrations.source",
        str(dump),
        "--model.init_args.batch_size",
        "4",
        "--model.init_args.optimizer.learning_rate",
        "1e-2",
        "--model.init_args.optimizer.warmup_steps",
        "0",
        "--model.init_args.optimizer.lr_schedule",
        "constant",
        "--trainer.max_steps",
        "12",
        "--trainer.accelerator",
        "cpu",
        "--trainer.log_every_n_steps",
        "1",
        *csv_logger(run),
    )
    losses = [float(r["train/loss"]) for r in read_metrics(run) if r.get("train/loss")]
    assert len(losses) == 12 and sum(losses[-3:]) / 3 < 0.8 * losses[0], losses


def test_bc_on_reference_solutions_then_warm_start_grpo(tmp_path):
    bc_run = tmp_path / "bc"
    cli(
        "fit",
        "--model",
        "BCModule",
        "--model.init_args.model.name_or_path",
        "tiny-random",
        "--model.init_args.demonstrations.source",
        "embedded",
        "--model.init_args.batch_size",
        "4",
        "--model.init_args.optimizer.learning_rate",
        "3e-3",
        "--trainer.max_steps",
        "6",
        "--trainer.accelerator",
        "cpu",
        "--trainer.log_every_n_steps",
        "1",
        *csv_logger(bc_run),
    )
    hf = next(bc_run.glob("version_*")) / "hf_model"
    assert (hf / "config.json").is_file()
    rl_run = tmp_path / "rl"
    cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        *TINY_RL,
        "--model.init_args.model.name_or_path",
        str(hf),
        "--trainer.max_steps",
        "1",
        *csv_logger(rl_run),
    )
    assert [r for r in read_metrics(rl_run) if r.get("train/reward")]
    # The RL run started from the BC weights, not from the tiny-random init.
    from transformers import AutoModelForCausalLM

    from lit_codeRL.policy.loading import load_model

    bc = AutoModelForCausalLM.from_pretrained(hf)
    init, _ = load_model(name_or_path="tiny-random")
    bc_w, init_w = bc.get_input_embeddings().weight, init.get_input_embeddings().weight
    assert not torch.allclose(bc_w, init_w)
