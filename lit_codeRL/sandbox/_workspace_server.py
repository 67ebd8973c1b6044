"""The trusted server inside one workspace sandbox (stdlib only; run as ``python -I -S -B``).

Why a server: a workspace lives for a whole episode, so something trusted has to stay inside the
sandbox to start each agent command with the session's limits, capture its output without
holding gigabytes, kill everything the command left behind, and answer file and diff requests
without going through the agent's shell. It talks to the trainer over its stdin/stdout (4-byte
length + JSON frames); no agent process ever holds those pipes.

Two modes, set by the trainer in the config:

- ``pid1`` (bwrap ``--as-pid-1``): the server is the init of the sandbox's PID namespace. The
  kernel drops every signal sent to it from inside the namespace that it has no handler for, so
  ``kill -9 -1`` or ``kill -9 1`` from the agent cannot stop it, and ``kill(-1, SIGKILL)`` from the
  server is an exact "kill every agent process", detached daemons included.
- subreaper (apptainer, where the instance's own init is PID 1): orphans are re-parented to the
  server, which kills its whole tree after each command. An agent that SIGKILLs the server ends
  its session (the trainer then reports it dead).

What persists between commands: the working directory and the exported environment (written by
an EXIT trap of each command's shell, read back here, applied to the next command). Shell
functions, aliases, unexported variables and background processes do not: every process of a
command is killed when it ends.

The one exception is the interactive session (``pty_start``/``pty_send``/``pty_stop``): a program
such as ``python -m pdb`` on a pseudo-terminal that lives across requests, until the next
``run``, ``diff``, ``pty_start`` or ``pty_stop`` (or its own end, or its timeout). Between
requests its processes are the only ones in the sandbox (every other op kills what it started),
so ending it is ``_kill_all``: exact, detached and ``setsid`` children included.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import heapq
import json
import math
import os
import posixpath
import re
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import termios
import time

_HDR = struct.Struct(">I")
_STATE_MAX = 1 << 20  # the agent's shell writes the state file: never trust its size
_WRAPPER = r"""
__lcrl_state=$1
trap 'builtin printf "%s\0" "$PWD" > "$__lcrl_state" 2>/dev/null && /usr/bin/env -0 >> "$__lcrl_state" 2>/dev/null' EXIT
eval "$2"
"""
"""Each command: ``bash -c WRAPPER lcrl <state file> <cmd>``. ``eval`` runs the command in this
shell, so ``cd`` and ``export`` change what the EXIT trap writes (also after ``exit N``)."""
_NOT_SOURCE = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")
"""Pathspecs a diff leaves out: compiled bytecode, wherever the agent's tools wrote it."""

_DROP = {"SHLVL", "_", "PWD"}
"""Variables bash sets itself: carrying them over would count SHLVL up forever."""
_PROMPT_WINDOW = 4096
"""Bytes at the end of a pty's output the prompt regex is matched against."""
_PTY_SIZE = struct.pack("HHHH", 24, 80, 0, 0)
"""rows, cols: a fixed window so programs that ask (pytest's line width) see the same one."""
_NO_PTY = "no interactive session is running"


