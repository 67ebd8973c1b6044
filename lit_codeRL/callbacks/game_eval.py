"""``GameEvalCallback``: the policy against fixed opponents at interval, with intervals on every rate.

Every ``eval_interval_steps`` optimizer steps (and at start and end), for each game and each
opponent (``random`` legal moves, the library ``bot``), the policy plays ``games_per_seat`` games
in each seat at SPIRAL's evaluation sampling (T=0.6, top-p 0.95). An invalid move ends the game
with -1 / +1 (SPIRAL's online evaluation). The same game seeds are used at every evaluation, so
two evaluations differ only by the policy. Reported per game, opponent and seat (and pooled over
seats): win, draw, loss and invalid-move rates with Wilson 95% intervals, and the share of the
policy's moves that were invalid. Results go to the loggers and to
``<log_dir>/game_eval/step_XXXXXX.json`` with every game. While it runs, it shows games done, the
running win rate and the ETA (:class:`~lit_codeRL.callbacks.progress.EvalProgress`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer

from lit_codeRL.callbacks.interval import IntervalEvaluation
from lit_codeRL.callbacks.progress import EvalProgress
from lit_codeRL.envs.games import make_game
from lit_codeRL.policy.engine import SamplingParams
from lit_codeRL.rollout.evaluation import gather_results
from lit_codeRL.rollout.selfplay import (
    SPIRAL_INSTRUCTION,
    BotOpponent,
    GameRecord,
    GameRunner,
    PolicyPrompter,
    RandomOpponent,
)

log = logging.getLogger("lit_codeRL")

_OPPONENTS = {"random": RandomOpponent, "bot": BotOpponent}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% for z = 1.96); (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def outcome_metrics(games: list[GameRecord], seats: tuple[int, ...] = (0, 1)) -> dict[str, float]:
    """Rates over the games where the policy held one of ``seats``: ``win``/``draw``/``loss``/
    ``invalid`` with ``_lo``/``_hi`` Wilson bounds, ``games``, and ``invalid_move_rate`` (per move)."""
    held = [(g, s) for g in games for s in g.policy_seats if s in seats]
    n = len(held)
    out: dict[str, float] = {"games": float(n)}
    for outcome in ("win", "draw", "loss", "invalid"):
        k = sum(g.outcome(s) == outcome for g, s in held)
        lo, hi = wilson_interval(k, n)
        out[outcome] = k / n if n else 0.0
        out[f"{outcome}_lo"], out[f"{outcome}_hi"] = lo, hi
    moves = [t for g, s in held for t in g.turns if t.by_policy and t.player == s]
    out["invalid_move_rate"] = sum(t.move is None for t in moves) / max(len(moves), 1)
    return out


class GameEvalCallback(IntervalEvaluation):
    """Interval evaluation of a game-playing policy against fixed opponents (module docstring).

    Args:
        games: Game ids to evaluate on.
        opponents: ``random`` and/or ``bot`` (the game library's: OpenSpiel MCTS for TicTacToe,
            CFR+ equilibrium for Kuhn Poker; negotiation has none and skips it).
        games_per_seat: Games per game, opponent and seat (>= 64 for usable intervals).
        eval_interval_steps: Evaluate every N optimizer steps (0 = only start/end).
        eval_at_start: Evaluate before the first step (the baseline).
        eval_at_end: Evaluate after the last step.
        max_new_tokens: Token limit of each move.
        temperature: Sampling temperature (SPIRAL's evaluation: 0.6).
        top_p: Nucleus mass (SPIRAL's evaluation: 0.95).
        batch_size: Games played in lockstep.
        max_turns: Moves per game at most (a longer game is a draw).
        seed: Seed of the game seeds and sampling (the same at every evaluation).
        output_dir: Where the JSON results go (default: ``<log_dir>/game_eval``).
    """

    def __init__(
        self,
        games: list[str] | None = None,
        opponents: list[str] | None = None,
        games_per_seat: int = 64,
        eval_interval_steps: int = 20,
        eval_at_start: bool = True,
        eval_at_end: bool = True,
        max_new_tokens: int = 256,
        temperature: float = 0.6,
        top_p: float = 0.95,
        batch_size: int = 64,
        max_turns: int = 50,
        seed: int = 1234,
        output_dir: str | None = None,
    ) -> None:
        super().__init__(eval_interval_steps, eval_at_start, eval_at_end)
        self.games = list(games or ["tictactoe"])
        self.opponents = list(opponents or ["random", "bot"])
        for name in self.opponents:
            if name not in _OPPONENTS:
                raise ValueError(f"unknown evaluation opponent {name!r}; choose from {sorted(_OPPONENTS)}")
        for game_id in self.games:
            make_game(game_id)
        self.games_per_seat = games_per_seat
        self.sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        self.batch_size, self.max_turns, self.seed = batch_size, max_turns, seed
        self.output_dir = output_dir

    # ------------------------------------------------------------------ evaluation
    def _supports(self, game_id: str, opponent: str) -> bool:
        if opponent != "bot":
            return True
        game = make_game(game_id)
        game.reset(seed=0)
        try:
            import random

            game.bot_move(random.Random(0))
        except NotImplementedError:
            return False
        return True

    @torch.no_grad()
    def evaluate(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, float]:
        start = time.perf_counter()
        engine = pl_module.generation_engine()
        settings = getattr(pl_module, "game_settings", None)
        prompter = PolicyPrompter(
            pl_module.tokenizer,
            getattr(settings, "instruction", SPIRAL_INSTRUCTION),
            getattr(settings, "system_prompt", None),
        )
        rank, world = trainer.global_rank, trainer.world_size
        generator = torch.Generator().manual_seed(self.seed + rank)
        seeds = torch.randint(
            0, 2**31, (self.games_per_seat,), generator=torch.Generator().manual_seed(self.seed)
        )
        local: list[dict[str, Any]] = []
        pairs = [(g, name) for g in self.games for name in self.opponents if self._supports(g, name)]
        jobs = [(s, int(seed)) for s in (0, 1) for seed in seeds.tolist()][rank::world]
        progress = EvalProgress(
            f"game_eval step {trainer.global_step}", len(pairs) * len(jobs), "games", "win rate", trainer
        )
        with trainer.precision_plugin.forward_context():
            for game_id, name in pairs:
                runner = GameRunner(
                    engine,
                    prompter,
                    self.sampling,
                    opponent=_OPPONENTS[name](),
                    invalid_move_rewards=(-1.0, 1.0),
                    max_turns=self.max_turns,
                )
                for i in range(0, len(jobs), self.batch_size):
                    chunk = jobs[i : i + self.batch_size]
                    played = runner.run(
                        [game_id] * len(chunk),
                        [seed for _, seed in chunk],
                        [(s,) for s, _ in chunk],
                        generator,
                    )
                    local += [{"opponent": name, **g.record()} for g in played]
                    wins = sum(g.outcome(s) == "win" for g in played for s in g.policy_seats)
                    progress.advance(len(played), wins)
        progress.close()
        results = gather_results(local, world)
        metrics = self._metrics(results)
        metrics["game_eval/seconds"] = time.perf_counter() - start
        self.publish(trainer, metrics, {"games": results}, "game_eval", self.output_dir)
        if trainer.is_global_zero:
            for key in sorted(k for k in metrics if k.endswith("/win") or k.endswith("/invalid_move_rate")):
                log.info("game_eval step %d: %s = %.3f", trainer.global_step, key, metrics[key])
        return metrics

    def _metrics(self, results: list[dict[str, Any]]) -> dict[str, float]:
        metrics: dict[str, float] = {}
        keys = sorted({(r["game_id"], r["opponent"]) for r in results})
        for game_id, name in keys:
            games = [_from_record(r) for r in results if r["game_id"] == game_id and r["opponent"] == name]
            for label, seats in (("", (0, 1)), ("/seat0", (0,)), ("/seat1", (1,))):
                for key, value in outcome_metrics(games, seats).items():
                    metrics[f"game_eval/{game_id}/vs_{name}{label}/{key}"] = value
        return metrics


def _from_record(r: dict[str, Any]) -> GameRecord:
    """A game back from its JSON record (what the ranks exchange), enough for the outcome rates."""
    from lit_codeRL.rollout.selfplay import GameTurn

    game = GameRecord(r["game_id"], r["seed"], tuple(r["policy_seats"]), returns=list(r["returns"]))
    game.end_reason, game.invalid_player = r["end_reason"], r["invalid_player"]
    game.turns = [
        GameTurn(t["player"], t["text"], t["move"], t["by_policy"], finish_reason=t["finish_reason"])
        for t in r["turns"]
    ]
    return game
