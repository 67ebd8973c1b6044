"""The self-play games: SPIRAL's move parser, TextArena's TicTacToe and negotiation, Kuhn Poker on
OpenSpiel hands, and the fixed opponents."""

from __future__ import annotations

import random

import pytest

from lit_codeRL.envs.games import make_game, parse_move
from lit_codeRL.envs.games.actions import last_boxed, normalize_move
from lit_codeRL.errors import ConfigError

TTT_LEGAL = [f"[{i}]" for i in range(9)]


# ---------------------------------------------------------------------------------------- parser
@pytest.mark.parametrize(
    ("text", "move"),
    [
        ("I take the centre. \\boxed{4}", "[4]"),
        ("\\boxed{[4]}", "[4]"),
        ("first \\boxed{1} then, better, \\boxed{8}", "[8]"),  # the last box counts
        ("\\boxed{\\text{4}}", "[4]"),
        ("4", "[4]"),  # no box: the whole text, a short bare answer gets brackets
        ("  [ 4 ]", None),  # inner spaces are not collapsed away: not the legal string
        ("[4]", "[4]"),
        ("\\boxed{9}", None),  # off the board
        ("The answer is 4 because the centre is strong and so on", None),
        ("", None),
        ("\\boxed{4", None),  # never closed: the whole text, which is not a move
    ],
)
def test_parse_move_tictactoe(text, move):
    assert parse_move(text, TTT_LEGAL) == move


def test_parse_move_is_case_sensitive_like_upstream():
    legal = ["[check]", "[bet]"]
    assert parse_move("\\boxed{check}", legal) == "[check]"
    assert parse_move("\\boxed{[bet]}", legal) == "[bet]"
    assert parse_move("\\boxed{Check}", legal) is None


def test_parse_move_free_text_needs_a_non_empty_box():
    offer = "[Offer: 2 Wood -> 1 Ore]"
    assert parse_move(f"Let us trade. \\boxed{{{offer}}}", []) == offer
    assert parse_move("I offer [Offer: 2 Wood -> 1 Ore] without a box", []) is None
    assert parse_move("\\boxed{  }", []) is None


def test_last_boxed_matches_braces():
    assert last_boxed("\\boxed{a{b}c} tail") == "a{b}c"
    assert last_boxed("no box") is None
    assert normalize_move("\\boxed{x} and \\boxed{y}") == "[x] and [y]"


def test_unknown_game_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown game 'chess'"):
        make_game("chess")


# ------------------------------------------------------------------------------------- tictactoe
SPIRAL_TTT_FIRST_OBSERVATION = (
    "You are Player 0 in Tic Tac Toe.\n"
    "Your goal is to win three in a row (horizontally, vertically, or diagonally) on the board.\n"
    "On your turn, you should select the square number (0-8) you want to put your mark in next.\n"
    "For example, '[4]' places your mark in the center cell of the board.\n"
    "\n"
    "As Player 0, you will be 'O', while your opponent is 'X'.\n"
    "\n\n"
    "Current Board:\n\n"
    " 0 | 1 | 2 \n---+---+---\n 3 | 4 | 5 \n---+---+---\n 6 | 7 | 8 \n\n"
    "Available Moves: '[0]', '[1]', '[2]', '[3]', '[4]', '[5]', '[6]', '[7]', '[8]'"
    "\n\nNext Action:"
)


def test_tictactoe_observation_is_spirals_text():
    game = make_game("tictactoe")
    game.reset(seed=0)
    assert game.current_player() == 0
    assert game.observation(0) == SPIRAL_TTT_FIRST_OBSERVATION
    assert game.legal_actions() == TTT_LEGAL


def test_tictactoe_board_only_observation_after_moves():
    game = make_game("tictactoe")
    game.reset(seed=0)
    game.step("[4]")
    assert game.current_player() == 1
    obs = game.observation(1)
    assert obs.startswith("You are Player 1 in Tic Tac Toe.")
    assert " 3 | O | 5 " in obs and "'[4]'" not in obs.split("Available Moves:")[1]
    assert obs.count("Current Board:") == 1  # the latest board only (a Markov state)
    assert game.legal_actions() == [m for m in TTT_LEGAL if m != "[4]"]


def test_tictactoe_win_and_draw():
    game = make_game("tictactoe")
    game.reset(seed=0)
    for move in ["[0]", "[3]", "[1]", "[4]"]:
        assert game.step(move) == (False, {"reason": ""})
    done, info = game.step("[2]")  # O completes the top row
    assert done and "invalid" not in info
    assert game.returns() == [1.0, -1.0]

    game.reset(seed=0)
    # O X O / O X X / X O O -> draw
    for move in ["[0]", "[1]", "[2]", "[4]", "[3]", "[5]", "[7]", "[6]"]:
        assert not game.step(move)[0]
    done, _ = game.step("[8]")
    assert done and game.returns() == [0.0, 0.0]


