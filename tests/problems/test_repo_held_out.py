"""Held-out checks of repository tasks, by hand: which calls are read, how they are changed,
where the checks go and how answers read back (``problems/synth/repo_held_out.py``). The
sandboxed end to end (hard-coded answers unresolved, the fix resolved) is in
``tests/envs/test_repo_held_out_checks.py``."""

from __future__ import annotations

import ast

import pytest

from lit_codeRL.problems.synth.held_out import RUN_NAME, Variant
from lit_codeRL.problems.synth.repo_held_out import (
    RepoVariant,
    _checks,
    candidate_modules,
    held_out_path,
    read_answers,
    repo_variants,
)
from lit_codeRL.problems.synth.validate import SuiteRun

PYTEST_STYLE = """import sys, os
sys.path.insert(0, os.path.dirname(__file__))
import pytest
from pkg.calc import add, scale
from pkg import text as tx
from pkg.more import *

LIMIT = 3


def test_add():
    assert add(2, 3) == 5


def test_not():
    assert not add(-1, 1)


def test_wrapped():
    assert sorted(scale([3, 1], factor=2)) == [2, 6]


def test_partly_literal():
    assert scale(list(range(3)), 2) == [0, 2, 4]


def test_module_attribute():
    assert tx.upper("ab") == "AB"


def test_local():
    x = 4
    assert add(x, 1) == 5


def test_module_constant():
    assert add(LIMIT, 1) == 4


def test_fixture(tmp_path):
    assert add(len(str(tmp_path)), 0) > 0


def test_lambda():
    assert list(map(lambda v: add(v, 1), [1])) == [2]


def test_raises():
    with pytest.raises(TypeError):
        add(None, 1)


def test_star_imported():
    assert hidden_name(1) == 1
"""
UNITTEST_STYLE = """import unittest

from pkg.calc import add


class AddTest(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(add(1, 1), 2)

    def test_true(self):
        self.assertTrue(add(1, 0))

    def test_self_state(self):
        self.assertEqual(self.helper(3), 3)
"""
FILES = {
    "tests/test_calc.py": PYTEST_STYLE,
    "tests/unit/test_more.py": UNITTEST_STYLE,
    "pkg/calc.py": "x = 1\n",
}


def test_calls_of_imported_names_with_literal_arguments_are_changed_and_the_rest_left_out():
    variants, headers = repo_variants(FILES, ["tests/test_calc.py", "tests/unit/test_more.py"], seed=0)
    by_module: dict[str, list[str]] = {}
    for v in variants:
        if not v.variant.support:  # a plain call's; whole test functions' below
            by_module.setdefault(v.module, []).append(v.variant.expression)
    calc = by_module["tests/test_calc.py"]
    for expression in calc:
        ast.parse(expression, mode="eval")
    # pytest asserts (==, not, wrapped), a module attribute, a call whose other argument is not a literal
    assert any(e.startswith("add(") for e in calc) and any(e.startswith("sorted(scale(") for e in calc)
    assert any(e.startswith("tx.upper(") for e in calc) and any("list(range(3))" in e for e in calc)
    # a local, a module constant, a fixture, a lambda, a star import: not rebuilt outside their test
    assert not any(name in e for e in calc for name in ("x,", "LIMIT", "tmp_path", "lambda", "hidden_name"))
    # no visible call again, none twice, the keyword kept by name
    assert "add(2, 3)" not in calc and "add(-1, 1)" not in calc and len(calc) == len(set(calc))
    assert all("factor=" in e for e in calc if e.startswith("sorted(scale("))
    assert all("list(range(3))" in e for e in calc if e.startswith("scale("))
    # unittest's assertEqual/assertTrue; never a call on self
    more = by_module["tests/unit/test_more.py"]
    assert more and all(e.startswith("add(") for e in more)
    # what no call could rebuild, whole test functions can: the local, the constant, the fixture
    # (a parameter the check passes through), the expected error; a unittest method is run in a
    # copy of its class, its assertions recorded
    whole = [v for v in variants if v.variant.support]
    methods = [v.variant for v in whole if v.module == "tests/unit/test_more.py"]
    assert methods and all(
        "class AddTest(unittest.TestCase):" in v.support
        and f"_lcrl_case(AddTest, {RUN_NAME!r})" in v.support
        and "self.assert" not in v.support.replace("_lcrl_check(_lcrl_failed, lambda: self.assert", "")
        for v in methods
    )
    lines = [line.strip() for v in whole for line in v.variant.support.splitlines()]
    assert any(line.startswith("x = ") and line != "x = 4" for line in lines)  # the local changed
    fixture = [v.variant for v in variants if v.variant.params]
    assert fixture and all(
        v.params == ("tmp_path",) and v.expression == "_lcrl_run_(tmp_path)" for v in fixture
    )
    assert any("pytest.raises(TypeError)" in v.variant.support for v in variants)
    # the header: the module without its tests (its imports, sys.path change, constant), since
    # whole test functions need what it defines; a module of plain calls only: its imports
    header = headers["tests/test_calc.py"]
    assert (
        "sys.path.insert(0, os.path.dirname(__file__))" in header
        and "from pkg.calc import add, scale" in header
    )
    assert "from pkg import text as tx" in header and "LIMIT = 3" in header and "def test_" not in header
    assert headers["tests/unit/test_more.py"] == "import unittest\nfrom pkg.calc import add"
    # seeded: the same calls again
    again, _ = repo_variants(FILES, ["tests/test_calc.py", "tests/unit/test_more.py"], seed=0)
    assert [v.variant.expression for v in again] == [v.variant.expression for v in variants]
    other, _ = repo_variants(FILES, ["tests/test_calc.py", "tests/unit/test_more.py"], seed=1)
    assert [v.variant.expression for v in other] != [v.variant.expression for v in variants]


