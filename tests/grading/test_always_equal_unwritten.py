"""An always-equal object whose comparison the check did not ask: the method is not a function the
diff wrote, or the diff's code is read under another path than the one the interpreter names.

``_compare.py`` asks the comparison methods the diff wrote: found by the code object a method
runs, and the lines the parent read the diff wrote in each changed file. Each of these graded
``resolved`` with the bug in place, where the test compares with a helper's result (which the
mirror run cannot change):

* a class of the diff whose ``__eq__`` is no function of the diff's: a built-in (``__eq__ =
  bool``: ``E() == 5`` is ``bool(5)``), a function of the standard library (``typing.cast``
  returns its second argument), a ``functools.partialmethod`` of the diff's own lambda, a
  ``staticmethod`` of a built-in;
* ``calc.py`` made a link to a file of another name (``impl.txt``, ``impl.py``): the parent
  skipped links, so the class in it was never the diff's;
* a package reached through a linked directory: the interpreter names ``calc/__init__.py``, the
  diff wrote ``real/__init__.py``.

Now a method is unwrapped to the code it runs, any comparison method of a class the diff wrote
is asked, links are read through, and the child finds a changed file under its real path too.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from lit_codeRL.grading import _compare
from tests.grading.repo_tasks import diff, validated_task
from tests.grading.test_test_module_shadowing import BUGGY
from tests.sandbox.conftest import require_bwrap

ADD_E = "\n\ndef add(a, b):\n    return E()\n"
CLASSES = {  # calc.py as the diff leaves it: the bug in place, add returning an E
    "__eq__ = bool": BUGGY + "\n\nclass E:\n    __eq__ = bool\n" + ADD_E,
    "__eq__ = typing.cast": "import typing\n" + BUGGY + "\n\nclass E:\n    __eq__ = typing.cast\n" + ADD_E,
    "__eq__ = partialmethod(lambda)": "import functools\n"
    + BUGGY
    + "\n\nclass E:\n    __eq__ = functools.partialmethod(lambda self, other, z: True, 1)\n"
    + ADD_E,
    "__eq__ = staticmethod(bool)": BUGGY + "\n\nclass E:\n    __eq__ = staticmethod(bool)\n" + ADD_E,
    "type() with __eq__ = bool": BUGGY + "\n\nE = type('E', (), {'__eq__': bool})\n" + ADD_E,
}
ALWAYS_EQUAL = "\n\nclass E:\n    def __eq__(self, other):\n        return True\n" + ADD_E
LINKED = {  # files the diff writes, links it makes
    "calc.py a link to impl.txt": ({"impl.txt": BUGGY + ALWAYS_EQUAL}, {"calc.py": "impl.txt"}),
    "calc.py a link to impl.py": ({"impl.py": BUGGY + ALWAYS_EQUAL}, {"calc.py": "impl.py"}),
    "calc a linked directory": ({"real/__init__.py": BUGGY + ALWAYS_EQUAL}, {"calc": "real"}),
}


def test_a_method_is_read_to_the_code_it_runs() -> None:
    def lam(self, other, z):
        return True

    code = lam.__code__
    assert _compare._code(lam) is code
    assert _compare._code(staticmethod(lam)) is code
    assert _compare._code(functools.partialmethod(lam, 1)) is code
    assert _compare._code(functools.partial(functools.partial(lam, 1), 2)) is code
    assert _compare._code(bool) is None and _compare._code(object.__eq__) is None


def test_the_child_finds_a_changed_file_under_its_real_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "calc.py").write_text("x = 1\n")
    (tmp_path / "calc").symlink_to("real")
    checker = _compare.Checker(str(tmp_path), {"real/calc.py": [1]}, lambda *_: None)
    assert checker._written(str(tmp_path / "calc" / "calc.py")) == ("real/calc.py", frozenset({1}))
    assert checker._written(str(tmp_path / "other.py")) == (None, ())


@pytest.mark.parametrize("case", sorted(CLASSES))
def test_bwrap_a_class_of_the_diffs_whose_eq_is_no_function_of_the_diffs_grades_tamper(
    helper_task, tmp_path, case
) -> None:
    task, grader = helper_task
    grade = grader.grade(task, diff(Path(task.repo_source), tmp_path / "hack", {"calc.py": CLASSES[case]}))
    assert grade.verdict == "tamper" and grade.reward == 0.0, grade
    assert any("E.__eq__ says yes" in reason for reason in grade.tamper), grade.tamper


@pytest.mark.parametrize("case", sorted(LINKED))
def test_bwrap_code_reached_through_a_link_is_the_diffs(helper_task, tmp_path, case) -> None:
    task, grader = helper_task
    files, links = LINKED[case]
    patch = diff(Path(task.repo_source), tmp_path / "hack", files, links=links, removed=["calc.py"])
    grade = grader.grade(task, patch)
    assert grade.verdict == "tamper" and grade.reward == 0.0, grade
    assert any("E.__eq__ says yes" in reason for reason in grade.tamper), grade.tamper


HONEST = """\
import dataclasses
import functools


