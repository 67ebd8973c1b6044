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
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import logging
import os
import queue
import re
import select
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lit_codeRL.sandbox import backends

logger = logging.getLogger(__name__)

SERVER_FILE = Path(__file__).with_name("_workspace_server.py")
MOUNT = "/opt/lcrl"
"""Where the server, the toolchain and the pristine repository appear inside a session."""
SERVER_IN = f"{MOUNT}/ws_server.py"
TOOLS_IN = f"{MOUNT}/tools"
REPO_SRC_IN = f"{MOUNT}/repo-src"
STATE_DIR = "/run/lcrl"
"""The server's per-command state files and temporary git indexes: a small tmpfs of its own, so
an agent filling /tmp or the workspace does not stop the shell state from being saved."""
STATE_BYTES = 4 << 20
OVERHEAD_MB = 256
"""Memory cgroup slack on top of memory_mb + disk_mb + /tmp: the server, git, bwrap."""
START_TIMEOUT_S = 120.0
IO_TIMEOUT_S = 60.0
"""Outer limit of a file request (read/write); a diff gets max(this, command_timeout_s)."""
APPTAINER_PYTHON = "python3"
"""The interpreter inside an apptainer image (env/swe.def installs python3 with pytest)."""
_HDR = struct.Struct(">I")


class WorkspaceError(RuntimeError):
    """A request the server could not carry out (a missing file, a failed git command)."""


class WorkspaceDead(WorkspaceError):
    """The session was closed or killed (ran past its outer wall clock, its server died)."""


@dataclass(frozen=True)
class WorkspaceConfig:
    backend: Literal["auto", "bwrap", "apptainer"] = "auto"
    """``auto``: apptainer when the binary and an image exist, else bwrap; never unisolated."""
    apptainer_image: str | None = None
    """The ``.sif`` (``env/swe.def``); default ``$LIT_CODERL_SWE_SIF``."""
    command_timeout_s: float = 30.0
    """Default per-command limit, enforced inside the sandbox."""
    max_output_chars: int = 10_000
    """Head + tail kept of a command's output, a marker line in the middle."""
    memory_mb: int = 2048
    """Per command (RLIMIT_AS); the session's memory cgroup, where writable, gets this plus the
    tmpfs sizes (their pages are charged to it) plus a fixed overhead."""
    max_processes: int = 128
    """Pids cgroup per session where writable (+ RLIMIT_NPROC when the trainer is not root)."""
    disk_mb: int = 512
    """Size bound of ``/workspace`` (bwrap: tmpfs ``--size``); also each file's RLIMIT_FSIZE."""
    grace_s: float = 5.0
    """Outer wall clock = timeout + grace; past it the whole session is killed."""
    python: str = sys.executable
    """Interpreter exposed as python/python3 inside (a venv resolved to its base)."""
    toolchain: tuple[str, ...] = ("pytest",)
    """Distributions importable read-only inside, with their dependencies (copied once per
    process from the host's installed files; bwrap only, apptainer uses the image's)."""
    max_sessions: int = 0
    """WorkspacePool bound; 0 = 2 x CPU count."""
    tmp_mb: int = 256
    """Size bound of the private ``/tmp`` (bwrap tmpfs)."""

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "bwrap", "apptainer"):
            raise ValueError(f"unknown workspace backend {self.backend!r} (auto, bwrap, apptainer)")
        if min(self.command_timeout_s, self.memory_mb, self.disk_mb, self.max_processes) <= 0:
            raise ValueError("workspace limits must be positive")


@dataclass
class CommandResult:
    exit_code: int | None
    """None when the command was killed at its timeout; 128+N when a signal N ended it."""
    output: str
    """stdout+stderr interleaved, truncated as head + marker line + tail."""
    timed_out: bool
    truncated: bool
    output_bytes: int
    """How much the command printed in total (also what was cut)."""
    wall_s: float


