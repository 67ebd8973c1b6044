"""Workspace sessions: one isolated, writable repository and a shell per episode.

Why not the program sandbox (``pool.py``): that one runs one short program per fork and wipes its
directory afterwards. An agent episode needs state that lasts (edited files, the shell's cwd and
exported variables) across many commands, each bounded on its own, and a trusted way to read the
result (``diff``) that no command can tamper with. So each session is one sandbox holding a small
trusted server (``_workspace_server.py``) that runs each command as ``bash -c`` with limits and
reports back over a pipe only the trainer holds.

Backends:

- ``bwrap`` (default, runs here): every namespace unshared (no network), uid 65534, read-only
  ``/usr``, the interpreter's files and a copied toolchain (pytest and its dependencies), the
  repository on a size-capped tmpfs at ``/workspace`` (it vanishes with the sandbox), private
  ``/tmp``; the server is the PID namespace's init, so ``kill -9 -1`` cannot stop it;
  ``--die-with-parent`` takes everything down with the trainer.
- ``apptainer``: ``instance start`` with the isolation flags (later ``exec``s join its
  namespaces), ``--workdir`` on a host scratch dir past the 64 MiB default tmpfs, the server run
  by ``exec instance://``, ``instance stop`` at close, from a finalizer, or from a watchdog
  process when the trainer is killed.

Every command is bounded twice: inside (the server kills the command's whole process tree at its
timeout) and outside (the trainer waits ``timeout + grace_s`` for the answer, then kills the whole
sandbox and the session is dead). Threat model, persistence and limits: ``docs/sandbox.md``.

Interactive sessions (``pty_start``/``pty_send``/``pty_stop``) run one program, e.g. ``python -m
pdb``, on a pseudo-terminal inside the sandbox that lives across requests (until the next ``run``,
``diff``, ``pty_start`` or ``pty_stop``), bounded the same two ways per request.

This module opens sessions (:func:`open_workspace`, :class:`WorkspacePool`) and re-exports the
public names of the modules that do the rest, one job each: ``workspace_config`` (settings),
``workspace_types`` (results, errors), ``workspace_toolchain`` (the read-only toolchain),
``workspace_argv`` (layout, command lines, backend choice), ``workspace_process`` (the spawner
thread, what a session holds on the host) and ``workspace_session`` (the :class:`Workspace` client).
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

from lit_codeRL.sandbox import cgroups, userns
from lit_codeRL.sandbox.workspace_argv import (
    APPTAINER_PYTHON,
    MOUNT,
    PLUGINS_IN,
    REPO_SRC_IN,
    SERVER_FILE,
    SERVER_IN,
    STATE_BYTES,
    STATE_DIR,
    TOOLS_IN,
    apptainer_server_argv,
    apptainer_start_argv,
    apptainer_stop_argv,
    base_env,
    bwrap_workspace_argv,
    instance_name,
    python_path_env,
    resolve_backend,
    server_config,
    workspace_image,
)
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig
from lit_codeRL.sandbox.workspace_process import _popen, _Resources
from lit_codeRL.sandbox.workspace_session import IO_TIMEOUT_S, START_TIMEOUT_S, Workspace
from lit_codeRL.sandbox.workspace_toolchain import toolchain_dir
from lit_codeRL.sandbox.workspace_types import (
    CPU_LIMIT_EXIT,
    MAX_DIFF_BYTES,
    CommandResult,
    DiffTooLarge,
    PtyResult,
    WorkspaceDead,
    WorkspaceError,
)

logger = logging.getLogger(__name__)

__all__ = [
    "CPU_LIMIT_EXIT",
    "APPTAINER_PYTHON",
    "IO_TIMEOUT_S",
    "MOUNT",
    "OVERHEAD_MB",
    "REPO_SRC_IN",
    "SERVER_FILE",
    "SERVER_IN",
    "START_TIMEOUT_S",
    "STATE_BYTES",
    "STATE_DIR",
    "PLUGINS_IN",
    "TOOLS_IN",
    "CommandResult",
    "DiffTooLarge",
    "MAX_DIFF_BYTES",
    "PtyResult",
    "Workspace",
    "WorkspaceConfig",
    "WorkspaceDead",
    "WorkspaceError",
    "WorkspacePool",
    "apptainer_server_argv",
    "apptainer_start_argv",
    "apptainer_stop_argv",
    "base_env",
    "bwrap_workspace_argv",
    "instance_name",
    "open_workspace",
    "resolve_backend",
    "server_config",
    "toolchain_dir",
    "workspace_image",
]

OVERHEAD_MB = 256
"""Memory cgroup slack on top of memory_mb + disk_mb + /tmp: the server, git, bwrap."""


# -- opening -------------------------------------------------------------------------------------


def open_workspace(
    config: WorkspaceConfig,
    repo: str | Path,
    *,
    binds: Mapping[str, str] = {},
    writable_binds: Mapping[str, str] = {},
    scratch: Mapping[str, int] = {},
    env: Mapping[str, str] = {},
) -> Workspace:
    """Start a session whose :attr:`Workspace.REPO` is a copy of the host directory ``repo``
    (a git working copy at the base commit; never modified). ``binds``: host path -> sandbox
    path, read-only (tools); ``writable_binds``: host dir -> sandbox path (uncapped host disk:
    prefer ``scratch``); ``scratch``: sandbox path -> size in bytes of a private tmpfs there
    (bwrap; under apptainer the directory is made in the instance's writable layer, bounded per
    file by RLIMIT_FSIZE only), read and written through :meth:`Workspace.read_file` /
    :meth:`Workspace.write_file` with ``confine=False``; ``env``: extra variables of every
    command."""
    repo = str(Path(repo).resolve())
    if not Path(repo).is_dir():
        raise FileNotFoundError(f"workspace repository {repo} is not a directory")
    backend = resolve_backend(config)
    cgroups.sweep_stale_cgroups()
    cgroups.warn_unshared_cpu(config.use_cpu_cgroup)
    res = _Resources()
    mem_mb = config.memory_mb + config.disk_mb + config.tmp_mb + OVERHEAD_MB + (sum(scratch.values()) >> 20)
    res.cgroups = cgroups.sandbox_cgroups(
        # +8: the server, bwrap's processes, slack for a child being reaped
        pids=config.max_processes + 8 if config.use_pids_cgroup else None,
        memory_bytes=mem_mb << 20,
        cpu=config.use_cpu_cgroup,
    )
    bounded = os.getuid() != 0 or cgroups.bounds(res.cgroups, "pids.max")
    userns_fd = host_uid = None
    ws: Workspace | None = None
    try:
        if backend == "bwrap":
            if not bounded and config.root_program_uid is not None and _USERNS_PROBLEM.get("bwrap") is None:
                own = _own_user_namespace(config.root_program_uid)
                if own is not None:
                    userns_fd, host_uid = own
            argv = bwrap_workspace_argv(
                config,
                repo,
                toolchain=str(toolchain_dir(config.python, config.toolchain)),
                binds=binds,
                writable_binds=writable_binds,
                scratch=scratch,
                env=env,
                userns_fd=userns_fd,
            )
        else:
            argv = _start_apptainer(config, repo, res, binds=binds, writable_binds=writable_binds, env=env)
        argv = cgroups.join_cgroups_argv([cg.procs for cg in res.cgroups], argv)
        try:
            res.proc = _popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None if os.environ.get("LCRL_SANDBOX_DEBUG") else subprocess.DEVNULL,
                pass_fds=() if userns_fd is None else (userns_fd,),
            )
        finally:
            if userns_fd is not None:
                os.close(userns_fd)  # bwrap holds the namespace from here on
        ws = Workspace(config, backend, res)
        ws.host_uid = host_uid
        ws._start()
        if userns_fd is not None:
            _USERNS_PROBLEM.setdefault("bwrap", None)  # it works here: a later failure is the session's
        return ws
    except BaseException as e:
        if ws is not None:
            ws.close()
        res.release()
        if userns_fd is not None and isinstance(e, Exception) and _USERNS_PROBLEM.get("bwrap", "?"):
            # Sessions in namespaces of their own are not known to start here, and this one did
            # not: say why once, and run this one and every later one as before (a session that
            # fails where others started in one is its own failure, raised).
            if "bwrap" not in _USERNS_PROBLEM:
                _refuse_user_namespaces(f"{type(e).__name__}: {e}")
            return open_workspace(
                config, repo, binds=binds, writable_binds=writable_binds, scratch=scratch, env=env
            )
        raise


_USERNS_PROBLEM: dict[str, str | None] = {}
"""Why sessions in a user namespace of their own do not start here (``None``: they do), once
known: the first such session decides, for the rest of the process."""


def _own_user_namespace(base_uid: int) -> tuple[int, int] | None:
    """An fd of a new user namespace for a session (``userns.py``) and the host uid (and gid) its
    programs run as, or ``None`` (warned once)."""
    uid = userns.host_uid(base_uid)
    try:
        return userns.make(uid), uid
    except OSError as e:
        _refuse_user_namespaces(str(e))
        return None


def _refuse_user_namespaces(why: str) -> None:
    _USERNS_PROBLEM["bwrap"] = why
    logger.warning(
        "workspace sessions cannot run as a uid that is not root here (%s): a fork bomb in one "
        "is bounded by its command's timeout only",
        why,
    )


def _start_apptainer(
    config: WorkspaceConfig,
    repo: str,
    res: _Resources,
    *,
    binds: Mapping[str, str],
    writable_binds: Mapping[str, str],
    env: Mapping[str, str],
) -> list[str]:
    """Start the instance (stdio to files/devnull: the instance daemon inherits them, so a pipe
    here would never reach EOF), arm the watchdog, and return the server's ``exec`` argv."""
    apptainer = shutil.which("apptainer") or "apptainer"
    image = workspace_image(config)
    assert image is not None
    name = instance_name()
    scratch = tempfile.mkdtemp(prefix="lcrl-ws-")
    res.dirs.append(scratch)
    workdir, workspace_dir = os.path.join(scratch, "work"), os.path.join(scratch, "workspace")
    os.makedirs(workdir)
    os.makedirs(workspace_dir)
    # from here on the instance may exist: stop it at close whatever happens next
    res.stop_argv = apptainer_stop_argv(name, apptainer)
    start = apptainer_start_argv(
        image, name, workdir, repo, workspace_dir=workspace_dir, binds=binds,
        writable_binds=writable_binds, apptainer=apptainer,
    )  # fmt: skip
    log = os.path.join(scratch, "start.log")
    with open(log, "wb") as out:
        done = subprocess.run(
            start, stdin=subprocess.DEVNULL, stdout=out, stderr=out, timeout=START_TIMEOUT_S, cwd="/",
            env=_apptainer_env(),
        )  # fmt: skip
    if done.returncode != 0:
        raise WorkspaceError(
            f"apptainer instance start failed: {Path(log).read_text(errors='replace')[-500:]}"
        )
    # the trainer may be SIGKILLed: a process of its own session waits for our end of a pipe
    # to close, then stops the instance and removes the host scratch dir (the bwrap backend has
    # --die-with-parent and tmpfs instead)
    stop = shlex.join(res.stop_argv)
    res.watchdog = _popen(
        ["/bin/sh", "-c", f"read _ ; {stop} >/dev/null 2>&1 ; exec rm -rf {shlex.quote(scratch)}"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=_apptainer_env(),
    )  # fmt: skip
    # the image's own interpreter finds pytest; the steady plugin and a src layout's code go on
    # its PYTHONPATH
    return apptainer_server_argv(config, name, {**python_path_env([PLUGINS_IN], repo), **env}, apptainer)


def _apptainer_env() -> dict[str, str]:
    """apptainer's own settings (cache, tmp dir) pass; nothing else of the trainer's."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("APPTAINER_", "SINGULARITY_"))})
    return env


# -- pool ----------------------------------------------------------------------------------------


class WorkspacePool:
    """Serves parallel episodes: at most ``config.max_sessions`` sessions open at once
    (``open`` blocks for a free slot); ``close`` closes every session still open."""

    def __init__(self, config: WorkspaceConfig) -> None:
        self.config = config
        self.max_sessions = config.max_sessions or 2 * (os.cpu_count() or 1)
        self._slots = threading.BoundedSemaphore(self.max_sessions)
        self._open: set[Workspace] = set()
        self._lock = threading.Lock()
        self._closed = False

    def open(self, repo: str | Path, **kwargs) -> Workspace:
        if self._closed:
            raise RuntimeError("the workspace pool is closed")
        self._slots.acquire()
        try:
            ws = open_workspace(self.config, repo, **kwargs)
        except BaseException:
            self._slots.release()
            raise
        with self._lock:
            self._open.add(ws)

        def release() -> None:
            with self._lock:
                self._open.discard(ws)
            self._slots.release()

        ws._on_close.append(release)
        if self._closed:  # closed while this one was starting
            ws.close()
            raise RuntimeError("the workspace pool is closed")
        return ws

    @property
    def sessions(self) -> int:
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            sessions = list(self._open)
        for ws in sessions:
            ws.close()

    def __enter__(self) -> WorkspacePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
