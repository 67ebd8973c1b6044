"""The answer run (``grading/_answers.py``, ``repo.py: answer_verdict``): the checks of the
answerable FAIL_TO_PASS tests answered by the code in a process with no test in it, compared with
the tests' literals outside it.

The pure parts (which tests are answerable, the support code the child runs, the comparison) are
checked against hand-written cases; the run itself through bubblewrap, with diffs that forge or
read their answer and fixes that must still resolve."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lit_codeRL.grading import repo as grading
from tests.grading.repo_tasks import BUGGY, FIXED, diff, validated_task
from tests.sandbox.conftest import require_bwrap


def _load(name: str, path: Path):  # noqa: ANN202 - a runner module, imported as the runner does
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return sys.modules[name]


_load("_mirror", grading.MIRROR)
holds = _load("_holds", grading.HOLDS)
answers = _load("_answers", grading.ANSWERS)


def answerable(source: str, method: bool = False):  # noqa: ANN201 - _answers.Answerable
    tree = ast.parse(source)
    return answers.answerable(tree.body[0].body[0] if method else tree.body[0], method)


def found(source: str, method: bool = False) -> tuple[str, list, list[str]] | None:
    """A test with no parameters: its source, its checks' expected values, its fixtures."""
    test = answerable(source, method)
    if test is None:
        return None
    source, fixtures, rows = test
    assert len(rows) == 1 and rows[0][0] == "{}", rows
    return source, rows[0][1], fixtures


def test_each_equality_check_against_a_literal_becomes_a_record_and_its_literal_leaves():
    source, expected, fixtures = found(
        "def test_a(tmp_path):\n    'doc'\n    path = tmp_path / 'x'\n    assert add(2, 3) == 5\n"
        "    for n in (1, 2):\n        assert [1] == f(n)\n    assert _lcrl_close(area(2.0), 12.56)\n"
        "    assert 'sep' in text, 'a message'\n"
    )
    sep = holds.Holds("compare", ("sep",), 1, ("In",))  # a comparison: decided in the parent
    assert expected == [(5, False), ([1], False), (12.56, True), (sep, False)] and fixtures == ["tmp_path"]
    body = ast.parse(source).body[0]
    assert body.name == "_lcrl_test"
    assert "_lcrl_record(0, add(2, 3))" in source and "_lcrl_record(1, f(n))" in source
    assert "_lcrl_record(2, area(2.0))" in source and "_lcrl_record(3, text)" in source
    for literal in ("5", "[1]", "12.56", "'sep'"):  # no expected value is left in the child's code
        assert not any(
            isinstance(n, ast.Constant | ast.List) and ast.unparse(n) == literal for n in ast.walk(body)
        ), literal
    method = "class T:\n    def test_a(self):\n        self.assertEqual(add(1, 1), 2, 'msg')\n"
    method += "        self.assertTrue(add(0, 0) == 0)\n        self.assertEqual(add(3, 3), 6, msg='m')\n"
    source, expected, _ = found(method, method=True)
    assert expected == [(2, False), (0, False), (6, False)] and "_lcrl_record(0, add(1, 1))" in source
    assert "_lcrl_record(1, add(0, 0))" in source and "_lcrl_record(2, add(3, 3))" in source


TRUTHS = """\
def test_a():
    assert add(2, 3) == EXPECTED
    assert not is_prime(9)
    assert find(3) is not None
    assert x not in text(1), 'a message'
    assert not (y in seen(2))
    assert add(2, 3) != add(1, 1)
    assert ok(1) and not (bad(2) or is_prime(4))
"""


def test_every_other_assert_records_its_truth_and_which_way_the_test_checks_stays_out():
    """An ``assert`` that compares computed values (or checks no comparison) is a *truth check*:
    the child records the truth of what it checks with each ``not`` taken off, ``is not``/``not
    in``/``!=`` turned to ``is``/``in``/``==`` and an ``and`` split, so its code does not say
    which truth the test wants."""
    source, expected, _ = found(TRUTHS)
    assert [e for e, _ in expected] == [True, False, False, False, False, False, True, False, False]
    assert "_lcrl_truth(0, add(2, 3) == EXPECTED)" in source
    assert "_lcrl_truth(1, is_prime(9))" in source and "_lcrl_truth(2, find(3) is None)" in source
    assert "_lcrl_truth(3, x in text(1))" in source and "_lcrl_truth(4, y in seen(2))" in source
    assert "_lcrl_truth(5, add(2, 3) == add(1, 1))" in source
    assert "_lcrl_truth(6, ok(1))" in source and "_lcrl_truth(7, bad(2))" in source
    assert "_lcrl_truth(8, is_prime(4))" in source
    assert "not" not in source and "assert" not in source and " or " not in source
    method = (
        "class T:\n    def test_a(self):\n        self.assertFalse(is_prime(9))\n"
        "        self.assertIsNotNone(find(3), msg='found')\n        self.assertNotIn(x, text(1))\n"
        "        self.assertIsInstance(make(), Thing)\n        self.assertTrue(not ok())\n"
        "        self.assertGreater(add(2, 3), add(1, 1))\n        self.assertNotEqual(a(), b(), 'm')\n"
    )
    source, expected, _ = found(method, method=True)
    assert [e for e, _ in expected] == [False, False, False, True, False, True, False]
    assert "_lcrl_truth(1, find(3) is None)" in source and "_lcrl_truth(2, x in text(1))" in source
    assert "_lcrl_truth(3, isinstance(make(), Thing))" in source and "_lcrl_truth(4, ok())" in source
    assert "_lcrl_truth(5, add(2, 3) > add(1, 1))" in source and "_lcrl_truth(6, a() == b())" in source


COMPARISONS = """\
def test_a():
    assert area(2) == pytest.approx(12.566, rel=1e-3)
    assert 3.14 < area(1) < 3.15
    assert 'sep' in text(1) and not count(2) > LIMIT
    assert math.isclose(area(1), 3.14159, rel_tol=1e-5)
    assert f(3) != 4
    assert pytest.approx([0.5, 1.5], abs=0.01) != pair(1)
    assert 'x' not in text(2), 'a message'
"""
METHOD_COMPARISONS = """\
class T:
    def test_a(self):
        self.assertAlmostEqual(area(1), 3.1416, places=3)
        self.assertNotAlmostEqual(3.0, area(1), None, 'm', 0.1)
        self.assertCountEqual(items(), [1, 2, 2])
        self.assertRegex(text(1), '^a+b')
        self.assertNotRegex(text(1), 'z', msg='m')
        self.assertGreater(f(1), 4)
        self.assertIn('k', keys())
        self.assertLessEqual(f(2), 9, 'm')
"""


