"""What every agent env on workspace sessions shares: one isolated session per episode, steps run
in parallel, and the reward from the episode's diff graded in a *fresh* workspace.

The SWE agent (``envs/swe/env.py``: ``<execute>`` shell commands) and the debugging gym
(``envs/debug/env.py``: pdb and editing tools) differ in what a turn does; the rest is here once:

* a thread pool that runs resets, steps and gradings of a batch at the same time (workspace calls
  wait on subprocesses, not on the GIL);
* the set of open workspaces, closed at episode end, at :meth:`close` and on errors;
* the end of an episode: ``submit`` grades it (``terminated``); a runner-truncated one is graded
  as it stands (``grade_on_truncation``, SWE-agent's auto-submit) or gets 0;
* masking only for what the agent did not cause: a workspace that does not start, a grading
  sandbox that does not start, the trainer's own clock (a session that stops answering, the
  env's time budget) *mask* the episode (``info["masked"]``: left out of the loss). What the agent
  did to its own workspace (its disk quota filled, files planted where the server works, its
  server killed: the diff cannot be taken) is a graded outcome, verdict ``workspace_broken`` with
  the failure reward and ``agent_fault`` set, so breaking the workspace never pays;
* grading: the diff against the base commit, taken by the trusted server after the agent's
  processes are gone, then :class:`~lit_codeRL.grading.SWEGrader` in a fresh workspace
  (tests restored, machine-readable results cross-checked; never the agent's stdout);
* ``validate_problems``: a task is trained on only if its reference fix resolves it and its base
  does not (cached per machine);
* bounded records: the runner keeps every turn's ``info["dump"]`` of every episode in memory,
  so a per-turn text field the agent can make large (a diff after a 40 MB file, a tool's output)
  is kept as its head and a note of its size (:func:`capped`, :data:`DUMP_TEXT_CHARS`); the
  episode's final diff (``info["episode"]["diff"]``, what ``lit-coderl episode`` shows and a
  regrade reads) is kept whole up to the grader's ``MAX_PATCH_BYTES``, past which it is not
  gradable anyway.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lit_codeRL.envs.protocol import Action, PendingSteps, StepResult
from lit_codeRL.errors import ConfigError, listed
from lit_codeRL.grading import SWEGrade, SWEGrader
from lit_codeRL.grading.repo import MAX_PATCH_BYTES
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import SWETask
from lit_codeRL.sandbox.workspace import (
    DiffTooLarge,
    Workspace,
    WorkspaceConfig,
    WorkspaceDead,
    WorkspaceError,
)
from lit_codeRL.sandbox.workspace_toolchain import missing_distributions

logger = logging.getLogger(__name__)

DUMP_TEXT_CHARS = 1 << 16
"""Characters of a per-turn dump's text field (a diff, a tool's output) kept at most."""


def capped(text: str, limit: int = DUMP_TEXT_CHARS) -> str:
    """``text`` whole when it has at most ``limit`` characters, else its first ``limit`` and a
    line saying how long it was: what the trainer keeps of a text the agent can make any size."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... cut: {len(text)} characters in all, the first {limit} kept ...]\n"


