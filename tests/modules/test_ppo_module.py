"""PPOModule on a tiny model: both critics learn and the policy moves; value pre-training freezes
the policy exactly and then hands over; micro-batching leaves the gradient unchanged; in a
multi-turn row only action tokens get gradient and the terminal reward reaches the last one;
GRPO advantages need no critic; a resumed run continues exactly, critic and phase included."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning import Callback, Trainer, seed_everything

from lit_codeRL.modules.ppo import PPOModule
from lit_codeRL.policy.loading import ModelSettings
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.prompts import ProblemSettings
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig
from tests.modules.test_grpo_module import undocumented_metrics as undocumented

REWARDS = [1.0, 0.0, 0.25, 0.75]


@pytest.fixture
def fixed_rewards(monkeypatch):
    """A random model earns nothing: give the rollouts rewards with signal."""
    next_batch = PPOModule.next_batch

    def patched(self, it):
        batch = next_batch(self, it)
        batch.rewards = torch.tensor(REWARDS[: batch.batch_size], dtype=torch.float32)
        return batch

    monkeypatch.setattr(PPOModule, "next_batch", patched)


def make(cls: type[PPOModule] = PPOModule, **kw) -> PPOModule:
    args = dict(
        model=ModelSettings(name_or_path="tiny-random"),
        problems=ProblemSettings(source="embedded", split="train", limit=2),
        sampling=SamplingParams(max_new_tokens=6),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=2,
        optimizer={"learning_rate": 1e-3, "max_grad_norm": 0.0},
        critic={"kind": "model", "optimizer": {"learning_rate": 1e-3, "max_grad_norm": 0.0}},
        save_hf_model=False,
        seed=0,
    )
    args.update(kw)
    return cls(**args)


class Record(Callback):
    def __init__(self) -> None:
        self.metrics: list[dict[str, float]] = []
        self.policy: list[dict[str, torch.Tensor]] = []
        self.critic: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, *_):
        self.metrics.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.policy.append({n: p.detach().clone() for n, p in pl_module.policy.named_parameters()})
        net = pl_module.critic if pl_module.critic is not None else pl_module.value_head
        self.critic.append({n: p.detach().clone() for n, p in net.named_parameters()} if net else {})


def fit(module: PPOModule, root: Path, steps: int, **kw) -> tuple[Trainer, Record]:
    rec = Record()
    ckpt_path = kw.pop("ckpt_path", None)
    trainer = Trainer(
        **{
            "accelerator": "cpu",
            "max_steps": steps,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "default_root_dir": root,
            **kw,
            "callbacks": [rec, *kw.get("callbacks", [])],
        }
    )
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, rec


def changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return [n for n in a if not torch.equal(a[n], b[n])]


@pytest.mark.parametrize("kind", ["model", "head"])
def test_gae_step_moves_policy_and_critic(tmp_path, fixed_rewards, kind):
    seed_everything(0)
    module = make(critic={"kind": kind, "optimizer": {"learning_rate": 1e-3, "max_grad_norm": 0.0}})
    before = {n: p.detach().clone() for n, p in module.policy.named_parameters()}
    trainer, rec = fit(module, tmp_path, 2)
    assert trainer.global_step == 2
    assert changed(before, rec.policy[0])
    assert changed(rec.critic[0], rec.critic[1])  # the critic learned between the two steps
    for key in ("value_loss", "explained_variance_before", "policy_loss", "returns_mean", "clip_ratio"):
        assert f"train/{key}" in rec.metrics[-1], key
    # one update per rollout: pi_old is the policy being trained, KL(pi_old || pi_theta) is 0
    assert "train/approx_kl" not in rec.metrics[-1] and "train/explained_variance" not in rec.metrics[-1]
    assert rec.metrics[0]["train/value_pretraining"] == 0.0
    assert not undocumented(list(rec.metrics[-1]))  # every name is in docs/metrics.md
    # the head starts at 0: the first step's values are all 0, so the returns are the rewards
    assert rec.metrics[0]["train/values_mean"] == 0.0


def test_value_pretraining_freezes_the_policy_then_hands_over(tmp_path, fixed_rewards):
    seed_everything(0)
    module = make(critic={"kind": "model", "pretrain_steps": 2, "optimizer": {"learning_rate": 1e-3}})
    start = {n: p.detach().clone() for n, p in module.policy.named_parameters()}
    critic_start = {n: p.detach().clone() for n, p in module.critic.named_parameters()}
    _, rec = fit(module, tmp_path, 3)
    assert [m["train/value_pretraining"] for m in rec.metrics] == [1.0, 1.0, 0.0]
    assert not changed(start, rec.policy[0]) and not changed(start, rec.policy[1])  # exactly frozen
    assert changed(critic_start, rec.critic[0])
    assert changed(start, rec.policy[2])
    assert module.ppo_state.pretrain_done == 2 and not module.ppo_state.pretraining


def test_pretraining_ends_early_at_the_explained_variance_threshold(tmp_path, fixed_rewards, monkeypatch):
    """The phase ends at the first step whose explained variance reaches ``pretrain_min_ev``,
    before ``pretrain_steps``, and not a step earlier; a threshold above every step's keeps it to
    ``pretrain_steps``. The explained variances are scripted (0.125, 0.25, 0.75: exact in binary, so
    reaching means equal or above): whether a
    three-step critic's EV happens to rise depends on the CPU path's rounding (on AVX2 fp32 it
    fell), and the threshold is what is tested here; the reduction over ranks is
    ``test_ppo_distributed.py``'s."""
    import lit_codeRL.modules.ppo as ppo_module

    def scripted(values: list[float]):
        it = iter(values)
        monkeypatch.setattr(
            ppo_module, "explained_variance_of_moments", lambda moments: torch.tensor(next(it))
        )

    for threshold, steps, ended in ((2.0, 3, None), (0.5, 3, 3), (0.25, 3, 2)):
        scripted([0.125, 0.25, 0.75, 0.75])
        seed_everything(0)
        critic = {"kind": "head", "pretrain_steps": 10, "pretrain_min_ev": threshold}
        module = make(critic=critic)
        _, rec = fit(module, tmp_path / str(threshold), steps)
        phase = [m["train/value_pretraining"] for m in rec.metrics]
        assert [m["train/explained_variance_before"] for m in rec.metrics] == [0.125, 0.25, 0.75]
        if ended is None:
            assert phase == [1.0, 1.0, 1.0] and module.ppo_state.pretraining
        else:  # the step that reached the threshold is the last of the phase
            assert phase[:ended] == [1.0] * ended and module.ppo_state.pretrain_done == ended
            assert not module.ppo_state.pretraining


