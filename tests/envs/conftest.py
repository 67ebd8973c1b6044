"""Fixtures of the agent-env tests."""

from __future__ import annotations

import pytest

from lit_codeRL.problems.debug import debug_problem, load_debug_tasks


@pytest.fixture(scope="module")
def median():
    """The shipped debugging task ``debug/median`` (stats.py, line 19 off by one) as a problem."""
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median"]
    return debug_problem(task)
