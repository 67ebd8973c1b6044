"""The environment protocols the rollout layer drives.

**Text environments** (:class:`TextEnv`): a batch of independent episodes stepped in lockstep.
``reset_batch`` starts one episode per problem and returns its first observation (the user
message of the chat prompt); ``step_batch`` takes one action (the policy's text) per live episode
and returns, per episode, gymnasium's five-tuple as a :class:`StepResult`: the next observation
(the next user message), a reward, ``terminated``, ``truncated`` and an info dict. ``step_batch``
may return before the work is done (:class:`PendingSteps`), so that grading in the sandbox
overlaps the generation of the rest of the batch. The single-turn code envs are the one-turn
case (every step terminates); :class:`~lit_codeRL.envs.code_repair.CodeRepairEnv` is multi-turn.

Turn and context limits belong to the runner (``rollout/episodes.py``), which truncates; an env
terminates (solved, game over) or goes on.

**Turn-based games** (:class:`TurnBasedGame`): two (or more) players alternate; the game says
whose turn it is, what that player sees, which moves are legal, and at the end every player's
return. Self-play runners step it with one policy playing every seat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from lit_codeRL.problems.record import Problem


@dataclass
class Action:
    """One turn of the policy, as the env sees it."""

    text: str
    """The decoded action (special tokens removed)."""
    finish_reason: str = "stop"
    """``stop`` / ``stop_string`` (the policy ended it) or ``length`` (cut off at the token limit)."""

    @property
    def cut_off(self) -> bool:
        return self.finish_reason == "length"


@dataclass
class EpisodeStart:
    """What ``reset_batch`` returns per episode."""

    observation: str
    """The first user message (plain text; the runner applies the chat template)."""
    state: Any
    """The env's private per-episode state, handed back to ``step_batch``."""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepResult:
    """gymnasium's ``(observation, reward, terminated, truncated, info)`` for one episode."""

    observation: str
    """The next user message (feedback); unused once the episode ends."""
    reward: float
    terminated: bool
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    """JSON-ready details; ``sandbox_error: True`` marks a step whose grading failed (the
    episode then has no reward and is left out of the loss)."""


class PendingSteps:
    """Step results that may still be computing; ``result()`` blocks and returns them in order."""

    def __init__(self, resolve: Callable[[], list[StepResult]], done: Callable[[], bool] | None = None):
        self._resolve, self._done = resolve, done
        self._results: list[StepResult] | None = None

    def done(self) -> bool:
        return self._results is not None or self._done is None or self._done()

    def result(self) -> list[StepResult]:
        if self._results is None:
            self._results = self._resolve()
        return list(self._results)

    @staticmethod
    def ready(results: list[StepResult]) -> PendingSteps:
        return PendingSteps(lambda: results)


@runtime_checkable
class TextEnv(Protocol):
    """Batched multi-turn text episodes (see the module docstring)."""

    def reset_batch(self, problems: Sequence[Problem]) -> list[EpisodeStart]: ...

    def step_batch(self, states: Sequence[Any], actions: Sequence[Action]) -> PendingSteps: ...


@runtime_checkable
class TurnBasedGame(Protocol):
    """A turn-based game for self-play: one instance is one game in progress.

    Rewards come at the end as per-player returns (zero-sum games: they add up to 0). A move that
    is not legal is the game's to judge (``step`` returns it in ``info["invalid"]`` and may end
    the game with a penalty for the offender).
    """

    num_players: int

    def reset(self, seed: int | None = None) -> None:
        """Start a new game."""
        ...

    def current_player(self) -> int:
        """Seat (0-based) of the player to move."""
        ...

    def observation(self, player: int) -> str:
        """What ``player`` sees now (rules, board, history), as a user message."""
        ...

    def legal_actions(self) -> list[str]:
        """The moves the current player may make, as text (empty where any text is allowed)."""
        ...

    def step(self, action: str) -> tuple[bool, dict[str, Any]]:
        """Play the current player's ``action``; returns ``(game_over, info)``."""
        ...

    def returns(self) -> list[float]:
        """Each player's return so far (final once the game is over)."""
        ...