def test_policy_schedule_starts_when_value_pretraining_ends(tmp_path, fixed_rewards):
    """The frozen policy's warm-up waits: its first trained step runs at warm-up step 0."""
    lrs: list[float] = []

    class Probe(PPOModule):
        def on_before_optimizer_step(self, optimizer):
            lrs.append(optimizer.param_groups[0]["lr"])
            super().on_before_optimizer_step(optimizer)

    seed_everything(0)
    module = make(
        Probe,
        optimizer={"learning_rate": 1e-3, "warmup_steps": 4, "max_grad_norm": 0.0},
        critic={"kind": "model", "pretrain_steps": 2},
    )
    _, rec = fit(module, tmp_path, 4)
    assert [m["train/value_pretraining"] for m in rec.metrics] == [1.0, 1.0, 0.0, 0.0]
    assert lrs[2:] == pytest.approx([1e-3 / 4, 2e-3 / 4])  # policy steps 0 and 1 of its warm-up
    assert module.ppo_state.frozen_steps == 2


def test_minibatches_are_exactly_num_minibatches_of_whole_groups(tmp_path, fixed_rewards):
    """4 groups in 3 minibatches are 3 (torch.chunk gives 2); more minibatches than groups per
    rollout are refused; a rollout takes ppo_epochs x num_minibatches optimizer steps."""
    from lit_codeRL.errors import ConfigError

    with pytest.raises(ConfigError, match="num_minibatches 5 > groups"):
        make(prompts_per_step=4, num_minibatches=5)  # 8 episodes, but 4 groups
    seed_everything(0)
    module = make(prompts_per_step=4, num_generations=1, num_minibatches=3)
    _, rec = fit(module, tmp_path, 3)
    assert len(rec.metrics) == 1  # one rollout, 3 optimizer steps
    rows = torch.arange(8)
    batch = TrajectoryBatch(
        input_ids=rows[:, None].repeat(1, 3),
        attention_mask=torch.ones(8, 3, dtype=torch.long),
        trainable_mask=torch.ones(8, 3, dtype=torch.long),
        old_logprobs=torch.zeros(8, 3),
        rewards=torch.zeros(8),
        group_ids=rows // 2,
    )
    module.hparams.num_generations = 2
    parts = module.minibatches(batch)
    assert len(parts) == 3
    assert sorted(len(p.group_ids) for p in parts) == [2, 2, 4]
    for part in parts:  # whole groups
        assert all((part.group_ids == g).sum() == 2 for g in part.group_ids.unique())
    assert sorted(int(i) for p in parts for i in p.input_ids[:, 0]) == list(range(8))
    # an agent episode with extra rows (a rewritten history): groups of 2 episodes are 3, 2, 1 and
    # 2 rows; each part still holds whole groups, so every episode stays whole in one part
    batch.group_ids = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    batch.episode_ids = torch.tensor([0, 0, 1, 2, 3, 4, 6, 7])
    parts = module.minibatches(batch)
    assert len(parts) == 3
    seen = [set(p.group_ids.tolist()) for p in parts]
    assert sorted(len(p.group_ids) for p in parts) == sorted(
        sum(int((batch.group_ids == g).sum()) for g in groups) for groups in seen
    )
    assert sorted(int(i) for p in parts for i in p.input_ids[:, 0]) == list(range(8))