@dataclass
class PtyResult:
    """What one interactive-session request read: the program's output since the request began,
    up to its prompt (the prompt included), and whether the program still runs."""

    output: str
    """The terminal's output (CR LF as LF, input not echoed), head + marker line + tail."""
    alive: bool
    """False once the program exited, was killed at the timeout, or the session died: a later
    :meth:`Workspace.pty_send` raises :class:`WorkspaceError`."""
    exit_code: int | None
    """The program's exit status when it ended by itself (128+N for signal N), else None."""
    timed_out: bool
    truncated: bool
    output_bytes: int
    wall_s: float


# -- toolchain ---------------------------------------------------------------------------------

_TOOLCHAIN_SCRIPT = r"""
import json, sys, importlib.metadata as md
from packaging.requirements import Requirement
todo, seen, files = list(sys.argv[1:]), set(), {}
while todo:
    name = todo.pop()
    dist = md.distribution(name)
    key = dist.metadata["Name"].lower().replace("_", "-")
    if key in seen:
        continue
    seen.add(key)
    root = str(dist.locate_file(""))
    files.setdefault(root, []).extend(str(f) for f in dist.files or ())
    for req in dist.requires or ():
        r = Requirement(req)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(r.name)
print(json.dumps({"dists": sorted(seen), "files": files}))
"""

_TOOLCHAIN_LAYOUT = 2
"""Part of the cache key: bump when what a toolchain directory holds changes."""
_TOOLCHAIN_LOCK = threading.Lock()
_TOOLCHAINS: dict[tuple[str, tuple[str, ...]], Path] = {}


def toolchain_dir(python: str, dists: tuple[str, ...]) -> Path:
    """A read-only toolchain for bwrap sessions, built once per (interpreter, distributions):
    ``site/`` with the installed files of ``dists`` and their dependencies (never the whole
    site-packages), ``bin/`` with python/python3/pytest launchers for the real interpreter, and
    ``etc/`` with a minimal passwd/group/hosts (no host /etc is shown). Kept in the user's cache
    dir (not /tmp) and reused across processes when nothing changed."""
    key = (python, tuple(dists))
    with _TOOLCHAIN_LOCK:
        if key not in _TOOLCHAINS:
            _TOOLCHAINS[key] = _build_toolchain(python, tuple(dists))
        return _TOOLCHAINS[key]


def _build_toolchain(python: str, dists: tuple[str, ...]) -> Path:
    exe = backends.interpreter(python).executable
    found: dict = {"dists": [], "files": {}}
    if dists:
        out = subprocess.run(
            [python, "-c", _TOOLCHAIN_SCRIPT, *dists], capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            raise backends.SandboxUnavailable(
                f"workspace toolchain {dists} is not installed for {python}: {out.stderr.strip()[-300:]}"
            )
        found = json.loads(out.stdout)
    listing = json.dumps([_TOOLCHAIN_LAYOUT, exe, found], sort_keys=True)
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "lit_coderl"
        / "workspace-toolchain"
    )
    dest = cache / hashlib.sha256(listing.encode()).hexdigest()[:16]
    if (dest / ".complete").exists():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        site = build / "site"
        for root, rel_files in found["files"].items():
            for rel in rel_files:
                src = Path(root) / rel
                if rel.startswith("..") or "__pycache__" in rel or not src.is_file():
                    continue  # console scripts outside site-packages; launchers replace them
                target = site / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
        if site.is_dir():  # read-only inside: without bytecode every import would recompile
            subprocess.run([exe, "-I", "-m", "compileall", "-q", str(site)], capture_output=True, timeout=300)
        _write_launchers(build / "bin", exe, "pytest" in [d.lower() for d in found["dists"]])
        _write_etc(build / "etc")
        (build / ".complete").write_text(listing)
        try:
            build.rename(dest)
        except OSError:  # another process finished first
            shutil.rmtree(build, ignore_errors=True)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return dest


