"""Sandbox configuration: which backend, how many workers, and the per-program limits."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Literal

from lit_codeRL.sandbox.userns import check_base_uid

BackendName = Literal["auto", "local", "bwrap", "apptainer"]

WORKERS_CAP = 8
"""Most workers ``workers: 0`` starts. The shipped configs grade 8 (quickstart) to 64 (the MBPP
recipes) completions a step, and MBPP-style tests take milliseconds, so 8 workers grade a step in
at most 8 rounds; every further worker costs a forked interpreter's memory and its start-up at
each pool open (evaluation callbacks open their own). Long-running tests: raise ``workers``."""


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which under SLURM or a cgroup CPU
    set is fewer than ``os.cpu_count()`` (the machine's); the CPU count where there is none."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS) or no answer
        return os.cpu_count() or 1


def default_workers(cores: int | None = None) -> int:
    """``max(1, min(cores - 1, WORKERS_CAP))``: one core stays with the main process, which runs
    the decode loop (on a GPU a Python loop that needs a core of its own) and, in training, the
    optimizer step, while the sandbox grades; at most :data:`WORKERS_CAP`."""
    cores = usable_cores() if cores is None else cores
    return max(1, min(cores - 1, WORKERS_CAP))


@dataclass(frozen=True)
class SandboxConfig:
    """Knobs of :func:`lit_codeRL.sandbox.make_sandbox`. Defaults suit MBPP-style reward grading."""

    backend: BackendName = "auto"
    """``auto`` picks the safest backend that works here: apptainer (binary + image), else bwrap
    (a probe worker started with the real command line grades a program). If neither works,
    creating the sandbox raises ``SandboxUnavailable`` naming the fixes: ``auto`` never falls back
    to ``local``. ``local`` (resource limits only, NOT isolation) only when asked for, with a
    warning every time a pool opens."""
    workers: int = 0
    """Parallel worker processes (each a fork server running one program at a time). 0: one per
    usable core (the process's CPU affinity) less one for the decode loop and trainer, at most 8:
    max(1, min(cores - 1, 8)) (``default_workers``)."""
    timeout_s: float = 5.0
    """Default wall-clock limit per program (program + all its tests)."""
    memory_mb: int = 1024
    """Address-space limit per program (RLIMIT_AS/RLIMIT_DATA); 0 disables."""
    max_output_bytes: int = 1 << 20
    """Cap on any file the program writes, stdout/stderr included (RLIMIT_FSIZE); exceeding it
    gives ``OUTPUT_LIMIT``."""
    max_capture_bytes: int = 16 << 10
    """How much stdout/stderr comes back in the result (the rest is truncated, not an error)."""
    max_processes: int = 16
    """RLIMIT_NPROC for the program (only enforced for non-root uids by the kernel), and the pids
    cgroup limit per worker when a writable pids cgroup exists."""
    max_open_files: int = 64
    """RLIMIT_NOFILE for the program."""
    max_pending: int = 0
    """Bound on submitted-but-unfinished programs; ``submit`` blocks beyond it. 0 = 64 x workers."""
    grace_s: float = 5.0
    """Extra time the parent waits for a worker's reply past the program timeout before it kills
    and recreates the worker (a safety net: the worker enforces the timeout itself)."""
    python: str = sys.executable
    """Interpreter for the worker: venv, conda, pyenv or system. For bwrap it is resolved to the real
    binary (a venv's base interpreter) and exactly its stdlib and shared-library directories are
    bound read-only (``backends.interpreter``)."""
    apptainer_image: str | None = None
    """Path to the ``.sif`` image for the apptainer backend (see ``env/sandbox.def``); defaults to
    ``$LIT_CODERL_SANDBOX_SIF``."""
    apptainer_python: str = "/usr/local/bin/python3"
    """Interpreter path inside the apptainer image."""
    retries: int = 2
    """How often a program whose run hit an infrastructure fault (a worker that cannot start, a
    server error, a server that died under it) is re-run on a fresh worker before the result is
    ``SANDBOX_ERROR``."""
    trusted_comparison: bool = True
    """Compare ``assert <expr> == <literal>`` tests and expected stdout outside the program's
    process (the program only computes ``<expr>``). Off: every test runs in-process (the old,
    weaker path; kept for comparison and tests)."""
    max_value_bytes: int = 1 << 20
    """Cap on the encoded size of one value a value test returns; larger values fail the test."""
    use_pids_cgroup: bool = True
    """Put each worker into its own pids cgroup (v1 or v2) when one is writable: the fork-bomb
    guard that also works when running as root (where RLIMIT_NPROC is not enforced)."""
    use_cpu_cgroup: bool = True
    """Put each worker into its own cpu cgroup, all at the same weight, when one is writable: a
    program's busy processes then share one worker's part of the CPU instead of slowing every
    other program into its timeout (``docs/sandbox.md``)."""
    root_program_uid: int | None = 100000
    """Where the trainer runs as root and no pids cgroup bounds a worker (most containers), a
    bwrap worker runs as a host uid that is not root, in a user namespace of its own, so that
    RLIMIT_NPROC (``max_processes``; the kernel exempts root) bounds a fork bomb: this uid plus
    an offset per process and worker (``sandbox/userns.py``). ``None``: as root, bounded by
    nothing but the timeout (warned)."""

    def __post_init__(self) -> None:
        check_base_uid("sandbox.root_program_uid", self.root_program_uid)

    def worker_count(self) -> int:
        """``workers``, or where it is 0 the rule of :func:`default_workers` for this host."""
        return self.workers or default_workers()
