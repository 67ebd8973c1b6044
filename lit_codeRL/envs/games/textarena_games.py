"""TicTacToe and SimpleNegotiation with TextArena's rules and text (``textarena==0.6.4``, the
version SPIRAL pins).

The adapter keeps each player's message history itself (TextArena hands a player its new
messages once) and renders it the way SPIRAL's wrappers do:

* ``first_last`` (TicTacToe, SPIRAL's ``FirstLastObservationWrapper``): the game prompt, the latest
  board, then ``Next Action:``; the board is a Markov state, so no history;
* ``history`` (negotiation, TextArena's ``LLMObservationWrapper``): every message so far as
  ``[GAME] ...`` / ``[Player 1] ...`` lines.

TextArena's own invalid-move handling is set to end the game at the first invalid move
(``error_allowance = 0``, as SPIRAL does); the runner then applies the configured invalid-move
rewards. TextArena seeds the global ``random`` module in ``reset``; the adapter puts the caller's
``random`` state back afterwards, so a game never shifts anybody else's random stream.
"""

from __future__ import annotations

import random
from typing import Any


def _textarena():
    try:
        import textarena as ta
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError("the TicTacToe and negotiation games need `pip install textarena==0.6.4`") from e
    return ta


class TextArenaGame:
    """One TextArena two-player game behind :class:`~lit_codeRL.envs.protocol.TurnBasedGame`.

    Args:
        env_id: TextArena id (``TicTacToe-v0``, ``SimpleNegotiation-v0``).
        game_id: Our name of the game (baseline keys, metrics).
        observation_style: ``first_last`` or ``history`` (see the module docstring).
    """

    num_players = 2

    def __init__(self, env_id: str, game_id: str, observation_style: str = "history") -> None:
        if observation_style not in ("first_last", "history"):
            raise ValueError(
                f"observation_style must be 'first_last' or 'history', got {observation_style!r}"
            )
        self.env_id, self.game_id, self.observation_style = env_id, game_id, observation_style
        self.env = _textarena().make(env_id)
        self.history: list[list[tuple[int, str]]] = [[], []]
        self._done = False

    def reset(self, seed: int | None = None) -> None:
        outer = random.getstate()
        try:
            self.env.reset(num_players=2, seed=seed)
        finally:
            random.setstate(outer)
        self.env.state.error_allowance = 0
        self.history = [[], []]
        self._done = False
        self._drain()

    def _drain(self) -> None:
        for pid in range(2):
            self.history[pid].extend(self.env.state.observations.get(pid, []))
            self.env.state.observations[pid] = []

    def current_player(self) -> int:
        return int(self.env.state.current_player_id)

    def observation(self, player: int) -> str:
        msgs = self.history[player]
        if self.observation_style == "first_last":
            parts = [msgs[0][1]] if msgs else []
            if len(msgs) > 1:
                parts.append(msgs[-1][1])
            return "\n\n".join(parts) + "\n\nNext Action:"
        names = self.env.state.role_mapping
        return "".join(
            f"\n[{'GAME' if sender == -1 else names.get(sender, f'Player {sender}')}] {message}"
            for sender, message in msgs
        )

    def legal_actions(self) -> list[str]:
        if self.env_id.startswith("TicTacToe"):
            board = self.env.state.game_state["board"]
            return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]
        return []  # free text

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        done, info = self.env.step(action)
        self._drain()
        self._done = bool(done)
        out = {"reason": str(info.get("reason", ""))}
        if done and out["reason"].startswith("Invalid Move"):
            out["invalid"] = True
        return self._done, out

    def returns(self) -> list[float]:
        rewards = self.env.state.rewards or {}
        return [float(rewards.get(p, 0.0)) for p in range(2)]

    # ------------------------------------------------------------------ fixed opponents
    def random_move(self, rng: random.Random) -> str:
        """A uniformly random legal move; for negotiation, one of deny / a random offer of 1-3
        units of a resource the player holds for 1-3 units of another / accept (only an offer
        it can pay for: accepting one it cannot is an invalid move)."""
        legal = self.legal_actions()
        if legal:
            return rng.choice(legal)
        state = self.env.state.game_state
        mine = state["player_resources"][self.current_player()]
        offer = state.get("current_offer")
        affordable = offer is not None and all(
            mine.get(r, 0) >= q for r, q in offer["requested_resources"].items()
        )
        kind = rng.choice(["offer", "accept", "deny"] if affordable else ["offer", "deny"])
        if kind != "offer":
            return f"[{kind.capitalize()}]"
        have = [r for r, q in mine.items() if q > 0]
        give = rng.choice(have)
        want = rng.choice([r for r in mine if r != give])
        return f"[Offer: {rng.randint(1, min(3, mine[give]))} {give} -> {rng.randint(1, 3)} {want}]"

    @property
    def bot_name(self) -> str | None:
        """What :meth:`bot_move` plays; ``None`` where the library has no bot (negotiation)."""
        return "OpenSpiel MCTS" if self.env_id.startswith("TicTacToe") else None

    def bot_move(self, rng: random.Random) -> str:
        """TicTacToe: OpenSpiel's MCTS bot on the same position (strong, near-perfect play)."""
        if self.bot_name is None:
            raise NotImplementedError(f"no library bot for {self.game_id}; use the random or frozen opponent")
        return _ttt_bot_move(self.env.state.game_state["board"], self.current_player(), rng)


def _ttt_bot_move(board: list[list[str]], player: int, rng: random.Random, simulations: int = 1000) -> str:
    """OpenSpiel ``MCTSBot`` (random rollouts, ``simulations`` per move) on the position: TextArena
    cells ``r*3+c`` are OpenSpiel's actions; TextArena's player 0 ('O') moves first like
    OpenSpiel's player 0."""
    import numpy as np
    import pyspiel
    from open_spiel.python.algorithms import mcts

    game = pyspiel.load_game("tic_tac_toe")
    state = game.new_initial_state()
    first = {"O": 0, "X": 1}
    moves = [(r * 3 + c, first[board[r][c]]) for r in range(3) for c in range(3) if board[r][c]]
    # Replay in alternating order (the order of equal-player moves does not change the position).
    by_player = [[a for a, p in moves if p == 0], [a for a, p in moves if p == 1]]
    for k in range(len(moves)):
        state.apply_action(by_player[k % 2][k // 2])
    assert state.current_player() == player, "board and player to move disagree"
    seed = rng.randrange(2**31)
    bot = mcts.MCTSBot(
        game,
        uct_c=2.0,
        max_simulations=simulations,
        evaluator=mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=np.random.RandomState(seed)),
        random_state=np.random.RandomState(seed),
        solve=True,
    )
    return f"[{bot.step(state)}]"


def tictactoe() -> TextArenaGame:
    return TextArenaGame("TicTacToe-v0", "tictactoe", "first_last")


def simple_negotiation() -> TextArenaGame:
    return TextArenaGame("SimpleNegotiation-v0", "simple_negotiation", "history")
