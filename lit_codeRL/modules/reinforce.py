"""REINFORCE with a leave-one-out (RLOO), group-mean or no baseline, as a LightningModule.

One training step, as data::

    problems -> G episodes each from the live policy (single- or multi-turn)
             -> returns -> A_i = R_i - baseline_i (rloo: mean of the group's other returns)
             -> loss -w * A * log pi(action tokens) (+ beta * KL) -> one optimizer step
                (w: truncated importance weight to the sampler, ``tis_cap``)

Ahmadian et al. 2024 ("Back to Basics: Revisiting REINFORCE-style optimization for learning from
human feedback") show RLOO matching PPO for LLMs at a fraction of the machinery; Kool et al. 2019
introduced the leave-one-out baseline. On-policy: one update per rollout, no ratio, no clipping
(a sampler in another precision is corrected by ``w``). Environment tokens of multi-turn episodes are masked: only the policy's own tokens get
gradient.
"""

from __future__ import annotations

from typing import Literal

import torch

from lit_codeRL.algorithms.reinforce import reinforce_advantages, reinforce_loss
from lit_codeRL.envs.settings import EnvSettings
from lit_codeRL.policy.engine import EngineSettings, SamplingParams
from lit_codeRL.policy.loading import ModelSettings
from lit_codeRL.rollout.prompts import ProblemSettings
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig
from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.policy_module import as_settings
from lit_codeRL.training.rollout_module import RolloutModule
from lit_codeRL.training.step_setup import per_episode, prepare_step


class REINFORCEModule(RolloutModule):
    """REINFORCE / RLOO for code-writing policies.

    Args:
        model: Policy model source, dtype, LoRA and gradient checkpointing.
        problems: Training problems and how they are prompted.
        env: Environment and episode limits (``unit_test``, ``code_execution``, ``code_repair``
            with ``max_turns``).
        sandbox: Where and how generated code runs.
        sampling: Rollout sampling.
        engine: Which generation engine samples rollouts.
        baseline: ``rloo`` (leave-one-out mean of the group), ``mean`` (group mean) or ``none``.
        num_generations: Episodes per prompt (>= 2 for ``rloo``/``mean``).
        prompts_per_step: Prompts per batch on each rank.
        optimizer: AdamW, learning-rate schedule and gradient clipping of the policy (here
            1e-6, constant).
        beta: KL coefficient to the frozen reference (0 = no reference).
        tis_cap: Cap of the truncated importance weight ``min(pi_train / pi_sampler, cap)`` on each
            token of the loss: it corrects a sampler that ran in another precision than the
            trainer (``engine.dtype`` bf16 with fp32 training). 0 turns it off (the plain
            on-policy gradient in the trainer's precision).
        loss_type: Token aggregation: ``dapo`` (mean over all action tokens of the batch),
            ``grpo`` (per-episode mean, then mean) or ``dr_grpo`` (sum / (B x max_new_tokens), B every
            row of the batch, also rows out of the loss).
        micro_batch_size: Rows per forward/backward chunk; ``None`` = a free-memory hint.
        share_prompt_forward: Run each group's prompt once in the training forward (exact).
        save_hf_model: Write ``<run>/hf_model`` at the end.
        seed: Seed of prompt order and sampling.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        problems: ProblemSettings = ProblemSettings(),  # noqa: B008
        env: EnvSettings = EnvSettings(),  # noqa: B008
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008
        sampling: SamplingParams = SamplingParams(),  # noqa: B008
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        baseline: Literal["rloo", "mean", "none"] = "rloo",
        num_generations: int = 4,
        prompts_per_step: int = 4,
        optimizer: OptimizerSettings = OptimizerSettings(learning_rate=1e-6),  # noqa: B008
        beta: float = 0.0,
        tis_cap: float = 2.0,
        loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo",
        micro_batch_size: int | None = None,
        share_prompt_forward: bool = True,
        save_hf_model: bool = True,
        seed: int = 0,
    ) -> None:
        if baseline in ("rloo", "mean") and num_generations < 2:
            raise ValueError(f"baseline {baseline!r} needs num_generations >= 2 (a group to compare within)")
        super().__init__(
            model=as_settings(ModelSettings, model),
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
        self.save_hyperparameters()
        self.plain_hparams()

    def training_step(self, dataloader_iter) -> None:
        hp = self.hparams
        batch = self.next_batch(dataloader_iter)
        seq_adv = per_episode(batch, lambda r, v: reinforce_advantages(r, hp.num_generations, hp.baseline, v))
        setup = prepare_step(
            self,
            batch,
            sampling=self.sampling,
            num_generations=hp.num_generations,
            share_prompt_forward=hp.share_prompt_forward,
            beta=hp.beta,
            sequence_advantages=seq_adv,
            loss_type=hp.loss_type,
        )
        start, group, temperature = setup.start, setup.group, setup.temperature
        num_rows, num_tokens = setup.counts

        def loss_fn(mb: TrajectoryBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            logps, _ = self.token_logprobs(mb, start, temperature=temperature, group_size=group)
            # The gradient wanted is the trainer's: weight each token by the truncated importance
            # weight to the sampler that drew it (a bf16 replica under engine.dtype auto).
            _, weights, tis = self.sampler_correction(logps, mb, start, hp.tis_cap)
            loss, stats = reinforce_loss(
                logps,
                mb.advantages[:, start:],
                mb.trainable_mask[:, start:],
                loss_type=hp.loss_type,
                max_completion_length=self.sampling.max_new_tokens,
                ref_logprobs=mb.ref_logprobs,
                beta=hp.beta,
                num_rows=num_rows,
                num_tokens=num_tokens,
                importance_weights=weights,
                sequence_tokens=mb.sequence_tokens,
            )
            return loss, {**stats, **tis}

        stats, times = self.update(batch, loss_fn, group, start=start)
        stats["advantage_abs"] = [float(seq_adv.abs().mean())]
        self.log_rollout(batch, stats, times)
