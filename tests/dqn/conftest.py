"""Shared fixtures for the DQN tests: the seed problems and a trusted in-process executor.

The in-process executor is a test double for the sandbox (the env only needs ``run_batch``); it is
used on hand-built programs and on programs made of the restricted token vocabulary, so that the
unit tests do not depend on the sandbox's worker processes. The sandbox path is covered by
``test_sandbox_executor`` when the sandbox package is importable.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lit_codeRL.envs.codegen import load_codegen_problems
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

ROOT = Path(__file__).resolve().parents[2]
TRAIN_JSON = ROOT / "data/examples/training_problems.json"
EVAL_JSON = ROOT / "data/examples/eval_problems.json"


class InProcessExecutor:
    """Grades trusted programs with ``exec`` (each test statement on its own), counting calls."""

    def __init__(self) -> None:
        self.calls = 0

    def run_batch(self, programs: list[Program]) -> list[ExecutionResult]:
        return [self._run(p) for p in programs]

    def _run(self, program: Program) -> ExecutionResult:
        self.calls += 1
        start = time.perf_counter()
        scope: dict = {}
        try:
            exec(compile(program.code, "<test>", "exec"), scope)
        except SyntaxError as err:
            return ExecutionResult(
                Verdict.SYNTAX_ERROR, [False] * len(program.tests), 0, "SyntaxError", str(err)
            )
        except Exception as err:  # noqa: BLE001 - the program's own failure
            return ExecutionResult(Verdict.RUNTIME_ERROR, [False] * len(program.tests), 0, type(err).__name__)
        passed = []
        for test in program.tests:
            try:
                exec(test, scope)
                passed.append(True)
            except Exception:  # noqa: BLE001
                passed.append(False)
        verdict = Verdict.PASSED if all(passed) else Verdict.FAILED
        failed = None if all(passed) else passed.index(False)
        return ExecutionResult(
            verdict, passed, failed, wall_time_s=time.perf_counter() - start, backend="inprocess"
        )


@pytest.fixture
def train_problems():
    return load_codegen_problems(TRAIN_JSON)


@pytest.fixture
def eval_problems():
    return load_codegen_problems(EVAL_JSON)


@pytest.fixture
def executor():
    return InProcessExecutor()
