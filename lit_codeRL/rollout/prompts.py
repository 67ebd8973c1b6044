"""Where rollout prompts come from: an endless, per-rank shuffled stream of problems."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lit_codeRL.problems import Problem
from lit_codeRL.rollout.difficulty import DifficultySettings


@dataclass
class ProblemSettings:
    """Which problems to train on and how they are shown to the policy."""

    source: str = "embedded"
    """``embedded`` (the set in ``data/``), ``mbpp`` (hub), a hub id, a local MBPP/seed-JSON file or dir,
    ``humaneval``, or SWE tasks for ``env.name: swe``: ``swe`` (the shipped ``data/swe``) or
    ``swe:<JSONL/JSON/parquet file, datasets dir or hub id>`` of SWE-bench rows."""
    split: str = "train"
    """Split of the source (MBPP: train/test/validation/prompt; embedded: train/eval)."""
    limit: int | None = None
    """Use only the first ``limit`` problems of the split (in task-id order)."""
    task_ids: list[str] | None = None
    """Use only these task ids (after ``limit``); ``None`` keeps all."""
    system_prompt: str | None = None
    """System message of the chat prompt; ``None`` uses the model's default."""
    num_shown_tests: int = 1
    """How many of a problem's tests appear in its prompt (MBPP convention: the first)."""
    difficulty: DifficultySettings = field(default_factory=DifficultySettings)
    """Online difficulty filtering: skip tasks the policy always or never solves, judged from their
    recent groups (``rollout/difficulty.py``)."""

    def __post_init__(self) -> None:
        if isinstance(self.difficulty, dict):
            self.difficulty = DifficultySettings(**self.difficulty)


def load_problem_set(settings: ProblemSettings) -> list[Problem]:
    from lit_codeRL.problems import load_problems

    problems = load_problems(settings.source, split=settings.split)
    if settings.limit is not None:
        problems = problems[: settings.limit]
    if settings.task_ids is not None:
        wanted = set(settings.task_ids)
        problems = [p for p in problems if p.task_id in wanted]
    if not problems:
        from lit_codeRL.errors import ConfigError

        raise ConfigError(f"no problems selected from source {settings.source!r} split {settings.split!r}")
    return problems


class ProblemStream:
    """Endless shuffled passes over ``problems``; each rank gets its own order.

    The stream position and RNG are checkpointed, so a resumed run sees the same prompts an
    uninterrupted run would have.
    """

    def __init__(self, problems: list[Problem], seed: int = 0, rank: int = 0, shuffle: bool = True):
        self.problems = problems
        self.shuffle = shuffle
        self.seed = seed + 1_000_003 * rank
        self.epoch = 0
        self.position = 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(len(self.problems)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def next(self) -> Problem:
        if self.position >= len(self._order):
            self.epoch += 1
            self.position = 0
            self._order = self._make_order()
        problem = self.problems[self._order[self.position]]
        self.position += 1
        return problem

    def take(self, n: int, accept: Callable[[Problem], bool] | None = None) -> list[Problem]:
        """The next ``n`` problems; with ``accept``, those it refuses are passed over, up to one
        pass over the set per problem taken (after that the next ones are taken anyway: a stream
        whose every task is refused still yields)."""
        if accept is None:
            return [self.next() for _ in range(n)]
        out = []
        for _ in range(n):
            for _ in range(len(self.problems)):
                problem = self.next()
                if accept(problem):
                    break
            out.append(problem)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seed, self.epoch, self.position = state["seed"], state["epoch"], state["position"]
        self._order = self._make_order()