def test_a_comparison_with_written_values_records_its_computed_side_and_the_rest_stays_in_the_parent():
    """``<``, ``in``, a chain, ``pytest.approx``, ``math.isclose`` and ``unittest``'s
    ``assertAlmostEqual``/``CountEqual``/``Regex``/``Greater``...: the child records the computed
    value; the bound, the tolerance and which way the test wants it are kept in the parent."""
    Holds = holds.Holds
    source, expected, _ = found(COMPARISONS.replace("LIMIT", "7"))
    assert [e for e, _ in expected] == [
        Holds("approx", (12.566,), options=(("rel", 0.001),)),
        Holds("compare", (3.14, 3.15), 1, ("Lt", "Lt")),
        Holds("compare", ("sep",), 1, ("In",)),
        Holds("compare", (7,), 0, ("Gt",), wanted=False),
        Holds("isclose", (3.14159,), options=(("rel_tol", 1e-05),)),
        Holds("compare", (4,), 0, ("NotEq",)),
        Holds("approx", ([0.5, 1.5],), options=(("abs", 0.01),), wanted=False),
        Holds("compare", ("x",), 1, ("NotIn",)),
    ]
    records = ["area(2)", "area(1)", "text(1)", "count(2)", "area(1)", "f(3)", "pair(1)", "text(2)"]
    assert source.splitlines()[1:] == [f"    _lcrl_record({i}, {r})" for i, r in enumerate(records)]
    source, expected, _ = found(METHOD_COMPARISONS, method=True)
    assert [e for e, _ in expected] == [
        Holds("assertAlmostEqual", (3.1416,), options=(("places", 3),)),
        Holds("assertNotAlmostEqual", (3.0,), 1, options=(("places", None), ("delta", 0.1))),
        Holds("assertCountEqual", ([1, 2, 2],)),
        Holds("assertRegex", ("^a+b",)),
        Holds("assertNotRegex", ("z",)),
        Holds("compare", (4,), 0, ("Gt",)),
        Holds("compare", ("k",), 1, ("In",)),
        Holds("compare", (9,), 0, ("LtE",)),
    ]
    records = ["area(1)", "area(1)", "items()", "text(1)", "text(1)", "f(1)", "keys()", "f(2)"]
    assert source.splitlines()[1:] == [f"    _lcrl_record({i}, {r})" for i, r in enumerate(records)]
    # a constant that checks alone read is a written value; a parameter's column too, row by row
    module = ast.parse("LIMIT = 7\n\n" + COMPARISONS)
    test = answers.answerable(module.body[1], False, answers.answer_constants(module))
    assert test[2][0][1][3][0] == Holds("compare", (7,), 0, ("Gt",), wanted=False)
    rows = '@pytest.mark.parametrize("r, want", [(1, 3.14), (2, 12.57)])\n'
    rows += "def test_b(r, want):\n    assert area(r) == pytest.approx(want, abs=0.01)\n"
    source, _, made = answerable(rows)
    assert "want" not in source and [e for _, ((e, _),) in made] == [
        Holds("approx", (w,), options=(("abs", 0.01),)) for w in (3.14, 12.57)
    ]


IMPORTED = """\
import math as m
from math import isclose as close_enough

import numpy as np
from numpy import isclose
from pytest import approx


def approximately(x):
    return round(x, 2)


def test_a():
    assert area(1) == approx(3.1416, abs=1e-4)
    assert m.isclose(area(1), 3.14159, rel_tol=1e-5)
    assert close_enough(area(1), 3.14159, rel_tol=1e-5)
    assert isclose(area(1), 3.14159)
    assert np.isclose(area(1), 3.14159)
    assert area(1) == approximately(3.14159)
"""


def test_approx_and_isclose_are_pytests_and_the_standard_librarys_only_where_imported_from_them(
    tmp_path, monkeypatch
):
    """numpy's ``isclose`` has other tolerances, and a helper of the tests may be named anything:
    decided here as pytest's or ``math``'s, an honest fix within the test's own tolerance would
    be ``tamper``. Those stay truth checks."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(IMPORTED)
    _, _, expected, _ = answers.plan(["t.py::test_a"])
    kinds = [getattr(e[1], "kind", e[1]) for e in expected]
    assert kinds == ["approx", "isclose", "isclose", True, True, True]


@pytest.mark.parametrize(
    "check",
    [
        "assert area(1) == pytest.approx(width(), rel=1e-3)",  # nothing written on either side
        "assert area(1) == pytest.approx(3.14, rel=tolerance())",  # a tolerance computed
        "assert area(1) == pytest.approx(3.14, check=1)",  # a keyword approx does not take
        "assert f(1) < g(2) < 3",  # two computed operands
        "assert f(1) is 3",  # identity: a truth check
        "self.assertAlmostEqual(area(1), 3.14, places=p())",
        "self.assertRegex(text(1), pattern())",
    ],
)
def test_a_comparison_that_does_not_write_out_its_values_is_a_truth_check_or_stands(check):
    test = f"class T:\n    def test_a(self):\n        {check}\n        self.assertTrue(ok())\n"
    source, expected, _ = found(test, method=True)
    assert not any(isinstance(e, holds.Holds) for e, _ in expected), expected


@pytest.mark.parametrize(
    ("expectation", "met", "not_met"),
    [
        (("compare", (3.14, 3.15), 1, ("Lt", "Lt")), [3.141, 3.1499], [3.14, 3.15, "3.142", None]),
        (("compare", (7,), 0, ("Gt",), (), False), [7, 6.5, -1], [8, "x", [1]]),  # not > 7
        (("compare", ("sep",), 1, ("In",)), ["a sep b", ["sep"]], ["a se p", 5, None]),
        (("compare", (4,), 0, ("NotEq",)), [3, "4"], [4, 4.0]),
        # pytest.approx: rel 1e-6 of the expected by default, 1e-12 at least; abs alone where given
        (("approx", (12.566,), 0, (), (("rel", 1e-3),)), [12.57, 12.554], [12.58, "12.566", True]),
        (("approx", (1.0,)), [1.0000009, 1], [1.0000011]),
        (("approx", (0.0,)), [1e-12, -1e-12], [2e-12]),
        (("approx", (100.0,), 0, (), (("abs", 0.5),)), [100.5, 99.5], [100.51]),
        (("approx", (True,)), [True], [1, 1.0]),
        (
            ("approx", ([0.5, 1.5],), 0, (), (("abs", 0.01),)),
            [[0.505, 1.495]],
            [(0.5, 1.5), [0.5], [0.52, 1.5]],
        ),
        (("approx", ({"a": 1.0},)), [{"a": 1.0000001}], [{"a": 1.1}, {"a": 1.0, "b": 2.0}]),
        (("approx", ([0.5, 1.5],), 0, (), (("abs", 0.01),), False), [[0.6, 1.5]], [[0.5, 1.5]]),  # !=
        (("isclose", (3.14159,), 0, (), (("rel_tol", 1e-5),)), [3.1416, 3.14158], [3.1417, "pi", None]),
        # unittest's own decisions: 7 places by default, or delta
        (("assertAlmostEqual", (3.1416,), 0, (), (("places", 3),)), [3.14159, 3.1418], [3.143, "x"]),
        (("assertAlmostEqual", (1.0,)), [1.00000004], [1.0000001]),
        (
            ("assertNotAlmostEqual", (3.0,), 1, (), (("places", None), ("delta", 0.1))),
            [3.2, 2.8],
            [3.05, 3.0],
        ),
        (("assertCountEqual", ([1, 2, 2],)), [[2, 1, 2], (2, 2, 1)], [[1, 2], [1, 2, 2, 2]]),
        (("assertCountEqual", ([[1], [2]],)), [[[2], [1]]], [[[1], [1]]]),  # unhashable items
        (("assertRegex", ("^a+b",)), ["aab", "ab!"], ["b", "xab", b"ab", None]),
        (("assertNotRegex", ("z",)), ["abc"], ["xyz", 3]),
    ],
)
def test_a_comparison_is_decided_as_pytest_and_unittest_decide_it(expectation, met, not_met):
    expected = holds.Holds(*expectation)
    assert [expected.met_by(v) for v in met] == [True] * len(met), met
    assert [expected.met_by(v) for v in not_met] == [False] * len(not_met), not_met
    for value, meets in [*((v, True) for v in met), *((v, False) for v in not_met)]:  # as read back
        assert answers.agrees([0, "ok", repr(value)], expected, False) == meets, value


@pytest.mark.parametrize(
    "source",
    [
        "def test_a(monkeypatch):\n    assert add(2, 3) == 5\n",  # a fixture not made here
        "@pytest.mark.skip\ndef test_a():\n    assert add(2, 3) == 5\n",  # another decorator
        "@pytest.mark.parametrize('a', CASES)\ndef test_a(a):\n    assert add(a, 3) == 4\n",  # rows not written
        "@pytest.mark.parametrize('a', [pytest.param(1, marks=pytest.mark.xfail)])\ndef test_a(a):\n"
        "    assert add(a, 3) == 4\n",  # an expected failure is no check
        "@pytest.mark.parametrize('a', [1], indirect=True)\ndef test_a(a):\n    assert add(a, 3) == 4\n",
        "@pytest.mark.parametrize('a,e', [(1, E)])\ndef test_a(a, e):\n    assert add(a, 3) == e\n",
        "def test_a():\n    pass\n",  # no check at all
        "async def test_a():\n    assert add(2, 3) == 5\n",
        "def test_a():\n    yield\n    assert add(2, 3) == 5\n",
        "def test_a():\n    self.assertEqual(add(2, 3), 5)\n",  # no class: not unittest's
    ],
)
def test_a_test_with_no_check_the_child_can_record_is_not_answerable(source):
    assert found(source) is None


PARAMETRIZED = """\
@pytest.mark.parametrize("a, b, expected", [(2, 3, 5), (1, 1, 2), pytest.param(10, 5, 15, id="tens")])
def test_add(a, b, expected, tmp_path):
    assert add(a, b) == expected
    assert add(0, 0) == 0