def test_a_module_that_does_not_parse_or_is_bytes_gives_no_call():
    files = {"tests/test_a.py": "def test_(:\n", "tests/test_b.py": b"\xff\xfe", "tests/test_c.py": "x = 1\n"}
    assert repo_variants(files, sorted(files)) == ([], {})


def test_checks_go_beside_their_test_module():
    assert held_out_path("tests/test_parser.py") == "tests/test_held_out_parser.py"
    assert held_out_path("pkg/parser_test.py") == "pkg/test_held_out_parser_test.py"
    assert held_out_path("test_.py") == "test_held_out_tests.py"


def test_answers_read_back_from_failure_messages_only():
    run = SuiteRun(
        "unresolved",
        {},
        {
            "tests/test_lcrl_candidates_test_a.py::test_c3": 'AssertionError: @lcrl-answer@["ok", "[1, \\"a\\"]"]',
            "tests/test_lcrl_candidates_test_a.py::test_c4": 'AssertionError: @lcrl-answer@["raise", "KeyError"]\nassert False',
            "tests/test_lcrl_candidates_test_a.py::test_c5": "AssertionError: something else",
            "tests/test_lcrl_candidates_test_a.py::test_c6": "AssertionError: @lcrl-answer@{not json",
            "tests/test_a.py::test_c7": 'AssertionError: @lcrl-answer@["ok", 7]',
            "tests/test_a.py::test_other": 'AssertionError: @lcrl-answer@["ok", "1"]',
        },
    )
    assert read_answers(run) == {3: ("ok", '[1, "a"]'), 4: ("raise", "KeyError")}


VARIANTS = [
    RepoVariant(Variant("add(1, 2)", 0), "tests/test_a.py"),
    RepoVariant(Variant("add(3, 2)", 0), "tests/test_a.py"),
    RepoVariant(Variant("up('x')", 1), "tests/sub/test_b.py"),
]
HEADERS = {"tests/test_a.py": "from pkg import add", "tests/sub/test_b.py": "from pkg import up"}


def test_candidate_modules_start_with_their_guarded_headers_and_answer_in_order():
    modules = candidate_modules(VARIANTS, HEADERS, [1, 0, 2])
    assert sorted(modules) == [
        "tests/sub/test_lcrl_candidates_test_b.py",
        "tests/test_lcrl_candidates_test_a.py",
    ]
    text = modules["tests/test_lcrl_candidates_test_a.py"]
    ast.parse(text)
    assert text.startswith("try:\n    from pkg import add\n") and text.index("def test_c1") < text.index(
        "def test_c0"
    )
    assert "_lcrl_report(lambda: (add(3, 2)), 400)" in text


def test_the_checks_a_bug_fails_come_first_and_are_named_per_module():
    variants, headers = VARIANTS, HEADERS
    expected = {0: 3, 1: 5, 2: "X"}
    out = _checks(variants, headers, expected, [2, 1, 0], 2, {})
    assert out is not None
    assert sorted(out.files) == ["tests/sub/test_held_out_b.py", "tests/test_held_out_a.py"]
    assert out.failing == (
        "tests/sub/test_held_out_b.py::test_held_out_1",
        "tests/test_held_out_a.py::test_held_out_1",
    )
    assert out.passing == ("tests/test_held_out_a.py::test_held_out_2",)
    a = out.files["tests/test_held_out_a.py"]
    assert "def test_held_out_1():\n    assert add(3, 2) == 5" in a and "assert add(1, 2) == 3" in a
    # a path the repository already holds is not written over; a bug left with no failing check gets none
    kept = _checks(variants, headers, expected, [2, 1, 0], 2, {"tests/sub/test_held_out_b.py": "x"})
    assert kept is not None and sorted(kept.files) == ["tests/test_held_out_a.py"]
    assert kept.failing == ("tests/test_held_out_a.py::test_held_out_1",)
    assert _checks(variants, headers, expected, [2, 1, 0], 1, {"tests/sub/test_held_out_b.py": "x"}) is None