def test_the_clipped_ratio_is_to_the_trainers_old_policy_not_the_samplers(tmp_path, monkeypatch):
    """A sampler whose log-probs are 0.5 below the trainer's (a bf16 or vLLM sampler, in
    exaggeration): with 2 updates per rollout the first update's ratio is exactly 1, nothing is
    clipped, and the truncated importance weight exp(0.5) (cap 2) carries the correction."""
    next_batch = PPOModule.next_batch

    def patched(self, it):
        batch = next_batch(self, it)
        batch.rewards = torch.tensor(REWARDS[: batch.batch_size], dtype=torch.float32)
        batch.old_logprobs = batch.old_logprobs - 0.5 * batch.trainable_mask  # the sampler's error
        return batch

    monkeypatch.setattr(PPOModule, "next_batch", patched)
    seed_everything(0)
    module = make(num_minibatches=2, optimizer={"learning_rate": 1e-9, "max_grad_norm": 0.0})
    _, rec = fit(module, tmp_path, 2)
    metrics = rec.metrics[0]
    assert metrics["train/ratio"] == pytest.approx(1.0, abs=1e-4)  # lr 1e-9: the policy barely moves
    assert metrics["train/clip_ratio"] == 0.0
    assert metrics["train/tis/weight"] == pytest.approx(math.exp(0.5), rel=1e-3)
    assert metrics["train/approx_kl"] == pytest.approx(0.0, abs=1e-6)


def test_head_critic_value_loss_reaches_the_shared_backbone(tmp_path, fixed_rewards):
    grads = {}

    class Probe(PPOModule):
        def on_before_optimizer_step(self, optimizer):
            grads[self.critic_settings.vf_coef] = {
                n: p.grad.clone() for n, p in self.policy.named_parameters() if p.grad is not None
            }

    for vf in (0.0, 5.0):
        seed_everything(0)
        fit(make(Probe, critic={"kind": "head", "vf_coef": vf}), tmp_path / str(vf), 2)
    # step 2 (the head is no longer 0): the value loss moves the backbone's gradient
    assert any(not torch.equal(grads[0.0][n], grads[5.0][n]) for n in grads[0.0])


def test_micro_batches_give_the_whole_batch_gradient(tmp_path, fixed_rewards):
    grads: list[dict[str, torch.Tensor]] = []

    class Probe(PPOModule):
        def on_before_optimizer_step(self, optimizer):
            params = [*self.policy.named_parameters(), *self.critic.named_parameters()]
            grads.append({n: p.grad.clone() for n, p in params if p.grad is not None})

    for micro in (None, 1):
        seed_everything(0)
        fit(
            make(Probe, micro_batch_size=micro, critic={"kind": "model", "clip_range": None}),
            tmp_path / str(micro),
            1,
        )
    whole, split = grads
    assert whole.keys() == split.keys()
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], atol=1e-6, rtol=1e-4, msg=name)


def test_grpo_advantages_need_no_critic_and_count_every_minibatch_step(tmp_path, fixed_rewards):
    seed_everything(0)
    module = make(advantage="grpo", ppo_epochs=2, num_minibatches=2)
    assert module.critic is None and module.value_head is None
    trainer, rec = fit(module, tmp_path, 4)
    assert trainer.global_step == 4 and len(rec.metrics) == 1  # 2 epochs x 2 minibatches per rollout
    assert "train/value_loss" not in rec.metrics[0] and "train/approx_kl" in rec.metrics[0]