def _send(obj: dict) -> None:
    data = json.dumps(obj).encode()
    _write_all(_HDR.pack(len(data)) + data)


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _recv() -> dict | None:
    def read_exact(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(0, n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    hdr = read_exact(_HDR.size)
    if hdr is None:
        return None
    body = read_exact(_HDR.unpack(hdr)[0])
    return None if body is None else json.loads(body)


# -- process control ---------------------------------------------------------------------------


def _reap() -> bool:
    """Reap every exited child; True when no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def _children_tree() -> list[int]:
    """Every process below this one (/proc scan), for the subreaper mode."""
    me, parent = os.getpid(), {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                parent[int(name)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [], {me}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in out}
        out += frontier
    return out


def _kill_all(cfg: dict) -> None:
    """Kill every process the agent started, until none is left (a fork bomb included: a killed
    process cannot fork, and each round kills whatever the last one missed)."""
    for _ in range(10000):
        if cfg["pid1"]:
            try:
                os.kill(-1, signal.SIGKILL)  # everything in our PID namespace but us
                alive = True
            except ProcessLookupError:
                alive = False
        else:
            victims = _children_tree()
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            alive = bool(victims)
        if _reap() and not alive:
            return
        time.sleep(0.001)


def _limits(cfg: dict, cpu_s: float | None = None) -> None:
    """In the forked child, before exec: the per-command rlimits. ``cpu_s``: CPU seconds each of
    the command's processes may use (RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL a second
    later), so a loop that never ends is stopped by the CPU it burns, not by a wall clock that a
    loaded machine stretches."""
    mem = int(cfg["memory_mb"]) << 20
    disk = int(cfg["disk_mb"]) << 20
    files = int(cfg["max_open_files"])
    wanted = [
        (resource.RLIMIT_AS, mem, mem),
        (resource.RLIMIT_FSIZE, disk, disk),
        (resource.RLIMIT_NOFILE, files, files),  # hard too: the command cannot raise it back
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if cfg.get("nproc"):
        wanted.append((resource.RLIMIT_NPROC, int(cfg["nproc"]), int(cfg["nproc"])))
    if cpu_s:
        soft = max(1, math.ceil(cpu_s))
        wanted.append((resource.RLIMIT_CPU, soft, soft + 1))
    for res, soft, hard in wanted:
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            pass


# -- file requests: paths ----------------------------------------------------------------------


class PathRefused(Exception):
    """A file request refused or failed: its message (``<path>: <reason>``, one line) is the
    agent's to read and goes into the reply verbatim, without an exception class."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""O_NOFOLLOW: a link is never opened through; O_NONBLOCK: a FIFO never blocks the server (a
write with no reader fails with ENXIO, a read opens and is then refused: not a regular file)."""
_SYMLINK = "is a symbolic link (open its target instead)"
_NO_SPACE = "no space left on the workspace disk"
_REASONS = {
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "is a directory",
    errno.ELOOP: _SYMLINK,
    errno.ENXIO: "not a regular file",  # a FIFO without a reader, a socket
    errno.ENOSPC: _NO_SPACE,
    errno.EDQUOT: _NO_SPACE,
    errno.EFBIG: "file too large for the workspace disk",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENAMETOOLONG: "file name too long",
    errno.EEXIST: "already exists",
}


def _show(path: str) -> str:
    """The path as the caller gave it, fit for a one-line message (quoted when empty or when it
    holds a newline or another unprintable character)."""
    shown = path if path and path.isprintable() else ascii(path)
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _reason(e: OSError) -> str:
    return _REASONS.get(e.errno) or (e.strerror or "cannot open").lower()


def _explain(parent: int, name: str, e: OSError) -> str:
    """Why opening ``name`` in directory ``parent`` failed: a link is named as such whatever the
    kernel answered (ELOOP, or ENOTDIR under O_DIRECTORY). The lstat only words the message;
    what was refused was decided by the open."""
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                return _SYMLINK
        except OSError:
            pass
    return _reason(e)


def _subdir(parent: int, name: str, create: bool) -> int:
    """An fd of the directory ``name`` in ``parent``, never through a link; ``create``: made
    first when missing (mkdirat makes a directory or fails, it never follows a link either)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # made meanwhile; if a link is there now, the open below refuses it
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _walk(fd: int, parts: list[str], shown: str, create: bool = False) -> int:
    """The directory ``parts`` below ``fd``, one component at a time (no link followed); the
    caller closes what it gets, ``fd`` included (closed here only on failure)."""
    for i, name in enumerate(parts):
        try:
            nxt = _subdir(fd, name, create)
        except OSError as e:
            why = _explain(fd, name, e)
            os.close(fd)
            where = "/".join(parts[: i + 1])  # the component at fault, named where it helps
            if why == _SYMLINK:
                why = f"{where} {why}"
            elif e.errno == errno.ENOTDIR:
                why = f"{where} is not a directory"
            raise PathRefused(f"{shown}: {why}") from None
        os.close(fd)
        fd = nxt
    return fd


