"""Grading helper for the loader tests: run reference solutions against their own tests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lit_codeRL.problems import Problem


def _failing_in_subprocess(problems: list[Problem], timeout_s: float) -> list[str]:
    failing = []
    for p in problems:
        source = "\n".join([p.reference_solution or "", p.setup_code, *p.test_statements()])
        try:
            done = subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            failing.append(p.task_id)
            continue
        if done.returncode != 0:
            failing.append(p.task_id)
    return failing


@pytest.fixture(scope="session")
def failing_references():
    """``failing_references(problems) -> [task ids whose reference solution fails a test]``.

    Uses the project sandbox (every test graded on its own); falls back to one ``python -c``
    subprocess per problem where the sandbox cannot be imported.
    """

    def run(problems: list[Problem], timeout_s: float = 10.0) -> list[str]:
        try:
            from lit_codeRL.sandbox import Program, make_sandbox
        except ImportError:
            return _failing_in_subprocess(problems, timeout_s)
        programs = [
            Program(p.reference_solution or "", tuple(p.test_statements()), p.setup_code) for p in problems
        ]
        with make_sandbox(workers=2, timeout_s=timeout_s) as sandbox:
            results = sandbox.run_batch(programs)
        return [p.task_id for p, r in zip(problems, results, strict=True) if not r.passed]

    return run
