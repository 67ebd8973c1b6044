"""``HarnessEnv``: an unmodified agent program works on a SWE or debugging task in the workspace
sandbox, and its diff is graded exactly as the SWE env grades it.

Per episode: the task's workspace (the repository at its base commit, no network, no host
environment variables, the usual per-session limits), plus, read-only, the directory holding the
episode's gateway socket and the task statement (``bridge.py``) and the agent's own files
(``agent_dir``: its scripts, or a venv it runs from through ``PYTHONPATH``). The
agent command runs once, wrapped so that ``http://127.0.0.1:<port>/v1`` inside relays to the
episode's socket and nowhere else, bounded by the episode's wall clock (``timeout_s``: past it the
whole process tree is killed) and the workspace's command limits. When it exits (or is killed),
the trusted server takes the diff, the workspace is closed with everything still running in it,
and the diff is graded in a fresh workspace (``WorkspaceEpisodeEnv._grade``: tests restored,
the tamper scan, the hack suite unchanged).

The policy's side of the episode (the calls, their exact ids) is the gateway's; turning both into
training rows is the rollout layer's (``rollout/harness.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from lit_codeRL.envs.harness.bridge import SOCKET_DIR_IN, bridge_binds, let_in, wrap_command
from lit_codeRL.envs.protocol import StepResult
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.envs.workspace_episodes import WorkspaceEpisodeEnv, WorkspaceState
from lit_codeRL.errors import ConfigError
from lit_codeRL.gateway.records import TrainChoices
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug_task import cache_root, debug_task
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import RepoCache, SWETask
from lit_codeRL.sandbox.workspace import Workspace, WorkspaceError, open_workspace

logger = logging.getLogger(__name__)

AGENTS_DIR = Path(__file__).with_name("agents")
"""The shipped agent programs (``simple_agent.py``), the default ``agent_dir``."""
AGENT_DIR_IN = "/opt/lcrl-agent"
"""Where ``agent_dir`` appears inside the sandbox."""
TASK_NAME = "task.md"
"""The statement's file name beside the episode's socket (``{task_file}``)."""


@dataclass
class HarnessSettings:
    """Knobs of ``env.name: harness`` (``env.harness`` in configs)."""

    command: str = (
        "python3 /opt/lcrl-agent/simple_agent.py --task {task_file} --base-url {base_url} "
        "--api-key {api_key} --model {model} --max-steps 8"
    )
    """The agent program's command line, run once per episode with ``bash -c`` in ``{workdir}``.
    Placeholders: ``{task_file}`` (the statement), ``{task}`` (the statement, shell-quoted),
    ``{workdir}`` (the repository), ``{base_url}`` (the gateway, ``http://127.0.0.1:<port>/v1``),
    ``{api_key}`` (the episode's key), ``{model}`` (the served name), ``{sample}`` (the episode's
    index in its group, 0..num_generations-1, e.g. a seed per sample), ``{instance_id}`` (the
    task's id, e.g. to name the agent's trajectory file). The default is the shipped
    scripted agent; ``configs/harness_mini_swe_agent.yaml`` runs mini-swe-agent."""
    agent_dir: str | None = None
    """A host directory bound read-only at ``/opt/lcrl-agent``: the agent's scripts, or a venv it
    runs from (``PYTHONPATH=/opt/lcrl-agent/lib/python3.X/site-packages``, the interpreter being
    the one lit-coderl runs on; ``configs/harness_mini_swe_agent.yaml``); ``None``: the shipped
    agents (``lit_codeRL/envs/harness/agents``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the agent program (nothing else of the host's is passed).
    ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``LCRL_TASK_FILE`` are always set."""
    timeout_s: float = 600.0
    """Wall clock of one agent run; past it the agent's whole process tree is killed and the diff
    as it stands is graded (``agent_timed_out``)."""
    max_calls: int = 200
    """Model calls one episode may make; past it the gateway answers 404 (agent SDKs stop)."""
    max_inflight_calls: int = 8
    """Calls of one episode the gateway answers at once; more get 429 (one agent cannot flood the batch)."""
    max_n: int = 16
    """Largest ``n`` (choices per call) an agent may ask for; more: 400."""
    train_choices: TrainChoices = "chosen"
    """Which choices of an ``n`` > 1 call are trained with the episode's reward. ``chosen``: the one
    the agent acted on (a later call's prompt extends it; else the first), the others dropped, as
    the outcome does not depend on them. ``all``: every choice, each beyond the first a row of its
    own, for an agent whose outcome they all shape (e.g. self-consistency voting); an episode may
    then weigh up to ``max_n`` x ``max_calls`` rows in the loss."""
    max_body_mb: int = 64
    """Largest request body an agent may send, in MiB; more: 413."""
    max_connections: int = 32
    """Connections one episode's socket holds open at once; more are closed as they open."""
    idle_timeout_s: float = 30.0
    """A connection of the agent's that sends no request, or not all of its body, this long is closed."""
    write_timeout_s: float = 60.0
    """A reply the agent does not read within this long is dropped, and the call not recorded."""
    port: int = 8000
    """The gateway's port on the sandbox's loopback."""
    served_name: str = "policy"
    """The model name the gateway reports (``{model}``)."""
    max_log_chars: int = 4000
    """Tail of the agent's own output kept in the rollout dump."""
    swe: SWESettings = field(default_factory=SWESettings)
    """The workspace isolation and limits, grading (timeout, partial credit, tamper reward) and
    tool bundles, as for ``env.name: swe`` (its turn-level knobs are unused)."""

    def __post_init__(self) -> None:
        if isinstance(self.swe, dict):
            self.swe = SWESettings(**self.swe)
        if self.timeout_s <= 0:
            raise ValueError("env.harness.timeout_s must be > 0")
        if (
            min(self.max_calls, self.max_inflight_calls, self.max_n, self.max_body_mb, self.max_connections)
            < 1
        ):
            raise ValueError(
                "env.harness.max_calls, max_inflight_calls, max_n, max_body_mb and max_connections must be >= 1"
            )
        if not (self.idle_timeout_s > 0 and self.write_timeout_s > 0):
            raise ValueError("env.harness.idle_timeout_s and write_timeout_s must be > 0")
        if self.train_choices not in get_args(TrainChoices):
            raise ValueError(
                f"env.harness.train_choices must be 'chosen' or 'all', not {self.train_choices!r}"
            )
        if not self.command.strip():
            raise ValueError("env.harness.command is empty")
        try:
            self.command.format(
                task_file="", task="", workdir="", base_url="", api_key="", model="", sample=0, instance_id=""
            )
        except (KeyError, IndexError, ValueError) as err:
            raise ConfigError(f"env.harness.command has an unknown placeholder or brace: {err}") from None


@dataclass
class HarnessState(WorkspaceState):
    """One episode: its workspace, the host directory of its socket, and how the agent ran."""

    socket_dir: Path | None = None
    key: str = ""
    sample: int = 0
    exit_code: int | None = None
    timed_out: bool = False
    agent_s: float = 0.0
    log_tail: str = ""


class HarnessEnv(WorkspaceEpisodeEnv):
    """Agent programs on SWE (``problems.source: swe``) or debugging (``debug``) tasks; see the
    module docstring. Driven by ``rollout/harness.py``: :meth:`start`, :meth:`run_agent`,
    :meth:`grade`."""

    name = "harness"

    def __init__(self, settings: HarnessSettings | None = None) -> None:
        self.settings = s = settings or HarnessSettings()
        self.repos = RepoCache(s.swe.repo_cache)
        grader = SWEGrader.from_settings(s.swe, self.repos)
        super().__init__(grader, s.swe.parallel, grade_on_truncation=True)
        self.agent_dir = Path(s.agent_dir).expanduser().resolve() if s.agent_dir else AGENTS_DIR
        if not self.agent_dir.is_dir():
            raise ConfigError(f"env.harness.agent_dir {s.agent_dir!r} is not a directory")
        self._swe: dict[str, SWETask] = {}

    def task_of(self, problem: Problem) -> SWETask:
        if "swe_task" in problem.metadata:
            return problem.metadata["swe_task"]
        if "debug_task" in problem.metadata:
            task = debug_task(problem)
            if task.task_id not in self._swe:
                self._swe[task.task_id] = task.to_swe_task(cache_root(), grader=self.grader)
            return self._swe[task.task_id]
        raise ConfigError(
            f"problem {problem.task_id!r} is neither a SWE nor a debugging task (env.name harness)"
        )

    def statement(self, problem: Problem) -> str:
        """What the agent is asked to do (the task file's text)."""
        task = self.task_of(problem)
        return task.problem_statement

    def _agent_workspace_config(self, task: SWETask) -> Any:
        s = self.settings
        # One command runs the whole agent: its limit is the episode's wall clock. A root
        # trainer's session runs as a host uid of its own where no pids cgroup bounds it
        # (``WorkspaceConfig.root_program_uid``), as the SWE env's do: as host root, a fork bomb
        # of the agent's would fill the host's process table for the whole wall clock, failing
        # every other episode's sandbox and the trainer's own threads (``start`` lets that uid
        # reach the episode's socket).
        return dataclasses.replace(
            s.swe.workspace.plus_toolchain(task.test_deps),
            command_timeout_s=s.timeout_s,
            max_output_chars=max(s.swe.workspace.max_output_chars, s.max_log_chars),
        )

    def start(self, problem: Problem, socket_dir: Path, key: str, sample: int = 0) -> HarnessState:
        """Open the episode's workspace with the bridge and the agent's files bound in, and write
        the statement beside the socket. A workspace that does not start masks the episode."""
        task = self.task_of(problem)
        state = HarnessState(task, socket_dir=socket_dir, key=key, sample=sample)
        try:
            (socket_dir / TASK_NAME).write_text(self.statement(problem), encoding="utf-8", errors="replace")
            binds = {**bridge_binds(socket_dir), str(self.agent_dir): AGENT_DIR_IN}
            ws = open_workspace(self._agent_workspace_config(task), self.repos.get(task), binds=binds)
            try:
                if ws.host_uid is not None:  # the socket and the statement are the trainer's (0700)
                    let_in(socket_dir, ws.host_uid)
            except BaseException:
                ws.close()  # the agent could not reach its socket: masked, not its fault
                raise
            state.workspace = self._track(ws)
        except Exception as e:  # noqa: BLE001 - the episode is masked, the run goes on
            logger.warning("harness workspace for %s failed to start: %s", task.instance_id, e)
            state.error = f"{type(e).__name__}: {e}"
        return state

    def agent_command(self, state: HarnessState, statement: str) -> str:
        """The wrapped command line of the episode: the agent's environment, then the relay and the agent."""
        s = self.settings
        base_url = f"http://127.0.0.1:{s.port}/v1"
        task_file = f"{SOCKET_DIR_IN}/{TASK_NAME}"
        agent = s.command.format(
            task_file=task_file,
            task=shlex.quote(statement),
            workdir=Workspace.REPO,
            base_url=base_url,
            api_key=state.key,
            model=s.served_name,
            sample=state.sample,
            instance_id=shlex.quote(state.task.instance_id),
        )
        env = {
            **s.env,
            "OPENAI_BASE_URL": base_url,
            "OPENAI_API_KEY": state.key,
            "LCRL_TASK_FILE": task_file,
        }
        exports = "".join(f"export {k}={shlex.quote(str(v))}; " for k, v in env.items() if k.isidentifier())
        return exports + wrap_command(f"cd {Workspace.REPO} && {agent}", s.port)

    def run_agent(self, state: HarnessState, statement: str) -> None:
        """Run the agent program to its end (or its wall clock) in the episode's workspace."""
        if state.workspace is None:
            return
        t0 = time.perf_counter()
        try:
            result = state.workspace.run(
                self.agent_command(state, statement), timeout=self.settings.timeout_s
            )
        except WorkspaceError as e:
            state.error = f"{type(e).__name__}: {e}"
            state.agent_s = time.perf_counter() - t0
            return
        state.agent_s = time.perf_counter() - t0
        state.exit_code, state.timed_out = result.exit_code, result.timed_out
        state.log_tail = result.output[-self.settings.max_log_chars :]

    def grade(self, state: HarnessState) -> StepResult:
        """Grade the episode's diff in a fresh workspace (closing the agent's first)."""
        if state.workspace is None:
            return self._masked(state, "sandbox_error", state.error or "no workspace")
        if state.error is not None:  # the agent's workspace failed under the run
            err = WorkspaceError(state.error)
            return self._lost(state, err)
        return self._grade(state, terminated=not state.timed_out)

    def episode_stats(self, state: HarnessState) -> dict[str, Any]:
        return {
            "agent_exit_code": state.exit_code,
            "agent_timed_out": state.timed_out,
            "agent_s": round(state.agent_s, 3),
            "agent_log": state.log_tail,
        }
