"""SPIRAL: self-play on zero-sum text games with role-conditioned advantages, as a LightningModule.

One training step, as data (Liu et al. 2025, "SPIRAL", arXiv 2506.24119; the released code)::

    games in lockstep, the live policy in every seat (or one seat vs a fixed opponent)
        -> per game and trained seat: A = R - b[game, seat] (old b), b <- a*b + (1-a)*R
        -> one row per turn of that seat (its own prompt + response), A != 0, exactly N rows
        -> per-token clipped surrogate, Dr. GRPO normaliser (sum / (N * max_new_tokens))
        -> ``ppo_epochs`` optimizer steps on the batch, the ratio to the trainer's pi_old

Upstream's defaults: T = 1.0, 128 samples per step, 2 epochs, clip 0.2, no KL, no critic, lr 1e-6
constant, AdamW (0.9, 0.95), grad clip 1.0, alpha = 0.95, invalid move -1.5 / +0.5, 50-turn
games. As upstream, the old log-probs of the ratio are the trainer's, recomputed by one no-grad
pass before the first epoch (ratio 1 there: the first update is on-policy); the sampler's error
(a bf16 replica) is left to the truncated importance weight ``min(pi_old / pi_sampler, tis_cap)``.
With ``ppo_epochs: 1`` no pass runs: the ratio is 1 and the weight is ``min(pi / pi_sampler,
tis_cap)``, as in GRPO and REINFORCE
(``PolicyModule.sampler_correction``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.engine import EngineSettings, GenerationEngine, SamplingParams, make_engine
from lit_codeRL.policy.loading import ModelSettings
from lit_codeRL.rollout.selfplay import (
    SPIRAL_INSTRUCTION,
    BotOpponent,
    GameRunner,
    ModelOpponent,
    Opponent,
    PolicyPrompter,
    RandomOpponent,
    SelfPlayDataset,
)
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.training.distributed import full_state_dict
from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.policy_module import PolicyModule, as_settings
from lit_codeRL.training.round_logging import log_round
from lit_codeRL.training.step_setup import attach_policy_old, prepare_step


@dataclass
class OpponentSettings:
    """Who plays against the policy during training."""

    kind: Literal["self_play", "random", "bot", "frozen"] = "self_play"
    """``self_play``: the policy holds both seats and both are trained. Otherwise the policy holds
    one seat (alternating between games) and only that seat is trained, against ``random`` legal
    moves, the game library's ``bot``, or a ``frozen`` copy of the policy."""
    frozen_path: str | None = None
    """``frozen``: a model to load as the opponent (an ``hf_model`` directory, a hub id); ``None``
    freezes the policy as it is when training starts."""
    refresh_every: int = 0
    """``frozen``: copy the current policy into the opponent every this many steps (0: never)."""


@dataclass
class GameSettings:
    """Which games are played and how a game ends."""

    games: list[str] = field(default_factory=lambda: ["tictactoe"])
    """Game ids (``tictactoe``, ``kuhn_poker``, ``simple_negotiation``); several = multi-game, one
    RAE baseline per game and seat."""
    max_turns: int = 50
    """Moves per game at most (both players); a game past it is a draw."""
    invalid_move_reward: float = -1.5
    """Return of the player whose move did not parse or was illegal (the game ends)."""
    invalid_move_other_reward: float = 0.5
    """Return of the other player in that case."""
    instruction: str = SPIRAL_INSTRUCTION
    """User message around each observation; ``{observation}`` is replaced."""
    system_prompt: str | None = None
    """System message (``None``: the chat template's default)."""


