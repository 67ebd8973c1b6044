"""GRPOModule end to end: CLI fit, logs, learning, resume, LoRA reference."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from tests.cli_process import run_cli
from tests.conftest import quiet_trainer

REPO = Path(__file__).resolve().parents[2]
SMALL_RUN = [
    "--model.init_args.prompts_per_step",
    "2",
    "--model.init_args.sandbox.workers",
    "2",
    "--trainer.callbacks.init_args.limit",
    "4",
    "--trainer.callbacks.init_args.max_new_tokens",
    "24",
    "--trainer.callbacks.init_args.eval_interval_steps",
    "0",
]


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    out = run_cli(*args, timeout=timeout)
    assert out.returncode == 0, out.stderr[-4000:]
    return out


def read_metrics(run: Path) -> list[dict[str, str]]:
    files = sorted(run.rglob("metrics.csv"))
    assert files, f"no metrics.csv under {run}"
    with files[-1].open() as f:
        return list(csv.DictReader(f))


def undocumented_metrics(names: list[str]) -> list[str]:
    """``names`` that docs/metrics.md does not list (the check of tests/test_metrics_doc.py)."""
    spec = importlib.util.spec_from_file_location("metrics_doc", REPO / "tests" / "test_metrics_doc.py")
    metrics_doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(metrics_doc)
    return metrics_doc.undocumented(names)


def test_fit_two_steps_through_the_cli(tmp_path):
    """Two GRPO steps through the CLI on the real model, on two easy problems it solves about
    two times in three: groups disagree, so advantages are non-zero and the update must move the
    weights. (A random model earns the same reward on every sample and would move nothing.)"""
    from safetensors.torch import load_file

    from lit_codeRL.policy.loading import load_model

    run = tmp_path / "run"
    cli(
        "fit",
        "--config",
        "configs/quickstart.yaml",
        *SMALL_RUN,
        "--model.init_args.model.name_or_path",
        "smollm2-135m-instruct",
        "--model.init_args.problems.task_ids",
        "[coderl/add_numbers,coderl/sum_list]",
        "--model.init_args.sampling.max_new_tokens",
        "96",
        "--model.init_args.num_generations",
        "4",
        "--model.init_args.optimizer.learning_rate",
        "1e-5",
        "--trainer.max_steps",
        "2",
        "--trainer.default_root_dir",
        str(run),
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir",
        str(run),
        "--trainer.logger.name",
        "",
        timeout=1200,
    )
    rows = read_metrics(run)
    train = [r for r in rows if r.get("train/reward")]
    assert [int(r["step"]) for r in train] == [0, 1]

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in train if r.get(key) not in (None, "")]

    assert all(0.0 <= v <= 1.0 for v in values("train/reward") + values("train/pass_rate"))
    assert min(values("train/frac_zero_std_groups")) < 1.0, "every group had equal rewards"
    assert max(values("train/reward_std")) > 0
    # One update per rollout: the ratio is exactly 1, nothing is clipped; beta=0: no KL.
    assert values("train/ratio") == [1.0, 1.0] and values("train/clip_ratio") == [0.0, 0.0]
    assert values("train/kl") == [0.0, 0.0]
    assert all(math.isfinite(v) for v in values("train/loss"))
    assert 0 < values("train/entropy")[0] < math.log(49152)  # entropy_interval=10 logs step 0
    assert all(0 < v <= 96 for v in values("train/completion_length"))
    assert values("train/lr") == pytest.approx([1e-5, 1e-5])  # logged as float32
    assert not undocumented_metrics([k for k in rows[0] if k not in ("epoch", "step")])
    evals = [int(r["step"]) for r in rows if r.get("mbpp_eval/pass_rate")]
    assert evals == [0, 2]  # before training and after the last step
    version = next(run.glob("version_*"))
    dumps = [json.loads(line) for line in (version / "rollouts.jsonl").read_text().splitlines()]
    assert len(dumps) == 2 * 2 * 4  # steps x prompts x generations
    assert {"prompt", "completion", "reward", "verdict"} <= set(dumps[0])
    assert {d["problem_id"] for d in dumps} == {"coderl/add_numbers", "coderl/sum_list"}
    assert sorted((version / "mbpp_eval").glob("step_*.json"))
    # The exported policy differs from the one training started from.
    trained = load_file(version / "hf_model" / "model.safetensors")
    start = load_model(name_or_path="smollm2-135m-instruct")[0].state_dict()
    moved = [k for k, v in trained.items() if k in start and not torch.equal(v, start[k])]
    assert len(moved) > len(trained) // 2, f"only {len(moved)} of {len(trained)} tensors changed"


LEARNING_STEPS = 12  # ~15 s each on 2 free cores (the batch of scripts/grpo_learning_curve.py)
# Seeded curves of 16 steps on the 2-core EPYC (2026-12-02), first 4 steps -> steps 9-12 -> 13-16:
# bf16 sampler 0.45 -> 0.77 -> 0.78; the AVX2 emulation (fp32) 0.60 -> 0.95 -> 1.0. The rise is
# there by step 12 in both, so the last four steps added a minute of CI and no evidence.


@pytest.mark.slow
def test_grpo_raises_the_training_reward_of_the_real_model(tmp_path):
    """What the package is for: a few GRPO steps make the embedded model solve its training
    problems more often. Two problems it solves about one time in three at the start (so groups
    disagree and there is signal), every step samples both, seeded: the curve is reproducible."""
    from statistics import mean

    from lightning.pytorch import Callback, seed_everything

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings
    from lit_codeRL.sandbox import SandboxConfig

    rewards: list[float] = []

    class RecordReward(Callback):
        def on_train_batch_end(self, trainer, pl_module, *args) -> None:
            rewards.append(float(trainer.callback_metrics["train/reward"]))

    seed_everything(0)
    module = GRPOModule(
        model=ModelSettings(name_or_path="smollm2-135m-instruct"),
        problems=ProblemSettings(task_ids=["coderl/square", "coderl/reverse_string"]),
        sampling=SamplingParams(max_new_tokens=128),
        sandbox=SandboxConfig(workers=2),
        num_generations=4,
        prompts_per_step=2,
        optimizer={"learning_rate": 2e-5},
        save_hf_model=False,
        seed=0,
    )
    quiet_trainer(tmp_path, LEARNING_STEPS, callbacks=[RecordReward()]).fit(module)
    assert len(rewards) == LEARNING_STEPS
    first, last = mean(rewards[:4]), mean(rewards[-4:])
    # A step's reward is a mean over 8 samples (std ~0.15): 4-step windows make 0.15 a real rise.
    assert last >= first + 0.15, (
        f"reward did not rise: first 4 steps {first:.3f}, last 4 {last:.3f}: {rewards}"
    )


@pytest.mark.slow
def test_resumed_run_matches_uninterrupted(tmp_path):
    """2 steps + checkpoint + 1 resumed step == 3 uninterrupted steps, parameter for parameter.

    Uses the real model: a random one earns the same reward on every completion, so its
    advantages (and updates) are all zero and the comparison would prove nothing.
    """
    from lightning.pytorch import Trainer, seed_everything

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings
    from lit_codeRL.sandbox import SandboxConfig

    def module() -> GRPOModule:
        return GRPOModule(
            model=ModelSettings(name_or_path="smollm2-135m-instruct"),
            problems=ProblemSettings(source="embedded", split="train", limit=6),
            sampling=SamplingParams(max_new_tokens=32),
            sandbox=SandboxConfig(workers=2),
            num_generations=2,
            prompts_per_step=2,
            optimizer={"learning_rate": 1e-5},
            save_hf_model=False,
        )

    def trainer(steps: int, root: Path, **kw) -> Trainer:
        return quiet_trainer(root, steps, **{"enable_checkpointing": True, **kw})

    seed_everything(0)
    full = module()
    trainer(3, tmp_path / "a", enable_checkpointing=False).fit(full)

    seed_everything(0)
    first = module()
    t = trainer(2, tmp_path / "b", enable_checkpointing=False)  # only the explicit save below
    t.fit(first)
    ckpt = tmp_path / "half.ckpt"
    t.save_checkpoint(ckpt)
    seed_everything(123)  # the resumed run must not depend on the global seed
    resumed = module()
    trainer(3, tmp_path / "c", enable_checkpointing=False).fit(resumed, ckpt_path=ckpt)
    for a, b in zip(full.policy.parameters(), resumed.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    moved = any(
        not torch.equal(a, b)
        for a, b in zip(full.policy.parameters(), module().policy.parameters(), strict=True)
    )
    assert moved, "training did not change the policy"


def test_lora_reference_kl_is_zero_at_step_zero():
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import LoraSettings, ModelSettings
    from lit_codeRL.policy.logprobs import token_logprobs
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.sandbox import SandboxConfig

    m = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random", lora=LoraSettings(r=4)),
        beta=0.1,
        sampling=SamplingParams(max_new_tokens=12),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=2,
    )
    assert m._reference == []  # no frozen copy: the base model with adapters off is the reference
    m.setup("fit")
    try:
        batch = m.dataset.collect()
    finally:
        m.teardown("fit")
    start = batch.first_trainable_position()
    ref = m.reference_logprobs(batch, start)
    pol, _ = token_logprobs(m.policy, batch.input_ids, batch.attention_mask, start)
    mask = batch.trainable_mask[:, start:].bool()
    from lit_codeRL.algorithms.kl import k3_kl

    assert k3_kl(pol.detach(), ref)[mask].abs().max() < 1e-6
    # ...and it is a real comparison: perturbing the adapters makes the KL positive.
    with torch.no_grad():
        for name, p in m.policy.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    pol2, _ = token_logprobs(m.policy, batch.input_ids, batch.attention_mask, start)
    assert k3_kl(pol2.detach(), ref)[mask].mean() > 1e-4


@pytest.mark.slow
def test_ddp_eval_count_equals_single_process(tmp_path):
    """MBPPEvalCallback shards problems over 2 DDP ranks and gathers: same results as 1 process.
    Five problems: the ranks' shards differ in length (3 and 2), and neither waits for the other."""
    common = [
        "--model.init_args.sampling.max_new_tokens",
        "8",
        "--model.init_args.num_generations",
        "2",
        "--model.init_args.prompts_per_step",
        "1",
        "--model.init_args.sandbox.workers",
        "1",
        "--trainer.max_steps",
        "1",
        "--trainer.callbacks.init_args.split",
        "eval",
        "--trainer.callbacks.init_args.limit",
        "5",
        "--trainer.callbacks.init_args.n_samples",
        "1",
        "--trainer.callbacks.init_args.temperature",
        "0.0",
        "--trainer.callbacks.init_args.batch_size",
        "1",
        "--trainer.callbacks.init_args.max_new_tokens",
        "96",
        "--trainer.callbacks.init_args.eval_at_end",
        "false",
        "--trainer.callbacks.init_args.eval_interval_steps",
        "0",
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.name",
        "",
    ]
    results = {}
    for name, extra in {"single": [], "ddp": ["--trainer.strategy", "ddp", "--trainer.devices", "2"]}.items():
        run = tmp_path / name
        cli(
            "fit",
            "--config",
            "configs/quickstart.yaml",
            *common,
            *extra,
            "--trainer.default_root_dir",
            str(run),
            "--trainer.logger.save_dir",
            str(run),
            timeout=900,
        )
        report = json.loads(next(run.rglob("mbpp_eval/step_000000.json")).read_text())
        results[name] = {p["task_id"]: [s["verdict"] for s in p["samples"]] for p in report["problems"]}
        results[name + "_count"] = report["metrics"]["mbpp_eval/problems_passed"]
    assert len(results["ddp"]) == len(results["single"]) == 5
    assert results["ddp_count"] == results["single_count"]
    assert results["ddp"] == results["single"]
    assert results["single_count"] > 0, "the real model should solve some embedded eval problems"


