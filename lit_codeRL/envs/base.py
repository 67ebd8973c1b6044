"""Single-turn code environments: one prompt, one completion, one sandbox run, one reward.

Two APIs over the same grading:

* gymnasium's ``reset`` / ``step`` (``step`` takes the completion text and always terminates),
  for interactive use and for later multi-turn envs to keep the same shape;
* ``score_batch`` / ``submit_batch`` for training: every completion of a rollout is queued on the
  sandbox pool at once, and ``submit_batch`` returns before any of them has run, so grading
  overlaps the generation of the rest of the batch.

A subclass says how a completion becomes a program (:meth:`SingleTurnCodeEnv.build_program`) and
how a sandbox result becomes a reward (:meth:`SingleTurnCodeEnv.reward_from_result`). Everything
that is not the policy's doing (a sandbox that failed, a future that raised) gets ``error_reward``
and is counted, never raised into the training loop.
"""

from __future__ import annotations

import string
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from lit_codeRL.envs.extraction import extract_code, has_no_statements
from lit_codeRL.envs.protocol import Action, EpisodeStart, PendingSteps, StepResult
from lit_codeRL.problems.prompts import format_prompt
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

NO_CODE = "no_code"
"""Verdict of a completion with no code in it (graded without running anything)."""

_SNIPPET_CHARS = 500


class Executor(Protocol):
    """What an env needs from a sandbox (:class:`lit_codeRL.sandbox.Sandbox` is one)."""

    def submit(self, program: Program) -> Future[ExecutionResult]: ...


@dataclass
class RewardResult:
    """The grade of one completion."""

    reward: float
    """Scalar reward for the policy."""
    verdict: str
    """A :class:`~lit_codeRL.sandbox.Verdict` value (``"passed"``, ``"syntax_error"``...) or ``"no_code"``."""
    pass_fraction: float
    """Fraction of tests passed (for a program without tests: 1.0 if it ran cleanly, else 0.0)."""
    code: str
    """The program extracted from the completion (what ran)."""
    info: dict[str, Any] = field(default_factory=dict)
    """JSON-ready details: ``exception_type``, ``exception_message``, ``stdout`` (a snippet),
    ``wall_time_s``, ``num_tests``, ``num_passed``, ``sandbox_error``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_info(graded: RewardResult) -> dict[str, Any]:
    """The info dict of a graded step: the sandbox details plus verdict, pass fraction and code."""
    return {
        **graded.info,
        "verdict": graded.verdict,
        "pass_fraction": graded.pass_fraction,
        "code": graded.code,
    }


def result_info(result: ExecutionResult) -> dict[str, Any]:
    """The JSON-ready summary of a sandbox result that goes into ``RewardResult.info``."""
    return {
        "exception_type": result.exception_type,
        "exception_message": (result.exception_message or "")[:_SNIPPET_CHARS] or None,
        "stdout": result.stdout[:_SNIPPET_CHARS],
        "wall_time_s": float(result.wall_time_s),
        "num_tests": result.num_tests,
        "num_passed": result.num_passed,
        "failed_test": result.failed_test,
        "sandbox_error": False,
    }


class PendingRewards:
    """Rewards of a submitted batch that may still be running in the sandbox.

    ``done()`` polls; ``result()`` blocks and returns one :class:`RewardResult` per completion, in
    submission order.
    """

    def __init__(self, env: SingleTurnCodeEnv, items: list[RewardResult | tuple[Problem, str, Future]]):
        self._env = env
        self._items = items
        self._results: list[RewardResult] | None = None

    def done(self) -> bool:
        return all(not isinstance(it, tuple) or it[2].done() for it in self._items)

    def result(self, timeout: float | None = None) -> list[RewardResult]:
        """Wait for every completion's grade (``timeout`` seconds per pending program)."""
        if self._results is None:
            self._results = [
                it if isinstance(it, RewardResult) else self._env._resolve(*it, timeout=timeout)
                for it in self._items
            ]
        return list(self._results)

    def __len__(self) -> int:
        return len(self._items)


