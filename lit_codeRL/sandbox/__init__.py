"""Run untrusted programs and grade them: ``make_sandbox(...)`` -> :class:`Sandbox`.

Backends (``SandboxConfig.backend``): ``bwrap`` (bubblewrap namespaces: no network, read-only
minimal root with exactly the interpreter's files, private /tmp and /dev/shm, PID namespace),
``apptainer`` (``apptainer exec --containall --cleanenv --net --network none``) and ``local``
(rlimits + process cleanup, NOT isolation, only when asked for). ``auto`` picks the safest that
works and raises :class:`SandboxUnavailable` (a ``ConfigError`` naming the fixes) when none does:
it never silently runs untrusted code unisolated. All backends run the same trusted fork server
(``_server.py``): one long-lived server per worker forks a child per program.

The full threat model, the test shapes whose expected values never enter the program's process
(``assert <expr> == <literal>``, io pairs, stdin/stdout; see :mod:`.grading`) and how to choose a
backend are in ``docs/sandbox.md``. In short:

- containment is the backend's job; every backend adds rlimits, a pids cgroup when writable, a
  wall-clock timeout and a kill of every process a program leaves; a root trainer without a pids
  cgroup runs bwrap programs as a host uid that is not root (``userns.py``), so the process
  rlimit binds them;
- no program affects a later one: after each program the server cleans its scratch space and
  checks its own health (scratch intact, no process left, its own limits unchanged); a damaged
  worker is replaced;
- sandbox failures are never verdicts on the program: infrastructure faults are retried on a fresh
  worker (``SandboxConfig.retries``) and only then reported as ``SANDBOX_ERROR``; signal deaths
  carry ``ExecutionResult.signal``;
- grading never trusts the exit code or stdout: test outcomes travel as HMAC-authenticated records
  from a runner set up before the program runs, and module state is restored before each test.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lit_codeRL.sandbox.backends import SandboxUnavailable
from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.pool import Sandbox
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

__all__ = [
    "ExecutionResult",
    "Program",
    "Sandbox",
    "SandboxConfig",
    "SandboxUnavailable",
    "Verdict",
    "make_sandbox",
]


def make_sandbox(config: SandboxConfig | None = None, /, **overrides: Any) -> Sandbox:
    """Build a :class:`Sandbox`: ``make_sandbox(backend="local", workers=2, timeout_s=5.0)`` or
    ``make_sandbox(SandboxConfig(...))`` (keyword overrides apply on top of a given config)."""
    config = replace(config or SandboxConfig(), **overrides)
    return Sandbox(config)
