"""PPO (Schulman et al. 2017) for code-writing policies: a critic with GAE, or GRPO advantages.

One training step, as data::

    problems -> episodes (single- or multi-turn) -> rewards on each episode's last policy token
      gae:  critic values V(s_t) -> (- beta * KL in the reward) -> GAE(lam_actor) advantages,
            GAE(lam_critic) returns -> whitened advantages
      grpo: group-relative advantages of the returns, broadcast over the policy tokens
    -> ppo_epochs x num_minibatches updates: clipped policy loss (+ beta * KL loss)
       - entropy_coef * entropy + vf_coef * clipped value loss

What it adds to the usual recipe (verl, OpenRLHF, Open-Reasoner-Zero; ``algorithms/gae.py``):
decoupled critic and actor lambdas (VC-PPO), the length-adaptive actor lambda (VAPO), and value
pre-training as a phase of its own: the first steps train the critic alone on rollouts of the
frozen policy, until its explained variance reaches ``critic.pretrain_min_ev`` or
``critic.pretrain_steps`` rollouts have gone by (VC-PPO's fix for value-initialisation bias).

Values and advantages live on policy tokens only; observation tokens of a multi-turn episode are
skipped by GAE, and the reward is put on the episode's last policy token
(``terminal_token_rewards``). Every episode ends with its final reward (the env grades a
runner-truncated episode as it stands), so GAE bootstraps from 0.

Model, engine, rollouts, the sampler correction, micro-batching, checkpoint state and export
live in the shared training layer (``lit_codeRL/training``); this file is the algorithm.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from lit_codeRL.algorithms.gae import (
    explained_variance_moments,
    explained_variance_of_moments,
    gae,
    kl_reward_penalty,
    length_adaptive_lambda,
    masked_moments,
    masked_whiten,
    moments_to_stats,
    terminal_token_rewards,
    value_loss,
)
from lit_codeRL.algorithms.grpo import (
    aggregate_token_loss,
    broadcast_advantages,
    group_advantages,
)
from lit_codeRL.algorithms.kl import k3_kl, masked_mean
from lit_codeRL.envs.settings import EnvSettings
from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.engine import EngineSettings, SamplingParams
from lit_codeRL.policy.loading import ModelSettings, load_model
from lit_codeRL.policy.value import ValueHead, ValueModel
from lit_codeRL.rollout.prompts import ProblemSettings
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig
from lit_codeRL.training import distributed
from lit_codeRL.training.optim import OptimizerSettings, lr_factor
from lit_codeRL.training.policy_module import as_settings
from lit_codeRL.training.rollout_module import RolloutModule
from lit_codeRL.training.step_setup import (
    StepSetup,
    has_extra_rows,
    no_grad_columns,
    per_episode,
    prepare_step,
    valid_rows,
)


@dataclass
class CriticSettings:
    """The critic of ``advantage: gae`` (unused with ``grpo`` advantages)."""

    kind: Literal["model", "head"] = "model"
    """``model``: a separate network initialised from the policy's weights (or ``name_or_path``)
    with a fresh value head and its own optimizer group (verl, OpenRLHF); ``head``: one linear
    value head on the policy's own final hidden states, no second forward, and the value loss
    (times ``vf_coef``) also trains the shared backbone."""
    name_or_path: str | None = None
    """``kind: model``: where the critic's backbone comes from (any ``model.name_or_path`` source);
    ``None``: the policy's own source."""
    optimizer: OptimizerSettings = field(default_factory=lambda: OptimizerSettings(learning_rate=1e-5))
    """The critic's AdamW group (the value head, or the whole critic model): verl's and OpenRLHF's
    critic learning rate is 10x the actor's."""
    vf_coef: float = 0.5
    """Weight of the value loss in the total loss (with ``head`` it sets how much the value loss
    moves the shared backbone; with ``model`` it scales the critic's gradient only)."""
    clip_range: float | None = 0.5
    """Value clipping around the old values (verl and OpenRLHF: 0.5); ``None``: plain squared error."""
    lam: float = 1.0
    """GAE lambda of the critic's targets (VC-PPO: 1.0, Monte-Carlo returns, no reward decay)."""
    pretrain_steps: int = 0
    """Value pre-training: at most this many rollout steps train the critic alone on the frozen
    policy's rollouts before PPO starts (0: none)."""
    pretrain_min_ev: float | None = None
    """End value pre-training early once the critic's explained variance on a fresh rollout batch
    reaches this (``None``: run all ``pretrain_steps``)."""

    def __post_init__(self) -> None:
        if isinstance(self.optimizer, dict):
            self.optimizer = OptimizerSettings(**self.optimizer)
        if self.kind not in ("model", "head"):
            raise ValueError(f"critic.kind must be 'model' or 'head', got {self.kind!r}")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"critic.lam must be in [0, 1], got {self.lam}")
        if self.pretrain_steps < 0 or self.vf_coef < 0:
            raise ValueError("critic.pretrain_steps and critic.vf_coef must be >= 0")
        if self.clip_range is not None and self.clip_range <= 0:
            raise ValueError(f"critic.clip_range must be > 0 or null, got {self.clip_range}")