def test_policy_trains_in_train_mode(tmp_path):
    """from_pretrained returns eval mode; dropout and gradient checkpointing need .training."""
    from lightning.pytorch import Callback, Trainer

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.sandbox import SandboxConfig

    modes: list[bool] = []

    class RecordMode(Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            modes.append(pl_module.policy.training)

    module = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        sampling=SamplingParams(max_new_tokens=8),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=1,
        save_hf_model=False,
    )
    module.policy.eval()  # the state from_pretrained (GGUF, hub) returns it in
    Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[RecordMode()],
    ).fit(module)
    assert modes == [True, True]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_skipping_zero_advantage_groups_leaves_the_gradient_unchanged(tmp_path, monkeypatch, loss_type):
    """Same rollout, same rewards (one group of three with equal returns): the gradient with the
    group skipped equals the gradient with every row run, for every loss normaliser."""
    from lightning import seed_everything

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings
    from lit_codeRL.sandbox import SandboxConfig

    rewards = torch.tensor([1.0, 0.0, 0.3, 0.3, 0.0, 0.7])  # group 2 carries no signal
    next_batch = GRPOModule.next_batch

    def fixed_rewards(self, it):
        batch = next_batch(self, it)
        batch.rewards = rewards.clone()
        return batch

    monkeypatch.setattr(GRPOModule, "next_batch", fixed_rewards)

    class Probe(GRPOModule):
        def on_before_optimizer_step(self, optimizer):
            self.grads = {n: p.grad.clone() for n, p in self.policy.named_parameters() if p.grad is not None}

    def run(skip: bool) -> tuple[dict[str, torch.Tensor], float]:
        seed_everything(0)
        module = Probe(
            model=ModelSettings(name_or_path="tiny-random"),
            problems=ProblemSettings(source="embedded", split="train", limit=3),
            sampling=SamplingParams(max_new_tokens=8),
            sandbox=SandboxConfig(workers=1),
            num_generations=2,
            prompts_per_step=3,
            loss_type=loss_type,
            optimizer={"max_grad_norm": 0.0},
            skip_zero_advantage_groups=skip,
            save_hf_model=False,
            seed=0,
        )
        trainer = quiet_trainer(tmp_path / str(skip), 1)
        trainer.fit(module)
        return module.grads, float(trainer.callback_metrics["train/trained_rows_frac"])

    skipped, frac = run(True)
    full, frac_full = run(False)
    assert frac == pytest.approx(4 / 6) and frac_full == 1.0
    assert skipped.keys() == full.keys() and any(g.abs().sum() > 0 for g in full.values())
    for name, grad in full.items():
        torch.testing.assert_close(skipped[name], grad, atol=1e-7, rtol=1e-5, msg=name)


