"""``EnvSettings``: which environment rollouts run, and the episode limits, as a config knob."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from lit_codeRL.envs.base import Executor
from lit_codeRL.envs.code_execution import CodeExecutionEnv
from lit_codeRL.envs.code_repair import CodeRepairEnv
from lit_codeRL.envs.debug.env import DebugSettings
from lit_codeRL.envs.harness.env import HarnessSettings
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.envs.unit_test import UnitTestEnv


@dataclass
class EnvSettings:
    """The rollout environment and its episode limits."""

    name: Literal["unit_test", "code_execution", "code_repair", "swe", "debug", "harness"] = "unit_test"
    """``unit_test``: one answer, reward = fraction of tests passed. ``code_execution``: one
    answer, +1 runs and prints / +0.5 runs / -0.5 syntax error / -1 runtime error. ``code_repair``:
    multi-turn; after a failed attempt the policy sees the verdict and a failing public test and
    revises (return = the last attempt's pass fraction). ``swe``: a software-engineering agent in
    an isolated repository (``<execute>cmd</execute>`` per turn, ``<submit/>``), rewarded by the
    task's hidden tests run on its diff in a fresh workspace (needs ``problems.source: swe``).
    ``debug``: a debugging gym; the agent fixes a buggy program with pdb, view, edit, eval tools and
    ``<submit/>``, rewarded by the tests run on its files in a fresh workspace (needs
    ``problems.source: debug``). ``harness``: an unmodified agent program (``env.harness.command``)
    works on a SWE or debugging task in the workspace sandbox, calling the policy through the
    OpenAI-compatible gateway as its only network endpoint; its diff is graded as ``swe`` grades
    it, and its recorded calls are the training rows (``docs/gateway.md``)."""
    max_turns: int = 1
    """Actions per episode at most (single-turn envs end after one anyway)."""
    max_context_tokens: int | None = None
    """Truncate an episode whose next turn would not fit in this many tokens; ``None``: no cap."""
    all_pass_bonus: float = 0.0
    """Extra reward when every test passes (``unit_test``, ``code_repair``)."""
    partial_credit: bool = True
    """``unit_test``, ``code_repair``: reward the fraction of tests passed; ``false``: 1 only when
    every test passes, 0 otherwise (pass@1's criterion; partial credit with a shown test rewards
    hard-coding that test's answer)."""
    feedback_tests: Literal["shown", "all"] = "shown"
    """``code_repair``: quote only tests shown in the prompt (RLEF) or any failing test."""
    swe: SWESettings = field(default_factory=SWESettings)
    """``swe``: tools, command and episode time limits, grading, and the workspace isolation."""
    debug: DebugSettings = field(default_factory=DebugSettings)
    """``debug``: tool preset, per-call and per-episode time limits, grading, the isolation."""
    harness: HarnessSettings = field(default_factory=HarnessSettings)
    """``harness``: the agent command, its files and environment, its wall clock, grading and
    the isolation."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"env.max_turns must be >= 1, got {self.max_turns}")
        if isinstance(self.swe, dict):
            self.swe = SWESettings(**self.swe)
        if isinstance(self.debug, dict):
            self.debug = DebugSettings(**self.debug)
        if isinstance(self.harness, dict):
            self.harness = HarnessSettings(**self.harness)

    @property
    def needs_sandbox(self) -> bool:
        """Whether the env grades programs in the one-program sandbox (the SWE and debugging envs
        bring their own workspaces)."""
        return self.name not in ("swe", "debug", "harness")


def make_env(settings: EnvSettings, sandbox: Executor | None, num_shown_tests: int = 1) -> Any:
    """The environment ``settings`` names, grading in ``sandbox`` (``None`` for ``swe``)."""
    if settings.name == "swe":
        from lit_codeRL.envs.swe.env import ContainerEnv

        return ContainerEnv(data_name_or_path=None, settings=settings.swe)
    if settings.name == "debug":
        from lit_codeRL.envs.debug.env import DebugEnv

        return DebugEnv(settings.debug)
    if settings.name == "harness":
        from lit_codeRL.envs.harness.env import HarnessEnv

        return HarnessEnv(settings.harness)
    assert sandbox is not None, f"env {settings.name!r} needs a sandbox"
    if settings.name == "unit_test":
        return UnitTestEnv(
            sandbox,
            all_pass_bonus=settings.all_pass_bonus,
            partial_credit=settings.partial_credit,
            num_shown_tests=num_shown_tests,
        )
    if settings.name == "code_execution":
        return CodeExecutionEnv(sandbox, num_shown_tests=num_shown_tests)
    if settings.name == "code_repair":
        return CodeRepairEnv(
            sandbox,
            feedback_tests=settings.feedback_tests,
            all_pass_bonus=settings.all_pass_bonus,
            partial_credit=settings.partial_credit,
            num_shown_tests=num_shown_tests,
        )
    from lit_codeRL.errors import ConfigError

    raise ConfigError(
        f"unknown env {settings.name!r}; choose unit_test, code_execution, code_repair, swe, debug or harness"
    )
