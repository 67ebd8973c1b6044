"""The host side of a session's processes: every sandbox is started from one long-lived thread,
and what a session holds on the host (its process, cgroups, scratch dirs, apptainer instance) is
released in one place."""

from __future__ import annotations

import logging
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from lit_codeRL.sandbox import backends

logger = logging.getLogger(__name__)


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