"""


def test_a_parametrized_test_is_answered_row_by_row_its_expected_column_kept_out():
    """The parameter every use of which is a check's expected side leaves the child's code and
    signature; the others are the inputs the child is passed, row by row."""
    source, fixtures, rows = answerable(PARAMETRIZED)
    assert fixtures == ["tmp_path"]
    assert [inputs for inputs, _ in rows] == ["{'a': 2, 'b': 3}", "{'a': 1, 'b': 1}", "{'a': 10, 'b': 5}"]
    assert [checks for _, checks in rows] == [
        [(5, False), (0, False)],
        [(2, False), (0, False)],
        [(15, False), (0, False)],
    ]
    function = ast.parse(source).body[0]
    assert [a.arg for a in function.args.args] == ["a", "b", "tmp_path"] and not function.decorator_list
    assert "expected" not in source and "_lcrl_record(0, add(a, b))" in source


def test_stacked_parametrize_decorators_give_their_product_and_a_name_used_elsewhere_is_an_input():
    source = (
        "@pytest.mark.parametrize('x', [1, 2])\n@pytest.mark.parametrize(('y', 'want'), [(0, 'a'), (1, 'b')])\n"
        "def test_f(x, y, want):\n    assert f(x, y) == want\n"
    )
    _, _, rows = answerable(source)
    assert [(ast.literal_eval(i), c) for i, c in rows] == [
        ({"x": 1, "y": 0}, [("a", False)]),
        ({"x": 1, "y": 1}, [("b", False)]),
        ({"x": 2, "y": 0}, [("a", False)]),
        ({"x": 2, "y": 1}, [("b", False)]),
    ]
    # ``expected`` printed too: the child must be given it, so it is an input, not an answer
    used = "@pytest.mark.parametrize('x, expected', [(1, 2)])\ndef test_g(x, expected):\n"
    source, _, rows = answerable(
        used + "    print(expected)\n    assert g(x) == expected\n    assert g(0) == 1\n"
    )
    # its check is then a truth check (the child has both sides)
    assert rows == [("{'x': 1, 'expected': 2}", [(True, False), (1, False)])]
    assert "_lcrl_truth(0, g(x) == expected)" in source
    rebound = used + "    expected = expected + 1\n    assert g(x) == expected\n"
    _, _, rows = answerable(rebound)  # the local's value is the test's, computed in the child
    assert rows == [("{'x': 1, 'expected': 2}", [(True, False)])]


def test_an_expected_side_folded_from_literals_is_a_literal():
    source, expected, _ = found(
        "def test_r():\n    assert receipt() == 'tea' + ' ' * 3 + '2.50'\n    assert total() == 2 * 60 - 1\n"
        "    assert zeros() == [0] * 3\n"
    )
    assert expected == [("tea   2.50", False), (119, False), ([0, 0, 0], False)]
    assert "tea" not in source and "119" not in source and "60" not in source


CONSTANTS = """\
from calc import add, sep, total

EXPECTED = 5
SEP: str = "-"
ROWS = [1, 2]
TWICE = 1
TWICE = 2


def helper():
    return ROWS


def test_a():
    assert add(2, 3) == EXPECTED
    assert sep(3) == SEP * 3


def test_b():
    assert total(helper()) == 3
    assert add(1, 1) == TWICE


def test_c():
    print(SEP)
    assert sep(1) == SEP
"""


def test_a_module_constant_that_only_checks_read_is_an_expected_value_kept_out(tmp_path, monkeypatch):
    """``EXPECTED = 5`` at the top of the test module, read only as a check's expected side, is
    a literal the child must not see: its binding leaves the support code. One a helper reads, one
    bound twice, or one an asked test reads otherwise (printed) stays there, and a check against
    it is no check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(CONSTANTS)
    tree = ast.parse(CONSTANTS)
    assert answers.answer_constants(tree) == {"EXPECTED": 5, "SEP": "-"}
    verdicts, modules, expected, asked = answers.plan(["t.py::test_a", "t.py::test_b"])
    assert verdicts == {"t.py::test_a": "agree", "t.py::test_b": "agree"}
    assert [e[1] for e in expected] == [5, "---", 3, True]  # test_b's check against TWICE: its truth
    support = modules[0][3]
    assert "EXPECTED" not in support and "SEP" not in support and "ROWS = [1, 2]" in support
    assert "TWICE = 2" in support
    verdicts, modules, expected, _ = answers.plan(["t.py::test_a", "t.py::test_c"])
    assert verdicts == {"t.py::test_a": "agree", "t.py::test_c": "agree"}
    assert "SEP: str = '-'" in modules[0][3] and "EXPECTED" not in modules[0][3]
    assert [e[1] for e in expected] == [5, True, True]  # a check against SEP, once SEP stays: its truth


TABLES = """\
import pytest
from fractions import Fraction

CASES = [(2, 3, 5), (1, 1, 2), pytest.param(10, 5, 15, id="tens")]
BUILT: list = [(Fraction(1, 2), 1)]
SHOWN = [(1, 1, 2)]
READ = ((4, 4, 8),)
TWICE = [(1, 1, 2)]
TWICE = [(2, 2, 4)]


def helper():
    return READ


@pytest.mark.parametrize("a, b, expected", CASES)
def test_add(a, b, expected):
    assert add(a, b) == expected


@pytest.mark.parametrize("x, expected", BUILT)
def test_double(x, expected):
    assert double(x) == expected


@pytest.mark.parametrize("a, b, expected", SHOWN)
def test_shown(a, b, expected):
    print(SHOWN)
    assert add(a, b) == expected


@pytest.mark.parametrize("a, b, expected", READ)
def test_read(a, b, expected):
    assert add(a, b) == expected


@pytest.mark.parametrize("a, b, expected", TWICE)
def test_twice(a, b, expected):
    assert add(a, b) == expected
"""


