"""Run untrusted programs and grade them: ``make_sandbox(...)`` -> :class:`Sandbox`.

Backends (``SandboxConfig.backend``): ``local`` (rlimits + process cleanup, NOT isolation),
``bwrap`` (bubblewrap namespaces: no network, read-only minimal root, private /tmp, PID
namespace) and ``apptainer`` (``apptainer exec --containall --cleanenv --net --network none``).
``auto`` picks the safest available. All of them run the same trusted fork server
(``_server.py``): one long-lived server per worker forks a child per program.

Threat model
------------
The program is written by a policy being optimised against our grader, so it is assumed to try
(by accident of optimisation or on purpose) to (a) escape or harm the host and (b) be graded
PASSED without solving the task.

(a) Containment is the backend's job. ``bwrap``/``apptainer`` give: no network, no view of host
files beyond the read-only interpreter and ``/usr``, a private writable tmpfs, a PID namespace
(the trainer is invisible, ``kill(-1)`` only hits the sandbox), die-with-parent. Every backend
adds rlimits (CPU, address space, file size = output cap, open files, processes), a pids cgroup
per worker when writable (the fork-bomb bound that also holds for root), a wall-clock timeout
enforced by the server, and after every program a kill of the child's process group and of every
remaining descendant (the server is a child subreaper, so double-forked daemons come back to it),
plus removal of the working directory. ``local`` shares the host's filesystem, network and uid:
use it only for trusted code or tests.

(b) Grading never trusts the exit code or stdout. A trusted runner (in the forked child, before
any untrusted code runs) captures the C-level callables it needs and a copy of every loaded
module's dict; compiles the program and each test separately; runs the program (``SystemExit(0)``
at top level is a normal end: tests still run), then the setup code, then each test in a fresh
copy of the namespace after restoring ``builtins``, ``sys`` (streams included) and every other
pre-loaded module's dict and the ``sys.modules`` entries, and clearing trace/profile hooks. A dict
is rewritten only when its CPython version tag (PEP 509, bumped by every mutation; probed at
start, else every dict is rewritten) moved, so an untouched stdlib costs nothing to restore. Each test's
outcome is sent as a record ``HMAC-SHA256(key, seq|kind|fields)`` over a pipe, with a random
per-program key that exists only in the runner's closure. The server (a separate process)
accepts a run only with a valid, in-order, complete record sequence: program status, one record
per test, end. Missing records (``os._exit``, a kill, a timeout) make the unreported tests fail;
any invalid, duplicated or reordered record (a program writing to the pipe) fails the whole run.
So ``sys.exit(0)``/``os._exit(0)`` before the asserts, printing "PASSED", redefining
``AssertionError``/``__builtins__``, monkeypatching modules or ``sys.exit``, raising
``SystemExit``/``BaseException`` inside a test, or settrace-based line skipping do not pass.

Not defended: a program that deliberately introspects the runner's memory in its own process
(frame walking, ``gc``, ``ctypes``, ``/proc/self/mem``) can recover the key and forge records (or
rewrite a dict's version tag), a program may return objects with a permissive ``__eq__``, shadow a
builtin name in its own globals (tests run on the program's definitions), patch attributes of
pure-Python classes (``collections.Counter.__eq__``: class dicts are not restored) or leave a
thread running that re-patches a module between the restore and a test. Such a program is still contained by (a); it
can only lie about its own grade. Tests and setup code are trusted.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.pool import Sandbox
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

__all__ = ["ExecutionResult", "Program", "Sandbox", "SandboxConfig", "Verdict", "make_sandbox"]


def make_sandbox(config: SandboxConfig | None = None, /, **overrides: Any) -> Sandbox:
    """Build a :class:`Sandbox`: ``make_sandbox(backend="local", workers=2, timeout_s=5.0)`` or
    ``make_sandbox(SandboxConfig(...))`` (keyword overrides apply on top of a given config)."""
    config = replace(config or SandboxConfig(), **overrides)
    return Sandbox(config)