def test_multi_turn_row_gradient_only_on_actions_and_terminal_reward_reaches_the_last(tmp_path, monkeypatch):
    """prompt | action | observation | action | observation: logits that predict prompt or
    observation tokens get no gradient; those predicting every action token do, the last included."""
    seed_everything(0)
    module = make(critic={"kind": "head"}, whiten_advantages=False, lam=1.0, tis_cap=0.0, num_generations=1)
    seg = [
        Segment([5, 6, 7]),
        Segment([11, 12], True, [0.0, 0.0], 0),
        Segment([21, 22, 23], False, None, 0),
        Segment([13, 14, 15], True, [0.0, 0.0, 0.0], 1),
        Segment([24, 25], False, None, 1),
    ]
    rows = [seg, seg]
    records = [
        {"problem_id": "t", "verdict": "", "completion_tokens": 5, "finished": True, "sandbox_s": 0.0}
    ] * 2
    layout = TrajectoryBatch.from_segments(
        rows, 0, torch.tensor([1.0, -1.0]), torch.tensor([0, 1]), records=records
    )
    monkeypatch.setattr(PPOModule, "next_batch", lambda self, it: layout.to(self.device))
    captured = []

    def hook(_mod, _inp, out):
        if out.requires_grad:  # the training forward (not the old values' no-grad pass)
            out.register_hook(lambda g: captured.append(g.detach().clone()))

    module.policy.lm_head.register_forward_hook(hook)
    fit(module, tmp_path, 1)
    grad = captured[-1]  # the training forward's logits [B, keep, V] (keep = L - start + 1)
    start = layout.first_trainable_position()
    per_pos = grad.abs().sum(-1)[0]  # row 0
    trainable = layout.trainable_mask[0, start:].bool()
    predicts_action = torch.cat([trainable, torch.tensor([False])])  # logits at j predict token start + j
    assert (per_pos[predicts_action] > 0).all()  # every action token, the last one included
    assert per_pos[~predicts_action].sum() == 0  # no observation (or trailing) position


def test_resume_continues_exactly_with_the_critic_and_its_phase(tmp_path, fixed_rewards):
    from lightning.pytorch.callbacks import ModelCheckpoint

    kw = dict(critic={"kind": "model", "pretrain_steps": 1}, num_minibatches=2)
    seed_everything(0)
    _, straight = fit(make(**kw), tmp_path / "a", 3 * 2)
    seed_everything(0)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ck", save_last=True, every_n_train_steps=1)
    fit(make(**kw), tmp_path / "b", 2 * 2, callbacks=[ckpt], enable_checkpointing=True)
    seed_everything(123)  # the checkpoint, not the global seed, decides what follows
    resumed_module = make(**kw)
    _, resumed = fit(resumed_module, tmp_path / "c", 3 * 2, ckpt_path=str(tmp_path / "ck" / "last.ckpt"))
    assert len(resumed.policy) == 1
    assert not changed(straight.policy[-1], resumed.policy[-1])
    assert not changed(straight.critic[-1], resumed.critic[-1])
    assert resumed_module.ppo_state.pretrain_done == 1 and not resumed_module.ppo_state.pretraining


@pytest.mark.parametrize("kl_mode", ["loss", "reward"])
def test_kl_modes_and_the_entropy_bonus(tmp_path, fixed_rewards, kl_mode):
    """beta > 0 builds the reference; the KL goes into the loss (k3, logged as train/kl) or into
    the token rewards before GAE (k1, train/kl_reward); the entropy bonus changes the gradient."""
    grads = {}

    class Probe(PPOModule):
        def on_before_optimizer_step(self, optimizer):
            grads[self.hparams.entropy_coef] = self.policy.lm_head.weight.grad.clone()
            super().on_before_optimizer_step(optimizer)

    for coef in (0.0, 0.5):
        seed_everything(0)
        module = make(Probe, beta=0.1, kl_mode=kl_mode, entropy_coef=coef)
        assert module._reference  # a frozen copy for the KL
        _, rec = fit(module, tmp_path / f"{kl_mode}{coef}", 1)
        metrics = rec.metrics[0]
        assert ("train/kl_reward" in metrics) == (kl_mode == "reward")
        assert ("train/entropy" in metrics) == (coef > 0)
        assert not undocumented(list(metrics))
    assert not torch.equal(grads[0.0], grads[0.5])
