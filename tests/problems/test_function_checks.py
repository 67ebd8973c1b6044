"""Held-out checks from whole test functions (``problems/synth/function_checks.py``): which tests
are sites, which of their literals change, and what the recording of their asserts keeps."""

from __future__ import annotations

import ast
import random

import pytest

from lit_codeRL.problems.synth.function_checks import (
    function_variants,
    input_literals,
    module_support,
    recording,
)
from lit_codeRL.problems.synth.function_checks import (
    test_functions as sites,
)
from lit_codeRL.problems.synth.held_out import KEEP_FUNCTION, RUN_NAME

MODULE = '''"""Tests."""
import pytest

from shop import restock, tokens

LIMIT = 3


@pytest.fixture
def stock():
    return {"tea": 2}


def helper(x):
    return [x]


def test_fixture_and_locals(stock):
    """A docstring."""
    names = ["tea", "jam"]
    assert restock(stock, names) == 1, "one new name"
    assert stock["tea"] == 3


def test_raises():
    with pytest.raises(ValueError, match="line 2"):
        tokens("a $ b")


@pytest.mark.parametrize("x", [1, 2])
def test_parametrized(x):
    assert helper(x) == [x]


def test_generator():
    yield 1


def test_nothing_to_change():
    assert helper(LIMIT) == [3]


def test_default(stock=None):
    assert helper(2) == [2]


class TestGrouped:
    def test_method(self):
        assert helper(1) == [1]
'''


def _functions(source: str = MODULE) -> dict[str, ast.FunctionDef]:
    return {f.name: f for f in sites(ast.parse(source))}


def test_sites_are_plain_test_functions_with_a_literal_to_change():
    # generator, defaulted, method, and literal-less tests are not sites; a parametrized test is
    # one per parameter set
    names = [f.name for f in sites(ast.parse(MODULE))]
    assert names == ["test_fixture_and_locals", "test_raises", "test_parametrized", "test_parametrized"]


PARAMETRIZED = """
@pytest.mark.parametrize("a, b", [(1, 2), pytest.param(3, 4, marks=slow), (5, 6), [7, 8], (9, 10), (11, 12)], ids=str)
def test_pairs(tmp_path, a, b):
    assert f(a, tmp_path) == b


@pytest.mark.parametrize(("word",), [("x",)])
def test_names_as_a_tuple(word):
    assert g(word)


@mark.parametrize("n", [0, 3])
def test_one_name(n):
    assert h(n) == 1


@pytest.mark.parametrize("n", [1], indirect=True)
def test_indirect(n):
    assert h(n) == 1


@pytest.mark.parametrize("n", [1])
@pytest.mark.parametrize("m", [2])
def test_stacked(n, m):
    assert h(n, m) == 1


@pytest.mark.slow
def test_other_mark():
    assert h(1) == 1


@pytest.mark.parametrize("z", [1])
def test_not_a_parameter(n):
    assert h(n) == 1
"""


def test_a_parametrized_test_is_a_site_per_parameter_set():
    from lit_codeRL.problems.synth.function_checks import MAX_PARAMETER_SETS, parameter_sets

    tests = {t.name: parameter_sets(t) for t in ast.parse(PARAMETRIZED).body}
    # pytest.param entries are left out (their marks), the first MAX_PARAMETER_SETS others kept
    pairs = [ast.unparse(t) for t in tests["test_pairs"]]
    assert len(pairs) == MAX_PARAMETER_SETS == 4
    assert pairs[0] == "def test_pairs(tmp_path):\n    a, b = (1, 2)\n    assert f(a, tmp_path) == b"
    assert [p.splitlines()[1].strip() for p in pairs[1:]] == [
        "a, b = (5, 6)",
        "a, b = [7, 8]",
        "a, b = (9, 10)",
    ]
    assert ast.unparse(tests["test_names_as_a_tuple"][0]).splitlines()[1].strip() == "word, = ('x',)"
    assert [ast.unparse(t).splitlines()[1].strip() for t in tests["test_one_name"]] == ["n = 0", "n = 3"]
    # indirect parameters, stacked or other marks, names the test does not take: no site
    for name in ("test_indirect", "test_stacked", "test_other_mark", "test_not_a_parameter"):
        assert tests[name] == [], name
    # the parameter set's values are inputs: the variants change them, and the record runs
    (one,) = [t for t in sites(ast.parse(PARAMETRIZED)) if t.name == "test_one_name"][:1]
    variants = function_variants(one, random.Random(0), set())
    assert variants and all("n = 0" not in v for v in variants)
    (binding,) = [line.strip() for line in variants[0].splitlines() if line.strip().startswith("n = ")]
    assert _run(variants[0], h=lambda n: n * 10)() == [ast.literal_eval(binding[4:]) * 10]


