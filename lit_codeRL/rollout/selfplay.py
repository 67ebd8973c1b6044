"""Self-play rollouts: games played in lockstep by the live policy, and SPIRAL's per-turn samples.

``GameRunner`` plays a batch of two-player games at once: every iteration, each live game's
player to move acts; all moves of seats the policy holds come from one batched ``generate`` (a
fresh prompt per turn: the instruction around that seat's observation, as SPIRAL does), the
other seats from a fixed :class:`Opponent` (random legal moves, a library bot, a frozen copy of
the policy). A move is parsed with SPIRAL's ``\\boxed{}`` convention; a move that does not parse
or that the game rejects ends the game with the invalid-move rewards (training: offender -1.5,
other +0.5; evaluation: -1 / +1). A game still running after ``max_turns`` moves is a draw.

``SelfPlayDataset`` turns finished games into training rows (one row per turn of each trained
seat, the turn's own prompt and action), with SPIRAL's role-conditioned advantage: per
``(game, seat)`` an EMA baseline, ``A = R - b`` with the old ``b``, then
``b <- alpha * b + (1 - alpha) * R``, once per game and seat; zero-advantage rows dropped. It plays
rounds of games until at least ``samples_per_step`` rows exist and keeps exactly that many, drawn
uniformly.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.algorithms.baselines import RoleBaselines
from lit_codeRL.envs.games import GAMES, library_bot, make_game, parse_move
from lit_codeRL.envs.protocol import TurnBasedGame
from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch

SPIRAL_INSTRUCTION = (
    "You are playing a two-player zero-sum game. Make valid actions to win.\n"
    "Observation: {observation}\n"
    "Please reason step by step, and put your final answer within \\boxed{}."
)
"""SPIRAL's ``qwen3`` prompt (``spiral/template.py``) as a user message; ``{observation}`` is
replaced by the seat's observation (no other brace is a placeholder)."""


@dataclass
class GameTurn:
    """One move of one seat."""

    player: int
    text: str
    """What the player wrote (the whole response)."""
    move: str | None
    """The parsed move, ``None`` when it did not parse (an invalid move)."""
    by_policy: bool
    observation: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    action_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


@dataclass
class GameRecord:
    """A finished game."""

    game_id: str
    seed: int
    policy_seats: tuple[int, ...]
    turns: list[GameTurn] = field(default_factory=list)
    returns: list[float] = field(default_factory=lambda: [0.0, 0.0])
    end_reason: str = ""
    """``game_over``, ``invalid_move`` or ``turn_limit`` (a draw)."""
    invalid_player: int | None = None
    game_returns: list[float] | None = None
    """The game's own returns before any invalid-move override (``None`` when one applied)."""

    def outcome(self, seat: int) -> str:
        """``win`` / ``loss`` / ``draw`` for ``seat``, or ``invalid`` when it made the invalid move."""
        if self.invalid_player == seat:
            return "invalid"
        mine, theirs = self.returns[seat], self.returns[1 - seat]
        return "win" if mine > theirs else "loss" if mine < theirs else "draw"

    def record(self) -> dict[str, Any]:
        return {
            "game_id": self.game_id,
            "seed": self.seed,
            "policy_seats": list(self.policy_seats),
            "returns": self.returns,
            "end_reason": self.end_reason,
            "invalid_player": self.invalid_player,
            "num_turns": len(self.turns),
            "turns": [
                {
                    "player": t.player,
                    "by_policy": t.by_policy,
                    "move": t.move,
                    "text": t.text,
                    "finish_reason": t.finish_reason,
                    "completion_tokens": len(t.action_ids),
                }
                for t in self.turns
            ],
        }


class Opponent(Protocol):
    """A fixed player for the seats the policy does not hold."""

    def act(self, games: list[TurnBasedGame], rng: random.Random) -> list[tuple[str, str | None]]:
        """``(text, move)`` for the player to move in each game (``move`` ``None``: invalid)."""
        ...