def _write_launchers(bin_dir: Path, exe: str, pytest: bool) -> None:
    bin_dir.mkdir(parents=True)
    launchers = {"python": f'exec {exe} "$@"', "python3": f'exec {exe} "$@"'}
    if pytest:
        launchers["pytest"] = f'exec {exe} -m pytest "$@"'
    for name, line in launchers.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)


def _write_etc(etc: Path) -> None:
    etc.mkdir(parents=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nagent:x:65534:65534:agent:/tmp/home:/bin/bash\n"
    )
    (etc / "group").write_text("root:x:0:\nagent:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (etc / "alternatives").mkdir()  # mount point for the host's (symlinks into /usr only)
    if Path("/etc/ld.so.cache").is_file():  # the loader finds multiarch libraries without it, slower
        shutil.copy2("/etc/ld.so.cache", etc / "ld.so.cache")


# -- argv builders (pure; unit-tested) ---------------------------------------------------------


def base_env(path_head: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment every command starts with: nothing from the trainer. ``$PATH`` inside an
    ``extra`` value stands for the default PATH (``{"PATH": "/tools/bin:$PATH"}``)."""
    path = f"{path_head}:/usr/local/bin:/usr/bin:/bin" if path_head else "/usr/local/bin:/usr/bin:/bin"
    env = {
        "PATH": path,
        "HOME": "/tmp/home",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "USER": "agent",
        "LOGNAME": "agent",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for k, v in extra.items():
        env[k] = str(v).replace("$PATH", path)
    return env


def server_config(
    config: WorkspaceConfig, env: Mapping[str, str], *, pid1: bool, repo_src: str | None
) -> str:
    """The JSON the in-sandbox server reads: where things are and the per-command limits."""
    return json.dumps(
        {
            "repo": Workspace.REPO,
            "repo_src": repo_src,
            "state_dir": STATE_DIR,
            "env": dict(env),
            "pid1": pid1,
            "memory_mb": int(config.memory_mb),
            "disk_mb": int(config.disk_mb),
            # RLIMIT_NPROC counts the uid's processes and is ignored for root: only then useful
            "nproc": int(config.max_processes) if os.getuid() != 0 else 0,
        }
    )


def bwrap_workspace_argv(
    config: WorkspaceConfig,
    repo: str,
    *,
    toolchain: str,
    binds: Mapping[str, str] = {},
    writable_binds: Mapping[str, str] = {},
    scratch: Mapping[str, int] = {},
    env: Mapping[str, str] = {},
    bwrap: str | None = None,
) -> list[str]:
    """bubblewrap command line of one session: the program sandbox's isolation flags and system
    binds, the server as PID 1, the workspace, /tmp and every ``scratch`` path (sandbox path ->
    bytes) on size-capped tmpfs."""
    interp = backends.interpreter(config.python)
    cmd_env = base_env(f"{TOOLS_IN}/bin", {"PYTHONPATH": f"{TOOLS_IN}/site", **env})
    argv = [
        bwrap or backends.bwrap_executable(),
        *backends.BWRAP_ISOLATION,
        "--as-pid-1",
        *backends.bwrap_system_binds(interp),
    ]
    argv += ["--ro-bind", f"{toolchain}/etc", "/etc", "--ro-bind", toolchain, TOOLS_IN]
    argv += ["--ro-bind", str(SERVER_FILE), SERVER_IN, "--ro-bind", repo, REPO_SRC_IN]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for size, path in (
        (backends.SHM_BYTES, "/dev/shm"),
        (int(config.tmp_mb) << 20, "/tmp"),
        (STATE_BYTES, STATE_DIR),
        (int(config.disk_mb) << 20, "/workspace"),
        *((int(n), p) for p, n in scratch.items()),
    ):
        argv += ["--size", str(size), "--tmpfs", path]
    for host, inside in binds.items():
        argv += ["--ro-bind", str(host), inside]
    for host, inside in writable_binds.items():
        argv += ["--bind", str(host), inside]
    if Path("/etc/alternatives").is_dir():  # Debian's /usr/bin/awk etc. point into it
        argv += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
    # bwrap's root and /dev are tmpfs of its own without a size: read-only, or the agent could
    # fill memory through them and delete /bin (a symlink bwrap made there)
    argv += [
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/",
        "--",
        interp.executable,
        "-I",
        "-S",
        "-B",
        SERVER_IN,
    ]
    argv.append(server_config(config, cmd_env, pid1=True, repo_src=REPO_SRC_IN))
    return argv


def instance_name() -> str:
    """A name no other session (of this or another process) uses."""
    return f"lcrl-ws-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def apptainer_start_argv(
    image: str,
    name: str,
    workdir: str,
    repo: str,
    *,
    workspace_dir: str,
    binds: Mapping[str, str] = {},
    writable_binds: Mapping[str, str] = {},
    apptainer: str = "apptainer",
) -> list[str]:
    """``apptainer instance start`` with every isolation flag (later ``exec``s join this
    instance's namespaces and cannot add isolation of their own)."""
    argv = [
        apptainer,
        "instance",
        "start",
        "--containall",  # private PID/IPC namespaces, no host /tmp or $HOME, minimal /dev
        "--cleanenv",
        "--no-home",
        "--net",
        "--network",
        "none",  # loopback only
        "--no-mount",
        "home,tmp,bind-paths",
        "--writable-tmpfs",
        "--workdir",
        workdir,  # the instance's /tmp and scratch on host disk, past the 64 MiB default tmpfs
        "--bind",
        f"{SERVER_FILE}:{SERVER_IN}:ro",
        "--bind",
        f"{repo}:{REPO_SRC_IN}:ro",
        "--bind",
        f"{workspace_dir}:/workspace",
    ]
    for host, inside in binds.items():
        argv += ["--bind", f"{host}:{inside}:ro"]
    for host, inside in writable_binds.items():
        argv += ["--bind", f"{host}:{inside}"]
    return [*argv, image, name]


def apptainer_server_argv(
    config: WorkspaceConfig, name: str, env: Mapping[str, str] = {}, apptainer: str = "apptainer"
) -> list[str]:
    cmd_env = base_env("", env)
    cfg = server_config(config, cmd_env, pid1=False, repo_src=REPO_SRC_IN)
    return [
        apptainer,
        "exec",
        "--cleanenv",
        "--pwd",
        "/",
        f"instance://{name}",
        APPTAINER_PYTHON,
        "-I",
        "-S",
        "-B",
        SERVER_IN,
        cfg,
    ]


def apptainer_stop_argv(name: str, apptainer: str = "apptainer") -> list[str]:
    return [apptainer, "instance", "stop", name]


# -- backend choice ----------------------------------------------------------------------------


def workspace_image(config: WorkspaceConfig) -> str | None:
    image = config.apptainer_image or os.environ.get("LIT_CODERL_SWE_SIF")
    return image if image and Path(image).is_file() else None


def resolve_backend(config: WorkspaceConfig) -> str:
    """``auto``: apptainer with binary and image, else bwrap; raises when neither isolates."""
    if config.backend in ("auto", "apptainer") and shutil.which("apptainer") and workspace_image(config):
        return "apptainer"
    if config.backend == "apptainer":
        raise backends.SandboxUnavailable(
            "workspace backend 'apptainer' needs the apptainer binary and an image "
            "(WorkspaceConfig.apptainer_image or $LIT_CODERL_SWE_SIF, built from env/swe.def)"
        )
    if shutil.which("bwrap") is None:
        raise backends.SandboxUnavailable(f"no isolating workspace backend works here; {backends.FIX}")
    return "bwrap"


# -- process spawning --------------------------------------------------------------------------


class _Spawner:
    """Starts every sandbox from one long-lived thread: bwrap's ``--die-with-parent`` is
    PR_SET_PDEATHSIG, which fires when the *thread* that forked it exits, so a session opened from
    a short-lived worker thread would otherwise die with that thread."""

    def __init__(self) -> None:
        self._q: queue.Queue[tuple[Callable[[], object], Future]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[], object]) -> object:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="workspace-spawner", daemon=True)
                self._thread.start()
        fut: Future = Future()
        self._q.put((fn, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            fn, fut = self._q.get()
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                fut.set_exception(e)


_SPAWNER = _Spawner()


def _popen(argv: list[str], **kw) -> subprocess.Popen:
    kw.setdefault("env", {"PATH": backends.SANDBOX_PATH, "LANG": "C.UTF-8"})
    kw.setdefault("cwd", "/")  # the trainer's cwd must not leak into the sandbox's view
    kw.setdefault("close_fds", True)
    kw.setdefault("start_new_session", True)
    return _SPAWNER.call(lambda: subprocess.Popen(argv, **kw))  # type: ignore[return-value]


# -- the session ---------------------------------------------------------------------------------


@dataclass
class _Resources:
    """Everything a session holds on the host; released by close, the finalizer or atexit
    (kept apart from the Workspace so the finalizer does not keep it alive)."""

    proc: subprocess.Popen | None = None
    cgroups: list = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    stop_argv: list[str] | None = None
    watchdog: subprocess.Popen | None = None
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        proc, self.proc = self.proc, None
        if proc is not None:
            backends.kill_sandbox(proc, self.cgroups)
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        if self.stop_argv:
            try:
                subprocess.run(
                    self.stop_argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, timeout=60, cwd="/",
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired) as e:
                logger.warning("workspace: apptainer instance stop failed: %s", e)
        for cg in self.cgroups:
            cg.kill_stragglers(500)
            cg.remove()
        for d in self.dirs:
            shutil.rmtree(d, ignore_errors=True)


_LIVE: weakref.WeakSet[Workspace] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ws in list(_LIVE):
        ws.close()


class Workspace:
    """One isolated session; see the module docstring. Thread-safe (requests are serialised)."""

    REPO = "/workspace/repo"
    """Where the repository lives inside every session; commands start there."""

    def __init__(self, config: WorkspaceConfig, backend: str, res: _Resources) -> None:
        self.config = config
        self.backend = backend
        self.base = ""
        """The commit checked out at start (``diff`` compares against it)."""
        self.alive = False
        self.dead_reason: str | None = None
        self._res = res
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, res.release)
        self._on_close: list[Callable[[], None]] = []
        _LIVE.add(self)

    # -- protocol --------------------------------------------------------------------------------

    def _start(self) -> None:
        reply = self._recv(time.monotonic() + START_TIMEOUT_S)
        if not reply.get("ready"):
            raise WorkspaceError(f"{self.backend} workspace did not start: {reply.get('error', reply)}")
        self.base = reply["base"]
        self.alive = True

    def _recv(self, deadline: float) -> dict:
        proc = self._res.proc
        if proc is None or proc.stdout is None:
            raise WorkspaceDead("the workspace is closed")
        fd = proc.stdout.fileno()

        def read_exact(n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError("the workspace did not answer in time")
                chunk = os.read(fd, min(n - len(buf), 1 << 20))
                if not chunk:
                    raise EOFError("the workspace's server exited")
                buf += chunk
            return bytes(buf)

        (n,) = _HDR.unpack(read_exact(_HDR.size))
        return json.loads(read_exact(n))

    def _request(self, req: dict, outer_s: float) -> dict:
        """Send one request and wait at most ``outer_s`` for its answer; a session that does not
        answer in time or whose server died is killed, and :class:`WorkspaceDead` raised."""
        if not self.alive:
            raise WorkspaceDead(f"the workspace is dead: {self.dead_reason or 'closed'}")
        proc = self._res.proc
        assert proc is not None and proc.stdin is not None
        data = json.dumps(req).encode()
        try:
            proc.stdin.write(_HDR.pack(len(data)) + data)
            proc.stdin.flush()
            return self._recv(time.monotonic() + outer_s)
        except (OSError, EOFError, TimeoutError, ValueError) as e:
            self._kill(f"{type(e).__name__}: {e}")
            raise WorkspaceDead(f"the workspace was killed: {self.dead_reason}") from e

    def _kill(self, reason: str) -> None:
        self.dead_reason = reason
        self.close()

    # -- API -------------------------------------------------------------------------------------

    def run(self, cmd: str, timeout: float | None = None, max_output: int | None = None) -> CommandResult:
        """Run ``cmd`` with ``bash -c`` in the session (cwd and exported variables carry over).

        Past ``timeout`` the command's whole process tree is killed (``exit_code`` None,
        ``timed_out``); past ``timeout + grace_s`` without an answer the whole session is killed:
        the result says so and every later call raises :class:`WorkspaceDead`."""
        t = float(timeout if timeout is not None else self.config.command_timeout_s)
        keep = int(max_output if max_output is not None else self.config.max_output_chars)
        t0 = time.monotonic()
        with self._lock:
            if not self.alive:
                raise WorkspaceDead(f"the workspace is dead: {self.dead_reason or 'closed'}")
            try:
                reply = self._request(
                    {"op": "run", "cmd": cmd, "timeout": t, "max_output": keep}, t + self.config.grace_s
                )
            except WorkspaceDead as e:
                # the outer wall clock fired (timed out) or the server died under the command
                outer = isinstance(e.__cause__, TimeoutError)
                return CommandResult(None, f"[{e}]", outer, False, 0, time.monotonic() - t0)
        if "error" in reply:
            raise WorkspaceError(reply["error"])
        output, truncated = _head_tail(
            base64.b64decode(reply["head"]), base64.b64decode(reply["tail"]), int(reply["output_bytes"]), keep
        )
        return CommandResult(
            exit_code=reply["exit_code"],
            output=output,
            timed_out=bool(reply["timed_out"]),
            truncated=truncated,
            output_bytes=int(reply["output_bytes"]),
            wall_s=float(reply["wall_s"]),
        )

    def read_file(self, path: str, max_bytes: int = 1 << 20, *, confine: bool = True) -> bytes:
        """At most ``max_bytes`` of a regular file, read by the trusted server.

        ``confine`` (the default, and the only mode for agent-chosen paths): ``path`` is relative
        to :attr:`REPO` or absolute, and must lie inside the repository (``..`` is applied to the
        text); no symbolic link anywhere in it is followed, and only a regular file is read (a
        FIFO, a device or a directory is refused). ``confine=False`` is for the trainer's own
        paths (grading I/O under ``/opt/...``), never for a path the agent chose: any absolute
        path, links followed except in its last component, still regular files only.
        A refused or failed request raises :class:`WorkspaceError` with a one-line message
        (``"<path>: <reason>"``) fit to show the agent; the session stays usable."""
        req = {"op": "read", "path": path, "max_bytes": int(max_bytes), "confine": bool(confine)}
        reply = self._call(req, IO_TIMEOUT_S)
        return base64.b64decode(reply["data"])

    def write_file(self, path: str, data: str | bytes, *, confine: bool = True) -> None:
        """Create or replace a regular file (mode 0644), making its missing directories;
        ``confine`` and errors as in :meth:`read_file` (a link, even to a file inside the
        repository, is refused rather than written through)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        req = {"op": "write", "path": path, "data": base64.b64encode(raw).decode(), "confine": bool(confine)}
        self._call(req, IO_TIMEOUT_S)

    def diff(self) -> str:
        """Unified ``git diff --binary`` of the working tree against :attr:`base`, new files
        included, made by the trusted server with a throwaway index ("" when nothing changed).
        Bytes that are not UTF-8 come back as surrogate escapes (``.encode(errors=
        "surrogateescape")`` gives the exact patch)."""
        t = max(IO_TIMEOUT_S, self.config.command_timeout_s)
        reply = self._call({"op": "diff", "timeout": t}, t)
        return base64.b64decode(reply["diff"]).decode("utf-8", errors="surrogateescape")

    # -- interactive sessions (a debugger on a pseudo-terminal) -------------------------------------

    def pty_start(
        self,
        argv: list[str],
        prompt: str,
        timeout: float | None = None,
        cwd: str | None = None,
        max_output: int | None = None,
    ) -> PtyResult:
        """Start ``argv`` (searched on the session's PATH) on a pseudo-terminal inside the
        sandbox, ending any previous interactive session, and return its output once it ends with
        the regex ``prompt`` (``r"\\(Pdb\\) $"``), it exits, or ``timeout`` passes (then its
        processes are all killed: ``alive`` False, ``timed_out``).

        It starts in ``cwd`` (relative to :attr:`REPO` or absolute; default the shell's current
        directory) with the shell's exported environment, ``TERM=dumb``, the per-command rlimits
        and echo off. It lives across requests until it exits, times out, or the next
        :meth:`run`, :meth:`diff`, :meth:`pty_start` or :meth:`pty_stop`, which kill it and
        everything it started; :meth:`read_file`, :meth:`write_file` and :meth:`listdir` leave
        it running."""
        if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError(f"pty_start needs argv as a non-empty list of strings, got {argv!r}")
        re.compile(prompt)  # a bad pattern is the caller's bug: fail here, not in the sandbox
        return self._pty(
            {"op": "pty_start", "argv": list(argv), "cwd": cwd, "prompt": prompt}, timeout, max_output
        )

    def pty_send(
        self, text: str, prompt: str, timeout: float | None = None, max_output: int | None = None
    ) -> PtyResult:
        """Type ``text`` and Enter into the running session and return its output up to the
        next ``prompt`` (as :meth:`pty_start`). Send one line at a time: the read stops at the
        first prompt, so the answers to further lines would arrive with the next request. Raises
        :class:`WorkspaceError` when no session is running (never started, exited, killed)."""
        re.compile(prompt)
        return self._pty({"op": "pty_send", "input": str(text), "prompt": prompt}, timeout, max_output)

    def pty_stop(self) -> None:
        """Kill the interactive session and every process it started (a no-op without one)."""
        self._call({"op": "pty_stop"}, IO_TIMEOUT_S)

    def _pty(self, req: dict, timeout: float | None, max_output: int | None) -> PtyResult:
        """One pty request under the same two bounds as :meth:`run`."""
        t = float(timeout if timeout is not None else self.config.command_timeout_s)
        keep = int(max_output if max_output is not None else self.config.max_output_chars)
        t0 = time.monotonic()
        with self._lock:
            if not self.alive:
                raise WorkspaceDead(f"the workspace is dead: {self.dead_reason or 'closed'}")
            try:
                reply = self._request({**req, "timeout": t, "max_output": keep}, t + self.config.grace_s)
            except WorkspaceDead as e:
                outer = isinstance(e.__cause__, TimeoutError)
                return PtyResult(f"[{e}]", False, None, outer, False, 0, time.monotonic() - t0)
        if "error" in reply:
            raise WorkspaceError(reply["error"])
        output, truncated = _head_tail(
            base64.b64decode(reply["head"]), base64.b64decode(reply["tail"]), int(reply["output_bytes"]), keep
        )
        return PtyResult(
            output=output,
            alive=bool(reply["alive"]),
            exit_code=reply["exit_code"],
            timed_out=bool(reply["timed_out"]),
            truncated=truncated,
            output_bytes=int(reply["output_bytes"]),
            wall_s=float(reply["wall_s"]),
        )

    def listdir(
        self, path: str = ".", depth: int = 2, max_entries: int = 200, *, confine: bool = True
    ) -> list[str]:
        """The tree under ``path`` (relative to :attr:`REPO` or absolute), listed by the server
        without starting a process (an interactive session keeps running): paths relative to
        ``path``, directories ending in ``/``, ``.git`` left out, ``depth`` levels, in tree order,
        at most ``max_entries`` then a ``[... N more ...]`` line. Symlinked directories are listed,
        not entered. ``confine`` as in :meth:`read_file`: by default ``path`` must be a directory
        inside the repository reached without a symbolic link; ``confine=False`` (trainer's own
        paths only, never the agent's) lists any directory but a link itself."""
        req = {
            "op": "listdir",
            "path": path,
            "depth": int(depth),
            "max_entries": int(max_entries),
            "confine": bool(confine),
        }
        return list(self._call(req, IO_TIMEOUT_S)["entries"])

    def _call(self, req: dict, timeout: float) -> dict:
        with self._lock:
            reply = self._request(req, timeout + self.config.grace_s)
        if "error" in reply:
            raise WorkspaceError(reply["error"])
        return reply

    def close(self) -> None:
        """Kill every process of the session and remove what it held on the host (idempotent)."""
        if self.alive and self._res.proc is not None and self._res.proc.stdin is not None:
            try:  # a polite exit first: the server kills its processes and leaves
                self._res.proc.stdin.close()
            except OSError:
                pass
        self.alive = False
        self._finalizer()  # runs _Resources.release once
        _LIVE.discard(self)
        callbacks, self._on_close = self._on_close, []
        for cb in callbacks:
            cb()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _head_tail(head: bytes, tail: bytes, total: int, keep: int) -> tuple[str, bool]:
    """``keep`` characters of output: the first half, a marker line, the last half."""
    h = keep // 2
    t = keep - h
    if total == len(head) + len(tail):  # the server held everything
        text = (head + tail).decode("utf-8", errors="replace")
        if len(text) <= keep:
            return text, False
        return text[:h] + _marker(len(text) - keep) + (text[-t:] if t else ""), True
    first = head.decode("utf-8", errors="replace")[:h]
    last = tail.decode("utf-8", errors="replace")[-t:] if t else ""
    return first + _marker(total - len(first.encode()) - len(last.encode())) + last, True


def _marker(cut: int) -> str:
    return f"\n[... {cut} characters cut ...]\n"


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
    backends.sweep_stale_cgroups()
    res = _Resources()
    # +8: the server, bwrap's processes, slack for a child being reaped
    pids = backends.PidsCgroup(config.max_processes + 8)
    mem_mb = config.memory_mb + config.disk_mb + config.tmp_mb + OVERHEAD_MB + (sum(scratch.values()) >> 20)
    mem = backends.MemoryCgroup(mem_mb << 20)
    res.cgroups = [cg for cg in (pids, mem) if cg.path is not None]
    for cg in (pids, mem):
        if cg.path is None:
            cg.remove()
    ws: Workspace | None = None
    try:
        if backend == "bwrap":
            argv = bwrap_workspace_argv(
                config,
                repo,
                toolchain=str(toolchain_dir(config.python, config.toolchain)),
                binds=binds,
                writable_binds=writable_binds,
                scratch=scratch,
                env=env,
            )
        else:
            argv = _start_apptainer(config, repo, res, binds=binds, writable_binds=writable_binds, env=env)
        argv = backends.join_cgroups_argv([cg.procs for cg in res.cgroups], argv)
        res.proc = _popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("LCRL_SANDBOX_DEBUG") else subprocess.DEVNULL,
        )
        ws = Workspace(config, backend, res)
        ws._start()
        return ws
    except BaseException:
        if ws is not None:
            ws.close()
        res.release()
        raise


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
    return apptainer_server_argv(config, name, env, apptainer)


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