class SingleTurnCodeEnv(gym.Env):
    """Base of the one-completion code environments.

    Args:
        sandbox: Where programs run: anything with ``submit(program) -> Future[ExecutionResult]``.
        timeout_s: Wall-clock limit per program; ``None`` uses the sandbox's default.
        syntax_error_reward: Reward of code that does not compile.
        empty_reward: Reward of a completion with no code in it (the sandbox is not called);
            ``None`` = ``syntax_error_reward``: an answer without code is as unrunnable as broken
            code, and cheaper to write, so it must not earn more.
        error_reward: Reward when the sandbox itself fails (not the policy's fault).
        problems: Problems ``reset()`` samples from when it is not given one in ``options``.
        num_shown_tests: Tests of a problem shown in its prompt (MBPP protocol: the first).

    It is also a :class:`~lit_codeRL.envs.protocol.TextEnv` with one turn: ``reset_batch`` gives
    the prompt, ``step_batch`` grades and always terminates.
    """

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Text(max_length=1 << 20, charset=string.printable)
    action_space = gym.spaces.Text(max_length=1 << 20, charset=string.printable)

    def __init__(
        self,
        sandbox: Executor,
        timeout_s: float | None = None,
        syntax_error_reward: float = 0.0,
        empty_reward: float | None = None,
        error_reward: float = 0.0,
        problems: Sequence[Problem] | None = None,
        num_shown_tests: int = 1,
    ) -> None:
        super().__init__()
        self.num_shown_tests = num_shown_tests
        self.sandbox = sandbox
        self.timeout_s = timeout_s
        self.syntax_error_reward = syntax_error_reward
        self.empty_reward = syntax_error_reward if empty_reward is None else empty_reward
        self.error_reward = error_reward
        self.problems = list(problems) if problems is not None else None
        self.problem: Problem | None = None
        self._lock = threading.Lock()
        self.num_graded = 0
        """Completions graded so far (all APIs)."""
        self.num_sandbox_errors = 0
        """Of those, how many hit a sandbox failure and got ``error_reward``."""

    # ------------------------------------------------------------------ for subclasses
    def build_program(self, problem: Problem, code: str) -> Program:
        """The program the sandbox runs for ``code`` extracted from a completion to ``problem``."""
        raise NotImplementedError

    def reward_from_result(self, problem: Problem, code: str, result: ExecutionResult) -> RewardResult:
        """The reward of a sandbox ``result`` (never called for ``SANDBOX_ERROR``)."""
        raise NotImplementedError

    def observation(self, problem: Problem) -> str:
        """What the policy sees: the task, its shown tests or starter code, and the answer format
        (plain text; chat templating belongs to the rollout layer)."""
        return format_prompt(problem, self.num_shown_tests)

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on ``options["problem"]``, or on a problem sampled from ``problems``."""
        super().reset(seed=seed)
        problem = (options or {}).get("problem")
        if problem is None:
            if not self.problems:
                raise ValueError("reset() needs options={'problem': Problem} or an env built with problems")
            problem = self.problems[int(self.np_random.integers(len(self.problems)))]
        self.problem = problem
        return self.observation(problem), {"task_id": problem.task_id, "entry_point": problem.entry_point}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Grade the completion ``action``; the episode always ends (``terminated=True``)."""
        if self.problem is None:
            raise RuntimeError("call reset() before step()")
        graded = self.score_batch([self.problem], [action])[0]
        self.problem = None
        return "", graded.reward, True, False, step_info(graded)

    # ------------------------------------------------------------------ TextEnv API
    def reset_batch(self, problems: Sequence[Problem]) -> list[EpisodeStart]:
        """One episode per problem; the state is the problem itself."""
        return [
            EpisodeStart(self.observation(p), p, {"task_id": p.task_id, "entry_point": p.entry_point})
            for p in problems
        ]

    def step_batch(self, states: Sequence[Problem], actions: Sequence[Action]) -> PendingSteps:
        """Grade every action (queued on the sandbox at once); every episode terminates."""
        pending = self.submit_batch(list(states), [a.text for a in actions])

        def resolve() -> list[StepResult]:
            return [StepResult("", g.reward, True, False, step_info(g)) for g in pending.result()]

        return PendingSteps(resolve, pending.done)

    # ------------------------------------------------------------------ batched API
    def submit_batch(self, problems: Sequence[Problem], completions: Sequence[str]) -> PendingRewards:
        """Queue every completion on the sandbox and return at once; see :class:`PendingRewards`."""
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
        items: list[RewardResult | tuple[Problem, str, Future]] = []
        for problem, completion in zip(problems, completions, strict=True):
            code = extract_code(completion, problem.entry_point)
            if has_no_statements(code):
                items.append(self._counted(self.empty_result(problem, code)))
                continue
            program = self.build_program(problem, code)
            try:
                future = self.sandbox.submit(program)
            except Exception as e:  # noqa: BLE001 - a closed or broken sandbox is not the policy's fault
                items.append(self._counted(self.error_result(code, e)))
                continue
            items.append((problem, code, future))
        return PendingRewards(self, items)

    def score_batch(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[RewardResult]:
        """Grade completions (``completions[i]`` answers ``problems[i]``), in order."""
        return self.submit_batch(problems, completions).result()

    # ------------------------------------------------------------------ helpers
    def empty_result(self, problem: Problem, code: str) -> RewardResult:
        info = {"num_tests": 0, "num_passed": 0, "wall_time_s": 0.0, "sandbox_error": False}
        return RewardResult(self.empty_reward, NO_CODE, 0.0, code, info)

    def error_result(self, code: str, error: BaseException | ExecutionResult) -> RewardResult:
        if isinstance(error, ExecutionResult):
            info = result_info(error)
        else:
            info = {
                "exception_type": type(error).__name__,
                "exception_message": str(error)[:_SNIPPET_CHARS],
                "wall_time_s": 0.0,
                "num_tests": 0,
                "num_passed": 0,
            }
        info["sandbox_error"] = True
        return RewardResult(self.error_reward, Verdict.SANDBOX_ERROR.value, 0.0, code, info)

    def _resolve(self, problem: Problem, code: str, future: Future, timeout: float | None) -> RewardResult:
        try:
            result = future.result(timeout=timeout)
        except Exception as e:  # noqa: BLE001 - see error_result
            return self._counted(self.error_result(code, e))
        if result.verdict == Verdict.SANDBOX_ERROR:
            return self._counted(self.error_result(code, result))
        return self._counted(self.reward_from_result(problem, code, result))

    def _counted(self, graded: RewardResult) -> RewardResult:
        with self._lock:
            self.num_graded += 1
            self.num_sandbox_errors += int(bool(graded.info.get("sandbox_error")))
        return graded
