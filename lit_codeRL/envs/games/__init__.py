"""Two-player zero-sum text games for self-play (SPIRAL), behind
:class:`~lit_codeRL.envs.protocol.TurnBasedGame`.

=====================  ==========================================================================
id                     rules
=====================  ==========================================================================
``tictactoe``          TextArena ``TicTacToe-v0`` (SPIRAL's TicTacToe), board-only observation
``kuhn_poker``         SPIRAL ``KuhnPoker-v1``: 5 hands of OpenSpiel ``kuhn_poker``, +-1 by chips
``simple_negotiation`` TextArena ``SimpleNegotiation-v0`` (5 resources, random stocks and values,
                       10 turns); SPIRAL's ``-v1`` (Wood/Gold, fixed values) is not shipped
=====================  ==========================================================================

Besides the protocol, each game offers ``random_move(rng)`` and, where the library has one,
``bot_move(rng)`` (OpenSpiel MCTS for TicTacToe, a CFR+ equilibrium for Kuhn Poker): the fixed
opponents. ``bot_name`` says which bot that is, ``None`` where there is none (negotiation:
``bot_move`` raises ``NotImplementedError``); :func:`library_bot` asks by game id.
"""

from __future__ import annotations

from collections.abc import Callable

from lit_codeRL.envs.games.actions import last_boxed, normalize_move, parse_move
from lit_codeRL.envs.protocol import TurnBasedGame
from lit_codeRL.errors import ConfigError


def _tictactoe() -> TurnBasedGame:
    from lit_codeRL.envs.games.textarena_games import tictactoe

    return tictactoe()


def _kuhn_poker() -> TurnBasedGame:
    from lit_codeRL.envs.games.kuhn_poker import kuhn_poker

    return kuhn_poker()


def _simple_negotiation() -> TurnBasedGame:
    from lit_codeRL.envs.games.textarena_games import simple_negotiation

    return simple_negotiation()


GAMES: dict[str, Callable[[], TurnBasedGame]] = {
    "tictactoe": _tictactoe,
    "kuhn_poker": _kuhn_poker,
    "simple_negotiation": _simple_negotiation,
}


def make_game(game_id: str) -> TurnBasedGame:
    """A new game by id (see the table above)."""
    if game_id not in GAMES:
        raise ConfigError(f"unknown game {game_id!r}; known games: {', '.join(sorted(GAMES))}")
    return GAMES[game_id]()


def library_bot(game_id: str) -> str | None:
    """The name of ``game_id``'s library bot, ``None`` where the game has none."""
    return make_game(game_id).bot_name


__all__ = ["GAMES", "make_game", "library_bot", "last_boxed", "normalize_move", "parse_move"]
