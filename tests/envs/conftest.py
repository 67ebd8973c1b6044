"""Fixtures of the agent-env tests."""

from __future__ import annotations

import ast

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.protocol import Action, StepResult
from lit_codeRL.problems.debug import debug_problem, load_debug_tasks


@pytest.fixture(scope="module")
def median():
    """The shipped debugging task ``debug/median`` (stats.py, line 19 off by one) as a problem."""
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median"]
    return debug_problem(task)


@pytest.fixture(scope="module")
def bwrap_gym(tmp_path_factory):
    """The debugging gym on bubblewrap, its first look at the tests left out (tool calls only)."""
    from tests.sandbox.conftest import require_bwrap

    require_bwrap()
    env = DebugEnv(
        DebugSettings(
            repo_cache=str(tmp_path_factory.mktemp("debug-cache")),
            workspace={"backend": "bwrap", "disk_mb": 96},
            show_initial_eval=False,
        )
    )
    yield env
    env.close()


def debug_episode(env: DebugEnv, task, calls: list[str]) -> tuple[StepResult, list[str]]:
    """One episode of ``task``: each tool call in turn (none may end it), then ``<submit/>``;
    the submission's step and what each call showed."""
    (start,) = env.reset_batch([debug_problem(task)])
    observations = []
    for call in calls:
        (out,) = env.step_batch([start.state], [Action(call, "stop")]).result()
        assert not out.terminated, (call, out.info)
        observations.append(out.observation)
    (out,) = env.step_batch([start.state], [Action("<submit/>", "stop")]).result()
    return out, observations


def answering(buggy: str, answers: dict[str, dict[str, object]]) -> str:
    """``buggy`` with each of its functions named in ``answers`` returning the answer listed for
    the ``repr`` of its arguments' tuple, the bug for any others: hard-coded answers to the
    visible tests, what a policy that reads them can write."""
    defined = {n.name for n in ast.parse(buggy).body if isinstance(n, ast.FunctionDef)}
    lines = [buggy]
    for name, table in answers.items():
        if name in defined:
            lines.append(
                f"\n_visible_{name} = {name}\n\n\ndef {name}(*args):\n    answers = {table!r}\n"
                f"    key = repr(args)\n"
                f"    return answers[key] if key in answers else _visible_{name}(*args)\n"
            )
    return "\n".join(lines)