def _read_upto(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (fewer only at its end)."""
    chunks, left = [], limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class Session:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.repo = cfg["repo"]
        self.env = dict(cfg["env"])
        self.cwd = self.repo
        self.base = ""
        self.seq = 0
        self.pty: _Pty | None = None

    # -- start ---------------------------------------------------------------------------------

    def _home(self) -> None:
        """HOME with git's identity; recreated if a command deleted it (``rm -rf /``)."""
        home = self.cfg["env"].get("HOME", "/tmp/home")
        if os.path.exists(os.path.join(home, ".gitconfig")):
            return
        try:
            os.makedirs(home, exist_ok=True)
            with open(os.path.join(home, ".gitconfig"), "w") as f:
                f.write(
                    "[user]\n\tname = agent\n\temail = agent@localhost\n"
                    "[safe]\n\tdirectory = *\n[init]\n\tdefaultBranch = main\n"
                    "[advice]\n\tdetachedHead = false\n"
                )
        except OSError:
            pass  # /tmp full: git then lacks an identity, the command says so

    def setup(self) -> dict:
        self._home()
        os.makedirs(self.cfg["state_dir"], exist_ok=True)
        src = self.cfg.get("repo_src")
        os.makedirs(self.repo, exist_ok=True)
        if src:
            # the pristine copy is bound read-only; the agent works on its own copy
            out = subprocess.run(
                ["cp", "-a", "--no-preserve=ownership", f"{src}/.", self.repo],
                capture_output=True,
                env=self._trusted_env(),
            )
            if out.returncode != 0:
                return {
                    "error": f"copying the repository failed: {out.stderr.decode(errors='replace')[-500:]}"
                }
        git = self._git(["rev-parse", "--verify", "-q", "HEAD"])
        if git.returncode != 0:
            # not a repository (or no commit yet): the starting tree becomes the base commit
            for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--allow-empty", "-m", "base"]):
                step = self._git(args)
                if step.returncode != 0:
                    return {"error": f"git {args[0]} failed: {step.stderr.decode(errors='replace')[-500:]}"}
            git = self._git(["rev-parse", "--verify", "-q", "HEAD"])
        self.base = git.stdout.decode().strip()
        return {"ready": True, "base": self.base, "pid": os.getpid()}

    def _trusted_env(self) -> dict:
        """The server's own environment for git and cp: the trainer's, never the agent's."""
        env = {k: v for k, v in self.cfg["env"].items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
        return env

    def _git(self, args: list[str], extra_env: dict | None = None, timeout: float = 120.0):
        argv = [
            "git",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "-c",
            "core.quotePath=false",
            *args,
        ]
        env = {**self._trusted_env(), **(extra_env or {})}
        return subprocess.run(
            argv,
            cwd=self.repo,
            env=env,
            capture_output=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    # -- requests ------------------------------------------------------------------------------

    def run(self, req: dict) -> dict:
        t0 = time.monotonic()  # before the debugger's end: its kill counts within the limit too
        self._pty_end()  # a debugger must not run (or write files) beside the command
        self.seq += 1
        self._home()
        # every process of the command is reaped before it answers (by its parent, or by us as
        # PID 1 / subreaper), so this delta is the CPU time of the command's whole tree
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        state = os.path.join(self.cfg["state_dir"], f"s{self.seq}")
        _remove(state)  # a FIFO an earlier command planted at this path would hang the EXIT trap
        r, w = os.pipe()
        cwd = self.cwd if os.path.isdir(self.cwd) else (self.repo if os.path.isdir(self.repo) else "/")
        env = {**self.env, "PWD": cwd}
        argv = ["/bin/bash", "--noprofile", "--norc", "-c", _WRAPPER, "lcrl", state, req["cmd"]]
        pid = os.fork()
        if pid == 0:  # the command: its own session/process group, limits, no server fds
            try:
                os.setsid()
                os.dup2(w, 1)
                os.dup2(w, 2)
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)
                os.closerange(3, 65536)
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.chdir(cwd)
                _limits(self.cfg, req.get("cpu_s"))
                os.execve(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001 - never return into the server's loop
                try:
                    os.write(2, f"cannot run the command: {e}\n".encode())
                finally:
                    os._exit(127)
        os.close(w)
        timeout = float(req["timeout"])
        keep = int(req["max_output"]) * 4  # bytes: enough for max_output chars of any UTF-8
        head, tail, total = bytearray(), bytearray(), 0
        status, timed_out = None, False
        pidfd = _pidfd(pid)
        deadline = t0 + timeout
        os.set_blocking(r, False)
        pipe_open = True
        while True:
            status = _try_wait(pid)
            if status is not None:
                break  # the command is done: background writers are killed below, then drained
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            fds = ([r] if pipe_open else []) + ([pidfd] if pidfd is not None else [])
            ready = select.select(fds, [], [], min(left, 0.05 if pidfd is None else left))[0]
            if r in ready:
                pipe_open, total = _drain(r, head, tail, keep, total)
        _kill_all(self.cfg)
        if status is None:
            try:
                _, raw = os.waitpid(pid, 0)
                status = raw
            except ChildProcessError:
                status = None
        if pidfd is not None:
            os.close(pidfd)
        # Every process of the command is dead, so what it wrote is in the pipe: read that, and
        # not on until EOF. The write end can outlive them outside the sandbox: sent over a unix
        # socket bound in (the harness's gateway socket, in a queue the gateway stopped reading),
        # it held this answer until the gateway let go (its write timeout, 60 s), past the
        # trainer's clock: the session was killed and the episode masked as the trainer's failure.
        if pipe_open:
            _, total = _drain(r, head, tail, keep, total)
        os.close(r)
        wall = time.monotonic() - t0
        now = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)
        if not timed_out:
            self._load_state(state)
        _remove(state)
        code = None
        if not timed_out and status is not None:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by a signal: the shell's 128+N
        return {
            "exit_code": code,
            "timed_out": timed_out,
            "head": base64.b64encode(bytes(head)).decode(),
            "tail": base64.b64encode(bytes(tail)).decode(),
            "output_bytes": total,
            "wall_s": wall,
            "cpu_s": cpu,
        }

    def _load_state(self, path: str) -> None:
        """Read what the command's EXIT trap wrote: its cwd, then its exported environment.

        The path is predictable and the agent's to write: a FIFO or a link planted there is
        ignored (non-blocking open, no link followed, regular files only), the read bounded."""
        try:
            fd = os.open(path, _READ_FLAGS)
        except OSError:
            return  # no trap ran (killed, exec'd, state dir removed): keep the previous state
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            data = _read_upto(fd, _STATE_MAX + 1)
        except OSError:
            return
        finally:
            os.close(fd)
        if len(data) > _STATE_MAX or not data.endswith(b"\0"):
            return
        parts = data[:-1].split(b"\0")
        try:
            cwd = parts[0].decode()
            env = dict(p.decode().split("=", 1) for p in parts[1:] if b"=" in p)
        except (UnicodeDecodeError, ValueError):
            return
        if not env:
            return  # env itself failed (PATH broken): only the trap's first half ran
        self.cwd = cwd if cwd.startswith("/") else self.cwd
        self.env = {k: v for k, v in env.items() if k not in _DROP and k and "\0" not in v}

    def read(self, req: dict) -> dict:
        """At most ``max_bytes`` of a regular file (``path``, ``confine``: see :meth:`_locate`)."""
        fd, shown = self._open_file(req, _READ_FLAGS)
        try:
            data = _read_upto(fd, max(0, int(req["max_bytes"])))
        except OSError as e:
            raise PathRefused(f"{shown}: {_reason(e)}") from None
        finally:
            os.close(fd)
        return {"data": base64.b64encode(data).decode()}

    def write(self, req: dict) -> dict:
        """Create or replace a regular file, its missing directories made (see :meth:`_locate`)."""
        data = memoryview(base64.b64decode(req["data"]))
        fd, shown = self._open_file(req, _WRITE_FLAGS, create=True)
        try:
            while data:
                data = data[os.write(fd, data) :]
        except OSError as e:
            try:
                os.ftruncate(fd, 0)  # the disk is full: a partial file must not keep it full
            except OSError:
                pass
            raise PathRefused(f"{shown}: {_reason(e)}") from None
        finally:
            os.close(fd)
        return {"ok": True}

    def _open_file(self, req: dict, flags: int, create: bool = False) -> tuple[int, str]:
        """An fd of the request's file, checked after opening to be a regular file (what was
        checked is what is read or written), and the path as messages show it."""
        parent, name, shown = self._locate(str(req["path"]), bool(req.get("confine", True)), create)
        try:
            if not name:
                raise PathRefused(f"{shown}: is a directory")
            try:
                fd = os.open(name, flags, 0o644, dir_fd=parent)
            except OSError as e:
                raise PathRefused(f"{shown}: {_explain(parent, name, e)}") from None
        finally:
            os.close(parent)
        try:
            mode = os.fstat(fd).st_mode
        except OSError as e:
            os.close(fd)
            raise PathRefused(f"{shown}: {_reason(e)}") from None
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise PathRefused(f"{shown}: {'is a directory' if stat.S_ISDIR(mode) else 'not a regular file'}")
        return fd, shown

    def _locate(self, path: str, confine: bool, create: bool = False) -> tuple[int, str, str]:
        """Where ``path`` is: an fd of its directory (the caller closes it), its last component
        ("" when the path is that directory itself: the repository, or /), and the path as
        messages show it.

        Confined (every agent-chosen path): relative to the repository or absolute, it must lie
        inside the repository once normalised as text (``..`` is never resolved through a link);
        its directories are then opened one at a time from ``/`` without following a link, so a
        component swapped for a link meanwhile fails instead of escaping. Unconfined (only the
        trainer's own paths, such as grading I/O): absolute as given, or relative to the
        repository; links in its directories are followed, never its last component.
        ``create``: missing directories are made."""
        shown = _show(path)
        if "\0" in path:
            raise PathRefused(f"{shown}: not a valid path")
        if not confine:
            full = self._path(path).rstrip("/") or "/"
            head, name = posixpath.split(full)
            try:
                if create and name:
                    os.makedirs(head, exist_ok=True)
                return os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), name, shown
            except OSError as e:
                raise PathRefused(f"{shown}: {_reason(e)}") from None
        repo = posixpath.normpath(self.repo)
        full = posixpath.normpath(posixpath.join(repo, path))
        if full != repo and not full.startswith(repo + "/"):
            raise PathRefused(f"{shown}: outside the repository")
        parts = full[len(repo) + 1 :].split("/") if full != repo else []
        try:
            root = _walk(os.open("/", _DIR_FLAGS), repo.strip("/").split("/"), shown)
        except PathRefused:
            raise PathRefused(f"{shown}: the repository directory {repo} cannot be opened") from None
        return _walk(root, parts[:-1], shown, create), (parts[-1] if parts else ""), shown

    def _path(self, path: str) -> str:
        return path if path.startswith("/") else os.path.join(self.repo, path)

    def diff(self, req: dict) -> dict:
        """``git add -A`` into a throwaway index, then ``git diff --cached --binary <base>``: new
        files included (bytecode excepted: what pdb, pytest and python leave in ``__pycache__`` is
        not part of a change, and must not reach grading), the agent's own index untouched, no hooks/fsmonitor/external diff or
        textconv, and the trainer's environment rather than the agent's."""
        # one deadline for the debugger's end and the three steps, not a limit each: the agent's
        # git config can make each step slow (a clean filter in add, a diff.orderFile that is a
        # FIFO in diff), and three limits made an answer after the trainer's outer clock (the
        # session killed, the episode masked)
        deadline = time.monotonic() + float(req.get("timeout", 120.0))
        self._pty_end()  # nothing may rewrite files while git reads them
        index = os.path.join(self.cfg["state_dir"], f"index{self.seq}-{os.urandom(4).hex()}")
        env = {"GIT_INDEX_FILE": index}
        try:
            for args in (
                ["read-tree", self.base],
                ["add", "-A", "--", ".", *_NOT_SOURCE],
                [
                    "diff",
                    "--cached",
                    "--binary",
                    "--no-color",
                    "--no-ext-diff",
                    "--no-textconv",
                    "--no-renames",
                    self.base,
                    "--",
                ],
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(["git", args[0]], 0)
                out = self._git(args, env, left)
                if out.returncode != 0:
                    err = out.stderr.decode(errors="replace")[-1000:]
                    return {"error": f"git {args[0]} failed ({out.returncode}): {err}"}
            # a diff over the caller's limit is refused here, in the sandbox: sent on, hundreds of
            # MB of files the agent wrote became the trainer's memory several times over (JSON,
            # base64, str), per episode and per edit; grading refuses such a diff anyway
            limit = req.get("max_bytes")
            if limit is not None and len(out.stdout) > int(limit):
                return {
                    "error": f"the changes make a diff of {len(out.stdout)} bytes, over the {int(limit)}-byte "
                    "limit of grading: remove the large files added",
                    "too_large": len(out.stdout),
                }
            return {"diff": base64.b64encode(out.stdout).decode()}
        except subprocess.TimeoutExpired:
            return {"error": "git diff timed out"}
        finally:
            _remove(index)
            _kill_all(self.cfg)  # a filter driver the agent configured must not outlive the diff

    # -- interactive sessions ------------------------------------------------------------------

    def pty_start(self, req: dict) -> dict:
        """Start ``argv`` on a fresh pseudo-terminal (ending any previous session) and read until
        the output ends with ``prompt``, the program exits, or ``timeout``."""
        t0 = time.monotonic()
        prompt = _prompt(req["prompt"])  # a bad regex fails before anything is started
        argv = [str(a) for a in req["argv"]]
        if not argv:
            return {"error": "pty_start needs a program to run"}
        self._pty_end()
        self._home()
        cwd = req.get("cwd")
        if cwd is None:
            cwd = self.cwd if os.path.isdir(self.cwd) else self.repo
        else:
            cwd = self._path(str(cwd))
        if not os.path.isdir(cwd):
            return {"error": f"not a directory: {cwd}"}
        env = {**self.env, "TERM": "dumb", "PWD": cwd}
        master, slave = os.openpty()
        try:
            pid = os.fork()
        except OSError:  # the process limit: the request fails, the server keeps no fd
            os.close(master)
            os.close(slave)
            raise
        if pid == 0:  # the program: its own session with the pty as controlling terminal
            try:
                os.close(master)
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                attrs = termios.tcgetattr(slave)
                # no echo: the agent's input is not repeated in the output; readline (pdb loads
                # it) reads this flag at start and then does not redisplay what it reads either
                attrs[3] &= ~(termios.ECHO | termios.ECHONL)
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
                fcntl.ioctl(slave, termios.TIOCSWINSZ, _PTY_SIZE)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                os.closerange(3, 65536)
                for sig in (signal.SIGPIPE, signal.SIGINT, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                os.chdir(cwd)
                _limits(self.cfg)
                os.execvpe(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001 - never return into the server's loop
                try:
                    os.write(2, f"cannot run {argv[0]}: {e}\n".encode())
                finally:
                    os._exit(127)
        os.close(slave)  # else the master never reads EOF/EIO when the program's side closes
        os.set_blocking(master, False)
        self.pty = _Pty(pid, master, _pidfd(pid))
        return self._pty_io(b"", t0, req, prompt)

    def pty_send(self, req: dict) -> dict:
        """Write one line of input to the session, then read as ``pty_start`` does."""
        t0 = time.monotonic()
        prompt = _prompt(req["prompt"])
        if self.pty is None:
            return {"error": _NO_PTY}
        data = (str(req["input"]) + "\n").encode("utf-8", errors="replace")
        return self._pty_io(data, t0, req, prompt, answer_only=True)

    def pty_stop(self, req: dict) -> dict:
        was = self.pty is not None
        self._pty_end()
        return {"ok": True, "was_running": was}

    def _pty_io(
        self, data: bytes, t0: float, req: dict, prompt: re.Pattern, *, answer_only: bool = False
    ) -> dict:
        """Write ``data`` (non-blocking, never past the deadline: a program may never read its
        stdin) while reading the output, until it ends with ``prompt`` after everything was
        written, the program exits, or the timeout kills the session.

        ``answer_only``: output already waiting before the write is read first and kept, but a
        prompt in it does not end the request; only one read after it does. A program that printed
        a second prompt after the last request ended (``!os.fork()`` in pdb: both processes print
        one) otherwise answered every later command with that stale prompt at once, one behind."""
        pty = self.pty
        assert pty is not None
        out = _PtyOutput(int(req["max_output"]) * 4)  # bytes: enough for max_output chars of any UTF-8
        if answer_only:
            out.drain(pty.master)
            out.forget_prompt()
        deadline = t0 + float(req["timeout"])
        pending = memoryview(data)
        readable, status, timed_out = True, None, False
        while True:
            state = out.drain(pty.master) if readable else "closed"
            readable = state != "closed"
            status = _try_wait(pty.pid)
            if status is not None:
                break
            # the prompt counts only after everything was written and read: the program waits
            if not pending and state != "more" and out.ends_with(prompt):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            rfds = ([pty.master] if readable else []) + ([pty.pidfd] if pty.pidfd is not None else [])
            wfds = [pty.master] if pending and readable else []
            wait = left if pty.pidfd is not None else min(left, 0.05)
            _, w, _ = select.select(rfds, wfds, [], wait)
            if w:
                try:
                    pending = pending[os.write(pty.master, pending[: 1 << 12]) :]
                except BlockingIOError:
                    pass
                except OSError:  # EIO: nobody holds the terminal any more; it has no reader
                    pending = pending[:0]
        alive = status is None and not timed_out
        code = None
        if not alive:
            self.pty = None
            _kill_all(self.cfg)  # its background children too (they may still hold the terminal)
            out.drain_to_end(pty.master)
            pty.close()
            if status is not None:
                code = os.waitstatus_to_exitcode(status)
                code = 128 - code if code < 0 else code  # killed by a signal: the shell's 128+N
        out.flush()
        return {
            "head": base64.b64encode(bytes(out.head)).decode(),
            "tail": base64.b64encode(bytes(out.tail)).decode(),
            "output_bytes": out.total,
            "alive": alive,
            "exit_code": code,
            "timed_out": timed_out,
            "wall_s": time.monotonic() - t0,
        }

    def _pty_end(self) -> None:
        """End the interactive session, if any. Between requests its processes are the only ones
        in the sandbox, so killing everything is exact: children it detached (``setsid``, double
        forks, SIGHUP ignored) included, which a kill of its session or process group would miss."""
        pty, self.pty = self.pty, None
        if pty is not None:
            _kill_all(self.cfg)
            pty.close()

    # -- listing -------------------------------------------------------------------------------

    def listdir(self, req: dict) -> dict:
        """A tree listing made here, starting no process (so a pty session survives it): paths
        relative to ``path``, directories with a trailing ``/``, ``.git`` skipped, at most
        ``depth`` levels, sorted as a tree, at most ``max_entries`` lines then a count of the rest.
        Symlinked directories are listed, never entered (loops). ``path`` is found as
        :meth:`_locate` says (``confine``); a link there is refused, not listed through."""
        parent, name, shown = self._locate(str(req.get("path") or "."), bool(req.get("confine", True)))
        depth = max(1, int(req.get("depth", 2)))
        cap = max(0, int(req.get("max_entries", 200)))
        if name:
            try:
                root = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except OSError as e:
                raise PathRefused(f"{shown}: {_explain(parent, name, e)}") from None
            finally:
                os.close(parent)
        else:
            root = parent
        total = 0

        def is_dir(e: os.DirEntry) -> bool:
            try:
                return e.is_dir(follow_symlinks=False)
            except OSError:
                return False

        def walk():
            nonlocal total
            stack = [("", 1)]
            while stack:  # explicit stack: a deep tree must not hit the recursion limit
                rel_dir, level = stack.pop()
                try:  # from the root's fd, no link followed (one swapped in meanwhile included)
                    fd = _walk(os.dup(root), rel_dir.split("/")[:-1], shown)
                except (OSError, PathRefused):
                    continue  # unreadable: listed, not entered
                try:
                    with os.scandir(fd) as it:
                        entries = [(e.name, is_dir(e)) for e in it]
                except OSError:
                    continue
                finally:
                    os.close(fd)
                for e_name, e_dir in entries:
                    if e_name == ".git":
                        continue
                    rel = rel_dir + e_name
                    total += 1
                    if e_dir:
                        yield rel + "/"
                        if level < depth:
                            stack.append((rel + "/", level + 1))
                    else:
                        yield rel

        # the first ``cap`` in tree order (a directory's entries right after it); never all in memory
        items = walk()
        try:
            first = heapq.nsmallest(cap, items, key=lambda p: p.rstrip("/").split("/"))
            for _ in items:  # nsmallest(0, ...) reads nothing: the count needs every entry
                pass
        finally:
            os.close(root)
        if total > len(first):
            first.append(f"[... {total - len(first)} more ...]")
        return {"entries": first}


class _Pty:
    """The open interactive session: its program's pid, the master end of its terminal."""

    def __init__(self, pid: int, master: int, pidfd: int | None) -> None:
        self.pid, self.master, self.pidfd = pid, master, pidfd

    def close(self) -> None:
        for fd in (self.master, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass


class _PtyOutput:
    """What one pty request read: head and tail (``keep`` bytes each) like ``run``, the count,
    and the last bytes for the prompt match; the terminal's CR LF becomes LF."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head, self.tail, self.recent = bytearray(), bytearray(), bytearray()
        self.total = 0
        self.cr = False
        """A chunk ended in CR: held back until the next one shows whether LF follows."""

    def drain(self, fd: int, budget: int = 1 << 20) -> str:
        """Read what is there, at most about ``budget`` bytes (a flood must not keep the caller
        from its deadline): ``"idle"`` when nothing more is there now, ``"more"`` when the budget
        ran out first, ``"closed"`` once the terminal has no writer left (EIO or EOF)."""
        while budget > 0:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return "idle"
            except OSError:  # EIO: every holder of the slave side is gone
                return "closed"
            if not chunk:
                return "closed"
            budget -= len(chunk)
            self._feed(chunk)
        return "more"

    def drain_to_end(self, fd: int, limit_s: float = 2.0) -> None:
        """After the kill: what the dead programs left in the terminal, until EIO (bounded, in
        case something we did not start still holds the terminal open)."""
        end = time.monotonic() + limit_s
        while self.drain(fd) != "closed":
            left = end - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return

    def _feed(self, chunk: bytes) -> None:
        if self.cr:
            chunk, self.cr = b"\r" + chunk, False
        if chunk.endswith(b"\r"):
            chunk, self.cr = chunk[:-1], True
        self._keep(chunk.replace(b"\r\n", b"\n"))

    def flush(self) -> None:
        if self.cr:
            self.cr = False
            self._keep(b"\r")

    def _keep(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.recent += chunk
        if len(self.recent) > _PROMPT_WINDOW:
            del self.recent[: len(self.recent) - _PROMPT_WINDOW]
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def forget_prompt(self) -> None:
        """Whatever was read so far no longer counts as ending with the prompt (it stays in the
        output): only output read after this can."""
        self.recent.clear()

    def ends_with(self, prompt: re.Pattern) -> bool:
        return not self.cr and prompt.search(self.recent.decode("utf-8", errors="replace")) is not None


def _prompt(pattern: str) -> re.Pattern:
    """The prompt regex, anchored at the very end of the output."""
    return re.compile(f"(?:{pattern})\\Z")


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _try_wait(pid: int) -> int | None:
    try:
        got, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return 0
    return status if got == pid else None


def _drain(fd: int, head: bytearray, tail: bytearray, keep: int, total: int) -> tuple[bool, int]:
    """Read what is there; keep the first and last ``keep`` bytes, count the rest."""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True, total
        if not chunk:
            return False, total
        total += len(chunk)
        room = keep - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            tail += chunk
            if len(tail) > keep:
                del tail[: len(tail) - keep]


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except IsADirectoryError:
        shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


def _harden() -> None:
    """Same-uid agent processes must not ptrace us or read our pipes via /proc/<pid>/fd, and a
    signal with a handler (SIGINT's KeyboardInterrupt) would reach even a PID 1."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (a no-op for PID 1)
    except Exception:  # noqa: BLE001 - best effort; the subreaper mode still scans /proc
        pass
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


def _drop_to(uid: int | None) -> None:
    """Become ``uid`` (as gid too, no groups) before anything else, in a session the trainer gave
    a user namespace of its own (``userns.py``): the capabilities that allow it go with it."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    _drop_to(cfg.get("drop_to"))
    _harden()
    os.umask(0o022)
    session = Session(cfg)
    try:
        _send(session.setup())
    except Exception as e:  # noqa: BLE001 - reported to the trainer, which kills the sandbox
        _send({"error": f"{type(e).__name__}: {e}"})
        return
    handlers = {
        "run": session.run,
        "read": session.read,
        "write": session.write,
        "diff": session.diff,
        "listdir": session.listdir,
        "pty_start": session.pty_start,
        "pty_send": session.pty_send,
        "pty_stop": session.pty_stop,
    }
    while True:
        req = _recv()
        if req is None or req.get("op") == "exit":
            _kill_all(cfg)
            return
        try:
            reply = handlers[req["op"]](req)
        except PathRefused as e:  # already worded for the agent
            reply = {"error": str(e)}
        except Exception as e:  # noqa: BLE001 - a bad request is the caller's error, not a crash
            reply = {"error": f"{type(e).__name__}: {e}"}
        _send(reply)


if __name__ == "__main__":
    main()