def test_the_support_is_the_module_without_its_tests():
    support = module_support(ast.parse(MODULE))
    namespace: dict = {}
    exec(support.replace("from shop import restock, tokens", ""), namespace)  # it runs alone
    assert {"stock", "helper", "LIMIT", "pytest"} <= set(namespace)
    assert "def test_" not in support and "class TestGrouped" not in support


def test_inputs_are_neither_expected_values_messages_subscripts_nor_pytest_arguments():
    changed = [ast.unparse(n) for n in input_literals(_functions()["test_fixture_and_locals"])]
    assert changed == ["['tea', 'jam']"]  # not 1, "one new name", "tea", 3, nor the docstring
    assert [ast.unparse(n) for n in input_literals(_functions()["test_raises"])] == ["'a $ b'"]
    source = "def test_x():\n    x = f'{1}'\n    assert g(x, None, ...) == pytest.approx(2.5)\n"
    assert input_literals(ast.parse(source).body[0]) == []


def _run(source: str, **namespace):
    exec(KEEP_FUNCTION + "\n" + source, namespace)
    return namespace[RUN_NAME]


def test_the_recording_keeps_each_compared_value_as_it_was_when_the_assert_ran():
    source = """def test_x(stock):
    items = [1]
    assert len(items) == 1
    items.append(2)
    assert items == [1, 2], "message"
    assert not stock
    assert 0 < len(items) <= 5
    assert 2.0 == pytest.approx(2.0)

    def inner():
        assert False
    for k in range(2):
        assert k >= 0
    if stock:
        return
    items.append(3)
"""
    text = recording(ast.parse(source).body[0])
    assert text.startswith(f"def {RUN_NAME}(stock):") and "assert False" in text  # inner untouched
    assert "assert " not in text.replace("assert False", "")
    run = _run(text)
    # len, the list then (not the list at the end), bool(stock), the chain's one non-literal side
    # (never 0 or 5, nor pytest.approx's side), each loop's k; the early return gives the records
    assert run({}) == [1, [1, 2], False, 2, 0, 1]
    assert run({"a": 1}) == [1, [1, 2], True, 2, 0, 1]


def test_a_value_without_a_literal_repr_is_kept_as_its_repr():
    run = _run(recording(ast.parse("def test_x():\n    assert object is object\n").body[0]))
    assert run() == [("<repr>", "<class 'object'>")] * 2  # both sides


def test_variants_change_an_input_and_never_give_the_test_back():
    function = _functions()["test_fixture_and_locals"]
    seen: set[str] = set()
    first = function_variants(function, random.Random(3), seen)
    assert first and first == function_variants(function, random.Random(3), set())  # seeded
    assert recording(function) in seen and recording(function) not in first
    for text in first:
        (changed,) = [
            n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Assign) and n.targets[0].id == "names"
        ]
        assert ast.literal_eval(changed.value) != ["tea", "jam"]
        assert "'one new name'" not in text and "== 1" not in text  # asserts recorded, no expected kept


@pytest.mark.parametrize("value", ["x = [1, 2]", "x = {'a': (1, 2.5)}", "x = 'abc'", "x = 7"])
def test_every_literal_kind_is_changed(value):
    function = ast.parse(f"def test_x():\n    {value}\n    assert f(x) == 1\n").body[0]
    variants = function_variants(function, random.Random(0), set())
    assert variants and all(value not in v for v in variants)


class _EqualToAnything:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class _Text(str):
    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_a_record_is_never_an_object_equal_to_anything(monkeypatch):
    """Code under test that returns an object equal to anything, or replaces ``repr`` or
    ``ast.literal_eval`` to give one, records no value that equals the clean run's."""
    import ast as ast_module
    import builtins

    run = _run(recording(ast.parse("def test_x():\n    assert f() == 3\n").body[0]), f=_EqualToAnything)
    assert run() != [3] and run() != [("<repr>", "3")]
    monkeypatch.setattr(ast_module, "literal_eval", lambda text: _EqualToAnything())
    assert run() != [3]
    monkeypatch.undo()
    # a value with no literal is kept as its repr: a repr that is not a plain string never equals one
    other = _run(recording(ast.parse("def test_x():\n    assert f() == 3\n").body[0]), f=object)
    assert other()[0][0] == "<repr>"
    monkeypatch.setattr(builtins, "repr", lambda v: _Text("x"))
    assert other() != [("<repr>", "<object object at 0x7f>")]
