"""The adversarial code game as a LightningModule: GRPO with group advantages per role.

One training step, as data (``rollout/code_game.py``)::

    P writer prompts (a topic each) -> G programs each -> the gate admits the valid ones (parse,
    no imports beyond an allow-list, time and traced-step budgets, 8 runs with different hash
    seeds agreeing, printed output without addresses) -> K predictions of each admitted program
    -> graded against the sandbox's output -> writer reward from its program's success rate,
    predictor reward per prediction -> advantages relative to the writer's G-group and to the
    program's K-group -> clipped surrogate -> optimizer step

The policy plays both roles in self-play (both trained), or one role against a fixed opponent: a
frozen copy of the initial policy, or another model. With ``warm_start.steps`` the run's first
steps are the predictor's warm start instead of rounds: behavioural cloning on (program, output)
pairs the gate ran (``rollout/code_game_warmstart.py``), then self-play. Logged under
``train/game/*`` (validity, why programs were refused, accuracy, lengths, rewards), the warm
start under ``train/warmstart/*``, and under the original design's names
``reward/avg_batch_reward`` and ``reward/successful_predictions_count``; every turn goes to
``code_game.jsonl`` and a table of programs, true outputs and predictions to ``samples/``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any, Literal

import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.engine import EngineSettings, SamplingParams
from lit_codeRL.policy.loading import ModelSettings, load_model
from lit_codeRL.rollout.code_game import (
    PREDICTOR,
    WRITER,
    CodeGameDataset,
    CodeGameRunner,
    CodeGameSettings,
)
from lit_codeRL.rollout.code_game_warmstart import PredictorWarmStart, PredictorWarmStarter
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from lit_codeRL.training.behaviour_cloning import mean_nll, nll_update
from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.policy_module import PolicyModule, as_settings
from lit_codeRL.training.round_logging import log_round
from lit_codeRL.training.step_setup import prepare_step


@dataclass
class CodeGameOpponent:
    """Who plays the role the policy does not."""

    kind: Literal["self_play", "frozen", "model"] = "self_play"
    """``self_play``: the policy writes and predicts, both roles trained. ``frozen``: the other role
    is a frozen copy of the policy as training starts; ``model``: the other role is
    ``name_or_path`` (a model of the policy's tokenizer family)."""
    role: Literal["writer", "predictor"] = "writer"
    """With a fixed opponent: the role the policy plays and trains."""
    name_or_path: str | None = None
    """``model``: the opponent's source (any ``model.name_or_path``)."""

    def __post_init__(self) -> None:
        if self.kind not in ("self_play", "frozen", "model"):
            raise ValueError(f"opponent.kind must be self_play, frozen or model, got {self.kind!r}")
        if self.role not in ("writer", "predictor"):
            raise ValueError(f"opponent.role must be writer or predictor, got {self.role!r}")
        if self.kind == "model" and not self.name_or_path:
            raise ValueError("opponent.kind model needs opponent.name_or_path")


class CodeGameModule(PolicyModule):
    """GRPO on the code-output game (see the module docstring).

    Args:
        model: Policy model source, dtype, LoRA and gradient checkpointing.
        game: Rounds, rewards, the validity gate and the prompts.
        opponent: Self-play, or the policy in one role against a fixed opponent.
        warm_start: The predictor's warm start before self-play: behavioural cloning on the
            gate's (program, output) pairs (``steps`` 0: none).
        sandbox: Where programs run (the gate).
        sampling: Sampling of both roles (predictions: ``game.prediction_max_new_tokens``).
        engine: Which generation engine samples turns.
        optimizer: AdamW, learning-rate schedule and gradient clipping of the policy.
        epsilon: Clip range of the importance ratio.
        loss_type: Token aggregation (``grpo``, ``dapo``, ``dr_grpo``).
        beta: KL coefficient to the reference policy (0: no reference pass).
        tis_cap: Truncated importance weight to the sampler (one update per batch).
        micro_batch_size: Rows per forward/backward chunk; ``None`` = a free-memory hint.
        save_hf_model: Write ``<run>/hf_model`` at the end.
        seed: Seed of topics and sampling.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        game: CodeGameSettings = CodeGameSettings(),  # noqa: B008
        opponent: CodeGameOpponent = CodeGameOpponent(),  # noqa: B008
        warm_start: PredictorWarmStart = PredictorWarmStart(),  # noqa: B008
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008
        sampling: SamplingParams = SamplingParams(max_new_tokens=256, temperature=1.0),  # noqa: B008
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        optimizer: OptimizerSettings = OptimizerSettings(learning_rate=1e-6),  # noqa: B008
        epsilon: float = 0.2,
        loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dapo",
        beta: float = 0.0,
        tis_cap: float = 2.0,
        micro_batch_size: int | None = None,
        save_hf_model: bool = True,
        seed: int = 0,
    ) -> None:
        game = as_settings(CodeGameSettings, game)
        opponent = as_settings(CodeGameOpponent, opponent)
        warm_start = as_settings(PredictorWarmStart, warm_start)
        model = as_settings(ModelSettings, model)
        super().__init__(
            model=model,
            engine=as_settings(EngineSettings, engine),
            optimizer=optimizer,
            micro_batch_size=micro_batch_size,
            save_hf_model=save_hf_model,
            needs_reference=beta > 0,
        )
        self.game_settings, self.opponent_settings = game, opponent
        self.sandbox_config = as_settings(SandboxConfig, sandbox)
        self.sampling = as_settings(SamplingParams, sampling)
        self.engine_settings = as_settings(EngineSettings, engine)
        # In a list, not an attribute: not a submodule, so never trained, never in the optimizer
        # or the checkpoint's weights (a frozen copy is rebuilt from the same source on resume).
        self._opponent: list[torch.nn.Module] = []
        if opponent.kind != "self_play":
            if opponent.kind == "frozen":
                other = copy.deepcopy(self.policy)
            else:
                settings = copy.deepcopy(model)
                settings.name_or_path, settings.lora = opponent.name_or_path, None
                other, _ = load_model(settings)
            self._opponent.append(other.eval().requires_grad_(False))
            if other.config.vocab_size != self.policy.config.vocab_size:
                raise ConfigError(
                    "the opponent model must share the policy's tokenizer (vocabulary sizes differ)"
                )
        self.roles = (
            (WRITER, PREDICTOR)
            if opponent.kind == "self_play"
            else ((WRITER,) if opponent.role == "writer" else (PREDICTOR,))
        )
        if warm_start.steps and PREDICTOR not in self.roles:
            raise ConfigError("warm_start trains the predictor, and here the policy only writes")
        self.warm_start_settings = warm_start
        self.save_hyperparameters()
        self.plain_hparams()
        self.dataset: CodeGameDataset | None = None
        self.warm_starter: PredictorWarmStarter | None = None
        self.sandbox = None

    @property
    def opponent_model(self) -> torch.nn.Module | None:
        """The fixed opponent's model (``None`` in self-play)."""
        return self._opponent[0] if self._opponent else None

    # ------------------------------------------------------------------ data
    def setup(self, stage: str) -> None:
        if stage != "fit" or self.dataset is not None:
            return
        self.sandbox = make_sandbox(self.sandbox_config)
        policy_engine = self.engine
        other = policy_engine
        if self.opponent_model is not None:
            # pushed once at fit start, sleeps with the policy's engine, closed in teardown
            other = self.frozen_engine(self.engine_settings, self.opponent_model)
        writer, predictor = (policy_engine, other) if WRITER in self.roles else (other, policy_engine)
        if self.opponent_settings.kind == "self_play":
            writer = predictor = policy_engine
        runner = CodeGameRunner(
            writer, predictor, self.tokenizer, self.sampling, self.sandbox, self.game_settings
        )
        rank = self.trainer.global_rank if self._trainer is not None else 0
        self.dataset = CodeGameDataset(runner, self.roles, seed=self.hparams.seed + 7919 * rank)
        self.register_state("code_game", self.dataset)
        if self.warm_start_settings.steps:
            self.warm_starter = PredictorWarmStarter(
                runner,
                self.warm_start_settings,
                self.hparams.seed + 7919 * rank + 1,
                policy_engine.pad_token_id,
                writes=WRITER in self.roles,
            )
            self.register_state("predictor_warm_start", self.warm_starter)
        self.setup_run_dir("code_game")

    def on_fit_start(self) -> None:
        super().on_fit_start()
        if self.opponent_model is not None:
            self.opponent_model.to(self.device)

    def teardown(self, stage: str) -> None:
        super().teardown(stage)  # the engines
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def configure_optimizers(self):
        config = super().configure_optimizers()
        steps = self.warm_start_settings.steps
        if not steps:
            return config
        # The warm start's steps run at its own learning rate; self-play's schedule (warm-up,
        # cosine to max_steps) starts after them, as PPO's policy schedule starts after value
        # pre-training.
        settings, warm = self.optimizer_settings, self.warm_start_settings.learning_rate
        total = self.trainer.max_steps if self._trainer is not None and self.trainer.max_steps > 0 else 0
        after = settings.factor(max(total - steps, 0) if total else 0)
        if warm is not None and settings.learning_rate <= 0:
            raise ConfigError("warm_start.learning_rate scales optimizer.learning_rate, which is 0")
        ratio = 1.0 if warm is None else warm / settings.learning_rate

        def policy_factor(step: int) -> float:
            return ratio if step < steps else after(step - steps)

        scheduler = config["lr_scheduler"]["scheduler"]
        scheduler.lr_lambdas[0] = policy_factor
        # LambdaLR set the first learning rate with the factor it was built with
        config["optimizer"].param_groups[0]["lr"] = scheduler.base_lrs[0] * policy_factor(
            scheduler.last_epoch
        )
        return config

    # ------------------------------------------------------------------ step
    def training_step(self, dataloader_iter) -> None:
        if self.warm_starter is not None and not self.warm_starter.done:
            self.warm_start_step()  # no round is played: the loader's batch is not taken
            return
        hp = self.hparams
        item = next(dataloader_iter)
        batch: TrajectoryBatch = (item[0] if isinstance(item, tuple) else item).to(self.device)
        batch.stats["sandbox_errors"] = float(batch.drop_invalid_from_loss())
        setup = prepare_step(
            self, batch, sampling=self.sampling, num_generations=1, share_prompt_forward=False,
            beta=hp.beta, sequence_advantages=batch.advantages, loss_type=hp.loss_type,
        )  # fmt: skip
        start, temperature, counts = setup.start, setup.temperature, setup.counts

        def loss_fn(mb: TrajectoryBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            logps, _ = self.token_logprobs(mb, start, temperature=temperature)
            loss, stats, _ = self.clipped_policy_loss(
                logps, mb, start, counts, epsilon=hp.epsilon, loss_type=hp.loss_type, beta=hp.beta,
                tis_cap=hp.tis_cap, max_completion_length=self.sampling.max_new_tokens,
            )  # fmt: skip
            return loss, stats

        stats, times = self.update(batch, loss_fn, start=start)
        self.log_round(batch, stats, times)

    def warm_start_step(self) -> None:
        """One step of the predictor's warm start (``rollout/code_game_warmstart.py``): the first
        harvests the pairs and evaluates the predictor on the held-out ones, the last evaluates
        it again and resets AdamW's moments for self-play."""
        warm = self.warm_starter
        assert warm is not None
        metrics: dict[str, float] = {}
        if warm.pairs is None:
            found = warm.harvest()
            metrics.update(
                {
                    "train/warmstart/pairs": found["pairs"],
                    "train/warmstart/rows": found["rows"],
                    "train/warmstart/held_out": found["held_out"],
                    "train/warmstart/pairs_from_writer": found["pairs_from_writer"],
                    "train/warmstart/pairs_from_seeds": found["pairs_from_seeds"],
                    "train/warmstart/writer_programs": found["writer_programs"],
                    "train/warmstart/writer_admitted": found["writer_admitted"],
                    "time/warmstart_harvest_s": found["harvest_s"],
                }
            )
            if warm.held_out:
                metrics.update(self._evaluate_predictor("before"))
            self.release_engines()
        batch = warm.next_batch()
        lr = self.optimizers().param_groups[0]["lr"]
        stats, times = nll_update(self, batch)
        warm.steps_done += 1
        if warm.done:
            # self-play starts from fresh AdamW moments, as a run started from these weights
            # would: the BC gradients' second moments would otherwise damp its first updates
            optimizer = self.optimizers().optimizer
            for param in self.optimizer_groups()[0][0]:
                optimizer.state.pop(param, None)
            if warm.held_out:
                metrics.update(self._evaluate_predictor("after"))
                self.release_engines()
        metrics.update(
            {
                "train/warmstart/nll": sum(stats["nll"]) / len(stats["nll"]),
                "train/warmstart/token_prob": sum(stats["token_prob"]) / len(stats["token_prob"]),
                "train/warmstart/tokens": float(batch.num_trainable_tokens),
                "train/warmstart/epoch": float(warm.dataset.epoch) if warm.dataset else 0.0,
                "train/lr": lr,
                **times,
            }
        )
        size = batch.batch_size
        self.log("train/warmstart/loss", stats["loss"][0], on_step=True, prog_bar=True, batch_size=size)
        self.log_dict(metrics, on_step=True, batch_size=size)

    _EVALUATION = {
        "before": (
            "train/warmstart/before/accuracy",
            "train/warmstart/before/format_rate",
            "train/warmstart/before/answer_tokens",
            "train/warmstart/before/nll",
            "time/warmstart_eval_before_s",
        ),
        "after": (
            "train/warmstart/after/accuracy",
            "train/warmstart/after/format_rate",
            "train/warmstart/after/answer_tokens",
            "train/warmstart/after/nll",
            "time/warmstart_eval_after_s",
        ),
    }
    """The metric names of the held-out evaluation before and after the warm start."""

    def _evaluate_predictor(self, phase: str) -> dict[str, float]:
        """The predictor on the warm start's held-out pairs (``phase``: before or after): sampled
        answers graded as in a round (accuracy, format rate, their mean length in tokens), the
        NLL of the true answers, and the seconds it took."""
        t0 = time.perf_counter()
        sampled = self.warm_starter.evaluate()
        nll = mean_nll(self, self.warm_starter.held_out_batch())
        values = (sampled["accuracy"], sampled["format_rate"], sampled["answer_tokens"], nll)
        return dict(zip(self._EVALUATION[phase], (*values, time.perf_counter() - t0), strict=True))

    # ------------------------------------------------------------------ logging
    def log_round(
        self, batch: TrajectoryBatch, stats: dict[str, list[float]], times: dict[str, float]
    ) -> None:
        """The game's own metrics (validity, roles, gate time); the rest is ``round_logging``'s.
        Every turn goes to ``code_game.jsonl``."""
        roles = batch.role_ids.tolist() if batch.role_ids is not None else []
        adv = batch.advantages.sum(-1) / batch.trainable_mask.sum(-1).clamp(min=1)
        metrics = {
            **{f"train/{k}": v for k, v in batch.stats.items() if k.startswith("game/")},
            **{k: v for k, v in batch.stats.items() if k.startswith("reward/")},
            "train/rows": float(batch.batch_size),
            "train/writer_rows": float(sum(r == WRITER for r in roles)),
            "train/predictor_rows": float(sum(r == PREDICTOR for r in roles)),
            "train/advantage_abs": float(adv.abs().mean()),
            "train/completion_length": float(batch.trainable_mask.sum(-1).float().mean()),
            "sandbox/errors": batch.stats.get("sandbox_errors", 0.0),
            "time/gate_s": batch.stats.get("gate_s", 0.0),
        }
        valid = ("valid", batch.stats.get("game/validity_rate", 0.0))
        log_round(self, batch, stats, times, metrics, progress=valid, records=batch.records)

    @staticmethod
    def completion_table(records: list[dict[str, Any]], max_chars: int) -> tuple[list[str], list[list[str]]]:
        """The examples table (``CompletionTableCallback``): program, true output and prediction."""
        columns = ["role", "program", "gate", "true output", "prediction", "reward"]
        rows = [
            [
                r["role"],
                str(r.get("program") or "")[:max_chars],
                r.get("gate", ""),
                str(r.get("true_output") or "")[:max_chars],
                str(r.get("prediction") if r.get("prediction") is not None else "")[:max_chars],
                f"{r.get('reward', 0.0):.2f}",
            ]
            for r in records
        ]
        return columns, rows
