"""A test that leaves a file open is no write of the toolchain's or the standard library's.

Found synthesizing tasks from ``boltons`` 26.2.0: its clean suite was ``tamper`` ("toolchain
changed: _pytest.python (written to as the test ran)", "the standard library changed:
unittest.case"). A test that leaves a file open (``JSONLIterator(open(path))``) warns
(``ResourceWarning``, ignored by default) as its frame is freed, from the frame that called it,
and the interpreter sets ``__warningregistry__`` in that frame's module: ``_pytest.python`` for a
test function, ``unittest.case`` for a ``TestCase`` method. Now a module whose dictionary differs
only there is not named; any other name that differs still is. Real parts: the bubblewrap
sandbox, the grader, pytest.
"""

from __future__ import annotations

import pytest

from tests.grading.repo_tasks import BUGGY, FIXED, assert_tamper, grade_files, validated_task
from tests.sandbox.conftest import require_bwrap

TESTS = """\
import unittest

from calc import add, sub


def test_add_leaving_a_file_open():
    handle = open(__file__)  # closed as the frame is freed, in pytest's frame
    assert handle.readline() and add(2, 3) == 5


class TestAdd(unittest.TestCase):
    def test_add(self):
        handle = open(__file__)
        self.assertEqual(add(2, 3), 5)
        self.assertTrue(handle.readline())


def test_sub():
    assert sub(5, 3) == 2
"""
FILES = {"calc.py": BUGGY, "tests/test_calc.py": TESTS}
F2P = ["tests/test_calc.py::test_add_leaving_a_file_open", "tests/test_calc.py::TestAdd::test_add"]
P2P = ["tests/test_calc.py::test_sub"]


@pytest.fixture(scope="module")
def leaky_task(tmp_path_factory):
    require_bwrap()
    # validation grades the reference resolved: the clean run is no longer tamper
    return validated_task(tmp_path_factory.mktemp("leaky"), "leaky", FILES, {"calc.py": FIXED}, F2P, P2P)


def test_an_honest_fix_of_a_suite_that_leaves_files_open_resolves(leaky_task, tmp_path):
    task, grader = leaky_task
    grade = grade_files(task, grader, tmp_path, {"calc.py": FIXED + "\n# fixed\n"})
    assert grade.verdict == "resolved" and grade.reward == 1.0, grade


def test_a_registry_set_beside_another_write_is_still_named(leaky_task, tmp_path):
    # the bug fixed, but a constant of the standard library changed beside a registry of its own
    hack = FIXED.replace(
        "def add(a, b):\n",
        "def add(a, b):\n    import math\n\n    math.__warningregistry__ = {}\n    math.tau = 6.0\n",
    )
    task, grader = leaky_task
    assert_tamper(task, grader, tmp_path, {"calc.py": hack}, "the standard library changed: math")
