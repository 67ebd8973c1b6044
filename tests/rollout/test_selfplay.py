"""SPIRAL's rollout side: RAE and per-turn samples against hand-built games, the game runner with
a scripted policy (invalid moves, turn limits, opponents), and the dataset's exact batch size and
checkpoint state."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.algorithms.baselines import RoleBaselines
from lit_codeRL.policy.output import GenerationOutput
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.selfplay import (
    GameRecord,
    GameRunner,
    GameTurn,
    PolicyPrompter,
    RandomOpponent,
    SelfPlayDataset,
    samples_batch,
    turn_samples,
)


def turn(player: int, by_policy: bool = True, move: str | None = "[0]", n_tokens: int = 2) -> GameTurn:
    return GameTurn(
        player,
        "text",
        move,
        by_policy,
        prompt_ids=[7, 8, 9],
        action_ids=[5] * n_tokens,
        logprobs=[-0.5] * n_tokens,
    )


def game(returns, players, policy_seats=(0, 1), end="game_over", invalid_player=None, game_id="tictactoe"):
    g = GameRecord(
        game_id, 0, tuple(policy_seats), [turn(p) for p in players], list(returns), end, invalid_player
    )
    return g


# ------------------------------------------------------------------------------ RAE, hand-computed
def test_rae_per_turn_samples_hand_computed():
    alpha = 0.9
    baselines = RoleBaselines(alpha=alpha)
    games = [
        # seat 0 wins in 3 of its moves (5 turns)
        game([1.0, -1.0], [0, 1, 0, 1, 0]),
        # seat 1 plays an invalid move on turn 2: -1.5 / +0.5
        game([0.5, -1.5], [0, 1], end="invalid_move", invalid_player=1),
        # a draw
        game([0.0, 0.0], [0, 1, 0, 1, 0, 1, 0, 1, 0]),
    ]
    samples = turn_samples(games, baselines, filter_zero_advantage=True)
    # Game 1: b = (0, 0) -> A = (1, -1); then b0 = 0.1, b1 = -0.1.
    # Game 2: A0 = 0.5 - 0.1 = 0.4, A1 = -1.5 + 0.1 = -1.4; b0 = 0.9*0.1 + 0.1*0.5 = 0.14,
    #         b1 = 0.9*-0.1 + 0.1*-1.5 = -0.24.
    # Game 3: A0 = -0.14, A1 = 0.24; b0 = 0.126, b1 = -0.216.
    expected = [1.0] * 3 + [-1.0] * 2 + [0.4] + [-1.4] + [-0.14] * 5 + [0.24] * 4
    got = [s.advantage for s in samples]
    assert got == pytest.approx(expected)
    assert [s.turn.player for s in samples] == [0, 0, 0, 1, 1, 0, 1] + [0] * 5 + [1] * 4
    assert [s.ret for s in samples[5:7]] == [0.5, -1.5]
    assert baselines.values[("tictactoe", 0)] == pytest.approx(0.126)
    assert baselines.values[("tictactoe", 1)] == pytest.approx(-0.216)


def test_rae_updates_once_per_game_not_per_turn_and_drops_zero_advantages():
    baselines = RoleBaselines(alpha=0.5)
    # A first draw has A == 0 for both seats (baselines start at 0): every sample is dropped.
    draw = game([0.0, 0.0], [0, 1, 0, 1])
    assert turn_samples([draw], baselines) == []
    assert turn_samples([draw], RoleBaselines(alpha=0.5), filter_zero_advantage=False) != []
    long_win = game([1.0, -1.0], [0, 1] * 4)
    turn_samples([long_win], baselines)
    assert baselines.values[("tictactoe", 0)] == pytest.approx(0.5)  # one update, not four


def test_rae_baselines_are_per_game_and_seat():
    baselines = RoleBaselines(alpha=0.5)
    turn_samples([game([1.0, -1.0], [0, 1]), game([-1.0, 1.0], [0, 1], game_id="kuhn_poker")], baselines)
    assert baselines.values == {
        ("tictactoe", 0): 0.5,
        ("tictactoe", 1): -0.5,
        ("kuhn_poker", 0): -0.5,
        ("kuhn_poker", 1): 0.5,
    }


def test_fixed_opponent_only_the_learner_seat_is_trained():
    baselines = RoleBaselines(alpha=0.5)
    g = GameRecord(
        "tictactoe", 0, (1,), [turn(0, by_policy=False), turn(1), turn(0, by_policy=False), turn(1)]
    )
    g.returns, g.end_reason = [1.0, -1.0], "game_over"
    samples = turn_samples([g], baselines)
    assert [s.turn.player for s in samples] == [1, 1]
    assert [s.advantage for s in samples] == [-1.0, -1.0]
    assert ("tictactoe", 0) not in baselines.values


def test_samples_batch_rows_are_prompt_then_action():
    samples = turn_samples([game([1.0, -1.0], [0, 1, 0])], RoleBaselines())
    batch = samples_batch(samples, pad_token_id=0)
    assert batch.batch_size == 3
    assert batch.advantages.tolist() == [1.0, 1.0, -1.0]  # seat by seat
    assert batch.role_ids.tolist() == [0, 0, 1]
    assert batch.roles == ["tictactoe/0", "tictactoe/0", "tictactoe/1"]
    assert batch.trainable_mask.sum(1).tolist() == [2, 2, 2]
    row = batch.input_ids[0][batch.attention_mask[0].bool()].tolist()
    assert row == [7, 8, 9, 5, 5]
    assert batch.old_logprobs[batch.trainable_mask.bool()].tolist() == [-0.5] * 6


# ------------------------------------------------------------------------- the runner, scripted
class ScriptedEngine:
    """A generation engine that answers from a script: ``script(observation) -> text``."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script, self.pad_token_id = tokenizer, script, 0
        self.calls: list[int] = []

    def pad_prompts(self, prompts):
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
        return ids, (ids != 0).long()

    def generate(self, ids, mask, sampling, n, generator=None, on_finished=None):
        texts = [self.script(self.tokenizer.decode(row[m.bool()])) for row, m in zip(ids, mask, strict=True)]
        self.calls.append(len(texts))
        comp = torch.tensor([[11, 12, 13]] * len(texts))
        return GenerationOutput(
            prompt_ids=ids,
            prompt_mask=mask,
            completion_ids=comp,
            completion_mask=torch.ones_like(comp),
            logprobs=torch.full(comp.shape, -1.0),
            texts=texts,
            finished=torch.ones(len(texts), dtype=torch.bool),
            finish_reasons=["stop"] * len(texts),
        )