@dataclass
class WorkspaceEnvSettings:
    """The knobs every agent env on workspace sessions has (``env.swe``, ``env.debug``): how an
    episode is graded, the isolation, the repository cache and the parallelism. Each env's
    settings class adds its own and sets its defaults (``grade_timeout_s``, ``repo_cache``)."""

    config_key: ClassVar[str] = "env"
    """Where the settings sit in a config, for the messages of :meth:`__post_init__`."""

    grade_on_truncation: bool = True
    """An episode cut by the runner's turn or context limit is graded on its files as they stand
    (auto-submit); off: it gets reward 0 without grading."""
    partial_credit: bool = False
    """Reward the fraction of the failing tests (FAIL_TO_PASS) that pass, when every passing
    test (PASS_TO_PASS) still passes (the tests it counts are mirrored and answered as a full
    pass's are)."""
    grade_timeout_s: float = 300.0
    """Time limit of one grading run (apply the diff, restore the tests, run them)."""
    grade_timeout_factor: float = 10.0
    """A task validated on this machine is graded within this many times its reference patch's
    grading run (at least ``grade_min_timeout_s``, at most ``grade_timeout_s``), so an edit that
    hangs the tests stalls the batch for seconds; ``0``: always ``grade_timeout_s``."""
    grade_min_timeout_s: float = 20.0
    """The floor of that scaled limit (sandboxes start slower on a loaded machine)."""
    grade_min_cpu_s: float = 5.0
    """Such a task's grading runs, and the debugging gym's ``eval``, also stop each process that
    uses ``grade_timeout_factor`` times the reference run's CPU time, at least this many seconds:
    an edit that loops forever costs seconds of the batch's wait even where the wall-clock floor
    above must be long; ``0``: no CPU limit."""
    tamper_reward: float = 0.0
    """Reward of an episode graded ``tamper`` (its diff shadows the toolchain, adds packaging
    metadata or reaches for reporter internals, or the run forged a pass: ``docs/swe.md``). The
    default is the failure reward; a negative value makes tampering a penalty."""
    mirror_check: bool = True
    """Grade an episode that resolved its task a second time, with the values its failing tests
    check equality against changed in their text: a pass there is ``tamper`` (the code read the
    answer from the test: ``docs/swe.md``). Costs one more grading run per resolved episode of a
    task whose tests have such values."""
    answer_check: bool = True
    """Then answer the checks of its failing tests that compare a computed value with a literal
    (``assert f(2, 3) == 5``) once more, without pytest and with no test in the work tree, and
    compare each value with the literal outside that process: another value is ``tamper`` (the
    first run's pass was forged, or read from the test: ``docs/swe.md``, the answer run). Costs
    one more run per resolved episode of a task whose reference answers such checks."""
    workspace: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    """The isolation backend and per-session limits (the agent's and the grading workspaces)."""
    repo_cache: str | None = None
    """Where the tasks' git repositories are prepared; ``None``: the env's default cache."""
    parallel: int = 8
    """Workspace operations (resets, tool calls, commands, gradings) running at once."""

    def __post_init__(self) -> None:
        if isinstance(self.workspace, dict):  # from YAML without a class path
            self.workspace = WorkspaceConfig(**self.workspace)
        key = self.config_key
        if self.grade_timeout_s <= 0:
            raise ValueError(f"{key}.grade_timeout_s must be > 0")
        if self.grade_timeout_factor < 0:
            raise ValueError(f"{key}.grade_timeout_factor must be >= 0 (0: always grade_timeout_s)")
        if self.grade_min_timeout_s <= 0:
            raise ValueError(f"{key}.grade_min_timeout_s must be > 0")
        if self.grade_min_cpu_s < 0:
            raise ValueError(f"{key}.grade_min_cpu_s must be >= 0 (0: no CPU limit)")
        if self.parallel < 1:
            raise ValueError(f"{key}.parallel must be >= 1")


@dataclass
class WorkspaceState:
    """One episode: its task (as graded), its workspace, and how it ended."""

    task: SWETask
    workspace: Workspace | None = None
    error: str | None = None
    """Why the workspace failed (the episode is masked)."""
    turn: int = 0
    done: bool = False
    grade: SWEGrade | None = None
    last_diff: str = ""