class PPOState:
    """What a resumed PPO run needs beyond weights and optimizer: the phase and the shuffles."""

    def __init__(self, seed: int) -> None:
        self.pretrain_done = 0
        """Rollout steps of value pre-training taken so far."""
        self.pretraining = True
        """Still in value pre-training (while ``pretrain_steps`` allows)."""
        self.frozen_steps = 0
        """Optimizer steps taken with the policy frozen: its schedule starts after them."""
        self.generator = torch.Generator().manual_seed(seed)
        """Draws the minibatch order of every epoch."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "pretrain_done": self.pretrain_done,
            "pretraining": self.pretraining,
            "frozen_steps": self.frozen_steps,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pretrain_done = int(state["pretrain_done"])
        self.pretraining = bool(state["pretraining"])
        self.frozen_steps = int(state.get("frozen_steps", 0))  # absent before the schedule fix
        self.generator.set_state(state["generator"])


class PPOModule(RolloutModule):
    """Proximal Policy Optimization with a critic (GAE) or with GRPO's group advantages.

    Args:
        model: Policy model source, dtype, LoRA and gradient checkpointing.
        problems: Training problems and how they are prompted.
        env: Environment and episode limits (single-turn code envs, ``code_repair``, ``swe``,
            ``debug``).
        sandbox: Where and how generated code runs.
        sampling: Rollout sampling.
        engine: Which generation engine samples rollouts.
        advantage: ``gae`` (critic, generalized advantage estimation over the policy's tokens) or
            ``grpo`` (group-relative advantages of the episode returns, no critic).
        critic: The critic of ``gae``: kind, learning rate, value clipping, lambda, pre-training.
        num_generations: Episodes per prompt (the group of ``grpo``; 1 is fine for ``gae``).
        prompts_per_step: Prompts per rollout batch on each rank.
        optimizer: The policy's AdamW group (here 1e-6, constant).
        gamma: Discount per policy token (1.0: the reward at the end reaches every token whole).
        lam: GAE lambda of the actor's advantages (VC-PPO decouples it from ``critic.lam``).
        lam_alpha: Length-adaptive actor lambda ``1 - 1 / (lam_alpha * l)`` per episode of ``l``
            policy tokens (VAPO: 0.05); ``None`` uses ``lam``.
        whiten_advantages: Normalise GAE advantages to mean 0, std 1 over the global batch.
        ppo_epochs: Passes over each rollout batch.
        num_minibatches: Optimizer steps per pass, exactly; each minibatch holds whole groups,
            so at most ``prompts_per_step``.
        epsilon: Lower clip range of the importance ratio.
        epsilon_high: Upper clip range (clip-higher); ``None`` uses ``epsilon``.
        loss_type: Token aggregation of the policy and entropy terms (``grpo``, ``dapo``,
            ``dr_grpo``; see ``algorithms/grpo.py``). The value loss is a token mean.
        entropy_coef: Entropy bonus (``- entropy_coef * entropy``); 0 computes none.
        beta: KL coefficient to the reference policy (0: no reference pass).
        kl_mode: ``loss`` (k3 KL added to the policy loss, as GRPO) or ``reward`` (k1 KL
            subtracted from each token's reward before GAE, as Ziegler et al. and OpenRLHF).
        tis_cap: Cap of the truncated importance weight to the sampler: ``min(pi_train /
            pi_sampler, cap)`` with one update per rollout, ``min(pi_old / pi_sampler, cap)``
            with more, where pi_old is the trainer's own policy before the first update
            (recomputed in one no-grad pass, as verl and OpenRLHF) and the clipped ratio is to
            it; 0 turns the weight off.
        micro_batch_size: Rows per forward/backward chunk; ``None`` = a free-memory hint.
        share_prompt_forward: Run each group's prompt once in the policy forward (exact).
        save_hf_model: Write ``<run>/hf_model`` (the policy) at the end.
        seed: Seed of prompt order, sampling and minibatch shuffles.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        problems: ProblemSettings = ProblemSettings(),  # noqa: B008
        env: EnvSettings = EnvSettings(),  # noqa: B008
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008
        sampling: SamplingParams = SamplingParams(),  # noqa: B008
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        advantage: Literal["gae", "grpo"] = "gae",
        critic: CriticSettings = CriticSettings(),  # noqa: B008
        num_generations: int = 4,
        prompts_per_step: int = 4,
        optimizer: OptimizerSettings = OptimizerSettings(learning_rate=1e-6),  # noqa: B008
        gamma: float = 1.0,
        lam: float = 0.95,
        lam_alpha: float | None = None,
        whiten_advantages: bool = True,
        ppo_epochs: int = 1,
        num_minibatches: int = 1,
        epsilon: float = 0.2,
        epsilon_high: float | None = None,
        loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo",
        entropy_coef: float = 0.0,
        beta: float = 0.0,
        kl_mode: Literal["loss", "reward"] = "loss",
        tis_cap: float = 2.0,
        micro_batch_size: int | None = None,
        share_prompt_forward: bool = True,
        save_hf_model: bool = True,
        seed: int = 0,
    ) -> None:
        critic = as_settings(CriticSettings, critic)
        if advantage not in ("gae", "grpo"):
            raise ConfigError(f"advantage must be 'gae' or 'grpo', got {advantage!r}")
        if advantage == "grpo" and num_generations < 2:
            raise ConfigError("advantage grpo needs num_generations >= 2 (a group to compare within)")
        if ppo_epochs < 1 or num_minibatches < 1:
            raise ConfigError("ppo_epochs and num_minibatches must be >= 1")
        if num_minibatches > prompts_per_step:
            # minibatches hold whole groups (a prompt's episodes), prompts_per_step per rollout
            raise ConfigError(
                f"num_minibatches {num_minibatches} > groups per rollout (prompts_per_step {prompts_per_step})"
            )
        if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
            raise ConfigError("gamma and lam must be in [0, 1]")
        if lam_alpha is not None and lam_alpha <= 0:
            raise ConfigError(f"lam_alpha must be > 0 or null, got {lam_alpha}")
        if kl_mode not in ("loss", "reward"):
            raise ConfigError(f"kl_mode must be 'loss' or 'reward', got {kl_mode!r}")
        model = as_settings(ModelSettings, model)
        super().__init__(
            model=model,
            engine=as_settings(EngineSettings, engine),
            problems=as_settings(ProblemSettings, problems),
            env=as_settings(EnvSettings, env),
            sandbox=as_settings(SandboxConfig, sandbox),
            sampling=as_settings(SamplingParams, sampling),
            num_generations=num_generations,
            prompts_per_step=prompts_per_step,
            seed=seed,
            optimizer=optimizer,
            micro_batch_size=micro_batch_size,
            save_hf_model=save_hf_model,
            needs_reference=beta > 0,
        )
        self.critic_settings = critic
        self.critic: ValueModel | None = None
        self.value_head: ValueHead | None = None
        if advantage == "gae":
            if critic.kind == "head":
                self.value_head = ValueHead(self.policy.config.hidden_size)
            else:
                source = model if critic.name_or_path is None else _with_source(model, critic.name_or_path)
                causal_lm, _ = load_model(_without_lora(source))
                self.critic = ValueModel.from_causal_lm(causal_lm)
        # context parallelism splits the policy's forward only; a critic would see whole rows on
        # every rank of a group, and the group-size gradient scale would multiply its loss too
        self.supports_sequence_parallel = advantage == "grpo"
        self.ppo_state = PPOState(seed)
        self.ppo_state.pretraining = advantage == "gae" and critic.pretrain_steps > 0
        self.register_state("ppo", self.ppo_state)
        self.save_hyperparameters()
        self.plain_hparams()

    # ------------------------------------------------------------------ the shared layer's hooks
    def optimizer_groups(self):
        groups = super().optimizer_groups()
        critic_params = self._critic_parameters()
        if critic_params:
            groups.append((critic_params, self.critic_settings.optimizer))
        return groups

    def _critic_parameters(self) -> list[torch.nn.Parameter]:
        net = self.critic if self.critic is not None else self.value_head
        return [p for p in net.parameters() if p.requires_grad] if net is not None else []

    def on_fit_start(self) -> None:
        super().on_fit_start()
        for net in (self.critic, self.value_head):  # from_pretrained returns eval mode, as for the policy
            if net is not None:
                net.train()

    def configure_model(self) -> None:
        sharded_before = self.sharded
        super().configure_model()
        if self.sharded and not sharded_before:  # FSDP2: the critic's gradients must sync too
            mesh = self.device_mesh
            if mesh.mesh_dim_names and "data_parallel" in mesh.mesh_dim_names:
                mesh = mesh["data_parallel"]
            for net in (self.critic, self.value_head):
                if net is not None:
                    distributed.shard_model(net, mesh)

    def configure_optimizers(self):
        config = super().configure_optimizers()
        # The policy's schedule (warm-up, cosine) starts when the policy starts training: its
        # step is the optimizer's step less the steps of value pre-training, which are known
        # only as the phase ends (``pretrain_min_ev``), hence read from the state at each step.
        settings, state = self.optimizer_settings, self.ppo_state
        total = self.trainer.max_steps if self._trainer is not None and self.trainer.max_steps > 0 else 0

        def policy_factor(step: int) -> float:
            offset = state.frozen_steps
            rest = max(total - offset, 0) if total else 0
            factor = lr_factor(settings.warmup_steps, settings.lr_schedule, rest, settings.min_lr_ratio)
            return factor(max(step - offset, 0))

        config["lr_scheduler"]["scheduler"].lr_lambdas[0] = policy_factor
        return config

    # ------------------------------------------------------------------ before the updates
    def _values(self, mb: TrajectoryBatch, start: int, hidden: Tensor | None) -> Tensor:
        """``[B, L - start]`` critic values of micro-batch ``mb`` (``hidden``: the policy's final
        hidden states, for the head)."""
        if self.value_head is not None:
            assert hidden is not None
            return self.value_head(hidden)
        assert self.critic is not None
        return self.critic(mb.input_ids, mb.attention_mask, start)

    def old_pass(
        self, batch: TrajectoryBatch, setup: StepSetup, policy_old: bool
    ) -> tuple[Tensor | None, Tensor | None]:
        """One no-grad pass before the updates: the trainer's pi_old ``[B, L - start]`` (if
        ``policy_old``) and the critic's old values (with a critic), masked to policy tokens.
        The value head reads the same policy forward, so pi_old then costs nothing extra."""
        start, critic = setup.start, self.hparams.advantage == "gae"
        policy_forward = policy_old or self.value_head is not None

        def forward(mb: TrajectoryBatch) -> tuple[Tensor | None, Tensor | None]:
            logps = hidden = None
            if policy_forward:
                logps, _, *rest = self.token_logprobs(
                    mb,
                    start,
                    temperature=setup.temperature,
                    group_size=setup.group,
                    with_hidden=self.value_head is not None,
                )
                hidden = rest[0] if rest else None
            values = self._values(mb, start, hidden).float() if critic else None
            return (logps.float() if policy_old else None), values

        if not (policy_forward or critic):
            return None, None
        logps, values = no_grad_columns(self, batch, start, setup.group, forward)
        mask = batch.trainable_mask[:, start:]
        return (logps * mask if logps is not None else None), (values * mask if values is not None else None)

    def advantages_and_returns(
        self,
        batch: TrajectoryBatch,
        start: int,
        values: Tensor | None,
        policy_old: Tensor | None,
        stats: dict[str, list[float]],
    ) -> None:
        """Fill ``batch.advantages`` (and, with a critic, ``batch.values``/``batch.returns``), full
        width, from the old ``values`` ``[B, L - start]`` and, for KL in the reward, the
        trainer's ``policy_old`` log-probs."""
        hp = self.hparams
        mask = batch.trainable_mask[:, start:]
        valid = valid_rows(batch)
        if hp.advantage == "grpo":
            seq = per_episode(batch, lambda r, v: group_advantages(r, hp.num_generations, "group", valid=v))
            batch.advantages = broadcast_advantages(seq, batch.trainable_mask)
            return
        assert values is not None
        token_rewards = terminal_token_rewards(batch.rewards.float() * valid.float(), mask)
        if hp.beta > 0 and hp.kl_mode == "reward":
            # the trainer's pi_old, not the sampler's: a bf16 or vLLM sampler's error is no KL
            assert policy_old is not None
            token_rewards, kl = kl_reward_penalty(
                token_rewards, policy_old, batch.ref_logprobs, mask, hp.beta
            )
            stats["kl_reward"] = [float(masked_mean(kl, mask))]
        lam: float | Tensor = hp.lam
        if hp.lam_alpha is not None:
            lam = length_adaptive_lambda(mask.sum(1), hp.lam_alpha).to(values.device)
            stats["lam_actor"] = [float(torch.as_tensor(lam).mean())]
        advantages, _ = gae(token_rewards, values, mask, hp.gamma, lam)
        _, returns = gae(token_rewards, values, mask, hp.gamma, self.critic_settings.lam)
        if hp.whiten_advantages:
            moments = distributed.all_reduce(torch.stack(masked_moments(advantages, mask)))
            mean, var = moments_to_stats(*moments)
            advantages = masked_whiten(advantages, mask, mean.to(advantages), var.to(advantages))
        # over the global batch: every rank gets the same number, so every rank ends value
        # pre-training at the same step (a rank-local one would let DDP replicas diverge and
        # FSDP2 ranks run different forwards)
        ev_moments = distributed.all_reduce(explained_variance_moments(values, returns, mask))
        stats["explained_variance_before"] = [float(explained_variance_of_moments(ev_moments))]
        stats["values_mean"] = [float(masked_mean(values, mask))]
        stats["returns_mean"] = [float(masked_mean(returns, mask))]
        pad = torch.zeros(batch.batch_size, start, device=values.device)
        batch.advantages = torch.cat([pad, advantages], 1)
        batch.values, batch.returns = torch.cat([pad, values], 1), torch.cat([pad, returns], 1)

    # ------------------------------------------------------------------ step
    def training_step(self, dataloader_iter) -> None:
        hp = self.hparams
        state = self.ppo_state
        batch = self.next_batch(dataloader_iter)
        setup = prepare_step(
            self,
            batch,
            sampling=self.sampling,
            num_generations=hp.num_generations,
            share_prompt_forward=hp.share_prompt_forward,
            beta=hp.beta,
        )
        start, group = setup.start, setup.group
        pretraining = state.pretraining
        num_updates = hp.ppo_epochs * hp.num_minibatches
        critic = hp.advantage == "gae"
        kl_in_reward = hp.beta > 0 and hp.kl_mode == "reward" and critic
        stats: dict[str, list[float]] = {}
        times: dict[str, float] = {}
        # pi_old is the trainer's, not the sampler's (verl, OpenRLHF): with several updates the
        # clip then bounds how far the updates move the policy, and the sampler's error is left
        # to the truncated importance weight. One update needs none (ratio 1).
        needs_policy_old = (num_updates > 1 and not pretraining) or kl_in_reward
        t0 = time.perf_counter()
        policy_old, values = self.old_pass(batch, setup, needs_policy_old)
        if policy_old is not None or values is not None:
            times["time/old_values_s"] = time.perf_counter() - t0
        self.advantages_and_returns(batch, start, values, policy_old, stats)
        if policy_old is not None and num_updates > 1:
            batch.policy_old_logprobs = policy_old

        def loss_fn(mb: TrajectoryBatch, counts: tuple[float, float]) -> tuple[Tensor, dict[str, Tensor]]:
            num_rows, num_tokens = counts
            mask = mb.trainable_mask[:, start:]
            out: dict[str, Tensor] = {}
            loss = torch.zeros((), device=self.device)
            hidden = None
            if not pretraining or self.value_head is not None:
                # While the critic pre-trains, the policy runs only to feed the head, without grad.
                with torch.no_grad() if pretraining else torch.enable_grad():
                    logps, entropy, *rest = self.token_logprobs(
                        mb,
                        start,
                        temperature=setup.temperature,
                        group_size=group,
                        with_entropy="grad" if hp.entropy_coef > 0 and not pretraining else False,
                        with_hidden=self.value_head is not None,
                    )
                hidden = rest[0] if rest else None
                if pretraining and hidden is not None:
                    hidden = hidden.detach()
            if not pretraining:
                kl_beta = hp.beta if hp.kl_mode == "loss" else 0.0
                policy, pstats, old = self.clipped_policy_loss(
                    logps, mb, start, counts, epsilon=hp.epsilon, epsilon_high=hp.epsilon_high,
                    loss_type=hp.loss_type, beta=kl_beta, tis_cap=hp.tis_cap, num_updates=num_updates,
                    max_completion_length=self.sampling.max_new_tokens,
                )  # fmt: skip
                loss = loss + policy
                out.update(pstats, policy_loss=policy.detach())
                if num_updates > 1:  # KL(pi_old || pi_theta), k3 on pi_old's tokens; 0 at one update
                    out["approx_kl"] = masked_mean(k3_kl(old.detach(), logps.detach()), mask)
                if entropy is not None:
                    bonus = aggregate_token_loss(
                        entropy, mask, hp.loss_type, self.sampling.max_new_tokens, num_rows, num_tokens,
                        mb.sequence_tokens,
                    )  # fmt: skip
                    loss = loss - hp.entropy_coef * bonus
                    out["entropy"] = masked_mean(entropy.detach(), mask)
            if critic:
                values = self._values(mb, start, hidden)
                vloss, vstats = value_loss(
                    values,
                    mb.values[:, start:],
                    mb.returns[:, start:],
                    mask,
                    self.critic_settings.clip_range,
                    num_tokens=num_tokens,
                )
                loss = loss + self.critic_settings.vf_coef * vloss
                out.update(vstats, value_loss=vloss.detach())
            if pretraining and self.trainer.world_size > 1 and not self.sharded:
                # DDP reduces every parameter's gradient: give the frozen policy's a (zero) one
                # (FSDP2 reduces per module in its own hooks: a policy left out reduces nothing).
                loss = loss + 0.0 * sum(p.sum() for p in self.policy.parameters() if p.requires_grad)
            return loss, out

        for epoch in range(hp.ppo_epochs):
            for minibatch in self.minibatches(batch):
                counts = self.loss_normalisers(minibatch, hp.loss_type)
                if pretraining:  # before update(): its schedule step already reads the offset
                    state.frozen_steps += 1
                step_stats, step_times = self.update(
                    minibatch,
                    lambda mb, c=counts: loss_fn(mb, c),
                    group,
                    freeze_policy=pretraining,
                    start=start,
                )
                for key, values in step_stats.items():
                    stats.setdefault(key if epoch == 0 else f"{key}_epoch{epoch + 1}", []).extend(values)
                for key, value in step_times.items():
                    times[key] = times.get(key, 0.0) + value
        stats["value_pretraining"] = [float(pretraining)]
        if pretraining:
            self._advance_pretraining(stats["explained_variance_before"][0])
        self.log_rollout(batch, stats, times)

    def minibatches(self, batch: TrajectoryBatch) -> list[TrajectoryBatch]:
        """Exactly ``num_minibatches`` parts of ``batch``, each of whole groups (``num_generations``
        rows; single rows when the batch is not made of groups; a group's rows by ``group_ids``
        when an episode has several rows, so that an episode stays in one part), in a fresh random
        order drawn from the checkpointed generator (a resumed run draws the same). Group counts
        that do not divide evenly give parts one group apart."""
        count = self.hparams.num_minibatches
        if count == 1:
            return [batch]
        if has_extra_rows(batch):
            ids = batch.group_ids.tolist()
            starts = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]]  # groups are contiguous
            rows = [list(range(a, b)) for a, b in zip(starts, [*starts[1:], len(ids)], strict=True)]
        else:
            size = self.hparams.num_generations
            size = size if batch.batch_size % size == 0 else 1
            rows = [list(range(g, g + size)) for g in range(0, batch.batch_size, size)]
        if len(rows) < count:
            # every rank must take as many optimizer steps (each is a collective), and the
            # schedule and importance-weight bookkeeping count num_minibatches: refuse, not shrink
            raise RuntimeError(f"num_minibatches {count} > {len(rows)} groups in this rollout batch")
        order = torch.randperm(len(rows), generator=self.ppo_state.generator)
        parts = order.tensor_split(count)
        return [batch.select([i for g in part.tolist() for i in rows[g]]) for part in parts]

    def _advance_pretraining(self, ev: float) -> None:
        """Count a rollout of value pre-training and end the phase at ``pretrain_steps`` or once
        ``ev`` (the global batch's explained variance, equal on every rank) reaches
        ``pretrain_min_ev``."""
        state, settings = self.ppo_state, self.critic_settings
        state.pretrain_done += 1
        reached = settings.pretrain_min_ev is not None and ev >= settings.pretrain_min_ev
        if reached or state.pretrain_done >= settings.pretrain_steps:
            state.pretraining = False


def _with_source(model: ModelSettings, name_or_path: str) -> ModelSettings:
    from dataclasses import replace

    return replace(model, name_or_path=name_or_path)


def _without_lora(model: ModelSettings) -> ModelSettings:
    """The critic's model settings: full weights (no adapters, not quantized: a value model
    trains all its weights)."""
    from dataclasses import replace

    return replace(model, lora=None, quantization="none") if model.lora is not None else model