def first_free(observation: str) -> str:
    """Play the lowest free TicTacToe square (from the board in the prompt)."""
    moves = observation.split("Available Moves: ")[-1].split("\n")[0]
    return f"I play \\boxed{{{moves.split(',')[0].strip().strip(chr(39))}}}"


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return tiny_model[1]


def runner(tokenizer, script, **kw) -> tuple[GameRunner, ScriptedEngine]:
    engine = ScriptedEngine(tokenizer, script)
    return GameRunner(engine, PolicyPrompter(tokenizer), SamplingParams(max_new_tokens=3), **kw), engine


def test_runner_self_play_plays_games_in_lockstep(tokenizer):
    r, engine = runner(tokenizer, first_free)
    games = r.run(["tictactoe"] * 3, [1, 2, 3], [(0, 1)] * 3)
    # First-free on both sides: O takes 0, 2, 4, 6 (the anti-diagonal wins on move 7).
    for g in games:
        assert g.end_reason == "game_over" and g.returns == [1.0, -1.0]
        assert [t.move for t in g.turns] == ["[0]", "[1]", "[2]", "[3]", "[4]", "[5]", "[6]"]
        assert all(t.by_policy and t.action_ids == [11, 12, 13] for t in g.turns)
    assert engine.calls == [3] * 7  # one batched generate per move, all games together


def test_runner_invalid_move_ends_the_game_with_the_configured_rewards(tokenizer):
    def script(observation: str) -> str:
        return "no idea" if "Player 1" in observation else first_free(observation)

    r, _ = runner(tokenizer, script, invalid_move_rewards=(-1.5, 0.5))
    (g,) = r.run(["tictactoe"], [0], [(0, 1)])
    assert g.end_reason == "invalid_move" and g.invalid_player == 1
    assert g.returns == [0.5, -1.5] and len(g.turns) == 2 and g.turns[1].move is None
    assert g.outcome(1) == "invalid" and g.outcome(0) == "win"


