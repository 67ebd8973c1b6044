"""Fixtures the grading tests share."""

from __future__ import annotations

import pytest

from tests.grading.repo_tasks import validated_task
from tests.sandbox.conftest import require_bwrap


@pytest.fixture(scope="module")
def helper_task(tmp_path_factory):
    """The calculator whose failing test compares with a helper of its own directory
    (``assert add(2, 3) == expected(2, 3)``, ``test_test_module_shadowing.py``), validated by a
    bubblewrap grader: a value the mirror run cannot change in the text (it arms the check at
    run time: ``_mirror.unmatched``), so only the in-process checks see an answer read from the
    test there. One per test module."""
    from tests.grading.test_test_module_shadowing import F2P, FILES, FIXED, P2P  # noqa: PLC0415

    require_bwrap()
    return validated_task(
        tmp_path_factory.mktemp("helper-task"), "helper", FILES, {"calc.py": FIXED}, F2P, P2P
    )