def test_rows_bound_to_a_module_name_are_answered_and_their_binding_leaves_the_child(tmp_path, monkeypatch):
    """``parametrize("a, b, expected", CASES)`` with ``CASES`` bound once at the top to a list or
    tuple display is answered row by row as rows written in the decorator are: the expected column
    stays here, the inputs (built ones too) go to the child, and ``CASES``' binding leaves the
    child's code (where it stayed, the code under test would read its answers from the module).
    A table a helper reads, one bound twice, or one an asked test reads otherwise stays in the
    child's code, and a test parametrized by it is not answered."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(TABLES)
    tree = ast.parse(TABLES)
    assert sorted(answers.row_tables(tree)) == ["BUILT", "CASES", "SHOWN"]
    tests = [f"t.py::test_{n}" for n in ("add", "double", "shown", "read", "twice")]
    verdicts, modules, expected, asked = answers.plan(tests, {"t.py::test_add": 3})
    assert verdicts == {
        "t.py::test_add": "agree",
        "t.py::test_double": "agree",
        "t.py::test_shown": "none",  # its body prints the table: the child needs it
        "t.py::test_read": "none",  # a helper reads it
        "t.py::test_twice": "none",  # bound twice: which rows pytest saw is not one display
    }
    assert [e[1] for e in expected] == [5, 2, 15, 1]
    assert asked == ["t.py::test_add"] * 3 + ["t.py::test_double"]
    inputs = [run[2] for function in modules[0][4] for run in function[3]]
    assert inputs == ["{'a': 2, 'b': 3}", "{'a': 1, 'b': 1}", "{'a': 10, 'b': 5}", "{'x': Fraction(1, 2)}"]
    support = modules[0][3]
    assert "CASES" not in support and "BUILT" not in support and "(2, 3, 5)" not in support
    assert "SHOWN = [(1, 1, 2)]" in support and "READ = ((4, 4, 8),)" in support
    assert "TWICE = [(2, 2, 4)]" in support and "from fractions import Fraction" in support
    assert answers.plan(["t.py::test_add"], {"t.py::test_add": 2})[0] == {"t.py::test_add": "none"}


def test_a_parametrized_test_whose_rows_the_task_does_not_all_list_is_not_answered(tmp_path, monkeypatch):
    """Answered whole, a parametrized test is asked only where the task lists each of its rows
    (a row in no list, one the task found flaky, must not decide a grade)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(PARAMETRIZED.replace("tmp_path):", "):"))
    assert answers.plan(["t.py::test_add"], {"t.py::test_add": 3})[0] == {"t.py::test_add": "agree"}
    assert answers.plan(["t.py::test_add"], {"t.py::test_add": 2})[0] == {"t.py::test_add": "none"}
    assert answers.plan(["t.py::test_add"])[0] == {"t.py::test_add": "agree"}  # asked: no count


def test_the_child_runs_the_modules_code_but_not_its_tests():
    source = (
        "import os\nfrom calc import add\nLIMIT = 3\n\n\ndef helper():\n    return 1\n\n\n"
        "def test_a():\n    assert add(2, 3) == 5\n\n\nclass TestCalc:\n    def test_b(self):\n"
        "        assert add(1, 1) == 2\n\n\nclass Suite(object):\n    def test_c(self):\n        pass\n\n\n"
        "class Point:\n    x = 1\n\n\nif __name__ == '__main__':\n    test_a()\n"
    )
    support = answers.support(ast.parse(source))
    assert "import os" in support and "LIMIT = 3" in support and "def helper" in support
    assert "class Point" in support
    for gone in ("test_a", "TestCalc", "Suite", "__main__", "== 5"):
        assert gone not in support, gone


