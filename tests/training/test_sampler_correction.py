"""The sampler/trainer mismatch correction of the shared training layer, in every policy-gradient
module: a batch whose sampling log-probs come from a deliberately perturbed sampler (a noised copy
of the policy), one training step, and the gradient compared with the importance-weighted gradient
written out by hand on a tiny model."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch

from lit_codeRL.algorithms.grpo import group_advantages
from lit_codeRL.algorithms.reinforce import rloo_advantages
from lit_codeRL.policy.loading import ModelSettings
from lit_codeRL.policy.logprobs import token_logprobs
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch

MAX_NEW = 6
CAP = 1.1  # low enough that some tokens of the perturbed sampler hit it
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]  # three groups of two that disagree: A != 0
SPIRAL_ADV = [1.0, -0.5, 0.8, -1.2, 0.3, -0.7]


def _batch(module: torch.nn.Module, kind: str) -> TrajectoryBatch:
    """Six rows, groups of two sharing a prompt, completions of 3..6 tokens (padding included)."""
    g = torch.Generator().manual_seed(0)
    rows, records = [], []
    for i in range(6):
        if i % 2 == 0:
            prompt = torch.randint(100, 2000, (4 + i // 2,), generator=g).tolist()
        action = torch.randint(100, 2000, (3 + i % 4,), generator=g).tolist()
        rows.append([Segment(prompt), Segment(action, True, [0.0] * len(action), 0)])
        if kind == "spiral":
            records.append({"completion_tokens": len(action), "advantage": SPIRAL_ADV[i]})
        else:
            verdict = "passed" if REWARDS[i] else "failed"
            records.append(
                {"verdict": verdict, "completion_tokens": len(action), "finished": True, "sandbox_s": 0.0}
            )
    extra: dict[str, Any] = {"valid": torch.ones(6, dtype=torch.bool)}
    if kind == "spiral":
        extra["advantages"] = torch.tensor(SPIRAL_ADV)
    return TrajectoryBatch.from_segments(
        rows,
        module.tokenizer.pad_token_id,
        torch.tensor(REWARDS),
        torch.arange(6) // 2,
        records,
        **extra,
    )


def _logps(model: torch.nn.Module, batch: TrajectoryBatch, start: int) -> torch.Tensor:
    return token_logprobs(model, batch.input_ids, batch.attention_mask, start)[0]


def noised(model: torch.nn.Module, scale: float) -> torch.nn.Module:
    """A copy of ``model`` with every weight moved by Gaussian noise: a sampler that disagrees."""
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.std().clamp(min=1e-3))
    return other


def _module(kind: str, **kw: Any):
    """The module under test, with gradients recorded at each optimizer step (before clipping:
    the override does not clip)."""
    common = {
        "model": ModelSettings(name_or_path="tiny-random"),
        "sampling": SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0),
        "micro_batch_size": 2,
        "save_hf_model": False,
        "tis_cap": CAP,
    }
    if kind == "grpo":
        from lit_codeRL.modules.grpo import GRPOModule as base

        kw = {"num_generations": 2, "prompts_per_step": 3, "skip_zero_advantage_groups": False, **kw}
    elif kind == "reinforce":
        from lit_codeRL.modules.reinforce import REINFORCEModule as base

        kw = {"num_generations": 2, "prompts_per_step": 3, **kw}
    else:
        from lit_codeRL.modules.spiral import SpiralModule as base

        kw = {"samples_per_step": 6, **kw}

    class Probe(base):
        grads: list[dict[str, torch.Tensor]]

        def on_before_optimizer_step(self, optimizer) -> None:
            self.grads.append(
                {n: p.grad.clone() for n, p in self.policy.named_parameters() if p.grad is not None}
            )

    module = Probe(**common, **kw)
    module.grads = []
    return module


def bf16(model: torch.nn.Module) -> torch.nn.Module:
    """The sampler of ``engine.dtype: bfloat16``: the policy with bf16 weights."""
    return copy.deepcopy(model).to(torch.bfloat16)


def train_one_batch(
    kind: str, sampler: Callable[[torch.nn.Module], torch.nn.Module] | None = None, **kw: Any
) -> dict[str, Any]:
    """One training step of ``kind`` on the hand-built batch, its sampling log-probs taken from
    ``sampler(policy)`` (``None``: the policy itself). Returns the module, the batch, the policy
    before the step, the trainer's and the sampler's log-probs and the logged metrics."""
    from lightning.pytorch import Trainer, seed_everything

    seed_everything(0)
    module = _module(kind, **kw)
    batch = _batch(module, kind)
    start = batch.first_trainable_position()
    initial = copy.deepcopy(module.policy)
    mask = batch.trainable_mask[:, start:]
    with torch.no_grad():
        train = _logps(initial, batch, start)
        sampled = train.clone() if sampler is None else _logps(sampler(initial), batch, start).float()
    batch.old_logprobs[:, start:] = sampled * mask  # what the engine would have recorded
    module.dataset = [batch]  # setup() keeps a dataset it already has: no sandbox, no rollouts
    trainer = Trainer(
        accelerator="cpu",
        max_steps=kw.get("ppo_epochs", 2 if kind == "spiral" else 1),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return {
        "module": module,
        "batch": batch,
        "start": start,
        "initial": initial,
        "train": train,
        "sampler": sampled,
        "mask": mask,
        "metrics": metrics,
    }


def expected_gradient(run: dict[str, Any], loss_of) -> dict[str, torch.Tensor]:
    """Gradient of ``loss_of(logps, mask)`` on the policy before the step, by autograd."""
    model = copy.deepcopy(run["initial"])
    loss = loss_of(_logps(model, run["batch"], run["start"]), run["mask"].float())
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def assert_gradients_equal(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    assert any(g.abs().sum() > 0 for g in want.values()), "the expected gradient is 0: nothing tested"
    for name, grad in want.items():
        torch.testing.assert_close(got[name], grad, atol=1e-6, rtol=1e-4, msg=name)


def tis_weights(run: dict[str, Any]) -> torch.Tensor:
    """``min(pi_train / pi_sampler, cap)`` on the action tokens, by hand."""
    return torch.exp(run["train"] - run["sampler"]).clamp(max=CAP) * run["mask"]


def logged_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    """How a loss statistic is logged: its mean over each micro-batch's action tokens (2 rows),
    then over micro-batches."""
    parts = [(x[i : i + 2] * mask[i : i + 2]).sum() / mask[i : i + 2].sum() for i in range(0, 6, 2)]
    return float(sum(parts) / len(parts))


def sequence_advantages(kind: str) -> torch.Tensor:
    rewards = torch.tensor(REWARDS)
    if kind == "grpo":
        return group_advantages(rewards, 2, "group")
    if kind == "reinforce":
        return rloo_advantages(rewards, 2)
    return torch.tensor(SPIRAL_ADV)


@pytest.mark.parametrize("kind", ["grpo", "reinforce", "spiral"])
def test_one_update_follows_the_trainers_gradient_under_a_perturbed_sampler(kind):
    """With one update per batch every module's gradient is ``-sum w * A * grad log pi / norm``
    with ``w = min(pi_train / pi_sampler, cap)`` from the sampler's recorded log-probs, and
    ``train/tis/logprob_diff`` reports the perturbation. Without the weight (the sampler's
    gradient, what REINFORCE and SPIRAL did before) the gradients differ."""
    kw = {"ppo_epochs": 1} if kind == "spiral" else {}
    run = train_one_batch(kind, lambda m: noised(m, 0.5), **kw)
    mask, w = run["mask"], tis_weights(run)
    diff = (run["train"] - run["sampler"]).abs()
    assert logged_mean(diff, mask) > 0.1, "the sampler is not perturbed enough to test anything"
    assert float(((w >= CAP) & (mask > 0)).sum()) > 0, "no weight reached the cap"
    m = run["metrics"]
    assert m["train/tis/logprob_diff"] == pytest.approx(logged_mean(diff, mask), rel=1e-4)
    assert m["train/tis/weight"] == pytest.approx(logged_mean(w, mask), rel=1e-4)
    adv = sequence_advantages(kind)[:, None]
    # dapo (GRPO, REINFORCE): / action tokens; SPIRAL's dr_grpo: / (rows x max_new_tokens)
    norm = float(mask.sum()) if kind != "spiral" else 6.0 * MAX_NEW
    want = expected_gradient(run, lambda lp, m_: -(w * adv * lp * m_).sum() / norm)
    assert len(run["module"].grads) == 1
    assert_gradients_equal(run["module"].grads[0], want)


def test_spiral_epochs_take_the_ratio_to_the_trainers_old_policy():
    """SPIRAL with two epochs: pi_old is the trainer's own (one no-grad pass before the first
    epoch), so the first epoch's ratio ``pi_theta / pi_old`` is 1 and nothing is clipped, even
    with a perturbed sampler; the sampler's error goes to the truncated importance weight
    ``w = min(pi_old / pi_sampler, cap)``. The gradient by hand: ``-w * r * A`` per token with
    ``r = exp(log pi_theta - log pi_old)``. With the sampler's log-probs as pi_old (before #48)
    the ratio would be ``pi_theta / pi_sampler`` and clip some tokens: a different gradient."""
    run = train_one_batch("spiral", lambda m: noised(m, 0.5), ppo_epochs=2)
    mask, adv, w = run["mask"], torch.tensor(SPIRAL_ADV)[:, None], tis_weights(run)
    off = torch.exp(run["train"] - run["sampler"])
    assert float((((off > 1.2) | (off < 0.8)) & (mask > 0)).sum()) > 0, "no token the old way would clip"

    def surrogate(lp: torch.Tensor, m_: torch.Tensor) -> torch.Tensor:
        r = torch.exp(lp - run["train"])
        return -(w * r * adv * m_).sum() / (6.0 * MAX_NEW)

    def to_the_sampler(lp: torch.Tensor, m_: torch.Tensor) -> torch.Tensor:
        r = torch.exp(lp - run["sampler"])
        clipped = ((adv > 0) & (r > 1.2)) | ((adv < 0) & (r < 0.8))
        return -((~clipped).float() * r * adv * m_).sum() / (6.0 * MAX_NEW)

    assert len(run["module"].grads) == 2
    want = expected_gradient(run, surrogate)
    assert_gradients_equal(run["module"].grads[0], want)
    old_way = expected_gradient(run, to_the_sampler)
    assert max(float((old_way[n] - want[n]).abs().max()) for n in want) > 1e-6
    assert run["metrics"]["train/clip_ratio"] == 0.0
    diff = (run["train"] - run["sampler"]).abs()
    assert run["metrics"]["train/tis/logprob_diff"] == pytest.approx(logged_mean(diff, mask), rel=1e-4)


@pytest.mark.parametrize("kind", ["reinforce", "spiral"])
def test_a_bf16_sampler_is_corrected_and_measured(kind):
    """The sampler ``engine.dtype: bfloat16`` gives (the policy in bf16) on REINFORCE and
    one-epoch SPIRAL: ``train/tis/logprob_diff`` measures its rounding, and the gradient is the
    importance-weighted one, measurably not the sampler's own (unweighted) gradient."""
    kw = {"ppo_epochs": 1} if kind == "spiral" else {}
    run = train_one_batch(kind, bf16, **kw)
    mask, w = run["mask"], tis_weights(run)
    diff = (run["train"] - run["sampler"]).abs()
    assert run["metrics"]["train/tis/logprob_diff"] == pytest.approx(logged_mean(diff, mask), rel=1e-4)
    assert run["metrics"]["train/tis/logprob_diff"] > 1e-4
    adv = sequence_advantages(kind)[:, None]
    norm = float(mask.sum()) if kind != "spiral" else 6.0 * MAX_NEW
    corrected = expected_gradient(run, lambda lp, m_: -(w * adv * lp * m_).sum() / norm)
    plain = expected_gradient(run, lambda lp, m_: -(adv * lp * m_).sum() / norm)
    got = run["module"].grads[0]
    assert_gradients_equal(got, corrected)
    gap = max(float((plain[n] - corrected[n]).abs().max()) for n in corrected)
    assert gap > 10 * max(float((got[n] - corrected[n]).abs().max()) for n in corrected), (
        "bf16 changed nothing"
    )