def _run_candidates(text: str) -> dict[str, str]:
    """Each candidate test of a module's text run in this process: name -> its failure message."""
    namespace: dict = {}
    exec(compile(text, "test_lcrl_candidates_x.py", "exec"), namespace)
    messages = {}
    for name, test in namespace.items():
        if name.startswith("test_c"):
            try:
                test()
            except pytest.fail.Exception as err:  # a bare message: no traceback to format
                assert not err.pytrace
                messages[f"tests/test_lcrl_candidates_x.py::{name}"] = f"Failed: {err}"
    return messages


def test_a_candidate_answers_in_its_message_and_a_header_that_fails_costs_only_its_module():
    variants = [
        RepoVariant(Variant("floor(7.5)", 0), "tests/test_a.py"),
        RepoVariant(Variant("floor('x')", 0), "tests/test_a.py"),
        RepoVariant(Variant("f(1)", 1), "tests/test_b.py"),
    ]
    headers = {
        "tests/test_a.py": "from __future__ import annotations\nfrom math import floor",
        "tests/test_b.py": "from a_module_nowhere import f",
    }
    modules = candidate_modules(variants, headers, [0, 1, 2])
    a = _run_candidates(modules["tests/test_lcrl_candidates_test_a.py"])
    b = _run_candidates(modules["tests/test_lcrl_candidates_test_b.py"])
    assert read_answers(SuiteRun("unresolved", {}, a)) == {0: ("ok", "7"), 1: ("raise", "TypeError")}
    assert read_answers(SuiteRun("unresolved", {}, b)) == {2: ("header", "ModuleNotFoundError")}


def test_the_standard_librarys_calls_are_not_the_code_under_test():
    files = {
        "tests/test_s.py": "import os\nfrom json import dumps\nfrom pkg import f\n\n\ndef test_s():\n"
        "    assert os.path.join('a', 'b') == 'a/b'\n    assert dumps([1]) == '[1]'\n"
        "    assert f(dumps([1])) == 3\n"
    }
    variants, headers = repo_variants(files, list(files))
    # os.path.join and dumps are not the code under test; f's one argument is no literal to change
    # (the whole test function is a site: its literals are inputs of f too)
    assert [v for v in variants if not v.variant.support] == []
    files["tests/test_s.py"] += "    assert f(os.sep, 2) == 4\n"
    variants, _ = repo_variants(files, list(files))
    plain = [v for v in variants if not v.variant.support]
    assert plain and all(v.variant.expression.startswith("f(os.sep, ") for v in plain)


def test_a_compared_side_that_binds_looser_than_equality_is_parenthesized():
    from lit_codeRL.problems.synth.held_out import test_module_text

    plain = [Variant("f(2) != 2", 0), Variant("f(3)", 0), Variant("g(1) + 1", 0)]
    text = test_module_text("from m import f, g", plain, {0: True, 1: 4, 2: 3}, [0, 1, 2])
    # unparenthesized, ``f(2) != 2 == True`` chains: ``f(2) != 2 and 2 == True``, false for every f
    assert "assert (f(2) != 2) == True" in text and "assert f(3) == 4" in text
    assert "assert (g(1) + 1) == 3" in text
    namespace: dict = {"f": lambda n: n + 1, "g": lambda n: n + 1}
    exec(compile(text.split("\n", 1)[1], "t.py", "exec"), namespace)
    for name in ("test_held_out_1", "test_held_out_2", "test_held_out_3"):
        namespace[name]()


def test_an_ordering_assert_gives_each_side_to_check():
    files = {
        "tests/test_o.py": "from pkg import f\n\n\ndef test_o():\n    assert f(3) > 2\n    assert 1 < f(5, 1) <= 9\n"
    }
    variants, _ = repo_variants(files, list(files))
    expressions = {v.variant.expression for v in variants}
    assert any(e.startswith("f(") and "," not in e for e in expressions)  # from f(3) > 2
    assert any(e.startswith("f(") and "," in e for e in expressions)  # from the chained comparison
    assert all(">" not in e and "<" not in e for e in expressions)