class RandomOpponent:
    """Uniformly random legal moves (negotiation: random accept / deny / offers)."""

    def act(self, games: list[TurnBasedGame], rng: random.Random) -> list[tuple[str, str | None]]:
        return [(m, m) for m in (g.random_move(rng) for g in games)]


class BotOpponent:
    """The game library's bot (OpenSpiel MCTS for TicTacToe, CFR+ equilibrium for Kuhn Poker).

    Args:
        fallback: Plays the games whose library has no bot (negotiation: ``bot_name`` is
            ``None``). ``None``: such a game is an error (``bot_move`` raises), which is what an
            evaluation wants: a rate "vs bot" must be against a bot.
    """

    def __init__(self, fallback: Opponent | None = None) -> None:
        self.fallback = fallback

    def act(self, games: list[TurnBasedGame], rng: random.Random) -> list[tuple[str, str | None]]:
        if self.fallback is None:
            return [(m, m) for m in (g.bot_move(rng) for g in games)]
        out: dict[int, tuple[str, str | None]] = {}
        for i, g in enumerate(games):
            if _bot_name(g) is not None:
                move = g.bot_move(rng)
                out[i] = (move, move)
        others = [i for i in range(len(games)) if i not in out]
        if others:
            out.update(zip(others, self.fallback.act([games[i] for i in others], rng), strict=True))
        return [out[i] for i in range(len(games))]


def bot_players(game_ids: Sequence[str], fallback: str = "random") -> dict[str, str]:
    """Who plays ``opponent.kind: bot`` in each game: its library bot (by name), else
    ``fallback`` (marked as the stand-in). A ``ConfigError`` when none of the games has a bot:
    the run would be ``opponent.kind: random`` under another name."""
    bots = {g: library_bot(g) for g in dict.fromkeys(game_ids)}
    if not any(bots.values()):
        raise ConfigError(
            f"opponent.kind bot: no library bot for {', '.join(bots)} (games with one: "
            f"{', '.join(g for g in GAMES if library_bot(g))}); use opponent.kind {fallback} or frozen"
        )
    return {g: bot or f"{fallback} (no library bot)" for g, bot in bots.items()}


def _bot_name(game: TurnBasedGame) -> str | None:
    return getattr(game, "bot_name", None)


class PolicyPrompter:
    """Prompts for a seat's observation: the instruction, templated with the tokenizer's chat
    template (cached: observations repeat, e.g. TicTacToe openings)."""

    def __init__(
        self, tokenizer: Any, instruction: str = SPIRAL_INSTRUCTION, system_prompt: str | None = None
    ):
        if "{observation}" not in instruction:
            raise ValueError("the game instruction must contain '{observation}'")
        self.chat, self.instruction = ChatFormat(tokenizer, system_prompt), instruction
        self._cache: dict[str, list[int]] = {}

    def ids(self, observation: str) -> list[int]:
        if observation not in self._cache:
            if len(self._cache) > 50_000:
                self._cache.clear()
            self._cache[observation] = self.chat.prompt_ids(
                self.instruction.replace("{observation}", observation)
            )
        return self._cache[observation]


def generate_moves(
    engine: GenerationEngine,
    prompter: PolicyPrompter,
    sampling: SamplingParams,
    games: list[TurnBasedGame],
    generator: torch.Generator | None,
) -> list[GameTurn]:
    """One batched generate for the player to move in each game; the turns with their exact ids."""
    observations = [g.observation(g.current_player()) for g in games]
    prompts = [prompter.ids(o) for o in observations]
    ids, mask = engine.pad_prompts(prompts)
    out = engine.generate(ids, mask, sampling, 1, generator)
    turns = []
    for r, g in enumerate(games):
        length = int(out.completion_mask[r].sum())
        turns.append(
            GameTurn(
                player=g.current_player(),
                text=out.texts[r],
                move=parse_move(out.texts[r], g.legal_actions()),
                by_policy=True,
                observation=observations[r],
                prompt_ids=prompts[r],
                action_ids=out.completion_ids[r, :length].tolist(),
                logprobs=out.logprobs[r, :length].tolist(),
                finish_reason=out.finish_reasons[r] if out.finish_reasons else "stop",
            )
        )
    return turns


