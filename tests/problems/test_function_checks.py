"""Held-out checks from whole test functions (``problems/synth/function_checks.py``): which tests
are sites, which of their literals change, and what the recording of their asserts keeps."""

from __future__ import annotations

import ast
import asyncio
import random
import time
import unittest
from pathlib import Path

import pytest

from lit_codeRL.problems.synth.function_checks import (
    class_fixtures,
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
from lit_codeRL.problems.synth.held_out import CASE_FUNCTION, KEEP_FUNCTION, RUN_NAME, Variant

ROOT = Path(__file__).resolve().parents[2]

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
@pytest.mark.parametrize("a, b", [(1, 2), pytest.param(3, 4, marks=slow), pytest.param(5, 6, id="p"), [7, 8], (9, 10), (11, 12)])
def test_pairs(tmp_path, a, b):
    assert f(a, tmp_path) == b


@pytest.mark.parametrize(("word",), [("x",)])
def test_names_as_a_tuple(word):
    assert g(word)


@mark.parametrize("n", [0, pytest.param(3, id="three"), pytest.param(4, 5)])
def test_one_name(n):
    assert h(n) == 1


@pytest.mark.parametrize("n", [1], indirect=True)
def test_indirect(n):
    assert h(n) == 1


@pytest.mark.parametrize("n", [1])
@pytest.mark.parametrize("m", [2, 3])
def test_stacked(n, m):
    assert h(n, m) == 1


@pytest.mark.slow
@pytest.mark.parametrize("m", [2, 3])
def test_marked_and_parametrized(m):
    assert h(m) == 1


@pytest.mark.parametrize("m", [1])
@pytest.mark.parametrize("m", [2])
def test_bound_twice(m):
    assert h(m) == 1


@pytest.mark.slow
def test_other_mark():
    assert h(1) == 1


@pytest.mark.parametrize("z", [1])
def test_not_a_parameter(n):
    assert h(n) == 1


@pytest.mark.xfail(reason="not yet")
def test_expected_to_fail():
    assert h(1) == 1


@pytest.mark.skip
def test_skipped():
    assert h(1) == 1


@slow
def test_a_name_for_a_mark():
    assert h(1) == 1
"""


def test_a_parametrized_test_is_a_site_per_parameter_set():
    from lit_codeRL.problems.synth.function_checks import MAX_PARAMETER_SETS, parameter_sets

    tests = {t.name: parameter_sets(t) for t in ast.parse(PARAMETRIZED).body}
    # pytest.param entries with marks are left out, those without are their values; all of a
    # table of at most MAX_PARAMETER_SETS kept
    pairs = [ast.unparse(t) for t in tests["test_pairs"]]
    assert len(pairs) == 5 < MAX_PARAMETER_SETS == 8
    assert pairs[0] == "def test_pairs(tmp_path):\n    a, b = (1, 2)\n    assert f(a, tmp_path) == b"
    assert [p.splitlines()[1].strip() for p in pairs[1:]] == [
        "a, b = (5, 6)",  # pytest.param(5, 6, id="p")
        "a, b = [7, 8]",
        "a, b = (9, 10)",
        "a, b = (11, 12)",
    ]
    assert ast.unparse(tests["test_names_as_a_tuple"][0]).splitlines()[1].strip() == "word, = ('x',)"
    assert [ast.unparse(t).splitlines()[1].strip() for t in tests["test_one_name"]] == ["n = 0", "n = 3"]
    # stacked parametrizations: the sets of their product
    assert [ast.unparse(t).splitlines()[1:3] for t in tests["test_stacked"]] == [
        ["    n = 1", "    m = 2"],
        ["    n = 1", "    m = 3"],
    ]
    assert [a.arg for a in tests["test_stacked"][0].args.args] == []
    # indirect parameters, a name two decorators bind, names the test does not take, an expected
    # failure, a skip, a decorator that is not a mark as written: no site
    for name in ("test_indirect", "test_bound_twice", "test_not_a_parameter", "test_expected_to_fail",
                 "test_skipped", "test_a_name_for_a_mark"):  # fmt: skip
        assert tests[name] == [], name
    # another mark (beside a parametrization too) stays on each site, to go on its checks
    (other,) = tests["test_other_mark"]
    assert ast.unparse(other).splitlines()[:2] == ["@pytest.mark.slow", "def test_other_mark():"]
    assert [ast.unparse(t).splitlines()[:3] for t in tests["test_marked_and_parametrized"]] == [
        ["@pytest.mark.slow", "def test_marked_and_parametrized():", "    m = 2"],
        ["@pytest.mark.slow", "def test_marked_and_parametrized():", "    m = 3"],
    ]
    # the parameter set's values are inputs: the variants change them, and the record runs
    (one,) = [t for t in sites(ast.parse(PARAMETRIZED)) if t.name == "test_one_name"][:1]
    variants = function_variants(one, random.Random(0), set())
    assert variants and all("n = 0" not in v for v in variants)
    (binding,) = [line.strip() for line in variants[0].splitlines() if line.strip().startswith("n = ")]
    assert _run(variants[0], h=lambda n: n * 10)() == [ast.literal_eval(binding[4:]) * 10]


def test_a_long_table_gives_sites_spread_over_it_from_its_first_row_to_its_last():
    from lit_codeRL.problems.synth.function_checks import parameter_sets, spread

    # a table written by kind (inflection's ORDINAL_NUMBERS: -1 ... 13, 101 ... 1001): its first
    # rows alone are one kind, and a bug of 12 read as "nd" had no site near an input it fails
    rows = ", ".join(f"({n!r}, 'x')" for n in range(61))
    source = f"CASES = [{rows}]\n\n\n@pytest.mark.parametrize('n, want', CASES)\ndef test_t(n, want):\n    assert f(n) == want\n"
    tree = ast.parse(source)
    displays = {"CASES": tree.body[0].value}
    bound = [ast.unparse(t).splitlines()[1].strip() for t in parameter_sets(tree.body[1], displays)]
    assert bound == [f"n, want = ({n}, 'x')" for n in (0, 9, 17, 26, 34, 43, 51, 60)]
    assert spread(list(range(5)), 8) == [0, 1, 2, 3, 4]
    assert spread(list(range(10)), 2) == [0, 9] and spread(list(range(10)), 1) == [0]


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


def _outside_checks(text: str) -> str:
    """``text`` without the tests its ``_lcrl_check(_lcrl_failed, lambda: ...)`` calls make."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_lcrl_check":
            node.args[1] = ast.Constant(None)
    return ast.unparse(tree)


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

    class Inner:
        def method(self):
            assert False
    for k in range(2):
        assert k >= 0
    if stock:
        return
    items.append(3)
"""
    text = recording(ast.parse(source).body[0])
    assert text.startswith(f"def {RUN_NAME}(stock):") and "assert False" in text  # a class's untouched
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
        # asserts recorded; the expected value only in the check of the value recorded, no message
        assert "'one new name'" not in text and "_lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == 1)" in text
        assert "== 1" not in _outside_checks(text)


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
    # decorated, fixture-method, ``__init__`` classes and a test class's subclass are not
    # sites, nor a decorated unittest method; a parametrized pytest method is one per set
    assert found == [
        ("TestUnit", "test_restock"),
        ("TestPlain", "test_fixture"),
        ("TestPlain", "test_parametrized"),
        ("TestPlain", "test_parametrized"),
        ("TestCountsOnDict", "test_counts"),
        ("TestAsync", "test_x"),  # an ``IsolatedAsyncioTestCase``: run by the case itself
    ]
    support = module_support(tree)
    assert "class StockCase" in support and "class TestUnit" not in support and "EVENTS = []" in support
    assert "class CountTestsMixin" in support and "class TestCountsOnDict" not in support
    namespace = _case_namespace()
    (owner, method) = method_sites(tree)[0]
    text = recording(method, owner)
    assert text.startswith(f"def {RUN_NAME}():")
    assert "self.assert" not in _outside_checks(text).replace("assertRaises", "")
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


FIXTURE_CLASSES = """import unittest

import pytest


class CartFixtures:
    rate = 10
    pytestmark = pytest.mark.slow

    @pytest.fixture
    def prices(self):
        return [1]

    @pytest.fixture
    def percent(self):
        return self.rate

    def setup_method(self):
        self.seen = []

    def test_in_the_base(self):
        assert True


class TestOverriding(CartFixtures):
    @pytest.fixture
    def prices(self):
        return [2]

    def test_sum(self, prices, percent):
        assert sum(prices + [1]) == 3


class TestNoFixtures:
    def test_len(self):
        assert len([1]) == 1


class TestAutouse:
    @pytest.fixture(autouse=True)
    def ready(self):
        self.ready = True

    def test_ready(self):
        assert self.ready and len([1]) == 1


class TestFrozen:
    @pytest.fixture(autouse=True)
    def frozen(self):
        yield "a clock frozen around each test: no state on self"

    def test_frozen(self):
        assert len([1]) == 1


class TestUnitWithFixture(unittest.TestCase):
    @pytest.fixture
    def prices(self):
        return [1]

    def test_unit(self):
        self.assertEqual(len([1]), 1)
"""


def test_a_pytest_class_s_fixture_methods_go_on_the_class_its_checks_are_methods_of():
    tree = ast.parse(FIXTURE_CLASSES)
    found = {owner.name: method for owner, method in method_sites(tree)}
    # a class's own fixtures and its base's make its methods sites, an autouse one that sets no
    # state on ``self`` too; one that does (on the instance pytest makes, not the case's copy) and a
    # ``TestCase``'s fixture (pytest passes it none) keep theirs out
    assert sorted(found) == ["TestFrozen", "TestNoFixtures", "TestOverriding"]
    body = class_fixtures(next(o for o, _ in method_sites(tree) if o.name == "TestOverriding"), tree)
    # the subclass's fixture over its base's, the attribute a fixture reads, no test, no runner
    # method (the case's copy runs those), no class marks
    assert "return [2]" in body and "return [1]" not in body and "rate = 10" in body, body
    assert "def percent(self)" in body and "setup_method" not in body and "test_" not in body
    assert "pytestmark" not in body
    assert class_fixtures(next(o for o, _ in method_sites(tree) if o.name == "TestNoFixtures"), tree) == ""
    # written as a method of a class of them, collected whatever ``python_classes`` says
    check = Variant("x", 0, params=("prices", "percent"), marks=("pytest.mark.slow",), fixtures=body)
    lines = check.test_lines("test_held_out_1", "assert sum(prices) * percent == 20", "TestHeldOut1")
    namespace: dict = {}
    exec("import pytest\n" + "\n".join(lines), namespace)
    holder = namespace["TestHeldOut1"]
    assert (
        holder.__test__ is True
        and check.node("test_held_out_1", "TestHeldOut1") == "TestHeldOut1::test_held_out_1"
    )
    holder().test_held_out_1([2], 10)
    plain = Variant("x", 0, params=("tmp_path",))
    assert (
        plain.test_lines("test_held_out_1", "assert x", "TestHeldOut1")[0] == "def test_held_out_1(tmp_path):"
    )
    assert plain.node("test_held_out_1", "TestHeldOut1") == "test_held_out_1"


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


HELPERS = """import unittest

import pytest

from shop import restock


def check(stock, names, new):
    assert restock(stock, names) == new, "count"
    return stock


def check_both(stock, names, new, after):
    assert check(stock, names, new) == after


def _untouched(value):
    return value


@pytest.fixture
def asserting_fixture():
    assert True


def test_module_helper():
    check({"tea": 2}, ["tea", "jam"], 1)


def test_helpers_calling_helpers():
    check_both({"tea": 2}, ["jam"], 1, {"tea": 2, "jam": 1})


def test_own_helper():
    def counted(names, new):
        assert restock({}, names) == new
        return len(names)

    @(lambda f: f)
    def decorated():
        assert False

    assert counted(["a", "b"], 2) == 2


def test_checks_nothing():
    _untouched([1])


def test_shadowed():
    check = _untouched
    check([1])


class StockCase(unittest.TestCase):
    def assertRestocks(self, stock, names, new):
        self.assertEqual(restock(stock, names), new)
        self.assertIn(names[0], stock)


class TestStock(StockCase):
    def restock_twice(self, names, new):
        self.assertRestocks({}, names, new)
        check({}, names, new)

    def test_base_helper(self):
        self.assertRestocks({"tea": 2}, ["tea"], 0)

    def test_own_helper_method(self):
        self.restock_twice(["jam", "bun"], 2)


class TestPlainStock:
    def check(self, names, new):
        assert restock({"tea": 1}, names) == new

    def test_plain_helper(self):
        self.check(["tea", "jam"], 1)
"""


def test_asserting_helpers_a_test_calls_record_into_its_checks():
    """``check(input, expected)``, ``self.assertRestocks(...)``: the asserts are in a helper, so a
    changed input failed the helper in the clean run too (no check). The helpers a site calls,
    and those they call, record as its own asserts do."""
    from lit_codeRL.problems.synth.function_checks import module_helpers

    tree = ast.parse(HELPERS)
    # functions that assert or call one that does; not a fixture, nor one that checks nothing
    assert sorted(module_helpers(tree)) == ["check", "check_both"]
    found = {f.name: f for f in sites(tree)}
    assert sorted(found) == ["test_helpers_calling_helpers", "test_module_helper", "test_own_helper"]
    namespace = _case_namespace(HELPERS)
    text = recording(found["test_module_helper"])
    assert "assert " not in text
    exec(text, namespace)
    # both compared sides, names in the helper (the expected one as the test passed it)
    assert namespace[RUN_NAME]() == [1, 1]
    exec(recording(found["test_helpers_calling_helpers"]), namespace)
    # the inner helper's sides, then the outer's comparison of what the inner returned
    assert namespace[RUN_NAME]() == [1, 1, {"tea": 2, "jam": 1}, {"tea": 2, "jam": 1}]
    text = recording(found["test_own_helper"])
    assert "assert False" in text  # a decorated function (``@given``) runs as its decorator says
    exec(text, namespace)
    assert namespace[RUN_NAME]() == [2, 2, 2]  # the nested helper's count and names, its return
    methods = [(owner, method) for owner, method in method_sites(tree)]
    assert [m.name for _, m in methods] == ["test_base_helper", "test_own_helper_method", "test_plain_helper"]
    answers = []
    for owner, method in methods:
        text = recording(method, owner)
        assert not any(f in _outside_checks(text) for f in ("assert ", "self.assertEqual(", "self.assertIn("))
        exec(text, namespace)
        answers.append(namespace[RUN_NAME]())
    # the mixin's helper recorded in the class copy (its names[0] in stock: a truth), the helper
    # method calling it and a module helper, a pytest class's helper
    assert answers == [
        [0, 0, "tea", {"tea": 3}],
        [2, 2, "jam", {"jam": 1, "bun": 1}, 2, 2],
        [1, 1],
    ]
    assert "def assertRestocks" not in ast.unparse(tree.body[-2])  # the module's class untouched


def test_a_hard_coded_answer_behind_a_helper_fails_its_variants():
    tree = ast.parse(HELPERS)

    def hard_coded(stock, names):
        visible = (stock == {"tea": 2} and names == ["tea", "jam"]) or names == ["jam", "bun"]
        new = _restock(stock, names)
        return new if visible else len(names)  # the bug: every name counted as new

    sites_found = [(None, f) for f in sites(tree) if f.name == "test_module_helper"]
    sites_found += [s for s in method_sites(tree) if s[1].name == "test_own_helper_method"]
    for owner, function in sites_found:
        clean, hacked = _case_namespace(HELPERS), _case_namespace(HELPERS)
        hacked["restock"] = hard_coded
        exec(recording(function, owner), clean)
        exec(recording(function, owner), hacked)
        assert clean[RUN_NAME]() == hacked[RUN_NAME]()  # the visible test is answered
        variants = function_variants(function, random.Random(0), set(), owner)
        assert variants
        differ = 0
        for text in variants:
            exec(text, clean)
            exec(text, hacked)
            differ += clean[RUN_NAME]() != hacked[RUN_NAME]()  # no variant raises: it records
        assert differ, function.name


def test_a_long_test_s_variant_keeps_only_its_changed_check(monkeypatch):
    """A table of helper calls too long for one check (``parse``'s ``test_datetimes``: 160 lines
    of ``y(fmt, text, expected)``): the variant is cut after its changed call, the other calls
    before it (checks of other values) left out, what they need (bindings, state) kept."""
    from lit_codeRL.problems.synth import function_checks

    calls = "\n".join(f"    check({{'tea': {i}}}, ['tea', 'jam'], 1)" for i in range(30))
    source = f"""def test_table():
    stock = {{}}
    restock(stock, ['bun'])

    def check(stock, names, new):
        assert restock(stock, names) == new
{calls}
    assert stock == {{'bun': 1}}
"""
    (test,) = sites(ast.parse(HELPERS.split("def test_module_helper")[0] + source))
    full = recording(test)
    monkeypatch.setattr(function_checks, "MAX_SOURCE", len(full) // 3)
    variants = [v for seed in range(4) for v in function_variants(test, random.Random(seed), set())]
    assert variants and all(len(v) <= len(full) // 3 for v in variants)
    # a changed input the checks read (``restock(stock, ['bun'])``): cut after the first check
    # that follows it, not before any
    bun = test.body[1].value.args[1]  # type: ignore[attr-defined]
    cut = function_checks._trimmed(test, {id(bun)}, None)
    assert [type(s).__name__ for s in cut.body] == ["Assign", "Expr", "FunctionDef", "Expr"]
    assert ast.unparse(cut.body[-1]) == "check({'tea': 0}, ['tea', 'jam'], 1)"
    namespace = _case_namespace(HELPERS)
    for text in variants:
        (run,) = [n for n in ast.parse(text).body[0].body if isinstance(n, ast.Try)]
        body = run.body
        kept = [ast.unparse(s) for s in body if isinstance(s, ast.Expr) and "check(" in ast.unparse(s)]
        assert 1 <= len(kept) <= 2, text  # the changed call(s), not the other 28
        assert "restock(stock, [" in text and "stock = {" in text  # what the test built
        exec(text, namespace)
        assert len(namespace[RUN_NAME]()) == 2 * len(kept)  # each kept call's two sides
    # each statement holding an input a site of its own, in turn: not 8 variants over 30 checks
    single = function_variants(test, random.Random(0), set())
    assert len(single) > function_checks.VARIANTS_PER_CALL
    changed_rows = set()
    for text in single:
        (run,) = [n for n in ast.parse(text).body[0].body if isinstance(n, ast.Try)]
        changed_rows |= {
            ast.unparse(s) for s in run.body if isinstance(s, ast.Expr) and "check(" in ast.unparse(s)
        }
    assert len(changed_rows) >= 20
    monkeypatch.setattr(function_checks, "MAX_SOURCE", 40)  # too long even when cut: no variant
    assert function_variants(test, random.Random(0), set()) == []


ATTRIBUTES = """import unittest

from shop import restock


class Tables:
    CASES = [({"tea": 2}, ["tea", "jam"], 1), ({}, ["bun"], 1)]


class TestTables(unittest.TestCase, Tables):
    EXPECTED = 1
    TWICE = [1]
    TWICE = [2]
    SET = ["tea"]

    def setUp(self):
        self.SET = ["jam"]

    def test_table(self):
        for stock, names, new in self.CASES:
            self.assertEqual(restock(dict(stock), names), new)

    def test_expected(self):
        self.assertEqual(restock({}, ["tea"]), self.EXPECTED)

    def test_not_inputs(self):
        self.assertEqual(restock({}, self.TWICE + self.SET), 2)
"""


def test_class_attributes_a_method_reads_are_inputs_it_binds():
    """A table of inputs kept as a class attribute (``self.CASES``, here a mixin's) is bound on
    ``self`` at the top of the method, a copy its variants change; not an expected value, a name
    bound twice, or one set on the instance (``setUp``)."""
    tree = ast.parse(ATTRIBUTES)
    found = {m.name: (o, m) for o, m in method_sites(tree)}
    owner, table = found["test_table"]
    assert ast.unparse(table.body[0]).startswith("self.CASES = [({'tea': 2}, ['tea', 'jam'], 1)")
    assert "self.EXPECTED =" not in ast.unparse(found["test_expected"][1])
    # bound twice in the class, set on the instance in ``setUp``: read as they are
    assert ast.unparse(found["test_not_inputs"][1]).count(" = ") == 0
    clean, hacked = _case_namespace(ATTRIBUTES), _case_namespace(ATTRIBUTES)

    def hard_coded(stock, names):
        visible = (stock, names) in [({"tea": 2}, ["tea", "jam"]), ({}, ["bun"])]
        new = _restock(stock, names)
        return new if visible else len(names)  # the bug: every name counted as new

    hacked["restock"] = hard_coded
    exec(recording(table, owner), clean)
    exec(recording(table, owner), hacked)
    assert clean[RUN_NAME]() == hacked[RUN_NAME]() == [1, 1, 1, 1]
    differ = 0
    for text in function_variants(table, random.Random(0), set(), owner):
        outcomes = []
        for namespace in (clean, hacked):
            exec(text, namespace)
            try:
                outcomes.append(namespace[RUN_NAME]())
            except ValueError:  # a set changed to unpack otherwise: raises in the clean run too
                outcomes.append("raised")
        differ += outcomes[0] != outcomes[1]
    assert differ


def test_an_error_after_a_failed_assert_ends_the_run_with_the_records():
    """``assert found is not None; found["n"]``: a changed input the assert guards against made
    the code after it raise in the clean run, and a variant that raises is no check. A failed
    assert is noted; an error after one ends the run, its name the last record."""
    source = """def test_x():
    found = lookup("a")
    assert found is not None
    assert found["n"] < 3
    assert len(found) == 1
"""
    text = recording(ast.parse(source).body[0])
    assert _run(text, lookup=lambda key: {"n": 1})() == [{"n": 1}, 1, 1]
    # nothing found: the first assert fails, the next one's value raises
    assert _run(text, lookup=lambda key: None)() == [None, ("<raised>", "TypeError")]
    # an error no failed assert came before is the test's own: raised, as before
    with pytest.raises(ZeroDivisionError):
        _run(text, lookup=lambda key: 1 / 0)()
    # a test that cannot be evaluated (``"x" < 3``) fails, it does not raise: the run goes on
    assert _run(text, lookup=lambda key: {"n": "x"})() == [{"n": "x"}, "x", 1]
    failing = recording(ast.parse(source.replace('found["n"] < 3', "not found")).body[0])
    assert _run(failing, lookup=lambda key: {"n": 1})() == [{"n": 1}, True, 1]


def test_a_test_of_a_helper_s_assert_keeps_it_raising():
    """``pytest.raises(AssertionError)`` around a helper: the test expects the helper's assert to
    raise. Recorded, it would not, and every variant would fail in the clean run."""
    source = """import pytest

from shop import restock


def check(stock, names, new):
    assert restock(stock, names) == new


def test_check_catches_a_wrong_count():
    def local(names):
        assert restock({}, names) == 0

    check({}, ["tea"], 1)
    with pytest.raises(AssertionError):
        check({}, ["tea"], 2)
    with pytest.raises(AssertionError):
        local(["tea"])
"""
    (site,) = sites(ast.parse(source))
    assert [n.name for n in site.body if isinstance(n, ast.FunctionDef)] == ["local"]  # no copy
    namespace = _case_namespace(source)
    text = recording(site)
    assert "assert restock({}, names) == 0" in text  # the defined helper left raising
    exec(text, namespace)
    assert namespace[RUN_NAME]() == []  # both ``pytest.raises`` met, as in the visible test


ASYNC = """import asyncio

import pytest

from shop import fetch

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


@pytest.mark.asyncio
async def test_fetch(tmp_path):
    got = await fetch([3])
    assert got == [3, 3]
    tmp_path = tmp_path + "/x"  # a parameter rebound: the body still reads the fixture first
    assert tmp_path


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("n", [1, 2])
async def test_parametrized(n):
    assert await fetch([n, 5]) == [n, n]


@pytest.mark.timeout(3)
async def test_other_mark():
    assert await fetch([1]) == [1, 1]


async def test_generator():
    yield await fetch([1])


class TestPlain:
    def setup_method(self):
        self.base = [10]

    async def test_method(self):
        assert await fetch([self.base[0] + 1]) == [11, 11]


class TestUnit(unittest.TestCase):
    async def test_never_awaited(self):
        self.assertEqual(await fetch([1]), [1, 1])
"""


async def _fetch(xs):
    await asyncio.sleep(0)
    return [xs[0], xs[0]]


def _variant_answers(method: ast.FunctionDef, owner: ast.ClassDef, namespace: dict) -> set[str]:
    """The distinct records of ``method``'s variants, each run in ``namespace``."""
    answers = set()
    for variant in function_variants(method, random.Random(0), set(), owner):
        exec(variant, namespace)
        answers.add(repr(namespace[RUN_NAME]()))
    return answers


def test_async_tests_are_sites_recorded_and_run_in_a_loop_of_their_own():
    """An async test's whole body is a site (a suite run by pytest-asyncio or anyio has no other):
    its recording is a plain function that runs the recorded coroutine to its end in a loop of its
    own, so the candidate and the check are plain tests. Its loop mark is no decorator that keeps
    it from being a site, and another mark goes on its checks. A ``TestCase`` never awaits a
    coroutine method, an async generator is no test: neither is a site."""
    tree = ast.parse(ASYNC)
    names = ["test_fetch", "test_parametrized", "test_parametrized", "test_other_mark"]
    assert [f.name for f in sites(tree)] == names
    assert [ast.unparse(d) for d in sites(tree)[3].decorator_list] == ["pytest.mark.timeout(3)"]
    assert [(o.name, m.name) for o, m in method_sites(tree)] == [("TestPlain", "test_method")]
    namespace = {"asyncio": asyncio, "fetch": _fetch, "unittest": unittest}
    exec(KEEP_FUNCTION + CASE_FUNCTION, namespace)
    fetch_test, one, two, _ = sites(tree)
    text = recording(fetch_test)
    assert text.startswith(f"def {RUN_NAME}(tmp_path):") and "async def test" not in text
    exec(text, namespace)
    assert namespace[RUN_NAME]("/tmp") == [[3, 3], True]
    for site, n in ((one, 1), (two, 2)):
        exec(recording(site), namespace)
        assert namespace[RUN_NAME]() == [[n, n], [n, n]]  # ``[n, n]`` is no literal: both sides
    owner, method = method_sites(tree)[0]
    text = recording(method, owner)
    assert "async def test_method" not in text  # the copy of the class holds no test
    exec(text, namespace)
    assert namespace[RUN_NAME]() == [[11, 11]]  # ``setup_method`` ran before the coroutine
    assert len(_variant_answers(method, owner, namespace)) > 1  # the changed inputs give other values
    # the module's marks, without the loop's: pytest-asyncio fails a plain test carrying its mark
    support = module_support(tree).replace("from shop import fetch", "")
    marks: dict = {"pytest": pytest}
    exec(support, marks)
    assert [m.name for m in marks["pytestmark"]] == ["slow"]


def test_an_async_recording_leaves_the_thread_s_loop_alone_and_its_timeout_reaches_into_its_loop():
    """The recording's loop is its own: the loop a plugin set for the thread is neither replaced
    nor closed, and tasks the test left running are cancelled. An awaited call that never ends
    is answered ``timeout`` by the candidate's interval timer, in its time."""
    import time

    from lit_codeRL.problems.synth.held_out import ANSWER_FUNCTION

    namespace: dict = {"asyncio": asyncio}
    exec(ANSWER_FUNCTION + KEEP_FUNCTION, namespace)
    source = """async def test_x():
    left = asyncio.get_running_loop().create_task(asyncio.sleep(60))
    LEFT.append(left)
    assert await asyncio.sleep(0, [1]) == [1]
"""
    left: list = []
    scope = {**namespace, "LEFT": left}
    exec(recording(ast.parse(source).body[0]), scope)
    plugin_loop = asyncio.new_event_loop()
    asyncio.set_event_loop(plugin_loop)
    try:
        assert scope[RUN_NAME]() == [[1]]
        assert (
            left[-1].cancelled() and asyncio.get_event_loop() is plugin_loop and not plugin_loop.is_closed()
        )
    finally:
        asyncio.set_event_loop(None)
        plugin_loop.close()
    hangs = "async def test_x():\n    assert await asyncio.sleep(600, [1]) == [1]\n"
    exec(recording(ast.parse(hangs).body[0]), namespace)
    start = time.monotonic()
    assert namespace["_lcrl_answer"](namespace[RUN_NAME]) == ["timeout", ""]
    assert time.monotonic() - start < 3.0


ISOLATED = """import asyncio
import unittest

from shop import fetch

EVENTS = []


class TestFeed(unittest.IsolatedAsyncioTestCase):
    def setUp(self):
        EVENTS.append("setUp")

    async def asyncSetUp(self):
        self.loop = asyncio.get_running_loop()
        self.queue = asyncio.Queue()  # bound to the case's loop
        await self.queue.put([2])
        self.addAsyncCleanup(self.cleanup)
        EVENTS.append("asyncSetUp")

    async def cleanup(self):
        EVENTS.append("cleanup")

    async def asyncTearDown(self):
        EVENTS.append("asyncTearDown")

    def tearDown(self):
        EVENTS.append("tearDown")

    async def test_fetch(self):
        self.assertTrue(asyncio.get_running_loop() is self.loop)
        got = await fetch([1] + await self.queue.get())
        self.assertEqual(got, [1, 1])

    def test_plain(self):
        self.assertEqual(len([1, 2]), 2)
"""


def test_an_isolated_asyncio_test_case_s_methods_are_sites_run_by_the_case_in_its_own_loop():
    """``unittest.IsolatedAsyncioTestCase`` runs ``asyncSetUp`` and the coroutine method in one
    loop of its own: what the set-up makes there (a queue, a client) is used by the test. Its
    methods were no sites. Now the case runs its recorded method itself (``run``: every hook, its
    async cleanups), the records and an error the method raises caught on the way."""
    tree = ast.parse(ISOLATED)
    found = method_sites(tree)
    assert [(o.name, m.name) for o, m in found] == [("TestFeed", "test_fetch"), ("TestFeed", "test_plain")]
    namespace = {"__name__": "checks", "fetch": _fetch}
    exec(
        f"{module_support(tree).replace('from shop import fetch', '')}\n{KEEP_FUNCTION}\n{CASE_FUNCTION}",
        namespace,
    )
    owner, method = found[0]
    text = recording(method, owner)
    assert "_lcrl_await" not in text  # awaited by the case, not in a loop of the check's own
    exec(text, namespace)
    assert namespace[RUN_NAME]() == [True, [1, 1]]
    assert namespace["EVENTS"] == ["setUp", "asyncSetUp", "asyncTearDown", "tearDown", "cleanup"]
    exec(recording(found[1][1], found[1][0]), namespace)
    assert namespace[RUN_NAME]() == [2]  # a plain method of such a case too
    assert len(_variant_answers(method, owner, namespace)) > 1  # the changed inputs give other values
    # the method's own error is the answer's; a set-up that fails is an error too
    namespace["fetch"] = lambda xs: 1 / 0
    exec(text, namespace)
    with pytest.raises(ZeroDivisionError):
        namespace[RUN_NAME]()
    exec(recording(method, owner).replace("asyncio.Queue()", "asyncio.Queue(None, 1)"), namespace)
    with pytest.raises(RuntimeError, match="set-up failed"):
        namespace[RUN_NAME]()
    # an awaited call that never ends is answered ``timeout`` in its time, inside the case's loop
    from lit_codeRL.problems.synth.held_out import ANSWER_FUNCTION

    exec(ANSWER_FUNCTION, namespace)
    namespace["fetch"] = lambda xs: asyncio.sleep(600, xs)
    exec(text, namespace)
    start = time.monotonic()
    assert namespace["_lcrl_answer"](namespace[RUN_NAME]) == ["timeout", ""]
    assert time.monotonic() - start < 3.0


LEFT_WAITING = '''import asyncio, gc, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

from lit_codeRL.problems.synth.function_checks import recording
from lit_codeRL.problems.synth.held_out import ANSWER_FUNCTION, CASE_FUNCTION, KEEP_FUNCTION, RUN_NAME
import ast

SOURCE = """async def test_x():
    never = threading.Event()
    with ThreadPoolExecutor(1) as executor:
        executor.submit(never.wait)  # a worker that never ends: the exit waits for it
        try:
            assert await asyncio.sleep(600, [1]) == [1]
        finally:
            await asyncio.sleep(600)  # cancelled, it waits again: suspended when its loop ends
"""
namespace = {"asyncio": asyncio, "threading": threading, "ThreadPoolExecutor": ThreadPoolExecutor}
if sys.argv[1] == "function":
    exec(ANSWER_FUNCTION + KEEP_FUNCTION + recording(ast.parse(SOURCE).body[0]), namespace)
else:  # the same test, a method of an ``IsolatedAsyncioTestCase``
    import textwrap, unittest
    case = "class TestX(unittest.IsolatedAsyncioTestCase):\\n" + textwrap.indent(SOURCE.replace("test_x()", "test_x(self)"), "    ")
    owner = ast.parse(case).body[0]
    namespace["unittest"] = unittest
    exec(ANSWER_FUNCTION + KEEP_FUNCTION + CASE_FUNCTION + recording(owner.body[0], owner), namespace)
start = time.monotonic()
print(namespace["_lcrl_answer"](namespace[RUN_NAME]), flush=True)
gc.collect()  # what a later test's collection would do to a coroutine left suspended
print(round(time.monotonic() - start, 1), flush=True)
sys.stdout.flush()
import os
os._exit(0)  # the worker is the test's own and never ends: leave without joining it
'''


@pytest.mark.parametrize("kind", ["function", "isolated case"])
def test_an_async_call_that_times_out_inside_a_thread_pool_leaves_nothing_to_hang_on(kind):
    """janus' tests wait in ``with ThreadPoolExecutor(4)`` for getters a changed input left
    without an item: the candidate timed out, and its coroutine, left suspended, was closed when
    collected, after the timer was off: the ``with``'s exit joined a thread that never ends, and
    the clean run of every candidate hung to its limit (no answer, no check for the repository).
    The coroutine is now closed while the timer can still end it, an ``IsolatedAsyncioTestCase``'s
    too (its runner cancels its tasks, and its cancellation met the timer as well)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", LEFT_WAITING, kind.split()[0]],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(ROOT),
    )
    lines = done.stdout.split()
    assert lines[:2] == ["['timeout',", "'']"], (done.stdout, done.stderr[-2000:])
    assert float(lines[2]) < 5.0, done.stdout