def test_runner_turn_limit_is_a_draw(tokenizer):
    r, _ = runner(tokenizer, first_free, max_turns=3)
    (g,) = r.run(["tictactoe"], [0], [(0, 1)])
    assert g.end_reason == "turn_limit" and g.returns == [0.0, 0.0] and len(g.turns) == 3


def test_runner_against_a_fixed_opponent(tokenizer):
    r, engine = runner(tokenizer, first_free, opponent=RandomOpponent())
    games = r.run(["tictactoe"] * 4, [0, 1, 2, 3], [(0,), (1,), (0,), (1,)], torch.Generator().manual_seed(0))
    for g in games:
        seat = g.policy_seats[0]
        assert all(t.by_policy == (t.player == seat) for t in g.turns)
        assert g.end_reason == "game_over"
    with pytest.raises(ValueError, match="needs an opponent"):
        runner(tokenizer, first_free)[0].run(["tictactoe"], [0], [(0,)])


# ---------------------------------------------------------------------------------- the dataset
def test_dataset_batches_have_exactly_n_rows_and_state_round_trips(tokenizer):
    def script(observation: str) -> str:
        return first_free(observation) if "Player 0" in observation else "pass"

    def dataset() -> SelfPlayDataset:
        r, _ = runner(tokenizer, script)
        return SelfPlayDataset(r, ["tictactoe"], samples_per_step=5, games_per_round=2, ema_alpha=0.9, seed=3)

    ds = dataset()
    batch = ds.collect()
    assert batch.batch_size == 5
    assert batch.stats["samples_collected"] >= 5
    assert batch.stats["game/seat1/invalid"] == 1.0
    state, before = ds.state_dict(), dict(ds.baselines.values)
    after = ds.collect()

    other = dataset()
    other.load_state_dict(state)
    assert other.baselines.values == before
    replay = other.collect()
    assert torch.equal(replay.input_ids, after.input_ids)
    assert torch.equal(replay.advantages, after.advantages)
    assert other.baselines.values == ds.baselines.values


# ---------------------------------------------------------------------------------- the library bot
def test_bot_opponent_plays_each_library_bot_and_the_stand_in_where_there_is_none():
    """``opponent.kind: bot`` on a multi-game run: TicTacToe and Kuhn Poker meet their library
    bots (the same moves as asking the games directly), negotiation the fallback; without a
    fallback a bot-less game is an error, as the evaluation wants."""
    import random

    from lit_codeRL.envs.games import make_game
    from lit_codeRL.rollout.selfplay import BotOpponent

    def games():
        out = [make_game(g) for g in ("tictactoe", "simple_negotiation", "kuhn_poker", "simple_negotiation")]
        for seed, g in enumerate(out):
            g.reset(seed=seed)
        return out

    class Recording:
        def __init__(self):
            self.seen = []

        def act(self, played, rng):
            self.seen.append([g.game_id for g in played])
            return [("stand-in", "[Deny]")] * len(played)

    stand_in = Recording()
    moves = BotOpponent(fallback=stand_in).act(games(), random.Random(0))
    assert stand_in.seen == [["simple_negotiation", "simple_negotiation"]]  # one batched call
    direct, rng = games(), random.Random(0)
    bot_moves = [direct[0].bot_move(rng), direct[2].bot_move(rng)]
    assert moves == [
        (bot_moves[0], bot_moves[0]),
        ("stand-in", "[Deny]"),
        (bot_moves[1], bot_moves[1]),
        ("stand-in", "[Deny]"),
    ]
    with pytest.raises(NotImplementedError, match="no library bot for simple_negotiation"):
        BotOpponent().act(games()[1:2], random.Random(0))


def test_bot_players_name_what_each_game_meets_and_refuse_a_run_without_any_bot():
    from lit_codeRL.errors import ConfigError
    from lit_codeRL.rollout.selfplay import bot_players

    assert bot_players(["tictactoe", "kuhn_poker", "simple_negotiation", "tictactoe"]) == {
        "tictactoe": "OpenSpiel MCTS",
        "kuhn_poker": "OpenSpiel CFR+ equilibrium",
        "simple_negotiation": "random (no library bot)",
    }
    with pytest.raises(
        ConfigError, match="no library bot for simple_negotiation .*games with one: tictactoe, kuhn_poker"
    ):
        bot_players(["simple_negotiation"])
