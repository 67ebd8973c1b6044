"""What goes into the sandbox and what comes out: the contract every backend honours."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Verdict(str, enum.Enum):
    """Outcome of one program run, from most to least successful."""

    PASSED = "passed"
    """Ran to completion; every test passed (or, with no tests, no exception and expected stdout matched)."""
    FAILED = "failed"
    """Ran, but at least one test failed (wrong value, or the test itself raised)."""
    SYNTAX_ERROR = "syntax_error"
    """The program does not compile (SyntaxError, IndentationError, TabError)."""
    RUNTIME_ERROR = "runtime_error"
    """The program raised, exited or was killed by a signal (``ExecutionResult.signal``) before its
    tests could run, or it ended its own sandbox server."""
    TIMEOUT = "timeout"
    """Wall-clock or CPU-time limit hit."""
    MEMORY_LIMIT = "memory_limit"
    """Address-space limit hit (MemoryError)."""
    OUTPUT_LIMIT = "output_limit"
    """Wrote more than the output cap to stdout/stderr or files."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox itself failed (not the program's fault) even after retries on fresh workers;
    never counts as a pass, and is no verdict on the program: leave it out of rewards."""


@dataclass(frozen=True)
class Program:
    """One untrusted program and how to grade it."""

    code: str
    """The untrusted code (usually model output after code extraction)."""
    tests: tuple[str, ...] = ()
    """Independent test statements (usually ``assert`` lines), each graded on its own, in order."""
    setup_code: str = ""
    """Trusted code run after ``code`` and before the tests, in the program's namespace (imports the
    tests need, fixtures built from the program's classes, e.g. MBPP task 367)."""
    stdin: str | None = None
    """Text fed to the program's standard input."""
    expected_stdout: str | None = None
    """When set, the run passes only if stdout matches (trailing whitespace per line ignored)."""
    timeout_s: float | None = None
    """Wall-clock limit for this program; ``None`` uses the sandbox default."""


@dataclass
class ExecutionResult:
    """Typed result of one run; test outcomes come from a channel the program cannot forge."""

    verdict: Verdict
    test_passed: list[bool] = field(default_factory=list)
    """Per test, in order; tests that never ran (crash, timeout) are ``False``."""
    failed_test: int | None = None
    """Index of the first failing test, if any."""
    exception_type: str | None = None
    """E.g. ``"ZeroDivisionError"`` for runtime errors, ``"SyntaxError"`` for syntax errors."""
    exception_message: str | None = None
    stdout: str = ""
    """Captured standard output, truncated to the sandbox's output cap."""
    stderr: str = ""
    wall_time_s: float = 0.0
    backend: str = ""
    signal: str | None = None
    """Name of the signal that killed the program (``"SIGSEGV"``), when one did; our own timeout
    kill is reported as ``TIMEOUT`` instead."""
    retries: int = 0
    """How many times the sandbox re-ran this program on a fresh worker after an infrastructure
    fault; a ``SANDBOX_ERROR`` result is what is left after ``SandboxConfig.retries`` of them."""

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASSED

    @property
    def num_tests(self) -> int:
        return len(self.test_passed)

    @property
    def num_passed(self) -> int:
        return sum(self.test_passed)

    @property
    def pass_fraction(self) -> float:
        """Fraction of tests passed; with no tests, 1.0 for a pass and 0.0 otherwise."""
        if not self.test_passed:
            return 1.0 if self.passed else 0.0
        return self.num_passed / len(self.test_passed)

    def to_dict(self) -> dict:
        """JSON-ready form for rollout dumps and per-problem eval files."""
        return {
            "verdict": self.verdict.value,
            "test_passed": list(self.test_passed),
            "failed_test": self.failed_test,
            "exception_type": self.exception_type,
            "exception_message": self.exception_message,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "wall_time_s": self.wall_time_s,
            "backend": self.backend,
            "signal": self.signal,
            "retries": self.retries,
        }
