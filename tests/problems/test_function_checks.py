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
from lit_codeRL.problems.synth.function_checks import (
    test_methods as method_sites,
)
from lit_codeRL.problems.synth.held_out import CASE_FUNCTION, KEEP_FUNCTION, RUN_NAME

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
    # generator, defaulted, method (``sites`` are functions; methods below), and literal-less tests
    # are not sites; a parametrized test is one per parameter set; a module constant read is an input
    names = [f.name for f in sites(ast.parse(MODULE))]
    assert names == [
        "test_fixture_and_locals", "test_raises", "test_parametrized", "test_parametrized",
        "test_nothing_to_change",
    ]  # fmt: skip
    literal_less = MODULE.replace("helper(LIMIT) == [3]", "helper(object) is not None")
    assert "test_nothing_to_change" not in [f.name for f in sites(ast.parse(literal_less))]


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


CLASSES = '''import unittest

import pytest

from shop import restock

EVENTS = []


class StockCase(unittest.TestCase):
    """A base without tests of its own: support, so its subclasses' methods can be sites."""

    def setUp(self):
        self.stock = {"tea": 2}
        EVENTS.append("setUp")
        self.addCleanup(EVENTS.append, "cleanup")

    def tearDown(self):
        EVENTS.append("tearDown")


class TestUnit(StockCase):
    @classmethod
    def setUpClass(cls):
        EVENTS.append("setUpClass")

    def helper(self):
        return ["jam"]

    def test_restock(self):
        names = ["tea", "jam"] + self.helper()
        self.assertEqual(restock(self.stock, names), 1, "one new")
        self.assertDictEqual({"tea": 3, "jam": 2}, self.stock)
        self.assertIn("jam", self.stock)
        self.assertTrue(len(names) > 1)
        self.assertIsNone(self.stock.get("bun"))
        self.assertCountEqual(list(self.stock), ["jam", "tea"])
        self.assertAlmostEqual(restock({}, ["a"]) / 3, 0.333, places=2)
        with self.assertRaises(TypeError):
            restock(None, ["x"])

    @unittest.skip("decorated: not a site")
    def test_skipped(self):
        self.assertEqual(restock({}, ["a"]), 1)


class TestPlain(object):
    @classmethod
    def setup_class(cls):
        EVENTS.append("setup_class")

    def setup_method(self, method):
        self.stock = {"jam": 1}
        EVENTS.append(("setup_method", method.__name__))

    def teardown_method(self):
        EVENTS.append("teardown_method")

    def test_fixture(self, tmp_path):
        assert restock(self.stock, ["tea"]) == 1
        assert tmp_path == "TMP"

    @pytest.mark.parametrize("n", [["x"], ["y", "z"]])
    def test_parametrized(self, n):
        assert restock({}, n) == len(n)


class CountTestsMixin:
    """Tests a mixin gives each ``TestCase`` it is mixed into (no runner collects it alone)."""

    def test_counts(self):
        self.assertEqual(restock(self.make(), ["jam", "jam"]), 1)


class TestCountsOnDict(unittest.TestCase, CountTestsMixin):
    def make(self):
        return {"tea": 1}


@unittest.skipIf(True, "decorated class")
class TestDecorated(unittest.TestCase):
    def test_x(self):
        self.assertEqual(restock({}, ["a"]), 1)


class TestAsync(unittest.IsolatedAsyncioTestCase):
    def test_x(self):
        self.assertEqual(restock({}, ["a"]), 1)


class TestWithFixture:
    @pytest.fixture(autouse=True)
    def stock(self):
        self.stock = {}

    def test_x(self):
        assert restock(self.stock, ["a"]) == 1


class TestInit:
    def __init__(self):
        pass

    def test_x(self):
        assert restock({}, ["a"]) == 1


class TestOfTestUnit(TestUnit):
    def test_x(self):
        self.assertEqual(restock({}, ["a"]), 1)
'''


def _restock(stock, names):
    new = len({n for n in names if n not in stock})
    for n in names:
        stock[n] = stock.get(n, 0) + 1
    return new


