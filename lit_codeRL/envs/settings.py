"""``EnvSettings``: which environment rollouts run, and the episode limits, as a config knob."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lit_codeRL.envs.base import Executor, SingleTurnCodeEnv
from lit_codeRL.envs.code_execution import CodeExecutionEnv
from lit_codeRL.envs.code_repair import CodeRepairEnv
from lit_codeRL.envs.unit_test import UnitTestEnv


@dataclass
class EnvSettings:
    """The rollout environment and its episode limits."""

    name: Literal["unit_test", "code_execution", "code_repair"] = "unit_test"
    """``unit_test``: one answer, reward = fraction of tests passed. ``code_execution``: one
    answer, +1 runs and prints / +0.5 runs / -0.5 syntax error / -1 runtime error. ``code_repair``:
    multi-turn; after a failed attempt the policy sees the verdict and a failing public test and
    revises (return = the last attempt's pass fraction)."""
    max_turns: int = 1
    """Actions per episode at most (single-turn envs end after one anyway)."""
    max_context_tokens: int | None = None
    """Truncate an episode whose next turn would not fit in this many tokens; ``None``: no cap."""
    all_pass_bonus: float = 0.0
    """Extra reward when every test passes (``unit_test``, ``code_repair``)."""
    feedback_tests: Literal["shown", "all"] = "shown"
    """``code_repair``: quote only tests shown in the prompt (RLEF) or any failing test."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"env.max_turns must be >= 1, got {self.max_turns}")


def make_env(settings: EnvSettings, sandbox: Executor, num_shown_tests: int = 1) -> SingleTurnCodeEnv:
    """The environment ``settings`` names, grading in ``sandbox``."""
    if settings.name == "unit_test":
        return UnitTestEnv(sandbox, all_pass_bonus=settings.all_pass_bonus, num_shown_tests=num_shown_tests)
    if settings.name == "code_execution":
        return CodeExecutionEnv(sandbox, num_shown_tests=num_shown_tests)
    if settings.name == "code_repair":
        return CodeRepairEnv(
            sandbox,
            feedback_tests=settings.feedback_tests,
            all_pass_bonus=settings.all_pass_bonus,
            num_shown_tests=num_shown_tests,
        )
    from lit_codeRL.errors import ConfigError

    raise ConfigError(f"unknown env {settings.name!r}; choose unit_test, code_execution or code_repair")