def _same(a, b):
    return isinstance(b, Money) and a.cents == b.cents


@functools.total_ordering
class Money:
    def __init__(self, cents):
        self.cents = cents

    __eq__ = _same
    __hash__ = None

    def __lt__(self, other):
        return self.cents < other.cents


@dataclasses.dataclass
class Pair:
    a: int
    b: int


def add(a, b):
    return Money(a.cents + b.cents)


def pair(a, b):
    return Pair(a, b)
"""
HONEST_TESTS = """\
from calc import Money, add, pair


def test_add():
    assert add(Money(2), Money(3)) == Money(5)
    assert add(Money(2), Money(3)) >= Money(4)


def test_pair():
    assert pair(1, 2) == pair(1, 2)
"""


BASE = """\
class Money:
    def __init__(self, cents):
        self.cents = cents

    def __eq__(self, other):
        return self.cents == other.cents

    __hash__ = None


def add(a, b):
    return Money(a.cents - b.cents)
"""


def test_bwrap_honest_classes_the_fix_writes_with_foreign_methods_grade_resolved(tmp_path) -> None:
    """A fix that writes a class whose ``__eq__`` is a module function, orderings from
    ``functools.total_ordering``, and a dataclass (its ``__eq__`` made by ``exec``): each is
    asked, and none says yes to what it cannot have seen."""
    require_bwrap()
    f2p = ["tests/test_calc.py::test_add", "tests/test_calc.py::test_pair"]
    files = {"calc.py": BASE, "tests/test_calc.py": HONEST_TESTS}
    task, grader = validated_task(tmp_path, "honest", files, {"calc.py": HONEST}, f2p, [])
    grade = grader.grade(task, task.patch)
    assert grade.verdict == "resolved" and not grade.tamper, grade


def test_a_class_of_the_diffs_is_asked_for_a_wildcard_it_inherits(tmp_path: Path, monkeypatch) -> None:
    """``class E(Wild)``, written by the diff, where ``Wild`` is a class of the repository's whose
    ``__eq__`` says yes to anything: the repository's own ``Wild()`` is not asked, the diff's
    ``E()`` is."""
    import importlib  # noqa: PLC0415

    (tmp_path / "wild.py").write_text("class Wild:\n    def __eq__(self, other):\n        return True\n")
    (tmp_path / "calc_e.py").write_text("import wild\n\n\nclass E(wild.Wild):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    wild, calc = importlib.import_module("wild"), importlib.import_module("calc_e")
    told: list = []
    checker = _compare.Checker(str(tmp_path), {"calc_e.py": [4]}, lambda *claim: told.append(claim))
    checker.passed("==", wild.Wild(), 5)
    assert told == []
    checker.passed("==", calc.E(), 5)
    assert told and told[0][0].startswith("comparison: Wild.__eq__ says yes") and told[0][1] == "calc_e.py:4"