class ModelOpponent:
    """A frozen language model (an earlier copy of the policy) playing through its own engine."""

    def __init__(self, engine: GenerationEngine, prompter: PolicyPrompter, sampling: SamplingParams):
        self.engine, self.prompter, self.sampling = engine, prompter, sampling
        self.generator = torch.Generator().manual_seed(0)

    def act(self, games: list[TurnBasedGame], rng: random.Random) -> list[tuple[str, str | None]]:
        self.generator.manual_seed(rng.randrange(2**62))
        turns = generate_moves(self.engine, self.prompter, self.sampling, games, self.generator)
        return [(t.text, t.move) for t in turns]


class GameRunner:
    """Plays batches of games with the policy in some seats (see the module docstring).

    Args:
        engine: The policy's generation engine.
        prompter: Turns observations into prompt ids.
        sampling: Sampling of the policy's moves.
        opponent: Who plays the seats the policy does not hold (``None``: self-play only).
        invalid_move_rewards: ``(offender, other)`` returns of a game ended by an invalid move.
        max_turns: Moves per game at most (both players); a longer game is a draw.
    """

    def __init__(
        self,
        engine: GenerationEngine,
        prompter: PolicyPrompter,
        sampling: SamplingParams,
        opponent: Opponent | None = None,
        invalid_move_rewards: tuple[float, float] = (-1.5, 0.5),
        max_turns: int = 50,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.engine, self.prompter, self.sampling = engine, prompter, sampling
        self.opponent, self.invalid_move_rewards, self.max_turns = opponent, invalid_move_rewards, max_turns

    def run(
        self,
        game_ids: Sequence[str],
        seeds: Sequence[int],
        policy_seats: Sequence[tuple[int, ...]],
        generator: torch.Generator | None = None,
        stats: dict[str, float] | None = None,
    ) -> list[GameRecord]:
        """Play one game per ``game_ids[i]`` (seeded ``seeds[i]``, the policy in ``policy_seats[i]``)."""
        import time

        stats = stats if stats is not None else {}
        rng = random.Random(int(torch.randint(0, 2**62, (1,), generator=generator)))
        games: list[TurnBasedGame] = []
        records: list[GameRecord] = []
        for game_id, seed, seats in zip(game_ids, seeds, policy_seats, strict=True):
            if any(s not in (0, 1) for s in seats) or not seats:
                raise ValueError(f"policy seats must be a non-empty subset of (0, 1), got {seats}")
            if len(seats) < 2 and self.opponent is None:
                raise ValueError("a game with a seat the policy does not hold needs an opponent")
            game = make_game(game_id)
            game.reset(seed=seed)
            games.append(game)
            records.append(GameRecord(game_id, int(seed), tuple(seats)))
        live = list(range(len(games)))
        while live:
            mine = [i for i in live if games[i].current_player() in records[i].policy_seats]
            theirs = [i for i in live if i not in mine]
            moves: dict[int, GameTurn] = {}
            if mine:
                t0 = time.perf_counter()
                for i, turn in zip(
                    mine,
                    generate_moves(
                        self.engine, self.prompter, self.sampling, [games[i] for i in mine], generator
                    ),
                    strict=True,
                ):
                    moves[i] = turn
                stats["generate_s"] = stats.get("generate_s", 0.0) + time.perf_counter() - t0
                stats["completion_tokens"] = stats.get("completion_tokens", 0.0) + sum(
                    len(moves[i].action_ids) for i in mine
                )
            if theirs:
                assert self.opponent is not None
                acted = self.opponent.act([games[i] for i in theirs], rng)
                for i, (text, move) in zip(theirs, acted, strict=True):
                    moves[i] = GameTurn(games[i].current_player(), text, move, by_policy=False)
            for i in live:
                self._apply(games[i], records[i], moves[i])
            live = [i for i in live if not records[i].end_reason]
        return records

    def _apply(self, game: TurnBasedGame, record: GameRecord, turn: GameTurn) -> None:
        record.turns.append(turn)
        invalid = turn.move is None
        if not invalid:
            done, info = game.step(turn.move)
            invalid = bool(info.get("invalid"))
            if done and not invalid:
                record.returns = [float(r) for r in game.returns()]
                record.game_returns = list(record.returns)
                record.end_reason = "game_over"
                return
        if invalid:
            offender, other = self.invalid_move_rewards
            record.returns = [offender if p == turn.player else other for p in range(2)]
            record.end_reason, record.invalid_player = "invalid_move", turn.player
        elif len(record.turns) >= self.max_turns:
            record.returns, record.end_reason = [0.0, 0.0], "turn_limit"


@dataclass
class TurnSample:
    """One training row: a policy turn of a trained seat and its advantage."""

    game: GameRecord
    turn: GameTurn
    advantage: float
    ret: float


def turn_samples(
    games: Sequence[GameRecord], baselines: RoleBaselines, filter_zero_advantage: bool = True
) -> list[TurnSample]:
    """SPIRAL's per-turn samples with role-conditioned advantages (RAE).

    Per game, in order, and per seat the policy holds: ``A = R_seat - b[(game, seat)]`` with the
    baseline as it was, then the baseline moves toward ``R_seat`` once (not once per turn). Every
    policy turn of that seat becomes a sample carrying ``A`` (gamma = 1); samples with ``A == 0``
    are dropped when ``filter_zero_advantage``."""
    out = []
    for game in games:
        seats = sorted(game.policy_seats)
        rets = torch.tensor([game.returns[s] for s in seats], dtype=torch.float64)
        adv = baselines.advantages(rets, [(game.game_id, s) for s in seats])
        for seat, a, r in zip(seats, adv.tolist(), rets.tolist(), strict=True):
            if filter_zero_advantage and a == 0.0:
                continue
            out.extend(TurnSample(game, t, a, r) for t in game.turns if t.player == seat and t.by_policy)
    return out


def samples_batch(samples: Sequence[TurnSample], pad_token_id: int) -> TrajectoryBatch:
    """One row per sample: the turn's prompt, then its action (trainable); ``advantages`` ``[B]``."""
    order: dict[int, int] = {}  # game -> episode index within the batch
    for s in samples:
        order.setdefault(id(s.game), len(order))
    batch = TrajectoryBatch.from_segments(
        [[Segment(s.turn.prompt_ids), Segment(s.turn.action_ids, True, s.turn.logprobs, 0)] for s in samples],
        pad_token_id,
        rewards=torch.tensor([s.ret for s in samples], dtype=torch.float32),
        group_ids=torch.arange(len(samples)),
        roles=[f"{s.game.game_id}/{s.turn.player}" for s in samples],
        role_ids=torch.tensor([s.turn.player for s in samples], dtype=torch.long),
        episode_ids=torch.tensor([order[id(s.game)] for s in samples], dtype=torch.long),
        terminated=torch.tensor([s.game.end_reason != "turn_limit" for s in samples]),
        truncated=torch.tensor([s.game.end_reason == "turn_limit" for s in samples]),
        records=[
            {
                "game_id": s.game.game_id,
                "seat": s.turn.player,
                "move": s.turn.move,
                "completion": s.turn.text,
                "finished": s.turn.finish_reason != "length",
                "completion_tokens": len(s.turn.action_ids),
                "advantage": s.advantage,
                "return": s.ret,
            }
            for s in samples
        ],
    )
    batch.advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return batch


def game_stats(games: Sequence[GameRecord]) -> dict[str, float]:
    """Outcome rates of the policy's seats over ``games``: ``invalid_rate`` (share of the policy's
    moves that were invalid), per seat ``win/draw/loss/invalid`` shares of games, game length."""
    moves = [t for g in games for t in g.turns if t.by_policy]
    out = {
        "games": float(len(games)),
        "invalid_move_rate": sum(t.move is None for t in moves) / max(len(moves), 1),
        "game_length": sum(len(g.turns) for g in games) / max(len(games), 1),
        "cut_off_rate": sum(t.finish_reason == "length" for t in moves) / max(len(moves), 1),
    }
    for seat in (0, 1):
        held = [g for g in games if seat in g.policy_seats]
        if not held:
            continue
        for outcome in ("win", "draw", "loss", "invalid"):
            out[f"seat{seat}/{outcome}"] = sum(g.outcome(seat) == outcome for g in held) / len(held)
    return out


class SelfPlayDataset(IterableDataset):
    """Endless batches of SPIRAL samples from the live policy (see the module docstring).

    Args:
        runner: Plays the games.
        game_ids: Games to train on; each round plays them in turn, shuffled (multi-game).
        samples_per_step: Rows per batch (exactly; SPIRAL: 128).
        games_per_round: Games played in lockstep per round.
        self_play: Both seats are the policy's (else only one seat, alternating between games,
            against ``runner.opponent``).
        ema_alpha: RAE baseline decay (SPIRAL: 0.95).
        filter_zero_advantage: Drop samples with ``A == 0``.
        max_rounds: Rounds at most per batch (a batch may then hold fewer rows).
        seed: Seed of game seeds, seat assignment and subsampling (checkpointed).
    """

    def __init__(
        self,
        runner: GameRunner,
        game_ids: Sequence[str],
        samples_per_step: int,
        games_per_round: int,
        self_play: bool = True,
        ema_alpha: float = 0.95,
        filter_zero_advantage: bool = True,
        max_rounds: int = 50,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not game_ids:
            raise ValueError("at least one game id is needed")
        for g in game_ids:
            make_game(g)  # unknown ids fail here, at setup
        self.runner, self.game_ids = runner, list(game_ids)
        self.samples_per_step, self.games_per_round = samples_per_step, games_per_round
        self.self_play, self.filter_zero_advantage, self.max_rounds = (
            self_play,
            filter_zero_advantage,
            max_rounds,
        )
        self.baselines = RoleBaselines(alpha=ema_alpha)
        self.generator = torch.Generator().manual_seed(seed)
        self.games_played = 0
        self.last_games: list[GameRecord] = []

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.collect()

    def _round_games(self) -> tuple[list[str], list[int], list[tuple[int, ...]]]:
        order = [
            self.game_ids[i] for i in torch.randperm(len(self.game_ids), generator=self.generator).tolist()
        ]
        ids = [order[k % len(order)] for k in range(self.games_per_round)]
        seeds = torch.randint(0, 2**31, (len(ids),), generator=self.generator).tolist()
        if self.self_play:
            seats = [(0, 1)] * len(ids)
        else:
            seats = [((self.games_played + k) % 2,) for k in range(len(ids))]
        self.games_played += len(ids)
        return ids, seeds, seats

    def collect(self) -> TrajectoryBatch:
        stats: dict[str, float] = {"generate_s": 0.0, "completion_tokens": 0.0}
        samples: list[TurnSample] = []
        games: list[GameRecord] = []
        rounds = 0
        while len(samples) < self.samples_per_step and rounds < self.max_rounds:
            rounds += 1
            ids, seeds, seats = self._round_games()
            played = self.runner.run(ids, seeds, seats, self.generator, stats)
            games += played
            samples += turn_samples(played, self.baselines, self.filter_zero_advantage)
        collected = len(samples)
        if collected > self.samples_per_step:
            keep = torch.randperm(collected, generator=self.generator)[: self.samples_per_step].sort().values
            samples = [samples[i] for i in keep.tolist()]
        if not samples:
            raise RuntimeError(
                f"no training sample in {rounds} rounds of games (every advantage was 0); "
                "raise max_rounds or games_per_round"
            )
        self.last_games = games
        batch = samples_batch(samples, self.runner.engine.pad_token_id)
        batch.stats.update(stats)
        batch.stats.update({f"game/{k}": v for k, v in game_stats(games).items()})
        batch.stats.update({"samples_collected": float(collected), "rollout_rounds": float(rounds)})
        for (game_id, seat), value in sorted(self.baselines.values.items()):
            batch.stats[f"baseline/{game_id}/{seat}"] = float(value)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "games_played": self.games_played,
            "baselines": self.baselines.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.games_played = int(state["games_played"])
        self.baselines.load_state_dict(state["baselines"])