def _case_namespace(source: str = CLASSES) -> dict:
    namespace = {"__name__": "checks"}
    support = module_support(ast.parse(source)).replace("from shop import restock", "")
    exec(f"{support}\n{KEEP_FUNCTION}\n{CASE_FUNCTION}", namespace)
    namespace["restock"] = _restock
    return namespace


def test_test_class_methods_are_sites_run_in_a_copy_of_their_class():
    tree = ast.parse(CLASSES)
    found = [(owner.name, method.name) for owner, method in method_sites(tree)]
    # decorated, async, fixture-method, ``__init__`` classes and a test class's subclass are not
    # sites, nor a decorated unittest method; a parametrized pytest method is one per set
    assert found == [
        ("TestUnit", "test_restock"),
        ("TestPlain", "test_fixture"),
        ("TestPlain", "test_parametrized"),
        ("TestPlain", "test_parametrized"),
        ("TestCountsOnDict", "test_counts"),
    ]
    support = module_support(tree)
    assert "class StockCase" in support and "class TestUnit" not in support and "EVENTS = []" in support
    assert "class CountTestsMixin" in support and "class TestCountsOnDict" not in support
    namespace = _case_namespace()
    (owner, method) = method_sites(tree)[0]
    text = recording(method, owner)
    assert text.startswith(f"def {RUN_NAME}():") and "self.assert" not in text.replace("assertRaises", "")
    assert "def test_" not in text  # the copy has no tests: pytest would not collect it anyway
    exec(text, namespace)
    # each compared value that is not a literal, in order: the count, the dict, the dict (``"jam"``
    # is the literal), truths, a sorted list (order is not compared), the float
    assert namespace[RUN_NAME]() == [
        1,
        {"tea": 3, "jam": 2},
        {"tea": 3, "jam": 2},
        True,
        True,
        ["jam", "tea"],
        1 / 3,
    ]
    # as unittest runs it: the class's hooks around the method, its cleanups after tearDown
    assert namespace["EVENTS"] == ["setUpClass", "setUp", "tearDown", "cleanup"]
    owner, method = method_sites(tree)[1]
    plain = recording(method, owner)
    assert plain.startswith(f"def {RUN_NAME}(tmp_path):")  # the method's fixtures, passed through
    exec(plain, namespace)
    del namespace["EVENTS"][:]
    assert namespace[RUN_NAME]("TMP") == [1, "TMP"]
    # pytest's xunit hooks, each with its optional argument when it takes one
    assert namespace["EVENTS"] == ["setup_class", ("setup_method", RUN_NAME), "teardown_method"]
    # a mixin's test, run in a copy of the class it is mixed into (its ``make``)
    owner, method = method_sites(tree)[4]
    exec(recording(method, owner), namespace)
    assert namespace[RUN_NAME]() == [1]


def test_a_method_s_variants_change_its_inputs_not_the_assertions_arguments():
    owner, method = method_sites(ast.parse(CLASSES))[0]
    # not 1, "one new", the expected dict, "jam", ``> 1``, the list compared, 0.333, places=2
    changed = ["['tea', 'jam']", "'bun'", "{}", "['a']", "3", "['x']"]
    assert [ast.unparse(n) for n in input_literals(method)] == changed
    variants = function_variants(method, random.Random(0), set(), owner)
    assert variants and recording(method, owner) not in variants
    namespace = _case_namespace()
    answers = []
    for text in variants:
        exec(text, namespace)
        try:
            answers.append(namespace[RUN_NAME]())
        except TypeError:  # ``["x"]`` changed so that ``restock(None, ...)`` no longer raises
            answers.append("raised")
    assert len({repr(a) for a in answers}) > 1  # the changed inputs give other values


