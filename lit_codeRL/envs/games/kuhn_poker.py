"""Kuhn Poker as SPIRAL trains it (``KuhnPoker-v1``): a match of several hands of OpenSpiel's
``kuhn_poker``.

Each hand is OpenSpiel's game (3-card deck J < Q < K, ante 1, one betting round: check/bet, then
check/bet or fold/call); OpenSpiel deals and scores it. The match follows SPIRAL's
``spiral/envs/KuhnPoker`` (not TextArena's ``KuhnPoker-v0``, whose final winner check compares a
player's chips with themselves and so always declares a draw): ``rounds`` hands (5), the starting
seat alternates and seat 1 starts the first hand, and the match return is +1 / -1 by total
chips, 0 on equal chips. Moves are ``[check]``, ``[bet]``, ``[fold]``, ``[call]`` (lowercase, as
SPIRAL's parser checks them). The observation is the whole message history of the match
(SPIRAL's ``LLMObservationWrapper`` style).
"""

from __future__ import annotations

import functools
import random
from typing import Any

_CARDS = "JQK"
_PASS, _BET = 0, 1


@functools.lru_cache(maxsize=1)
def _game():
    import pyspiel

    return pyspiel.load_game("kuhn_poker")


@functools.lru_cache(maxsize=1)
def _equilibrium_policy() -> dict[str, list[tuple[int, float]]]:
    """An approximate Nash equilibrium of one hand (OpenSpiel's CFR+, 2000 iterations):
    information-state string -> [(action, probability)]; the library bot."""
    import pyspiel

    solver = pyspiel.CFRPlusSolver(_game())
    for _ in range(2000):
        solver.evaluate_and_update_policy()
    table = solver.tabular_average_policy().policy_table()
    return {key: [(int(a), float(p)) for a, p in pairs] for key, pairs in table.items()}


class KuhnPoker:
    """A Kuhn Poker match (see the module docstring).

    Args:
        rounds: Hands per match.
    """

    num_players = 2
    game_id = "kuhn_poker"
    bot_name: str | None = "OpenSpiel CFR+ equilibrium"
    """What :meth:`bot_move` plays."""

    def __init__(self, rounds: int = 5) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.rounds = rounds
        self.rng = random.Random(0)
        self.history: list[list[tuple[str, str]]] = [[], []]
        self.chips = [0, 0]
        self.round = 0
        self.starter = 0
        self.hand = None
        self.cards = [0, 0]
        self._done = False

    # ------------------------------------------------------------------ protocol
    def reset(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.chips, self.round, self._done = [0, 0], 0, False
        self.history = [[("GAME", self._rules(p))] for p in range(2)]
        self.starter = 0  # flipped before the first hand: seat 1 starts hand 1 (SPIRAL)
        self._new_hand()

    def current_player(self) -> int:
        return self._seat(self.hand.current_player())

    def observation(self, player: int) -> str:
        return "".join(f"\n[{sender}] {message}" for sender, message in self.history[player])

    def legal_actions(self) -> list[str]:
        return ["[call]", "[fold]"] if self._facing_bet() else ["[check]", "[bet]"]

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        if self._done:
            raise RuntimeError("the match is over")
        if action not in self.legal_actions():
            self._done = True
            return True, {"invalid": True, "reason": f"illegal move {action!r}"}
        seat = self.current_player()
        self.hand.apply_action(_BET if action in ("[bet]", "[call]") else _PASS)
        for p in range(2):
            self.history[p].append((f"Player {seat}", action))
        if self.hand.is_terminal():
            self._end_hand()
            if self.round >= self.rounds:
                self._done = True
                return True, {"reason": f"chips {self.chips[0]} : {self.chips[1]}"}
            self._new_hand()
        else:
            self._prompt_to_act()
        return False, {}

    def returns(self) -> list[float]:
        if not self._done or self.chips[0] == self.chips[1]:
            return [0.0, 0.0]
        return [1.0, -1.0] if self.chips[0] > self.chips[1] else [-1.0, 1.0]

    # ------------------------------------------------------------------ fixed opponents
    def random_move(self, rng: random.Random) -> str:
        return rng.choice(self.legal_actions())

    def bot_move(self, rng: random.Random) -> str:
        """A move of OpenSpiel's CFR+ equilibrium policy for this hand (unexploitable play)."""
        pairs = _equilibrium_policy()[self.hand.information_state_string()]
        r, acc = rng.random(), 0.0
        action = pairs[-1][0]
        for a, p in pairs:
            acc += p
            if r < acc:
                action = a
                break
        if self._facing_bet():
            return "[call]" if action == _BET else "[fold]"
        return "[bet]" if action == _BET else "[check]"

    # ------------------------------------------------------------------ internals
    def _seat(self, hand_player: int) -> int:
        """OpenSpiel's player 0 in a hand is the seat that starts it."""
        return (self.starter + hand_player) % 2

    def _facing_bet(self) -> bool:
        return _BET in self.hand.history()[2:]  # after the two deals

    def _new_hand(self) -> None:
        self.round += 1
        self.starter = 1 - self.starter
        self.hand = _game().new_initial_state()
        deal = self.rng.sample(range(3), 2)  # hand players 0, 1
        for card in deal:
            self.hand.apply_action(card)
        self.cards = [deal[(seat - self.starter) % 2] for seat in range(2)]
        for p in range(2):
            self.history[p].append(
                (
                    "GAME",
                    f"Starting round {self.round} out of {self.rounds} rounds. Your card is: {_CARDS[self.cards[p]]}",
                )
            )
        self._prompt_to_act()

    def _prompt_to_act(self) -> None:
        seat = self.current_player()
        legal = ", ".join(self.legal_actions())
        self.history[seat].append(("GAME", f"Your available actions are: {legal}"))

    def _end_hand(self) -> None:
        payoff = self.hand.returns()  # per hand player
        for hand_player in range(2):
            self.chips[self._seat(hand_player)] += int(payoff[hand_player])
        if self.hand.history()[2:] in ([_BET, _PASS], [_PASS, _BET, _PASS]):
            outcome = "the bet was folded"
        else:
            outcome = f"showdown: Player 0 had {_CARDS[self.cards[0]]}, Player 1 had {_CARDS[self.cards[1]]}"
        winner = 0 if payoff[0] > 0 else 1
        msg = (
            f"Player {self._seat(winner)} wins the pot ({outcome}). "
            f"Chips after round {self.round}: Player 0 {self.chips[0]}, Player 1 {self.chips[1]}."
        )
        for p in range(2):
            self.history[p].append(("GAME", msg))

    def _rules(self, player: int) -> str:
        return (
            f"You are Player {player} in a {self.rounds} round game of Kuhn Poker.\n"
            "Game Rules:\n"
            "- Kuhn Poker uses a 3-card deck with J, Q, K (J lowest, K highest)\n"
            "- Each player antes 1 chip and receives 1 card each round\n"
            f"- Game continues for {self.rounds} rounds\n"
            "- The player with the most chips after all rounds wins\n\n"
            "Action Rules:\n"
            "- '[check]': Pass without betting (only if no bet is on the table)\n"
            "- '[bet]': Add 1 chip to the pot (only if no bet is on the table)\n"
            "- '[call]': Match an opponent's bet by adding 1 chip to the pot\n"
            "- '[fold]': Surrender your hand and let your opponent win the pot\n"
        )


def kuhn_poker() -> KuhnPoker:
    return KuhnPoker()
