"""Online difficulty filtering: stop spending rollouts on tasks the policy always or never solves.

A group whose returns are all equal (every sample solved it, or none did) has zero advantage and
teaches a group-relative method nothing, yet costs a full group of generations and sandbox runs.
Dynamic sampling (``filter_zero_std_groups``) drops such groups *after* paying for them; this
filter predicts them from the task's own recent groups and skips the task *before* generating:

* after every group the task's streak of signal-less groups is updated (reset to 0 by a group
  whose returns differ, +1 otherwise), and the last group's mean return kept (solved or not);
* a task whose streak reached ``after_groups`` is skipped when the stream draws it, except with
  probability ``revisit``: the policy changes, and a task it never solved may become learnable
  (or one it always solved may start failing); a revisit that shows signal resets the streak;
* if every remaining task of a pass would be skipped the stream takes them anyway (a run never
  starves).

The estimates come from this rank's own groups (each rank has its own problem order) and are
carried in the checkpoint with the stream, so a resumed run skips what the uninterrupted one
would. Polaris/DAPO-style offline pre-filtering needs a pass over the data with the initial
policy; this costs nothing up front and follows the policy as it learns.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class DifficultySettings:
    """Online difficulty filtering of the problem stream (off by default)."""

    enabled: bool = False
    """Skip tasks whose recent groups all had equal returns (always or never solved)."""
    after_groups: int = 2
    """Consecutive signal-less groups of a task before it is skipped."""
    revisit: float = 0.1
    """Probability of taking a skipped task anyway when the stream draws it (to notice that it
    became learnable)."""

    def __post_init__(self) -> None:
        if self.after_groups < 1:
            raise ValueError("problems.difficulty.after_groups must be >= 1")
        if not 0.0 <= self.revisit <= 1.0:
            raise ValueError("problems.difficulty.revisit must be in [0, 1]")


class DifficultyFilter:
    """Per-task streaks of signal-less groups, and the skip decision (see the module docstring)."""

    def __init__(self, settings: DifficultySettings, seed: int = 0) -> None:
        self.settings = settings
        self.streak: dict[str, int] = {}
        self.last_mean: dict[str, float] = {}
        self.rng = random.Random(seed)
        self.skipped = 0
        """Draws skipped so far (a counter for logs)."""

    def record(self, task_id: str, returns: Sequence[float], valid: Sequence[bool] | None = None) -> None:
        """One group of ``task_id`` ran with these episode returns (invalid ones ignored)."""
        kept = [r for r, ok in zip(returns, valid or [True] * len(returns), strict=True) if ok]
        if not kept:
            return  # the sandbox failed the whole group: no evidence either way
        flat = max(kept) - min(kept) <= 1e-9
        self.streak[task_id] = self.streak.get(task_id, 0) + 1 if flat else 0
        self.last_mean[task_id] = sum(kept) / len(kept)

    def dead(self, task_id: str) -> bool:
        """Whether the task's recent groups all lacked signal (``after_groups`` in a row)."""
        return self.streak.get(task_id, 0) >= self.settings.after_groups

    def wants(self, task_id: str) -> bool:
        """Whether to run ``task_id`` now: yes unless it is dead, and then with ``revisit``."""
        if not self.dead(task_id):
            return True
        if self.rng.random() < self.settings.revisit:
            return True
        self.skipped += 1
        return False

    def counts(self) -> dict[str, float]:
        """Dead tasks, split by their last mean return (solved: > 0; unsolved: 0 or less)."""
        dead = [t for t in self.streak if self.dead(t)]
        solved = sum(self.last_mean.get(t, 0.0) > 0 for t in dead)
        return {"dead_tasks": float(len(dead)), "dead_solved": float(solved), "skipped": float(self.skipped)}

    def state_dict(self) -> dict[str, Any]:
        return {
            "streak": dict(self.streak),
            "last_mean": dict(self.last_mean),
            "rng": self.rng.getstate(),
            "skipped": self.skipped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.streak = dict(state["streak"])
        self.last_mean = dict(state["last_mean"])
        rng = state["rng"]
        # a checkpoint stores tuples as lists: random.setstate wants (version, tuple, gauss)
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
        self.skipped = int(state["skipped"])


__all__ = ["DifficultyFilter", "DifficultySettings"]
