"""``ContainerEnv``: multi-turn software-engineering episodes in an isolated repository.

An episode is one SWE task (``problems/swe.py``) in its own workspace session
(``sandbox/workspace.py``: the repository at the base commit with its history cut there, no
network, bounded commands). The policy runs one shell command per turn as
``<execute>cmd</execute>`` (the generation's stop string is ``</execute>``) and sees the command's
output and the current ``git diff``; ``<submit/>`` ends the episode. Which tag wins, and what a
missing or cut-off command gets, is defined in ``actions.py``.

The reward is given once, at the end, by grading the episode's diff in a fresh workspace
(``grading.py``): never in the agent's own workspace, never from its stdout. An episode the
runner cuts (``max_turns``, context) is graded on its diff as it stands (``grade_on_truncation``,
SWE-agent's auto-submit) or gets 0. Limits per episode: the runner's turns and context, the
per-command time limit, and the total command time ``max_episode_command_s``: an episode that
exhausts it is *masked out of the loss* (``valid`` False), not rewarded 0, because what stopped it
is the environment's clock, not a wrong answer (rLLM's ``ENV_TIMEOUT`` handling). A workspace
that fails (cannot start, dies) masks the episode the same way.

Two interfaces: the batched :class:`~lit_codeRL.envs.protocol.TextEnv` one the episode runner
drives (``reset_batch``/``step_batch``/``finish_batch``), and the original single-episode one
(``reset()`` -> dict with ``problem_statement``, ``step(text)`` -> ``(message, reward, done,
extra)``, ``close()``, a context manager).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from lit_codeRL.envs.protocol import Action, EpisodeStart, StepResult
from lit_codeRL.envs.swe.actions import STOP_STRINGS, parse_action
from lit_codeRL.envs.swe.prompt import FEEDBACK, IGNORED_NOTE, command_observation, task_prompt
from lit_codeRL.envs.swe.tools import ToolBundle, load_tools
from lit_codeRL.envs.text import clean_text
from lit_codeRL.envs.workspace_episodes import (
    WorkspaceEnvSettings,
    WorkspaceEpisodeEnv,
    WorkspaceState,
    capped,
)
from lit_codeRL.errors import ConfigError
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import RepoCache, SWETask, load_swe_tasks
from lit_codeRL.sandbox.workspace import (
    DiffTooLarge,
    Workspace,
    WorkspaceConfig,
    WorkspaceError,
    open_workspace,
)

logger = logging.getLogger(__name__)


@dataclass
class SWESettings(WorkspaceEnvSettings):
    """Knobs of :class:`ContainerEnv` (``env.swe`` in configs); the grading, isolation and
    parallelism knobs are every workspace env's (:class:`WorkspaceEnvSettings`)."""

    config_key: ClassVar[str] = "env.swe"

    tools: list[str] = field(default_factory=lambda: ["search"])
    """Tool bundles installed into every workspace (``<tools_path>/<name>/{bin,config.yaml,install.sh}``)."""
    tools_path: str | None = None
    """Where the tool bundles live (``base_tools_path``); ``None``: ``env/tools`` of this checkout."""
    command_timeout_s: float = 30.0
    """Time limit of one command (killed with its whole process tree after it)."""
    max_episode_command_s: float = 300.0
    """Total time of an episode's commands (each with the diff shown after it); an episode that uses
    it up is masked out of the loss."""
    max_output_chars: int = 3000
    """Command output shown per turn (head and tail kept, the middle cut with a marker)."""
    max_diff_chars: int = 2000
    """``git diff`` shown per turn (head and tail kept)."""
    sif_folder: str | None = None
    """Apptainer users: a folder of per-instance images (``<instance_id>.sif`` or the file name of
    the task's ``image``); a task with an image there runs in it (backend apptainer)."""
    repo_cache: str | None = None
    """Where prepared (history-cut) repositories are cached; ``None``: ``$LIT_CODERL_SWE_CACHE`` or
    ``~/.cache/lit-coderl/swe-repos``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("command_timeout_s", "max_episode_command_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"env.swe.{name} must be > 0")


@dataclass
class SWEState(WorkspaceState):
    """One episode: its task, its workspace, and the commands it has run."""

    command_s: float = 0.0
    commands: int = 0


def swe_task(problem: Problem) -> SWETask:
    task = problem.metadata.get("swe_task")
    if not isinstance(task, SWETask):
        raise ConfigError(f"problem {problem.task_id!r} is not a SWE task (use problems.source: swe)")
    return task


def instance_image(folder: str | None, task: SWETask) -> Path | None:
    """The task's image in ``folder`` (:attr:`SWESettings.sif_folder`): ``<instance_id>.sif``, else
    the file name of its ``image`` with ``:`` as ``_`` plus ``.sif``; ``None`` when neither is a file
    there. An ``instance_id`` with ``/`` names a file in a subfolder; one that is absolute or has a
    ``..`` part (a task file's text) names none: it must not pick an image outside the folder."""
    if not folder:
        return None
    for name in (f"{task.instance_id}.sif", Path(task.image or "").name.replace(":", "_") + ".sif"):
        parts = name.split("/")
        if name == ".sif" or "\0" in name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            continue
        image = Path(folder).expanduser().joinpath(*parts)
        if image.is_file():
            return image
    return None


class ContainerEnv(WorkspaceEpisodeEnv):
    """SWE tasks in isolated workspaces (see the module docstring; what every workspace env
    shares, the end of an episode and its grading, is ``envs/workspace_episodes.py``).

    Args:
        data_name_or_path: Tasks for the single-episode interface: ``embedded`` (the shipped
            tasks), a JSONL/JSON/parquet file of SWE-bench rows, or a dataset id. The batched
            interface takes its tasks from the problems it is given instead.
        split: Split of those tasks.
        sif_folder: See :attr:`SWESettings.sif_folder`.
        base_tools_path: See :attr:`SWESettings.tools_path`.
        tool_list: See :attr:`SWESettings.tools`.
        settings: Every other knob; the arguments above override its fields.
        grader: Grades diffs (default: :class:`SWEGrader` with the same workspace settings).
    """

    stop_strings = STOP_STRINGS
    name = "SWE"

    def __init__(
        self,
        data_name_or_path: str | None = "embedded",
        split: str = "train",
        sif_folder: str | None = None,
        base_tools_path: str | None = None,
        tool_list: Sequence[str] | None = None,
        settings: SWESettings | None = None,
        grader: SWEGrader | None = None,
    ) -> None:
        s = settings or SWESettings()
        overrides: dict[str, Any] = {}
        if sif_folder is not None:
            overrides["sif_folder"] = sif_folder
        if base_tools_path is not None:
            overrides["tools_path"] = base_tools_path
        if tool_list is not None:
            overrides["tools"] = list(tool_list)
        self.settings = s = dataclasses.replace(s, **overrides) if overrides else s
        self.tools: list[ToolBundle] = load_tools(s.tools, s.tools_path)
        self.repos = RepoCache(s.repo_cache)
        grader = grader or SWEGrader.from_settings(s, self.repos)
        super().__init__(grader, s.parallel, s.grade_on_truncation)
        self.data_name_or_path, self.split = data_name_or_path, split
        self._tasks: list[SWETask] | None = None
        self._next_task = 0
        self._single: SWEState | None = None

    # ------------------------------------------------------------------ workspaces
    def _workspace_config(self, task: SWETask) -> WorkspaceConfig:
        config = dataclasses.replace(
            self.settings.workspace.plus_toolchain(task.test_deps),
            command_timeout_s=self.settings.command_timeout_s,
        )
        image = instance_image(self.settings.sif_folder, task)
        if image is not None:
            return dataclasses.replace(config, backend="apptainer", apptainer_image=str(image))
        return config

    def _open_workspace(self, task: SWETask) -> Workspace:
        ws = self._track(
            open_workspace(
                self._workspace_config(task),
                self.repos.get(task),
                binds={str(t.path): t.mount for t in self.tools},
            )
        )
        try:
            # the tools' bin/ go in front of PATH through the session's persistent exported state
            if self.tools:
                bins = ":".join(f"{t.mount}/bin" for t in self.tools)
                ws.run(f'export PATH="{bins}:$PATH"', timeout=10)
            for tool in self.tools:
                if tool.has_install:
                    out = ws.run(f"bash {tool.mount}/install.sh", timeout=60)
                    if out.exit_code != 0:
                        raise RuntimeError(f"tool {tool.name}: install.sh failed: {out.output[-300:]}")
        except BaseException:
            self._close(ws)
            raise
        return ws

    def task_of(self, problem: Problem) -> SWETask:
        return swe_task(problem)

    def _start(self, problem: Problem | SWETask) -> SWEState:
        task = problem if isinstance(problem, SWETask) else swe_task(problem)
        state = SWEState(task)
        try:
            state.workspace = self._open_workspace(task)
        except Exception as e:  # noqa: BLE001 - the episode is masked, the run goes on
            logger.warning("workspace for %s failed to start: %s", task.instance_id, e)
            state.error = f"{type(e).__name__}: {e}"
        return state

    def first_observation(self, task: SWETask) -> str:
        return task_prompt(task.problem_statement, self.tools, self.settings.command_timeout_s)

    # ------------------------------------------------------------------ TextEnv
    def reset_batch(self, problems: Sequence[Problem]) -> list[EpisodeStart]:
        tasks = [swe_task(p) for p in problems]
        states = self._parallel(self._start, tasks)
        return [
            EpisodeStart(self.first_observation(t), s, {"task_id": t.instance_id})
            for t, s in zip(tasks, states, strict=True)
        ]

    def _step(self, state: SWEState, action: Action) -> StepResult:
        state.turn += 1
        if state.error is not None or state.workspace is None:
            return self._masked(state, "sandbox_error", state.error or "no workspace")
        parsed = parse_action(action.text, action.cut_off)
        note = IGNORED_NOTE if parsed.ignored_text else ""
        info: dict[str, Any] = {"turn": state.turn, "action": parsed.kind}
        if parsed.kind == "submit":
            return self._grade(state, terminated=True)
        if parsed.kind != "execute":
            info["dump"] = {"action": parsed.kind}
            return StepResult(FEEDBACK[parsed.kind] + note, 0.0, False, False, info)
        s = self.settings
        remaining = s.max_episode_command_s - state.command_s
        t0 = time.monotonic()
        try:
            result = state.workspace.run(parsed.command, timeout=min(s.command_timeout_s, remaining))
            try:
                diff = state.workspace.diff()
            except DiffTooLarge:  # the agent may remove what it wrote; submitted so, it is patch_failed
                diff = ""
        except WorkspaceError as e:  # the agent broke its workspace, or the clock stopped it
            return self._lost(state, e)
        except Exception as e:  # noqa: BLE001 - anything else is ours: the episode is masked
            return self._masked(state, "sandbox_error", f"{type(e).__name__}: {e}")
        # the diff's time too: git runs the clean filters the agent configured over every file, so
        # a turn's wait is the agent's to make long, and the budget bounds what a turn costs
        state.command_s += max(result.wall_s, time.monotonic() - t0)
        state.commands += 1
        state.last_diff = diff
        info["dump"] = {
            "action": "execute",
            "command": parsed.command,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "output": clean_text(result.output[: s.max_output_chars * 2]),  # as shown: no raw controls
            "diff": capped(diff),  # kept per turn by the runner: bounded (the final one is whole)
            "wall_s": round(result.wall_s, 3),
        }
        info["wall_time_s"] = result.wall_s
        if state.command_s >= s.max_episode_command_s:
            return self._masked(state, "env_time_limit", f"{state.command_s:.0f} s of commands")
        observation = command_observation(result, diff, s.max_output_chars, s.max_diff_chars) + note
        return StepResult(observation, 0.0, False, False, info)

    def episode_stats(self, state: SWEState) -> dict[str, Any]:
        return {"num_commands": state.commands, "command_s": round(state.command_s, 3)}

    def close(self) -> None:
        """Close every workspace still open (idempotent)."""
        super().close()
        self._single = None

    # ------------------------------------------------------------------ the original interface
    def tasks(self) -> list[SWETask]:
        if self._tasks is None:
            if self.data_name_or_path is None:
                raise ConfigError("this ContainerEnv has no task source (data_name_or_path)")
            self._tasks = load_swe_tasks(self.data_name_or_path, split=self.split)
        return self._tasks

    def reset(self, task: SWETask | str | int | None = None) -> dict[str, Any]:
        """Start an episode: the next task in order, the one with this index or instance id, or
        the given task. Returns ``{"problem_statement", "instance_id", "prompt"}``."""
        if self._single is not None:
            self._end(self._single)
        if isinstance(task, SWETask):
            chosen = task
        elif task is None:
            tasks = self.tasks()
            chosen = tasks[self._next_task % len(tasks)]
            self._next_task += 1
        elif isinstance(task, int):
            chosen = self.tasks()[task]
        else:
            matches = [t for t in self.tasks() if t.instance_id == task]
            if not matches:
                raise KeyError(f"no task {task!r} in {self.data_name_or_path!r} split {self.split!r}")
            chosen = matches[0]
        self._single = self._start(chosen)
        if self._single.error:
            raise RuntimeError(f"the workspace did not start: {self._single.error}")
        return {
            "problem_statement": chosen.problem_statement,
            "instance_id": chosen.instance_id,
            "prompt": self.first_observation(chosen),
        }

    def step(self, text: str, finish_reason: str = "stop") -> tuple[str, float, bool, dict[str, Any]]:
        """One turn: ``(message, reward, done, extra)``; ``extra["output"]`` and ``extra["diff"]``
        hold the command's output and the diff after it, ``extra["grade"]`` the grade at the end."""
        if self._single is None or self._single.done:
            raise RuntimeError("call reset() first")
        result = self._step(self._single, Action(text, finish_reason))
        dump = result.info.get("dump", {})
        episode = result.info.get("episode", {})
        extra = {
            **{k: v for k, v in result.info.items() if k not in ("dump", "episode")},
            "output": dump.get("output", ""),
            "exit_code": dump.get("exit_code"),
            "timed_out": dump.get("timed_out", False),
            "diff": episode.get("diff", self._single.last_diff),  # whole, not the dump's capped copy
        }
        if "grade" in episode:
            extra["grade"] = episode["grade"]
        done = result.terminated or result.truncated
        return result.observation, result.reward, done, extra

    def __enter__(self) -> ContainerEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
