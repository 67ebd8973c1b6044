"""The settings of workspace sessions (``WorkspaceConfig``): backend, per-command limits, sizes."""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from lit_codeRL.sandbox.userns import check_base_uid


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
    """Pids cgroup per session where writable (+ RLIMIT_NPROC when the trainer is not root, or
    runs commands as ``root_program_uid``)."""
    max_open_files: int = 1024
    """Per command (RLIMIT_NOFILE, soft and hard): an agent program or test run that opens files or
    sockets without end gets EMFILE here, not at the trainer's limit (often far higher)."""
    use_pids_cgroup: bool = True
    """Put each session into its own pids cgroup when one is writable (the fork-bomb guard that
    also works for a root trainer)."""
    use_cpu_cgroup: bool = True
    """Put each session into its own cpu cgroup, all at the same weight, when one is writable:
    a command's or test run's busy processes then share one session's part of the CPU instead
    of slowing other episodes' commands and gradings into their timeouts."""
    root_program_uid: int | None = 100000
    """Where the trainer runs as root and no pids cgroup bounds a session (most containers), a
    bwrap session runs its server and commands as a host uid that is not root, in a user
    namespace of its own, so that RLIMIT_NPROC (``max_processes``; the kernel exempts root)
    bounds a fork bomb: this uid plus an offset per process and session
    (``sandbox/userns.py``). ``None``: as root, bounded by nothing but the command's timeout."""
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
        limits = (
            self.command_timeout_s,
            self.memory_mb,
            self.disk_mb,
            self.max_processes,
            self.max_open_files,
        )
        if min(limits) <= 0:
            raise ValueError("workspace limits must be positive")
        check_base_uid("workspace.root_program_uid", self.root_program_uid)

    def plus_toolchain(self, dists: Sequence[str]) -> WorkspaceConfig:
        """This config with ``dists`` (a task's ``test_deps``) added to its toolchain, after the
        entries it has; itself when it has each of them already (names compared as packaging
        does: case, ``-``, ``_`` and ``.`` alike)."""
        have, new = {_canonical(name) for name in self.toolchain}, []
        for name in dists:
            if _canonical(name) not in have:
                have.add(_canonical(name))
                new.append(name)
        return dataclasses.replace(self, toolchain=(*self.toolchain, *new)) if new else self


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
