"""What a workspace session answers with: the result of a command or an interactive request, and
the errors a request raises. Shared by the session (``workspace_session.py``) and its callers."""

from __future__ import annotations

import signal
from dataclasses import dataclass

CPU_LIMIT_EXIT = 128 + signal.SIGXCPU
"""The exit code of a command whose process a ``cpu_s`` limit stopped (the shell's 128 + SIGXCPU)."""


class WorkspaceError(RuntimeError):
    """A request the server could not carry out (a missing file, a failed git command)."""


class WorkspaceDead(WorkspaceError):
    """The session was closed or killed (ran past its outer wall clock, its server died)."""


class DiffTooLarge(WorkspaceError):
    """The repository's changes make a diff larger than :data:`MAX_DIFF_BYTES` (the session is fine)."""


MAX_DIFF_BYTES = 16 << 20
"""Largest diff a workspace sends back: grading refuses a larger one (``grading/repo.py:
MAX_PATCH_BYTES``), and one of the few hundred MB an agent can write would be held by the trainer."""


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
    cpu_s: float | None = None
    """CPU time (user + system) of every process the command ran; ``None``: not known (the
    session died under it)."""


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