def test_a_step_without_signal_skips_the_forward_and_updates_as_the_full_step(tmp_path, monkeypatch):
    """Step 1 has signal, step 2 none (equal rewards in every group): with the skip, step 2 runs
    no forward (``trained_rows_frac`` 0) and still steps AdamW on zero gradients, so momentum
    from step 1 and weight decay move the parameters exactly as the run without the skip does."""
    from lightning import Trainer, seed_everything

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings
    from lit_codeRL.sandbox import SandboxConfig

    per_step = [torch.tensor([1.0, 0.0, 0.3, 0.9]), torch.tensor([0.5, 0.5, 0.0, 0.0])]
    next_batch = GRPOModule.next_batch

    def fixed_rewards(self, it):
        batch = next_batch(self, it)
        batch.rewards = per_step[self.global_step].clone()
        return batch

    monkeypatch.setattr(GRPOModule, "next_batch", fixed_rewards)
    forwards = []

    def run(skip: bool) -> tuple[dict[str, torch.Tensor], list[float]]:
        seed_everything(0)
        module = GRPOModule(
            model=ModelSettings(name_or_path="tiny-random"),
            problems=ProblemSettings(source="embedded", split="train", limit=2),
            sampling=SamplingParams(max_new_tokens=8),
            sandbox=SandboxConfig(workers=1),
            num_generations=2,
            prompts_per_step=2,
            optimizer={"learning_rate": 1e-3, "weight_decay": 0.1, "max_grad_norm": 0.0},
            skip_zero_advantage_groups=skip,
            save_hf_model=False,
            seed=0,
        )
        fracs: list[float] = []
        count = forwards.__len__()
        handle = module.policy.register_forward_hook(lambda *_: forwards.append(1))

        class Frac(__import__("lightning").Callback):
            def on_train_batch_end(self, trainer, *_):
                fracs.append(float(trainer.callback_metrics["train/trained_rows_frac"]))

        Trainer(
            accelerator="cpu",
            max_steps=2,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path / str(skip),
            callbacks=[Frac()],
        ).fit(module)
        handle.remove()
        fracs.append(len(forwards) - count)
        return {n: p.detach().clone() for n, p in module.policy.named_parameters()}, fracs

    skipped, skip_info = run(True)
    full, full_info = run(False)
    assert skip_info[:2] == [1.0, 0.0] and full_info[:2] == [1.0, 1.0]
    assert skip_info[2] < full_info[2]  # fewer training forwards (the sampler's are the same)
    moved = [n for n in full if not torch.equal(full[n], skipped[n])]
    assert not moved, moved[:3]