def test_tictactoe_occupied_square_is_invalid():
    game = make_game("tictactoe")
    game.reset(seed=0)
    game.step("[4]")
    done, info = game.step("[4]")
    assert done and info["invalid"]


def test_tictactoe_bot_blocks_and_wins():
    game = make_game("tictactoe")
    game.reset(seed=0)
    for move in ["[0]", "[4]", "[1]"]:  # O threatens the top row; X must block at 2
        game.step(move)
    assert game.bot_move(random.Random(0)) == "[2]"
    game.reset(seed=0)
    for move in ["[0]", "[3]", "[1]", "[4]"]:  # O to move and wins at 2
        game.step(move)
    assert game.bot_move(random.Random(0)) == "[2]"


def test_textarena_reset_leaves_the_global_random_stream_alone():
    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    make_game("simple_negotiation").reset(seed=7)
    assert [random.random() for _ in range(3)] == expected


# ------------------------------------------------------------------------------------ kuhn poker
def test_kuhn_seat_one_starts_and_cards_stay_private():
    game = make_game("kuhn_poker")
    game.reset(seed=3)
    assert game.current_player() == 1  # SPIRAL: seat 1 starts round 1
    assert game.legal_actions() == ["[check]", "[bet]"]
    mine = game.observation(1)
    assert "Your card is:" in mine and "Your available actions are: [check], [bet]" in mine
    cards = "JQK"
    assert mine.count("Your card is") == 1
    theirs = game.observation(0)
    card0 = theirs.split("Your card is: ")[1][0]
    card1 = mine.split("Your card is: ")[1][0]
    assert card0 != card1 and {card0, card1} <= set(cards)
    assert f"Your card is: {card1}" not in theirs


def test_kuhn_fold_call_and_match_return():
    game = make_game("kuhn_poker")
    game.reset(seed=0)
    # Hand 1: seat 1 bets, seat 0 folds -> seat 1 +1 chip.
    assert game.step("[bet]") == (False, {})
    assert game.legal_actions() == ["[call]", "[fold]"]
    game.step("[fold]")
    assert game.chips == [-1, 1]
    # Hand 2: seat 0 starts.
    assert game.current_player() == 0
    game.step("[bet]")
    game.step("[call]")  # showdown for 2 chips
    assert game.chips in ([1, -1], [-3, 3])
    while True:
        done, _ = game.step("[check]")
        if done:
            break
    assert game.round == 5
    chips = game.chips
    expected = [0.0, 0.0] if chips[0] == chips[1] else ([1.0, -1.0] if chips[0] > chips[1] else [-1.0, 1.0])
    assert game.returns() == expected
    assert sum(chips) == 0


def test_kuhn_illegal_move_is_invalid():
    game = make_game("kuhn_poker")
    game.reset(seed=0)
    done, info = game.step("[call]")  # nothing to call
    assert done and info["invalid"]


def test_kuhn_bot_is_an_equilibrium_player():
    game = make_game("kuhn_poker")
    rng = random.Random(0)
    # With the king facing a bet, the equilibrium always calls; with the jack it always folds.
    calls = {"K": 0, "J": 0}
    for seed in range(200):
        game.reset(seed=seed)
        game.step("[bet]")  # seat 1 bets; seat 0 to act
        card = game.observation(0).split("Your card is: ")[1][0]
        if card in calls:
            calls[card] += game.bot_move(rng) == "[call]"
    assert calls["J"] == 0 and calls["K"] > 0


# ----------------------------------------------------------------------------------- negotiation
def test_negotiation_history_and_invalid_offer():
    game = make_game("simple_negotiation")
    game.reset(seed=1)
    assert game.legal_actions() == []  # free text
    obs = game.observation(0)
    assert obs.startswith("\n[GAME] You are Player 0 in the Negotiation Game.")
    done, _ = game.step("Hello. [Offer: 1 Wheat -> 1 Ore]")
    assert not done
    assert "[Player 0] Hello. [Offer: 1 Wheat -> 1 Ore]" in game.observation(1)
    done, info = game.step("[Offer: 1000 Ore -> 1 Wheat]")  # not in stock: TextArena rejects it
    assert done and info["invalid"]


@pytest.mark.parametrize("game_id", ["tictactoe", "kuhn_poker", "simple_negotiation"])
def test_random_opponent_plays_whole_games_without_invalid_moves(game_id):
    rng = random.Random(0)
    game = make_game(game_id)
    for seed in range(20):
        game.reset(seed=seed)
        for _ in range(60):
            done, info = game.step(game.random_move(rng))
            assert not info.get("invalid"), info
            if done:
                break
        assert done
        assert sum(game.returns()) == pytest.approx(0.0)
