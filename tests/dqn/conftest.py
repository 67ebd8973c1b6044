"""Shared fixtures for the DQN tests: the seed problems and the real sandbox that grades their code.

Programs are graded by the project sandbox with the module's default configuration (the isolating
``auto`` backend, one worker), so a test fails when grading through the sandbox breaks. One sandbox
serves the whole session; ``executor`` counts the programs it is asked to grade.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lit_codeRL.envs.codegen import SandboxExecutor
from lit_codeRL.problems import load_seed_json
from lit_codeRL.sandbox import SandboxConfig
from lit_codeRL.sandbox.types import ExecutionResult, Program

ROOT = Path(__file__).resolve().parents[2]
TRAIN_JSON = ROOT / "data/examples/training_problems.json"
EVAL_JSON = ROOT / "data/examples/eval_problems.json"
SANDBOX = SandboxConfig(workers=1, timeout_s=2.0)
"""What the DQN tests grade with: the ``auto`` backend (bwrap here), as ``DQNModule`` does by default."""


def require_isolating_sandbox() -> None:
    if not shutil.which("bwrap") and not shutil.which("apptainer"):
        pytest.skip("no isolating sandbox backend (bubblewrap or apptainer) is installed")


class CountingExecutor:
    """The session's sandbox, counting the programs it grades."""

    def __init__(self, executor: SandboxExecutor) -> None:
        self.executor = executor
        self.calls = 0

    def run_batch(self, programs: list[Program]) -> list[ExecutionResult]:
        self.calls += len(programs)
        return self.executor.run_batch(programs)


@pytest.fixture(scope="session")
def sandbox_executor():
    require_isolating_sandbox()
    executor = SandboxExecutor(SANDBOX)
    yield executor
    executor.close()


@pytest.fixture
def train_problems():
    return load_seed_json(TRAIN_JSON)


@pytest.fixture
def eval_problems():
    return load_seed_json(EVAL_JSON)


@pytest.fixture
def executor(sandbox_executor):
    return CountingExecutor(sandbox_executor)