def test_with_several_iterations_the_ratio_is_to_the_trainers_old_policy(tmp_path, monkeypatch):
    """A sampler whose log-probs are 0.5 below the trainer's (a bf16 or vLLM sampler, in
    exaggeration), ``num_iterations: 2``: pi_old is the trainer's own, so the ratio is 1 (lr 1e-9:
    the policy barely moves), nothing is clipped, and the truncated importance weight exp(0.5)
    carries the sampler's error. With the sampler's log-probs as pi_old every token would sit at
    ratio exp(0.5) > 1 + epsilon and be clipped."""
    from lightning import seed_everything

    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings
    from lit_codeRL.sandbox import SandboxConfig

    next_batch = GRPOModule.next_batch

    def sampler_error(self, it):
        batch = next_batch(self, it)
        batch.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
        batch.old_logprobs = batch.old_logprobs - 0.5 * batch.trainable_mask
        return batch

    monkeypatch.setattr(GRPOModule, "next_batch", sampler_error)
    seed_everything(0)
    module = GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        problems=ProblemSettings(source="embedded", split="train", limit=2),
        sampling=SamplingParams(max_new_tokens=8),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=2,
        num_iterations=2,
        optimizer={"learning_rate": 1e-9, "max_grad_norm": 0.0},
        save_hf_model=False,
        seed=0,
    )
    trainer = quiet_trainer(tmp_path, 2)
    trainer.fit(module)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert metrics["train/ratio"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["train/clip_ratio"] == 0.0
    assert metrics["train/tis/weight"] == pytest.approx(math.exp(0.5), rel=1e-3)