class WorkspaceEpisodeEnv:
    """Base of the agent envs on workspace sessions (see the module docstring).

    A subclass implements :meth:`_start` (open the episode's workspace, return its state),
    :meth:`_step` (one turn) and :meth:`task_of` (the graded task of a problem), and may add to
    the grade's info with :meth:`episode_stats`.
    """

    name = "workspace"
    """Used in log messages (``SWE``, ``debug``)."""

    def __init__(self, grader: SWEGrader, parallel: int, grade_on_truncation: bool) -> None:
        self.grader = grader
        self.grade_on_truncation = grade_on_truncation
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix=f"{self.name}-env")
        self._open: set[Workspace] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ for subclasses
    def task_of(self, problem: Problem) -> SWETask:
        raise NotImplementedError

    def _start(self, problem: Problem) -> WorkspaceState:
        raise NotImplementedError

    def _step(self, state: Any, action: Action) -> StepResult:
        raise NotImplementedError

    def episode_stats(self, state: Any) -> dict[str, Any]:
        """Numbers about the episode merged into the final step's info and its ``episode`` dump."""
        return {}

    def _track(self, ws: Workspace) -> Workspace:
        with self._lock:
            self._open.add(ws)
        return ws

    def _close(self, ws: Workspace | None) -> None:
        if ws is None:
            return
        with self._lock:
            self._open.discard(ws)
        try:
            ws.close()
        except Exception:  # noqa: BLE001 - teardown must not lose a run
            logger.exception("closing a workspace failed")

    def _end(self, state: WorkspaceState) -> None:
        state.done = True
        self._close(state.workspace)
        state.workspace = None

    def _masked(self, state: WorkspaceState, why: str, detail: str) -> StepResult:
        """End the episode without a reward: it leaves the loss (``masked``; ``sandbox_error``
        when the infrastructure failed)."""
        self._end(state)
        info = {"verdict": why, "reason": detail[:500], "masked": True, "turn": state.turn}
        if why == "sandbox_error":
            info["sandbox_error"] = True
        return StepResult("", 0.0, False, True, info)

    def _failed(self, state: WorkspaceState, verdict: str, detail: str) -> StepResult:
        """End the episode with the failure reward for something the agent did to its own
        workspace (a graded outcome, not masked: see the module docstring)."""
        self._end(state)
        grade = SWEGrade(verdict, 0.0, reason=detail[:500]).to_dict()
        info = {
            "turn": state.turn,
            "verdict": verdict,
            "reason": detail[:500],
            "agent_fault": True,
            "episode": {
                "diff": capped(state.last_diff, MAX_PATCH_BYTES),
                "grade": grade,
                "instance_id": state.task.instance_id,
                "agent_fault": True,
                **self.episode_stats(state),
            },
        }
        return StepResult("", 0.0, True, False, info)

    def _lost(self, state: WorkspaceState, error: WorkspaceError) -> StepResult:
        """The workspace failed under a request: masked when the trainer's clock stopped it (the
        session did not answer in time), else the agent's doing (``workspace_broken``)."""
        ws = state.workspace
        reason = (ws.dead_reason if ws is not None else None) or str(error)
        if isinstance(error, WorkspaceDead) and reason.startswith("TimeoutError"):
            return self._masked(state, "sandbox_error", f"the workspace stopped answering: {reason}")
        return self._failed(state, "workspace_broken", f"{type(error).__name__}: {error}")

    def _grade(self, state: WorkspaceState, terminated: bool) -> StepResult:
        """Take the diff, close the agent's workspace, grade the diff in a fresh one."""
        try:
            diff = state.workspace.diff() if state.workspace is not None else state.last_diff
        except DiffTooLarge as e:  # what grading refuses unread (the grader's patch_failed)
            return self._failed(state, "patch_failed", str(e))
        except WorkspaceError as e:  # the agent filled its disk, planted files, broke git...
            return self._lost(state, e)
        self._end(state)  # the agent's processes are gone before grading starts
        grade = self.grader.grade(state.task, diff)
        state.grade, state.last_diff = grade, diff
        stats = self.episode_stats(state)
        info: dict[str, Any] = {
            "turn": state.turn,
            "verdict": "passed" if grade.resolved else grade.verdict,
            "resolved": grade.resolved,
            "pass_fraction": f2p_fraction(grade),
            "wall_time_s": grade.wall_s,
            **stats,
            "episode": {
                "diff": capped(diff, MAX_PATCH_BYTES),  # larger: refused by the grader (patch_failed)
                "grade": grade.to_dict(),
                "instance_id": state.task.instance_id,
                **stats,
            },
        }
        if grade.infra_error:
            info.update(sandbox_error=True, masked=True)
        return StepResult("", grade.reward, terminated, not terminated, info)

    # ------------------------------------------------------------------ TextEnv
    def validate_problems(self, problems: Sequence[Problem]) -> list[Problem]:
        """The problems whose task validates (its reference fix resolves it, the base does not;
        cached per machine), the others dropped with a warning naming them and why."""
        check_test_deps(problems, self.grader.workspace)
        reasons = list(self._pool.map(lambda p: self.grader.validate(self.task_of(p)), problems))
        dropped = [(p.task_id, why) for p, why in zip(problems, reasons, strict=True) if why]
        for task_id, why in dropped:
            logger.warning("%s task %s dropped: %s", self.name, task_id, why)
        if dropped:
            logger.warning("%d of %d %s tasks dropped by validation", len(dropped), len(problems), self.name)
        return [p for p, why in zip(problems, reasons, strict=True) if not why]

    def _parallel(self, fn: Callable[..., Any], *args: Sequence[Any]) -> list[Any]:
        return list(self._pool.map(fn, *args))

    def step_batch(self, states: Sequence[Any], actions: Sequence[Action]) -> PendingSteps:
        """One turn of each episode, run at the same time. A state given twice runs its first
        action only: two threads on one episode would race (one grades and closes the workspace
        under the other, which then looks broken by the agent); the repeat and a step of an episode
        already over get :meth:`_not_stepped`, a defined result that blames no one."""
        seen: set[int] = set()
        futures: list[Future[StepResult]] = []
        for state, action in zip(states, actions, strict=True):
            if id(state) in seen or state.done:
                why = (
                    "a repeat of a state earlier in the batch" if id(state) in seen else "the episode is over"
                )
                futures.append(Future())
                futures[-1].set_result(self._not_stepped(state, why))
                continue
            seen.add(id(state))
            futures.append(self._pool.submit(self._step, state, action))
        return PendingSteps(lambda: [f.result() for f in futures], lambda: all(f.done() for f in futures))

    @staticmethod
    def _not_stepped(state: WorkspaceState, why: str) -> StepResult:
        """The result of a step the env did not run (the caller's mistake, not the agent's nor the
        sandbox's): masked, the state left as it is."""
        info = {"verdict": "not_stepped", "reason": why, "masked": True, "turn": state.turn}
        return StepResult("", 0.0, False, True, info)

    def finish_batch(self, states: Sequence[Any], truncated: Sequence[bool]) -> list[StepResult | None]:
        """Called by the runner when episodes end: grade the truncated ones (if
        ``grade_on_truncation``), close every workspace still open."""
        futures = [self._pool.submit(self._finish, s, t) for s, t in zip(states, truncated, strict=True)]
        return [f.result() for f in futures]

    def _finish(self, state: WorkspaceState, truncated: bool) -> StepResult | None:
        if state.done or state.workspace is None:
            self._close(state.workspace)
            state.workspace = None
            return None
        if not (truncated and self.grade_on_truncation):
            self._end(state)
            return StepResult("", 0.0, False, True, {"verdict": "not_graded"})
        return self._grade(state, terminated=False)

    def close(self) -> None:
        """Close every workspace still open (idempotent)."""
        with self._lock:
            open_now = list(self._open)
        for ws in open_now:
            self._close(ws)

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # a finalizer, not the contract: close() is
        try:
            self._pool.shutdown(wait=False, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass


def check_test_deps(problems: Sequence[Problem], workspace: WorkspaceConfig) -> None:
    """Raise ``ConfigError`` in one line, before any grading run, when the ``test_deps`` of an SWE
    or debugging task are not installed for ``workspace.python``: every session of such a task
    would fail to start, and validation would drop them one by one."""
    needed: dict[str, list[str]] = {}
    for problem in problems:
        task = problem.metadata.get("swe_task") or problem.metadata.get("debug_task")
        for dep in getattr(task, "test_deps", ()):
            needed.setdefault(dep, []).append(problem.task_id)
    missing = missing_distributions(workspace.python, list(needed))
    if missing:
        ids = list(dict.fromkeys(task_id for dep in missing for task_id in needed[dep]))
        raise ConfigError(
            f"{len(ids)} task(s) ({listed(ids)}) import "
            f"{', '.join(missing)} in their tests (their test_deps), not installed for {workspace.python}: "
            f"pip install {' '.join(missing)}"
        )


def f2p_fraction(grade: SWEGrade) -> float:
    """Share of the FAIL_TO_PASS tests the graded diff made pass."""
    if not grade.fail_to_pass:
        return 0.0
    return sum(s == "passed" for s in grade.fail_to_pass.values()) / len(grade.fail_to_pass)