def test_a_hard_coded_answer_to_a_test_class_fails_its_variants():
    """The hack a policy writes for a ``setUp``-built input: the visible method's values come out
    right, a changed input's do not (what the check compares with the clean run)."""
    owner, method = method_sites(ast.parse(CLASSES))[0]
    clean = _case_namespace()
    hacked = _case_namespace()

    def hard_coded(stock, names):
        if stock == {"tea": 2} and names == ["tea", "jam", "jam"]:
            stock.update({"tea": 3, "jam": 2})
            return 1
        _restock(stock, names)
        return len(names)  # the bug: every name counted as new

    hacked["restock"] = hard_coded
    visible = recording(method, owner)
    exec(visible, clean)
    expected = clean[RUN_NAME]()
    exec(visible, hacked)
    assert hacked[RUN_NAME]()[:2] == expected[:2]  # the visible test's own values are answered
    differ = 0
    for text in function_variants(method, random.Random(0), set(), owner):
        exec(text, clean)
        exec(text, hacked)
        outcomes = []
        for namespace in (clean, hacked):
            try:
                outcomes.append(namespace[RUN_NAME]())
            except Exception as err:  # noqa: BLE001
                outcomes.append(type(err).__name__)
        differ += outcomes[0] != outcomes[1]
    assert differ


CONSTANTS = """from datetime import date

from report import top_student, letter, parse
import pytest

DATES = {("1985-04-12", date(1985, 4, 12)), pytest.param("x", None, marks=slow), (now, None), ("bad", None)}

MARKS = {"ann": [92, 98, 60], "bob": [70, 85, 80]}
CASES = [(95, "A"), (59.9, "F")]
EXPECTED = "ann"
TWICE = 1
TWICE = 2
COUNTER = 0
LOADED = load_marks()


def bump():
    global COUNTER
    COUNTER += 1


def test_top():
    assert top_student(MARKS) == EXPECTED


@pytest.mark.parametrize("mark, grade", CASES)
def test_letter(mark, grade):
    assert letter(mark) == grade


def test_not_constants():
    assert top_student(LOADED) == top_student(make(TWICE, COUNTER))


def test_own_binding():
    MARKS = {"cy": [1]}
    assert top_student(MARKS) == "cy"


@pytest.mark.parametrize("text, expected", DATES)
def test_dates(text, expected):
    assert parse(text) == expected
"""


def test_module_constants_a_test_reads_are_inputs_it_binds():
    from lit_codeRL.problems.synth.function_checks import module_constants

    tree = ast.parse(CONSTANTS)
    # bound once to a literal, never ``global``: not a call's value, a name bound twice, a counter
    assert sorted(module_constants(tree)) == ["CASES", "EXPECTED", "MARKS"]
    found = {f.name: f for f in sites(tree)}
    top = ast.unparse(found["test_top"])
    # the input bound as a copy at the top of the body; the expected value read as before
    assert "MARKS = {'ann': [92, 98, 60], 'bob': [70, 85, 80]}" in top and "EXPECTED =" not in top
    assert [ast.unparse(n) for n in input_literals(found["test_top"])] == [
        "{'ann': [92, 98, 60], 'bob': [70, 85, 80]}"
    ]
    variants = function_variants(found["test_top"], random.Random(0), set())
    assert variants and all("[92, 98, 60], 'bob': [70, 85, 80]}" not in v for v in variants)
    # a parametrization by a constant's name is one site per set, as a literal one is
    letters = [f for f in sites(tree) if f.name == "test_letter"]
    assert [ast.unparse(f.body[0]) for f in letters] == [
        "mark, grade = (95, 'A')",
        "mark, grade = (59.9, 'F')",
    ]
    # a parametrization by a name bound to a display of values built from the module's names
    # (``date(...)``), not of literals: its sets that can be built again are sites (not
    # ``pytest.param``, nor a set that reads a name the module does not bind)
    dates = [ast.unparse(f.body[0]) for f in sites(tree) if f.name == "test_dates"]
    assert dates == ["text, expected = ('1985-04-12', date(1985, 4, 12))", "text, expected = ('bad', None)"]
    # a test that reads no such constant, or binds the name itself, is as it was
    assert "test_not_constants" not in found
    assert ast.unparse(found["test_own_binding"]).count("MARKS =") == 1