class SpiralModule(PolicyModule):
    """SPIRAL self-play training (see the module docstring).

    Args:
        model: Policy model source, dtype, LoRA and gradient checkpointing.
        games: Games, turn limit, invalid-move rewards and prompt.
        opponent: Self-play or a fixed opponent.
        sampling: Sampling of training moves (upstream: T=1, top-p 1).
        engine: Which generation engine samples moves.
        samples_per_step: Training rows per step (SPIRAL: 128).
        games_per_round: Games played in lockstep per collection round.
        max_rounds: Collection rounds per step at most.
        ema_alpha: RAE baseline decay.
        filter_zero_advantage: Drop rows whose advantage is exactly 0.
        ppo_epochs: Optimizer steps per batch (the first on-policy, later ones clipped).
        epsilon: Clip range of the ratio.
        loss_type: Token aggregation; ``dr_grpo`` = sum / (rows x ``sampling.max_new_tokens``).
        beta: KL coefficient to the frozen initial policy (0: none, as upstream).
        tis_cap: Cap of the truncated importance weight ``min(pi_train / pi_sampler, cap)`` on each
            token of the loss when ``ppo_epochs`` is 1: it corrects a sampler that ran in another
            precision than the trainer (``engine.dtype`` bf16 with fp32 training). 0 turns it off.
            With more epochs the clipped ratio is to the trainer's pi_old and this cap bounds
            ``pi_old / pi_sampler``.
        optimizer: AdamW, learning-rate schedule and gradient clipping of the policy (here
            1e-6, constant).
        micro_batch_size: Rows per forward/backward chunk; ``None`` = a free-memory hint.
        save_hf_model: Write ``<run>/hf_model`` at the end.
        seed: Seed of game seeds, seats and subsampling.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        games: GameSettings = GameSettings(),  # noqa: B008
        opponent: OpponentSettings = OpponentSettings(),  # noqa: B008
        sampling: SamplingParams = SamplingParams(max_new_tokens=256, temperature=1.0),  # noqa: B008
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        samples_per_step: int = 128,
        games_per_round: int = 32,
        max_rounds: int = 50,
        ema_alpha: float = 0.95,
        filter_zero_advantage: bool = True,
        ppo_epochs: int = 2,
        epsilon: float = 0.2,
        loss_type: Literal["grpo", "dapo", "dr_grpo"] = "dr_grpo",
        beta: float = 0.0,
        tis_cap: float = 2.0,
        optimizer: OptimizerSettings = OptimizerSettings(learning_rate=1e-6),  # noqa: B008
        micro_batch_size: int | None = None,
        save_hf_model: bool = True,
        seed: int = 0,
    ) -> None:
        games = as_settings(GameSettings, games)
        opponent = as_settings(OpponentSettings, opponent)
        if ppo_epochs < 1:
            raise ConfigError(f"ppo_epochs must be >= 1, got {ppo_epochs}")
        if samples_per_step < 1 or games_per_round < 1:
            raise ConfigError("samples_per_step and games_per_round must be >= 1")
        if opponent.kind not in ("self_play", "random", "bot", "frozen"):
            raise ConfigError(
                f"opponent.kind must be self_play, random, bot or frozen, got {opponent.kind!r}"
            )
        super().__init__(
            model=as_settings(ModelSettings, model),
            engine=as_settings(EngineSettings, engine),
            optimizer=optimizer,
            micro_batch_size=micro_batch_size,
            save_hf_model=save_hf_model,
            needs_reference=beta > 0,
        )
        self.game_settings, self.opponent_settings = games, opponent
        self.sampling = as_settings(SamplingParams, sampling)
        self.engine_settings = as_settings(EngineSettings, engine)
        self.save_hyperparameters()
        self.plain_hparams()
        self.dataset: SelfPlayDataset | None = None
        self.frozen: FrozenOpponentState | None = None

    # ------------------------------------------------------------------ data
    def setup(self, stage: str) -> None:
        if stage != "fit" or self.dataset is not None:
            return
        hp, gs = self.hparams, self.game_settings
        prompter = PolicyPrompter(self.tokenizer, gs.instruction, gs.system_prompt)
        runner = GameRunner(
            self.engine,
            prompter,
            self.sampling,
            opponent=self._make_opponent(prompter),
            invalid_move_rewards=(gs.invalid_move_reward, gs.invalid_move_other_reward),
            max_turns=gs.max_turns,
        )
        rank = self.trainer.global_rank if self._trainer is not None else 0
        self.dataset = SelfPlayDataset(
            runner,
            gs.games,
            hp.samples_per_step,
            hp.games_per_round,
            self_play=self.opponent_settings.kind == "self_play",
            ema_alpha=hp.ema_alpha,
            filter_zero_advantage=hp.filter_zero_advantage,
            max_rounds=hp.max_rounds,
            seed=hp.seed + 7919 * rank,
        )
        self.register_state("selfplay", self.dataset)
        if self.frozen is not None:
            self.register_state("frozen_opponent", self.frozen)
        self.setup_run_dir("games")

    def _make_opponent(self, prompter: PolicyPrompter) -> Opponent | None:
        kind = self.opponent_settings.kind
        if kind == "self_play":
            return None
        if kind == "random":
            return RandomOpponent()
        if kind == "bot":
            import logging

            from lit_codeRL.rollout.selfplay import bot_players

            # A game without a library bot (negotiation) meets random moves instead, said once
            # here; a ConfigError when no game has a bot at all.
            players = bot_players(self.game_settings.games, fallback="random")
            if self.global_rank == 0:
                logging.getLogger("lit_codeRL").info(
                    "opponent bot: %s", ", ".join(f"{g} -> {who}" for g, who in players.items())
                )
            return BotOpponent(fallback=RandomOpponent())
        path = self.opponent_settings.frozen_path
        if path:
            from lit_codeRL.policy.loading import load_model

            settings = copy.deepcopy(as_settings(ModelSettings, self.hparams.model))
            settings.name_or_path, settings.lora = path, None
            frozen, _ = load_model(settings)
        else:
            frozen = copy.deepcopy(self.policy)
        frozen.eval().requires_grad_(False)
        engine = make_engine(self.engine_settings, self.tokenizer, frozen)
        engine.sync_weights(frozen)
        self.frozen = FrozenOpponentState(frozen, engine)
        return ModelOpponent(engine, prompter, self.sampling)

    # ------------------------------------------------------------------ step
    def training_step(self, dataloader_iter) -> None:
        hp = self.hparams
        item = next(dataloader_iter)
        batch: TrajectoryBatch = (item[0] if isinstance(item, tuple) else item).to(self.device)
        setup = prepare_step(
            self, batch, sampling=self.sampling, num_generations=1, share_prompt_forward=False,
            beta=hp.beta, sequence_advantages=batch.advantages, loss_type=hp.loss_type,
        )  # fmt: skip
        start, temperature, counts = setup.start, setup.temperature, setup.counts
        if hp.ppo_epochs > 1:  # the trainer's pi_old: ratio 1 in the first epoch, as upstream
            attach_policy_old(self, batch, setup)

        def loss_fn(mb: TrajectoryBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            logps, _ = self.token_logprobs(mb, start, temperature=temperature)
            # One epoch: ratio 1 and the truncated importance weight to the sampler; more: the
            # ratio to the trainer's pi_old (the same in every epoch), weighted pi_old / pi_sampler.
            loss, stats, _ = self.clipped_policy_loss(
                logps, mb, start, counts, epsilon=hp.epsilon, loss_type=hp.loss_type, beta=hp.beta,
                tis_cap=hp.tis_cap, num_updates=hp.ppo_epochs, max_completion_length=self.sampling.max_new_tokens,
            )  # fmt: skip
            return loss, stats

        stats: dict[str, list[float]] = {}
        times: dict[str, float] = {}
        for epoch in range(hp.ppo_epochs):
            step_stats, step_times = self.update(batch, loss_fn, start=start)
            for key, values in step_stats.items():
                stats.setdefault(key if epoch == 0 else f"{key}_epoch{epoch + 1}", []).extend(values)
            for key, value in step_times.items():
                times[key] = times.get(key, 0.0) + value
        self._after_step()
        self.log_games(batch, stats, times)

    def _after_step(self) -> None:
        every = self.opponent_settings.refresh_every
        if (
            self.frozen is not None
            and every > 0
            and (self.global_step // self.hparams.ppo_epochs) % every == 0
        ):
            # Under FSDP2 the policy's parameters are shards: gather them (every rank calls this).
            state = full_state_dict(self.policy) if self.sharded else self.policy.state_dict()
            self.frozen.copy_from(state)

    # ------------------------------------------------------------------ logging
    def log_games(
        self, batch: TrajectoryBatch, stats: dict[str, list[float]], times: dict[str, float]
    ) -> None:
        """Game outcomes of this step's games, baselines and sample statistics; the rest is
        ``round_logging``'s. Every game of the step goes to ``games.jsonl``."""
        lengths = torch.tensor([r["completion_tokens"] for r in batch.records], dtype=torch.float32)
        adv = torch.tensor([r["advantage"] for r in batch.records], dtype=torch.float32)
        metrics = {
            **{f"train/{k}": v for k, v in batch.stats.items() if k.startswith(("game/", "baseline/"))},
            "train/samples": float(batch.batch_size),
            "train/samples_collected": batch.stats.get("samples_collected", 0.0),
            "train/advantage_mean": float(adv.mean()),
            "train/advantage_abs": float(adv.abs().mean()),
            "train/completion_length": float(lengths.mean()),
        }
        # the games of this round, for the run's jsonl (a module without a writer records none)
        writing = self.writer is not None and self.dataset is not None
        games = [g.record() for g in self.dataset.last_games] if writing else None
        invalid = ("invalid", batch.stats.get("game/invalid_move_rate", 0.0))
        log_round(self, batch, stats, times, metrics, progress=invalid, records=games)


class FrozenOpponentState:
    """The frozen opponent's weights as checkpoint state: a resumed run plays the same opponent."""

    def __init__(self, model: torch.nn.Module, engine: GenerationEngine | None = None) -> None:
        self.model, self.engine = model, engine

    @torch.no_grad()
    def copy_from(self, policy_state: dict[str, torch.Tensor]) -> None:
        """Load the policy's (full, unsharded) state dict into the opponent."""
        self.model.load_state_dict(policy_state, strict=False)
        self._refresh_engine()

    def state_dict(self) -> dict[str, Any]:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state)
        self._refresh_engine()

    def _refresh_engine(self) -> None:
        # The opponent's engine may sample from its own replica (bf16 on CPU): refresh it, or
        # it keeps playing the weights it was built with.
        if self.engine is not None:
            self.engine.sync_weights(self.model)
