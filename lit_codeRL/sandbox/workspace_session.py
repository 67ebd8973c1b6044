"""The client side of one workspace session (``Workspace``): the framed JSON protocol to the
trusted in-sandbox server, each request bounded by an outer wall clock, and the API built on it
(``run``, files, ``diff``, interactive pty sessions). How sessions are started: ``workspace.py``."""

from __future__ import annotations

import atexit
import base64
import json
import os
import re
import select
import struct
import threading
import time
import weakref
from collections.abc import Callable

from lit_codeRL.sandbox.workspace_argv import REPO
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig
from lit_codeRL.sandbox.workspace_process import _Resources
from lit_codeRL.sandbox.workspace_types import (
    MAX_DIFF_BYTES,
    CommandResult,
    DiffTooLarge,
    PtyResult,
    WorkspaceDead,
    WorkspaceError,
)

START_TIMEOUT_S = 120.0
IO_TIMEOUT_S = 60.0
"""Outer limit of a file request (read/write); a diff gets max(this, command_timeout_s)."""
_HDR = struct.Struct(">I")
"""Each message is a 4-byte big-endian length, then that many bytes of JSON."""

_LIVE: weakref.WeakSet[Workspace] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for ws in list(_LIVE):
        ws.close()


class Workspace:
    """One isolated session; see the module docstring. Thread-safe (requests are serialised)."""

    REPO = REPO
    """Where the repository lives inside every session; commands start there."""

    def __init__(self, config: WorkspaceConfig, backend: str, res: _Resources) -> None:
        self.config = config
        self.backend = backend
        self.base = ""
        """The commit checked out at start (``diff`` compares against it)."""
        self.host_uid: int | None = None
        """The host uid and gid the session's programs run as when they are not the trainer's
        (a root trainer's session in a user namespace of its own, ``userns.py``), else ``None``:
        a host file the trainer makes for them (a socket) must let that uid in."""
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

    def run(
        self,
        cmd: str,
        timeout: float | None = None,
        max_output: int | None = None,
        cpu_s: float | None = None,
    ) -> CommandResult:
        """Run ``cmd`` with ``bash -c`` in the session (cwd and exported variables carry over).

        Past ``timeout`` the command's whole process tree is killed (``exit_code`` None,
        ``timed_out``); past ``timeout + grace_s`` without an answer the whole session is killed:
        the result says so and every later call raises :class:`WorkspaceDead`. ``cpu_s``: each of
        the command's processes is stopped after that many CPU seconds (rounded up; SIGXCPU, so a
        process it ends reports ``128 + SIGXCPU``, :data:`CPU_LIMIT_EXIT`), however loaded the
        machine is; ``None``: only the wall clock."""
        t = float(timeout if timeout is not None else self.config.command_timeout_s)
        keep = int(max_output if max_output is not None else self.config.max_output_chars)
        t0 = time.monotonic()
        with self._lock:
            if not self.alive:
                raise WorkspaceDead(f"the workspace is dead: {self.dead_reason or 'closed'}")
            try:
                request = {"op": "run", "cmd": cmd, "timeout": t, "max_output": keep}
                if cpu_s:
                    request["cpu_s"] = float(cpu_s)
                reply = self._request(request, t + self.config.grace_s)
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
            cpu_s=float(reply["cpu_s"]) if "cpu_s" in reply else None,
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
        repository, is refused rather than written through); ``data`` text that cannot be UTF-8
        (a lone surrogate) is refused the same way."""
        try:
            raw = data.encode() if isinstance(data, str) else bytes(data)
        except UnicodeEncodeError as e:  # a lone surrogate: the caller's text, a one-line refusal
            raise WorkspaceError(
                f"{path}: the content is not text (character {e.start}: {e.reason})"
            ) from None
        req = {"op": "write", "path": path, "data": base64.b64encode(raw).decode(), "confine": bool(confine)}
        self._call(req, IO_TIMEOUT_S)

    def diff(self) -> str:
        """Unified ``git diff --binary`` of the working tree against :attr:`base`, new files
        included, made by the trusted server with a throwaway index ("" when nothing changed).
        Bytes that are not UTF-8 come back as surrogate escapes (``.encode(errors=
        "surrogateescape")`` gives the exact patch). A diff over :data:`MAX_DIFF_BYTES` raises
        :class:`DiffTooLarge` (the agent's doing: the session goes on)."""
        t = max(IO_TIMEOUT_S, self.config.command_timeout_s)
        with self._lock:
            reply = self._request(
                {"op": "diff", "timeout": t, "max_bytes": MAX_DIFF_BYTES}, t + self.config.grace_s
            )
        if "too_large" in reply:
            raise DiffTooLarge(reply["error"])
        if "error" in reply:
            raise WorkspaceError(reply["error"])
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