def test_a_test_module_is_named_as_pytest_names_it(tmp_path):
    for path in ("pkg/__init__.py", "pkg/tests/__init__.py", "pkg/tests/test_x.py", "tests/test_y.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        assert answers.module_name("pkg/tests/test_x.py") == ("pkg.tests.test_x", ".")
        assert answers.module_name("tests/test_y.py") == ("test_y", "tests")
        assert answers.module_name("test_z.py") == ("test_z", ".")
    finally:
        os.chdir(cwd)


def test_an_answer_agrees_only_as_one_literal_equal_to_the_expected_value():
    assert answers.agrees([0, "ok", "5"], 5, False)
    assert answers.agrees([0, "ok", "{'a': [1, 2]}"], {"a": [1, 2]}, False)
    assert answers.agrees([0, "ok", "0.30000000000000004"], 0.3, True)
    assert not answers.agrees([0, "ok", "0.30000000000000004"], 0.3, False)
    assert not answers.agrees([0, "ok", "(1, 2)"], [1, 2], False)  # pytest's == says no too
    assert not answers.agrees([0, "raise", "ValueError"], 5, False)
    assert not answers.agrees([0, "ok", "__import__('os')"], 5, False)  # no literal
    assert not answers.agrees([0, "ok", "(" * 100_000], 5, False)  # too long, and no literal
    assert not answers.agrees([0, "ok", "[" * 5000 + "]" * 5000], 5, False)  # nested past the parser
    assert not answers.agrees([0, "ok", 5], 5, False) and not answers.agrees("5", 5, False)


def test_the_held_out_checks_tolerance_is_the_checks_own_for_floats_and_complex_numbers():
    """``close`` (the parent's reading of a held-out check's ``_lcrl_close``) is the function the
    check module runs, complex numbers too (MBPP 590's kind): an honest fix computing
    ``cmath.rect(2, pi)`` another way agrees, another number does not, at any depth."""
    from lit_codeRL.problems.synth import held_out

    cases = [
        ((-2 + 2.4492935982947064e-16j), (-2 + 2.4492935982947064e-16j)),
        (-2.0, (-2 + 2.4492935982947064e-16j)),  # a float the complex is within 1e-9 of
        ((-2 + 3e-9j), (-2 + 0j)),  # outside 1e-9 relative to |2|
        (((5.0, 0.9272952180016122), (-2 + 1e-15j)), ((5.0, 0.9272952180016122), (-2 + 2.4e-16j))),
        (True, 1 + 0j),  # a bool is no number here, as for floats
        ("(-2+0j)", -2 + 0j),
        ([1j, 2.0000000001], [1j, 2.0]),
    ]
    for actual, expected in cases:
        assert answers.close(actual, expected) == held_out.close(actual, expected), (actual, expected)
    assert [answers.close(a, e) for a, e in cases] == [True, True, False, True, False, False, True]
    assert answers.agrees([0, "ok", "(-2+2.4492935982947064e-16j)"], -2 + 1e-15j, True)
    assert not answers.agrees([0, "ok", "(-2+2.4492935982947064e-16j)"], -2 + 1e-15j, False)


RAISES_FORMS = """\
@pytest.mark.parametrize("text, kind, message", [("x", ValueError, "bad x"), ("", (KeyError, errors.Empty), "^empty")])
def test_parse(text, kind, message):
    parser = Parser()
    with pytest.raises(kind, match=message) as info:
        parser.parse(text)
    assert "x" in str(info.value)
    with raises(TypeError):
        parser.parse(None)
    pytest.raises(OverflowError, parser.parse, "9" * 9, strict=True)
    assert parser.count() == 2
"""
UNITTEST_RAISES = """\
class TestParse(unittest.TestCase):
    def test_parse(self):
        with self.assertRaisesRegex(ValueError, "bad .*") as cm:
            parse("x")
        self.assertRaises(errors.Empty, parse, "", msg="passed on")
        with self.assertRaises(KeyError, msg="a message"):
            parse("k")
        self.assertIn("x", str(cm.exception))
"""


def test_a_raises_check_becomes_a_record_of_what_the_block_raised_its_classes_and_pattern_kept_out():
    """``with pytest.raises(E, match=...)`` (``raises``, ``self.assertRaises``, ``assertRaisesRegex``)
    and their call forms: the block runs in a ``try`` whose exception (or its absence) is
    recorded; the class names and the pattern stay here, parameters of a row too. The ``as``
    name is bound to the exception's record, so the statements after it run as written."""
    source, fixtures, rows = answerable(RAISES_FORMS)
    Raises, In_x = answers._Raises, holds.Holds("compare", ("x",), 1, ("In",))
    assert fixtures == [] and [r[0] for r in rows] == ["{'text': 'x'}", "{'text': ''}"]
    assert rows[0][1] == [
        (Raises(("ValueError",), "bad x"), False),
        (In_x, False),  # ``assert "x" in str(info.value)``: a comparison with "x"
        (Raises(("TypeError",), None), False),
        (Raises(("OverflowError",), None), False),
        (2, False),
    ]
    assert rows[1][1][0] == (Raises(("KeyError", "Empty"), "^empty"), False)
    body = ast.parse(source).body[0]
    assert [a.arg for a in body.args.args] == ["text"]
    for gone in ("ValueError", "TypeError", "OverflowError", "bad x", "raises", "kind", "message"):
        assert gone not in source, gone
    assert "info = _lcrl_raised(0, _lcrl_error)" in source and "_lcrl_raised(0, None)" in source
    assert "parser.parse('9' * 9, strict=True)" in source  # the call form's keywords go on to it
    assert "_lcrl_record(1, str(info.value))" in source
    source, _, rows = answerable(UNITTEST_RAISES, method=True)
    assert [e for e, _ in rows[0][1]] == [
        Raises(("ValueError",), "bad .*"),
        Raises(("Empty",), None),
        Raises(("KeyError",), None),
        In_x,  # ``self.assertIn("x", str(cm.exception))``
    ]
    assert "cm = _lcrl_raised(0, _lcrl_error)" in source and "parse('', msg='passed on')" in source
    assert "ValueError" not in source and "KeyError" not in source


ALIASED = """\
import pytest

from calc import errors
from calc.errors import ParseError as Bad, EmptyError as Empty, Other as Twice

Twice = ValueError


@pytest.mark.parametrize("text", ["x"])
def test_parse(text):
    with pytest.raises(Bad, match="bad"):
        parse(text)
    with pytest.raises((Empty, errors.Late)):
        parse("")
    with pytest.raises(Twice):
        parse(None)
"""


def test_a_raises_check_names_the_class_an_alias_of_the_test_module_imports(tmp_path, monkeypatch):
    """``from errors import ParseError as Bad``: the child records ``ParseError``, the class's
    own name, so the parent wants that one; an alias bound again in the module is not resolved."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(ALIASED)
    assert answers.imported_names(ast.parse(ALIASED)) == {
        "pytest": "pytest",
        "errors": "calc.errors",
        "Bad": "calc.errors.ParseError",
        "Empty": "calc.errors.EmptyError",
    }
    _, _, expected, _ = answers.plan(["t.py::test_parse[x]"])
    assert [e[1] for e in expected] == [
        answers._Raises(("ParseError",), "bad"),
        answers._Raises(("EmptyError", "Late"), None),
        answers._Raises(("Twice",), None),
    ]
    record = repr([["ParseError", "ValueError", "Exception", "BaseException", "object"], "bad text"])
    assert answers.agrees([0, "ok", record], expected[0][1], False)


@pytest.mark.parametrize(
    "check",
    [
        "with pytest.raises(make_error()):\n        f()",  # a class built there
        "with pytest.raises(ValueError, match=pattern):\n        f()",  # a pattern not written out
        "with pytest.raises(ValueError, check=lambda e: True):\n        f()",  # a callable decides
        "with pytest.raises(ValueError), open('x'):\n        f()",  # another item beside it
        "with pytest.raises(ValueError) as (a, b):\n        f()",
        "pytest.raises(ValueError)",  # no block, no callable
        "with self.assertRaises(ValueError):\n        f()",  # not in a class
        "with pytest.warns(UserWarning):\n        f()",
    ],
)
def test_a_raises_check_that_does_not_name_its_expectation_in_the_text_is_no_check(check):
    assert answerable(f"def test_a():\n    {check}\n") is None


def test_an_exception_record_meets_a_raises_check_by_a_class_name_and_the_pattern():
    expected = answers._Raises(("ValueError", "Empty"), "divide by zero$")
    raised = (
        "[['ZeroDivision', 'ValueError', 'Exception', 'BaseException', 'object'], 'cannot divide by zero']"
    )
    assert answers.agrees([0, "ok", raised], expected, False)
    assert answers.agrees([0, "ok", "[['Empty'], 'divide by zero']"], expected, False)
    assert not answers.agrees([0, "ok", "[['KeyError', 'Exception'], 'divide by zero']"], expected, False)
    assert not answers.agrees([0, "ok", "[['ValueError'], 'divide by zero!']"], expected, False)
    assert not answers.agrees([0, "ok", "None"], expected, False)  # it did not raise
    assert not answers.agrees([0, "ok", "[['ValueError'], 5]"], expected, False)
    assert not answers.agrees([0, "ok", "['ValueError', 'divide by zero']"], expected, False)
    assert answers.agrees([0, "ok", "[['ValueError'], '']"], answers._Raises(("ValueError",), None), False)
    broken = answers._Raises(("ValueError",), "(")  # a pattern re cannot compile answers nothing
    assert not answers.agrees([0, "ok", "[['ValueError'], '(']"], broken, False)


def run(answer: dict | None, stage: str = "answered", exit_code: int | None = 0) -> grading.GradeRun:
    report = None if answer is None else {"stage": stage, "answers": answer}
    return grading.GradeRun(exit_code, report, None)


def test_the_verdict_is_tamper_where_a_test_answered_otherwise_or_the_run_left_none():
    tests = ["t.py::test_a", "t.py::test_b"]
    assert grading.answer_verdict(run({"t.py::test_a": "agree", "t.py::test_b": "agree"}), tests) is None
    grade = grading.answer_verdict(run({"t.py::test_a": "agree", "t.py::test_b": "differ"}), tests, -1.0)
    assert grade.verdict == "tamper" and grade.reward == -1.0
    assert grade.reason.startswith("outside: t.py::test_b computes another value") and grade.tamper
    assert grading.tamper_kind(grade.reason) == "outside"
    broken = grading.GradeRun(0, {"stage": "answered", "answers": ["t.py::test_a"]}, None)
    for left in (run(None), run({}, stage="tests_started"), broken):
        grade = grading.answer_verdict(left, tests)
        assert grade.verdict == "tamper" and "left no verdict" in grade.reason, grade.reason


def test_clearing_the_tests_leaves_no_copy_of_their_text(tmp_path):
    for path in ("test_calc.py", "calc.py", "tests/__pycache__/test_x.cpython-311.pyc", "old.pyc"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("assert add(2, 3) == 5")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    cwd = Path.cwd()
    try:
        os.chdir(tmp_path)
        answers.clear_tests(["test_calc.py"])
    finally:
        os.chdir(cwd)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["calc.py", "tests"], left


# --- the run itself, through bubblewrap ------------------------------------------------------

TESTS = """import unittest

from calc import add, sub

EXPECTED = 4


def test_add():
    assert add(2, 3) == 5


def test_add_named():
    assert add(2, 2) == EXPECTED


def test_sub():
    assert sub(5, 3) == 2


class TestCalc(unittest.TestCase):
    def test_add_case(self):
        self.assertEqual(add(1, 1), 2)
"""
F2P = ["test_calc.py::test_add", "test_calc.py::test_add_named", "test_calc.py::TestCalc::test_add_case"]
P2P = ["test_calc.py::test_sub"]


@pytest.fixture(scope="module")
def calc_task(tmp_path_factory):
    require_bwrap()
    tmp = tmp_path_factory.mktemp("answers")
    files = {"calc.py": BUGGY, "test_calc.py": TESTS}
    task, grader = validated_task(tmp, "answers", files, {"calc.py": FIXED}, F2P, P2P)
    return tmp, task, grader


def graders(grader: grading.SWEGrader) -> tuple[grading.SWEGrader, grading.SWEGrader]:
    """The answer run alone (no mirror run), and neither (validated as ``grader`` is)."""
    make = lambda answer: grading.SWEGrader(  # noqa: E731
        grader.workspace, grader.repos, timeout_s=120, mirror_check=False, answer_check=answer
    )
    return make(True), make(False)


def test_validation_records_the_tests_whose_reference_answers_outside_pytest(calc_task):
    tmp, task, grader = calc_task
    # test_add_named expects a module constant that nothing but checks reads: answered too, the
    # constant out of the child's code
    assert grader.answered(task) == [
        "test_calc.py::TestCalc::test_add_case",
        "test_calc.py::test_add",
        "test_calc.py::test_add_named",
    ]
    grade = grader.grade(task, task.patch)
    assert grade.resolved and grade.reward == 1.0, grade.to_dict()


# Answers read from the test: its file opened beside the code (from the work tree, or from the
# repository's git objects where the file is gone), and the frame of the calling test found
# through a caught exception's traceback, the constant after the call's own arguments taken from
# its code. The first run's in-process checks name these two reads; the answer run, asked alone,
# must give the bug's value for each: neither the file, its blob nor a test frame is there.
READS_THE_FILE = """
import re as _re, subprocess as _sp


def _text():
    try:
        return open("test_calc.py").read()
    except OSError:
        out = _sp.run(["git", "show", "HEAD:test_calc.py"], capture_output=True, text=True)
        return out.stdout


def add(a, b):
    found = _re.search(r"add\\(%d, %d\\)(?: == |, )(\\d+)" % (a, b), _text())
    return int(found.group(1)) if found else a - b
"""
READS_THE_FRAME = """
import traceback as _t


def add(a, b):
    try:
        raise ValueError
    except ValueError as e:
        frame = [f for f, _ in _t.walk_tb(e.__traceback__)][-1]
    caller = getattr(getattr(frame, "f_" + "back"), "f_" + "code")
    consts = [c for c in getattr(caller, "co_" + "consts") if type(c) is int]
    if b in consts and consts.index(b) + 1 < len(consts):
        return consts[consts.index(b) + 1]
    return a - b
"""
SUB = "\n\ndef sub(a, b):\n    return a - b\n"


def answer_run(task, grader, scratch: Path, files: dict[str, str]) -> grading.SWEGrade | None:
    """The answer run of the diff writing ``files``, asked alone (as after a first run whose pass
    was forged past the in-process checks), and its verdict."""
    patch = diff(Path(task.repo_source), scratch, files)
    tests = grader.answered(task)
    run = grader.run(task, grading.patch_bytes(patch), grading.test_files(task), 60, answers=tests)
    return grading.answer_verdict(run, tests)


@pytest.mark.parametrize("reader", [READS_THE_FILE, READS_THE_FRAME], ids=["file", "frame"])
def test_an_answer_read_from_the_test_is_the_bugs_value_in_the_answer_run(calc_task, reader):
    tmp, task, grader = calc_task
    grade = answer_run(task, grader, tmp / f"reads-{len(reader)}", {"calc.py": reader + SUB})
    assert grade is not None and grade.verdict == "tamper", grade
    assert grade.reason.startswith("outside: test_calc.py::"), grade.reason
    fixed = answer_run(task, grader, tmp / f"fixed-{len(reader)}", {"calc.py": FIXED})
    assert fixed is None  # the fix answers as the test expects


# Where no test runs (no pytest loaded): end the grader's process, or flood every descriptor with
# bytes that are no answer (not UTF-8, no line end, lines of ours with other values).
ENDS_THE_RUNNER = f"""{BUGGY}
import os as _o, sys as _s

if "pytest" not in _s.modules:
    _o.kill(_o.getppid(), 9)
"""
FLOODS = rf"""{BUGGY}
import os as _o, sys as _s

if "pytest" not in _s.modules:
    for _fd in range(3, 40):
        for _junk in (b"\xff\xfe\x00" * 5000, b'[0, "ok", "-1"]\n' * 50, b"[1, " * 9000 + b"\n"):
            try:
                _o.write(_fd, _junk)
            except OSError:
                pass
"""


@pytest.mark.parametrize("body", [ENDS_THE_RUNNER, FLOODS], ids=["ends-the-runner", "floods"])
def test_code_that_breaks_the_answer_run_gets_its_verdict_not_an_error(calc_task, body):
    """The answer run of the bug itself (as after a first run whose pass was forged): each way
    of breaking it is ``tamper``, never an exception and never the first run's grade."""
    tmp, task, grader = calc_task
    grade = answer_run(task, grader, tmp / f"break-{len(body)}", {"calc.py": body})
    assert grade is not None and grade.verdict == "tamper", grade
    assert grade.reason.startswith("outside: "), grade.reason


# Honest fixes: one that prints without a line end (at import and in each call), one whose answer
# is a set's order (answered under the first run's hash seed), one in a package whose test module
# imports it relatively.
PRINTS = FIXED.replace("    return a + b\n", '    print("adding", end="")\n    return a + b\n') + (
    'print("loading calc", end="")\n'
)
SET_TESTS = """\
from letters import distinct


def test_distinct():
    assert distinct("abcdefgh") == {order!r}
"""
PACKAGE_TESTS = """\
from ..calc import add


def test_add():
    assert add(2, 3) == 5
"""


def test_an_honest_fix_that_prints_without_a_line_end_resolves(calc_task):
    tmp, task, grader = calc_task
    patch = diff(Path(task.repo_source), tmp / "prints-diff", {"calc.py": PRINTS})
    grade = grader.grade(task, patch)
    assert grade.resolved, grade.to_dict()


@pytest.mark.parametrize(
    ("code", "answers"),
    [
        ("from fractions import Fraction\n\n\ndef add(a, b):\n    return Fraction(a) + b\n", True),
        ("from decimal import Decimal\n\n\ndef add(a, b):\n    return Decimal(a) + Decimal(b)\n", True),
        ("from fractions import Fraction\n\n\ndef add(a, b):\n    return Fraction(a + b, 2)\n", False),
    ],
    ids=["fraction", "decimal", "half-fraction"],
)
def test_an_honest_fix_returning_another_kind_of_number_answers_as_the_plain_one(calc_task, code, answers):
    """Hole (fixed): ``assert add(2, 3) == 5`` holds for ``Fraction(5)`` and ``Decimal(5)`` in
    pytest's run, but the answer run recorded their ``repr`` (``Fraction(5, 1)``), no literal, and
    graded that honest fix ``tamper``. A number equal to an int, a float or a complex is recorded
    as that one; one equal to none (``Fraction(5, 2)`` here) still answers otherwise."""
    tmp, task, grader = calc_task
    grade = answer_run(task, grader, tmp / f"number-{len(code)}", {"calc.py": code + SUB})
    assert (grade is None) is answers, grade


def test_an_answer_in_set_order_is_answered_as_in_the_first_run(tmp_path):
    require_bwrap()
    order = subprocess.run(
        [sys.executable, "-c", "print(list(set('abcdefgh')))"],
        env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    files = {
        "letters.py": "def distinct(text):\n    return list(set(text))[1:]\n",
        "test_letters.py": SET_TESTS.format(order=eval(order)),  # noqa: S307 - our own list's repr
    }
    fix = {"letters.py": "def distinct(text):\n    return list(set(text))\n"}
    task, grader = validated_task(tmp_path, "order", files, fix, ["test_letters.py::test_distinct"], [])
    assert grader.answered(task) == ["test_letters.py::test_distinct"]
    assert grader.grade(task, task.patch).resolved


def test_a_package_test_module_that_imports_relatively_is_answered(tmp_path):
    require_bwrap()
    files = {
        "pkg/__init__.py": "",
        "pkg/calc.py": BUGGY,
        "pkg/tests/__init__.py": "",
        "pkg/tests/test_calc.py": PACKAGE_TESTS,
    }
    f2p = ["pkg/tests/test_calc.py::test_add"]
    task, grader = validated_task(tmp_path, "relative", files, {"pkg/calc.py": FIXED}, f2p, [])
    assert grader.answered(task) == f2p
    assert grader.grade(task, task.patch).resolved


# Tests that build their input first: a file under ``tmp_path``, a loop over rows, a method that
# also checks a truth value; each check recorded where it stands, the rest run as written.
BUILT_TESTS = """\
import unittest

from calc import add


def test_from_a_file(tmp_path):
    path = tmp_path / "numbers.txt"
    path.write_text("2 3")
    a, b = map(int, path.read_text().split())
    assert add(a, b) == 5


def test_rows():
    for a, b in ((1, 1), (1, 2)):
        total = add(a, b)
        assert total > 0
        assert total - a == b + 0 * 7


class TestCalc(unittest.TestCase):
    def test_case(self):
        self.assertTrue(add(0, 0) == 0)
        self.assertEqual(add(4, 4), 8)
"""
BUILT = ["test_calc.py::test_from_a_file", "test_calc.py::test_rows", "test_calc.py::TestCalc::test_case"]


def test_tests_that_build_their_input_are_answered_and_the_bug_answers_otherwise(tmp_path):
    require_bwrap()
    files = {"calc.py": BUGGY, "test_calc.py": BUILT_TESTS}
    task, grader = validated_task(tmp_path, "built", files, {"calc.py": FIXED}, BUILT, [])
    # test_rows compares with no literal (``b + 0 * 7`` is computed): answered by its truth checks
    assert grader.answered(task) == [BUILT[2], BUILT[0], BUILT[1]]
    assert grader.grade(task, task.patch).resolved
    grade = answer_run(task, grader, tmp_path / "bug", {"calc.py": BUGGY.replace("a - b", "a - b + 0", 1)})
    assert grade is not None and grade.reason.startswith(f"outside: {BUILT[2]} (+2 more)"), grade
    # the fix for the answered calls only: add(4, 4) right, add(0, 0) wrong (the truth check
    # stands in the child and fails there)
    half = "def add(a, b):\n    return a + b if a else 1\n\n\ndef sub(a, b):\n    return a - b\n"
    grade = answer_run(task, grader, tmp_path / "half", {"calc.py": half})
    assert grade is not None and grade.reason.startswith(f"outside: {BUILT[2]} computes"), grade


# A parametrized failing test, one function of three rows: the answer run answers every row, its
# expected column kept in the grader's process.
PARAM_TESTS = """\
import pytest

from calc import add, sub


@pytest.mark.parametrize("a, b, expected", [(2, 3, 5), (1, 1, 2), pytest.param(10, 5, 15, id="tens")])
def test_add(a, b, expected):
    assert add(a, b) == expected


def test_sub():
    assert sub(5, 3) == 2
"""
PARAM_F2P = ["test_calc.py::test_add[2-3-5]", "test_calc.py::test_add[1-1-2]", "test_calc.py::test_add[tens]"]
# the expected value read where the test calls (its frame's locals, reached through a traceback)
READS_THE_EXPECTED_LOCAL = READS_THE_FRAME.split("    caller =")[0] + (
    '    caller = getattr(frame, "f_" + "back")\n'
    '    return getattr(caller, "f_" + "locals").get("expected", a - b)\n'
)


@pytest.fixture(scope="module")
def param_task(tmp_path_factory):
    require_bwrap()
    tmp = tmp_path_factory.mktemp("answers-param")
    files = {"calc.py": BUGGY, "test_calc.py": PARAM_TESTS}
    task, grader = validated_task(
        tmp, "answers-param", files, {"calc.py": FIXED}, PARAM_F2P, ["test_calc.py::test_sub"]
    )
    return tmp, task, grader


def test_a_parametrized_failing_test_is_answered_and_an_answer_read_from_its_row_is_the_bugs(param_task):
    tmp, task, grader = param_task
    assert grader.answered(task) == ["test_calc.py::test_add"]
    reads_the_row = READS_THE_FILE.replace("add\\(%d, %d\\)(?: == |, )", "%d, %d, ")
    assert reads_the_row != READS_THE_FILE
    for reader in (READS_THE_EXPECTED_LOCAL, reads_the_row):
        grade = answer_run(task, grader, tmp / f"reads-{len(reader)}", {"calc.py": reader + SUB})
        assert grade is not None and grade.verdict == "tamper", grade
        assert grade.reason.startswith("outside: test_calc.py::test_add computes another value"), grade.reason
    assert answer_run(task, grader, tmp / "fixed", {"calc.py": FIXED}) is None
    grade, asked = graded_asking(grader, task, task.patch)  # the first run, the mirror and answer runs
    assert grade.resolved and grade.reward == 1.0, grade.to_dict()
    assert asked == [["test_calc.py::test_add"]]  # every row passed: the function is asked


# The same rows bound to a module name: the answer run answers them too, and code that reads the
# expected column from the test module's globals (where the test calls it) finds none there.
TABLE_TESTS = PARAM_TESTS.replace(
    '\n\n@pytest.mark.parametrize("a, b, expected", [(2, 3, 5), (1, 1, 2), pytest.param(10, 5, 15, id="tens")])',
    'CASES = [(2, 3, 5), (1, 1, 2), pytest.param(10, 5, 15, id="tens")]\n\n\n'
    '@pytest.mark.parametrize("a, b, expected", CASES)',
)
READS_THE_TABLE = READS_THE_FRAME.split("    caller =")[0] + (
    '    caller = getattr(frame, "f_" + "back")\n'
    '    for row in getattr(caller, "f_" + "globals").get("CA" + "SES", ()):\n'
    '        values = tuple(getattr(row, "values", row))\n'
    "        if values[:2] == (a, b):\n"
    "            return values[2]\n"
    "    return a - b\n"
)


def test_a_test_parametrized_by_a_module_name_is_answered_and_its_rows_are_not_in_the_child(tmp_path):
    require_bwrap()
    assert "CASES)\ndef test_add" in TABLE_TESTS
    files = {"calc.py": BUGGY, "test_calc.py": TABLE_TESTS}
    task, grader = validated_task(
        tmp_path, "answers-table", files, {"calc.py": FIXED}, PARAM_F2P, ["test_calc.py::test_sub"]
    )
    assert grader.answered(task) == ["test_calc.py::test_add"]
    reader = diff(Path(task.repo_source), tmp_path / "reads-table", {"calc.py": READS_THE_TABLE + SUB})
    trusting = grading.SWEGrader(
        grader.workspace, grader.repos, timeout_s=120, mirror_check=False, answer_check=False
    )
    assert trusting.grade(task, reader).resolved  # the hole: pytest's run alone pays it
    grade = answer_run(task, grader, tmp_path / "reads-table-2", {"calc.py": READS_THE_TABLE + SUB})
    assert grade is not None and grade.verdict == "tamper", grade
    assert grade.reason.startswith("outside: test_calc.py::test_add computes another value"), grade.reason
    assert answer_run(task, grader, tmp_path / "fixed", {"calc.py": FIXED}) is None


# Failing tests that check only that an exception is raised, its class and message in the test
# alone: answered outside pytest, where the bug raises nothing and a forger must guess both.
DIVIDE_BUGGY = "def divide(a, b):\n    if b == 0:\n        return 0\n    return a // b\n"
DIVIDE_FIXED = DIVIDE_BUGGY.replace("return 0\n", "raise ValueError('cannot divide by zero')\n", 1)
RAISES_TESTS = """\
import unittest

import pytest

from calc import divide


class TestDivide(unittest.TestCase):
    def test_zero(self):
        self.assertRaises(ValueError, divide, 2, 0)


def test_divide_by_zero():
    with pytest.raises(ValueError, match="divide by zero$") as info:
        divide(1, 0)
    assert "zero" in str(info.value)


def test_divide():
    assert divide(6, 3) == 2
"""
RAISES_F2P = ["test_calc.py::TestDivide::test_zero", "test_calc.py::test_divide_by_zero"]


def test_a_raises_only_failing_test_is_answered_and_a_guessed_exception_is_not_the_fix(tmp_path):
    require_bwrap()
    files = {"calc.py": DIVIDE_BUGGY, "test_calc.py": RAISES_TESTS}
    f2p, p2p = RAISES_F2P, ["test_calc.py::test_divide"]
    task, grader = validated_task(tmp_path, "answers-raises", files, {"calc.py": DIVIDE_FIXED}, f2p, p2p)
    assert grader.answered(task) == f2p
    assert grader.grade(task, task.patch).resolved
    wrong = {
        "bug": DIVIDE_BUGGY,  # raises nothing
        "class": DIVIDE_BUGGY.replace("return 0\n", "raise ZeroDivisionError('cannot divide by zero')\n"),
        "message": DIVIDE_BUGGY.replace("return 0\n", "raise ValueError('zero')\n"),  # not the pattern's
        "system-exit": DIVIDE_BUGGY.replace("return 0\n", "raise SystemExit(0)\n"),
    }
    for name, code in wrong.items():
        grade = answer_run(task, grader, tmp_path / name, {"calc.py": code})
        assert grade is not None and grade.verdict == "tamper", (name, grade)
        assert grade.reason.startswith("outside: test_calc.py::"), (name, grade.reason)
    # a subclass of the class the test names, with the message it matches, is the fix
    subclass = "class DivisionError(ValueError):\n    pass\n\n\n" + DIVIDE_FIXED.replace(
        "raise ValueError", "raise DivisionError"
    )
    assert answer_run(task, grader, tmp_path / "subclass", {"calc.py": subclass}) is None


def graded_asking(grader: grading.SWEGrader, task, patch: str) -> tuple[grading.SWEGrade, list]:
    """``grader``'s grade of ``patch`` and the tests each of its answer runs asked."""
    asked, run = [], grader.run

    def counting(*args, answers=None, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if answers is not None:
            asked.append(list(answers))
        return run(*args, answers=answers, **kwargs)

    grader.run = counting
    try:
        return grader.grade(task, patch), asked
    finally:
        del grader.run


def test_validation_answers_a_parametrized_test_only_where_the_task_lists_each_row(param_task):
    tmp, task, grader = param_task
    listed_two = dataclasses.replace(task, instance_id="answers-param-two", fail_to_pass=tuple(PARAM_F2P[:2]))
    assert grader.validate(listed_two) is None  # the third row fails on the base, in no list
    assert grader.answered(listed_two) == []


def test_a_partial_pass_of_a_parametrized_test_keeps_its_credit(param_task):
    """Two rows of three passed: the answer run, which answers every row of a test, does not ask
    it (an honest partial fix fails a row there too); the fraction is paid."""
    tmp, task, grader = param_task
    partial = grading.SWEGrader(grader.workspace, grader.repos, timeout_s=120, partial_credit=True)
    two = FIXED.replace("    return a + b\n", "    return a + b if a < 10 else a - b\n", 1)
    grade, asked = graded_asking(
        partial, task, diff(Path(task.repo_source), tmp / "two-rows", {"calc.py": two})
    )
    assert grade.verdict == "unresolved" and grade.reward == pytest.approx(2 / 3), grade.to_dict()
    assert asked == []


# Failing tests that compare a float with a tolerance and a bound written in the test: each
# answered outside pytest, where the test's code holds neither, and an honest fix that is another
# float within the tolerance (or a float of its own class) still resolves.
AREA_BUGGY = "def area(r):\n    return 3 * r * r\n\n\ndef label(r):\n    return f'circle r={r}'\n"
AREA_FIXED = "import math\n\n\n" + AREA_BUGGY.replace("3 * r * r", "math.pi * r * r")
AREA_TESTS = """\
import unittest

import pytest

from geometry import area, label


def test_area():
    assert area(2) == pytest.approx(12.566, rel=1e-3)


def test_between():
    assert 3.14 < area(1) < 3.15


class TestArea(unittest.TestCase):
    def test_places(self):
        self.assertAlmostEqual(area(1), 3.1416, places=3)


def test_label():
    assert label(1) == "circle r=1"
"""
AREA_F2P = [
    "test_geometry.py::test_area",
    "test_geometry.py::test_between",
    "test_geometry.py::TestArea::test_places",
]
# the float constants of the calling test's code: the mean of those near the largest (12.566;
# 3.14 and 3.15; 3.1416) passes each test where its code runs
READS_THE_CONSTANTS = READS_THE_FRAME.split("    caller =")[0].replace("def add(a, b):", "def area(r):") + (
    '    caller = getattr(getattr(frame, "f_" + "back"), "f_" + "code")\n'
    '    floats = [c for c in getattr(caller, "co_" + "consts") if type(c) is float]\n'
    "    near = [c for c in floats if c > max(floats, default=0) - 1]\n"
    "    return sum(near) / len(near) if near else 3 * r * r\n"
    "\n\ndef label(r):\n    return f'circle r={r}'\n"
)


def test_comparisons_with_a_tolerance_or_a_bound_are_answered_and_their_values_are_not_in_the_child(tmp_path):
    require_bwrap()
    files = {"geometry.py": AREA_BUGGY, "test_geometry.py": AREA_TESTS}
    fix, p2p = {"geometry.py": AREA_FIXED}, ["test_geometry.py::test_label"]
    task, grader = validated_task(tmp_path, "answers-area", files, fix, AREA_F2P, p2p)
    assert grader.answered(task) == sorted(AREA_F2P)
    reader = diff(Path(task.repo_source), tmp_path / "reader", {"geometry.py": READS_THE_CONSTANTS})
    trusting = grading.SWEGrader(
        grader.workspace, grader.repos, timeout_s=120, mirror_check=False, answer_check=False
    )
    # pytest's run names the read in process; a diff that also forged that run's reports is
    # left to the answer run, asked alone here
    first = trusting.grade(task, reader)
    assert first.verdict == "tamper" and "read the code of the test calling it" in first.reason, first
    grade = answer_run(task, grader, tmp_path / "constants", {"geometry.py": READS_THE_CONSTANTS})
    assert grade is not None and grade.verdict == "tamper", grade  # no constant of the test there
    # every one of the three: the bound and the tolerances are in none of their codes
    assert grade.reason.startswith("outside: test_geometry.py::"), grade.reason
    assert "(+2 more)" in grade.reason, grade.reason
    near = AREA_FIXED.replace("math.pi * r * r", "3.1 * r * r")  # outside every tolerance
    assert answer_run(task, grader, tmp_path / "near", {"geometry.py": near}) is not None
    honest = {
        "other-float": AREA_BUGGY.replace("3 * r * r", "3.14159 * r * r"),  # within each tolerance
        "float-class": "class Area(float):\n    def __repr__(self):\n        return f'Area({float(self)})'\n"
        + AREA_FIXED.replace("return math.pi * r * r", "return Area(math.pi * r * r)"),
        "fraction": "from fractions import Fraction\n"
        + AREA_FIXED.replace("return math.pi * r * r", "return Fraction(math.pi * r * r)"),
    }
    for name, code in honest.items():
        assert answer_run(task, grader, tmp_path / name, {"geometry.py": code}) is None, name
    assert grader.grade(task, task.patch).resolved
