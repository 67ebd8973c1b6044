"""``DebugEnv``: a multi-turn debugging gym. The policy fixes a buggy Python program with a debugger.

An episode is one debugging task (``problems/debug.py``: a buggy program and its pytest tests) in
its own workspace session (``sandbox/workspace.py``: no network, bounded commands, the files on a
tmpfs). Each turn the policy calls one tool (``tools.py``): ``pdb`` (a real ``python -m pdb``
session over a pseudo-terminal inside the sandbox, running the tests, ``pdb_session.py``),
``view``, ``replace``/``edit``/``rewrite``, ``eval`` (the tests' output as the agent would see it), ``listdir``,
optionally ``bash``; ``submit`` ends the episode. The first observation holds the task, the files
and the tests' output at the start (debug-gym runs ``eval`` at reset the same way).

The reward is computed once, from the episode's diff, in a **fresh** workspace with the test files
restored (``SWEGrader``: junit XML and a signed record cross-checked against the exit code): never
from what the agent's ``eval`` printed, so a program that prints ``3 passed``, edits the tests
(through ``rewrite`` or pdb's ``!``) or adds a ``conftest.py`` gains nothing. The reward is 1 when
every test passes (``partial_credit``: the fraction of the initially failing tests that pass, when
none of the passing ones broke). Limits: the runner's turns (``max_turns``, 80 in the configs)
and context; per tool call a time limit; per episode ``trajectory_timeout_s`` of tool time, past
which the episode is masked out of the loss (the environment stopped it, not a wrong answer).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from lit_codeRL.envs.debug.pdb_session import PdbSession
from lit_codeRL.envs.debug.tools import (
    PRESETS,
    ToolCall,
    apply_edit,
    apply_replace,
    line_range,
    numbered,
    parse_tool_call,
    stop_strings,
    usage,
)
from lit_codeRL.envs.protocol import Action, EpisodeStart, StepResult
from lit_codeRL.envs.swe.prompt import cut_middle
from lit_codeRL.envs.text import clean_text
from lit_codeRL.envs.workspace_episodes import (
    WorkspaceEnvSettings,
    WorkspaceEpisodeEnv,
    WorkspaceState,
    capped,
    check_test_deps,
)
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug import DebugTask, cache_root, debug_task, validate_debug_tasks
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import RepoCache, SWETask
from lit_codeRL.sandbox.workspace import (
    CPU_LIMIT_EXIT,
    DiffTooLarge,
    Workspace,
    WorkspaceDead,
    WorkspaceError,
    open_workspace,
)

logger = logging.getLogger(__name__)

READ_LIMIT = 1 << 20
"""Bytes ``view`` shows of a file at most; ``edit`` and ``replace`` refuse a larger file (they
write the file back whole, so a part read would cut it)."""


@dataclass
class DebugSettings(WorkspaceEnvSettings):
    """Knobs of :class:`DebugEnv` (``env.debug`` in configs); the grading, isolation and
    parallelism knobs are every workspace env's (:class:`WorkspaceEnvSettings`)."""

    config_key: ClassVar[str] = "env.debug"

    tools: Literal["debug", "lines", "rewrite", "full"] = "debug"
    """Tool preset: ``debug`` (pdb, view, replace, edit, rewrite, eval, listdir, submit),
    ``lines`` (``debug`` without ``replace``: edits by line numbers only, the ablation), ``rewrite``
    (debug-gym's rewrite-only agent: view, rewrite, eval, listdir, submit; the ablation without a
    debugger), ``full`` (``debug`` plus ``bash``)."""
    pdb_timeout_s: float = 10.0
    """Time limit of one pdb command (past it the debugger's processes are killed)."""
    eval_timeout_s: float = 30.0
    """Time limit of one ``eval`` (the tests)."""
    command_timeout_s: float = 30.0
    """Time limit of one ``bash`` command."""
    trajectory_timeout_s: float = 600.0
    """Tool time of an episode; an episode that uses it up is masked out of the loss."""
    max_output_chars: int = 3000
    """Output shown per tool call (head and tail kept, the middle cut with a marker)."""
    max_view_lines: int = 200
    """Lines ``view`` shows at most."""
    show_initial_eval: bool = True
    """Put the tests' output at the start into the first observation."""
    grade_timeout_s: float = 120.0
    """Time limit of one grading run (apply the diff, restore the tests, run them)."""
    repo_cache: str | None = None
    """Where the tasks' git repositories are prepared; ``None``: ``$LIT_CODERL_DEBUG_CACHE`` or
    ``~/.cache/lit-coderl/debug-tasks``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tools not in PRESETS:
            raise ValueError(f"env.debug.tools must be one of {sorted(PRESETS)}, got {self.tools!r}")
        for name in ("pdb_timeout_s", "eval_timeout_s", "command_timeout_s", "trajectory_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"env.debug.{name} must be > 0")

    @property
    def tool_names(self) -> tuple[str, ...]:
        return PRESETS[self.tools]

    def cache_root(self) -> Path:
        return cache_root(self.repo_cache)


@dataclass
class DebugState(WorkspaceState):
    """One episode: its task, workspace and debugger, and what it has used."""

    debug_task: DebugTask | None = None
    pdb: PdbSession | None = None
    tool_s: float = 0.0
    tool_calls: int = 0
    edits: int = 0
    tools_used: dict[str, int] = field(default_factory=dict)


TASK_TEMPLATE = """You are debugging a Python program in {repo}. It should do this:
<task>
{description}
</task>
Files: {files}
{initial}
Each turn, call exactly one tool:
{usage}
Fix the program, not the tests: test files are restored before your work is graded."""

_DURATION = re.compile(r" in \d+(?:\.\d+)?s(?=(?: =+)?[ \t]*$)", re.MULTILINE)


def tests_output(text: str) -> str:
    """pytest's output without its run time (``... in 0.05s``): the same program gives the same
    observation (the episodes of a group must share their first prompt)."""
    return _DURATION.sub("", text)


class DebugEnv(WorkspaceEpisodeEnv):
    """Debugging tasks in isolated workspaces (see the module docstring)."""

    name = "debug"

    def __init__(self, settings: DebugSettings | None = None, grader: SWEGrader | None = None) -> None:
        self.settings = s = settings or DebugSettings()
        self.tools = s.tool_names
        self.stop_strings = stop_strings(self.tools)
        self.repos = RepoCache(s.cache_root() / "prepared")
        grader = grader or SWEGrader.from_settings(s, self.repos)
        super().__init__(grader, s.parallel, s.grade_on_truncation)
        self._swe: dict[str, SWETask] = {}
        self._initial: dict[str, str] = {}

    # ------------------------------------------------------------------ tasks
    def task_of(self, problem: Problem) -> SWETask:
        task = debug_task(problem)
        # by content, not id: two sources, or one made again (new held-out checks), can give one
        # id to tasks with other files, and the second was graded with the first one's checks
        key = task.content_key()
        if key not in self._swe:
            self._swe[key] = task.to_swe_task(self.settings.cache_root(), grader=self.grader)
        return self._swe[key]

    def validate_problems(self, problems: Sequence[Problem]) -> list[Problem]:
        """The problems whose task is worth training on (``validate_debug_tasks``: the reference
        fix resolves it and the base does not; a task without a fix is kept when its base fails,
        with a warning), the others dropped with a warning saying why. Cached per machine."""
        check_test_deps(problems, self.grader.workspace)
        kept = validate_debug_tasks(
            [debug_task(p) for p in problems], self.grader, self.settings.cache_root(), self.settings.parallel
        )
        ids = {t.task_id for t in kept}
        return [p for p in problems if debug_task(p).task_id in ids]

    def _test_command(self, task: DebugTask) -> str:
        return "python -m pytest -q --tb=short -p no:cacheprovider " + " ".join(task.test_modules)

    def _pdb_argv(self, task: DebugTask) -> list[str]:
        return ["python", "-m", "pdb", "-m", "pytest", "-sq", "-p", "no:cacheprovider", *task.test_modules]

    # ------------------------------------------------------------------ episodes
    def _start(self, problem: Problem) -> DebugState:
        task = debug_task(problem)
        s = self.settings
        state = DebugState(self.task_of(problem), debug_task=task)
        state.pdb = PdbSession(self._pdb_argv(task), s.pdb_timeout_s, s.max_output_chars)
        try:
            config = dataclasses.replace(
                s.workspace.plus_toolchain(state.task.test_deps), command_timeout_s=s.command_timeout_s
            )
            state.workspace = self._track(open_workspace(config, self.repos.get(state.task)))
        except Exception as e:  # noqa: BLE001 - the episode is masked, the run goes on
            logger.warning("workspace for %s failed to start: %s", task.task_id, e)
            state.error = f"{type(e).__name__}: {e}"
        return state

    def first_observation(self, state: DebugState) -> str:
        task = state.debug_task
        assert task is not None
        initial = ""
        if self.settings.show_initial_eval:
            key = task.content_key()
            if key not in self._initial and state.workspace is not None:
                try:
                    out = self._run(
                        state,
                        self._test_command(task),
                        self.settings.eval_timeout_s,
                        count=False,
                        cpu_s=self.grader.cpu_limit(state.task),
                    )
                except WorkspaceError as e:  # ours (no action ran yet): this episode is masked, not the run
                    logger.warning("the initial tests of %s failed to run: %s", task.task_id, e)
                    state.error = f"the initial eval failed: {type(e).__name__}: {e}"
                    self._close(state.workspace)  # nothing to grade, at a step or at the end
                    state.workspace = None
                else:
                    shown = clean_text(out)  # as _step shows the tests' output
                    initial = f"The tests now give:\n{shown}\n"
                    # kept for every later episode of the task only when the tests ran to their end:
                    # one run past its limit on a loaded machine would tell every later episode so
                    if out.rsplit("\n", 1)[-1].startswith("[exit code "):
                        self._initial[key] = shown
            if key in self._initial:
                initial = f"The tests now give:\n{self._initial[key]}\n"
        return TASK_TEMPLATE.format(
            repo=Workspace.REPO,
            description=task.description.strip(),
            files=", ".join(sorted(task.files)),
            initial=initial,
            usage=usage(self.tools),
        )

    def reset_batch(self, problems: Sequence[Problem]) -> list[EpisodeStart]:
        states = self._parallel(self._start, problems)
        # one initial eval per task (sequentially per task, so a group shares its observation)
        seen: dict[str, str] = {}
        starts = []
        for problem, state in zip(problems, states, strict=True):
            key = debug_task(problem).task_id
            if key not in seen:
                seen[key] = self.first_observation(state)
            starts.append(EpisodeStart(seen[key], state, {"task_id": key}))
        return starts

    def _run(
        self, state: DebugState, cmd: str, timeout: float, count: bool = True, cpu_s: float | None = None
    ) -> str:
        """A process in the workspace (``eval``, ``bash``): it ends the debugger's session.
        ``cpu_s``: CPU seconds each of its processes may use (``eval``: the grader's limit)."""
        assert state.workspace is not None
        budget = self.settings.trajectory_timeout_s - state.tool_s
        result = state.workspace.run(
            cmd,
            timeout=max(0.1, min(timeout, budget)),
            max_output=self.settings.max_output_chars,
            cpu_s=cpu_s,
        )
        if state.pdb is not None:
            state.pdb.stale()
        if count:
            state.tool_s += result.wall_s
        if result.timed_out:
            status = "timed out and was killed"
        elif cpu_s and result.exit_code == CPU_LIMIT_EXIT:
            status = f"used {cpu_s:g} s of CPU time and was killed"
        else:
            status = f"exit code {result.exit_code}"
        return f"{tests_output(result.output).rstrip() or '(no output)'}\n[{status}]"

    def _step(self, state: DebugState, action: Action) -> StepResult:
        state.turn += 1
        if state.error is not None or state.workspace is None:
            return self._masked(state, "sandbox_error", state.error or "no workspace")
        call = parse_tool_call(action.text, self.tools, action.cut_off)
        info: dict[str, Any] = {"turn": state.turn, "action": call.tool}
        if call.tool == "submit":
            return self._grade(state, terminated=True)
        note = "\n(Only your first tool call ran; one call per turn.)" if call.ignored_text else ""
        if not call.ok:
            info["dump"] = {"tool": "error", "kind": call.args.get("kind"), "output": call.message}
            return StepResult(call.message + note, 0.0, False, False, info)
        state.tool_calls += 1
        state.tools_used[call.tool] = state.tools_used.get(call.tool, 0) + 1
        before, t0 = state.tool_s, time.monotonic()
        try:
            output, dump = self._call(state, call)
        except WorkspaceDead as e:  # the agent broke its workspace, or the clock stopped it
            return self._lost(state, e)
        except Exception as e:  # noqa: BLE001 - anything else is ours: the episode is masked
            return self._masked(state, "sandbox_error", f"{type(e).__name__}: {e}")
        # a call that failed took its time too (a debugger kept from its prompt waits pdb_timeout_s,
        # then the call is only feedback): the budget counts at least the call's wall time, else
        # failed calls were a wait no budget bounded
        state.tool_s = max(state.tool_s, before + time.monotonic() - t0)
        output = clean_text(output)
        # the dump is kept for every turn of every episode in the trainer: its output is capped (the
        # agent saw at most max_output_chars of it) and so is an edit's diff (capped in _tool)
        info["dump"] = {"tool": call.tool, **call.args, "output": capped(output), **dump}
        info["wall_time_s"] = dump.get("wall_s", 0.0)
        if state.tool_s >= self.settings.trajectory_timeout_s:
            return self._masked(state, "env_time_limit", f"{state.tool_s:.0f} s of tool time")
        return StepResult(cut_middle(output, self.settings.max_output_chars) + note, 0.0, False, False, info)

    def _call(self, state: DebugState, call: ToolCall) -> tuple[str, dict[str, Any]]:
        """Run one tool; returns what the agent sees and extra dump fields. An ordinary failure
        (a missing file, a path outside the repository, a full disk, a debugger that will not
        start) is feedback; only a dead workspace raises (:class:`WorkspaceDead`)."""
        try:
            return self._tool(state, call)
        except WorkspaceDead:
            raise
        except WorkspaceError as e:
            hint = (
                " (rewrite creates a file)"
                if call.tool in ("edit", "replace") and "no such file" in str(e)
                else ""
            )
            return f"<{call.tool}> failed: {e}{hint}", {}

    def _tool(self, state: DebugState, call: ToolCall) -> tuple[str, dict[str, Any]]:
        ws, s, task = state.workspace, self.settings, state.debug_task
        assert ws is not None and task is not None and state.pdb is not None
        args = call.args
        if call.tool == "pdb":
            result = state.pdb.send(ws, args["command"])
            state.tool_s += result.wall_s
            text = result.output or "(no output)"
            if result.restarted:
                text = f"[debugger (re)started: {' '.join(state.pdb.argv)}]\n{text}"
            if result.timed_out:
                text += (
                    f"\n[the command did not return within {s.pdb_timeout_s:g} s; the debugger was stopped]"
                )
            elif result.ended:
                text += "\n[the debugger exited; it restarts at your next pdb command]"
            return text, {"wall_s": round(result.wall_s, 3), "breakpoints": list(state.pdb.locations)}
        if call.tool == "eval":  # as long as a grading run may take, at most eval_timeout_s
            limit = min(s.eval_timeout_s, self.grader.time_limit(state.task))
            return self._run(
                state, self._test_command(task), limit, cpu_s=self.grader.cpu_limit(state.task)
            ), {}
        if call.tool == "bash":
            return self._run(state, args["command"], s.command_timeout_s), {}
        if call.tool == "listdir":
            entries = ws.listdir(args["path"], depth=2, max_entries=200)
            return "\n".join(entries) or "(empty)", {}  # cleaned with every output in _step
        if call.tool == "view":
            raw = ws.read_file(args["path"], max_bytes=READ_LIMIT + 1)
            data = raw[:READ_LIMIT].decode("utf-8", errors="replace")  # bad bytes shown as U+FFFD
            first, last = line_range(args["lines"]) if "lines" in args else (1, None)
            cut = (
                f"\n[the file is larger than {READ_LIMIT} bytes: only its start was read]"
                if len(raw) > READ_LIMIT
                else ""
            )
            return f"{args['path']}:\n{numbered(data, first, last, s.max_view_lines)}{cut}", {}
        # replace / edit / rewrite
        if call.tool == "rewrite":
            new, error = args["content"], None
        else:
            raw = ws.read_file(args["path"], max_bytes=READ_LIMIT + 1)
            if len(raw) > READ_LIMIT:  # the edited text is written back whole: a part read would cut it
                return (
                    f"{args['path']} is larger than {READ_LIMIT} bytes, too large for <{call.tool}>: nothing "
                    "changed (<rewrite> replaces it whole)."
                ), {}
            try:  # the whole file: a character cut at the limit cannot make it look like bad bytes
                old = raw.decode("utf-8")
            except UnicodeDecodeError:  # writing it back would re-encode every byte that is not UTF-8
                return f"{args['path']} is not UTF-8 text: nothing changed (<rewrite> replaces it whole).", {}
            if call.tool == "replace":
                new, error = apply_replace(old, args["old"], args["new"])
            else:
                new, error = apply_edit(old, args["lines"], args["content"])
        if error:
            return error, {}
        ws.write_file(args["path"], new)
        state.edits += 1
        state.pdb.stale()  # the code changed: the debugger restarts, breakpoints kept
        note = ""
        try:
            diff = ws.diff()  # (ends the debugger's processes too: it was restarting anyway)
        except DiffTooLarge as e:  # the edit was made: say so, and why no diff can be graded
            diff, note = "", f"\n[{e}]"
        except WorkspaceDead:
            raise
        except WorkspaceError as e:  # the edit was made all the same (the agent's git config can
            # make the diff fail: a clean filter that sleeps); "<edit> failed" would be untrue
            diff, note = "", f"\n[the edit is made, but git could not take the diff: {e}]"
        state.last_diff = diff
        shown = numbered(new, max_lines=s.max_view_lines)
        return f"{args['path']} now reads:\n{shown}{note}", {"diff": capped(diff)}

    def episode_stats(self, state: DebugState) -> dict[str, Any]:
        return {
            "num_commands": state.tool_calls,
            "command_s": round(state.tool_s, 3),
            "num_edits": state.edits,
            "tools_used": dict(state.tools_used),
            "debugger_restarts": state.pdb.restarts if state.pdb is not None else 0,
        }
