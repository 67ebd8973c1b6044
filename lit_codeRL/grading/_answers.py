"""The answer run of grading (trusted, stdlib only; the runner's parent imports it).

Every other check of a grading run asks the process that ran the code under test what happened
in it: pytest's reports, the audit hook's events, the record of the grader's objects. Code that
knows where those live can change them (a reporter patched to forge the failing test's pass, the
record emptied first), and code that can tell the mirror run from the first (the test's values
where they run against its source text) forges only where the values are the test's own. Where a
task has one failing test function, nothing caught that (``docs/swe.md``, the answer run).

Here the verdict is made **outside** that process, from values the code under test cannot know
without computing them. A check is an equality of a computed value with a literal written in the
test: ``assert <computed> == <literal>`` (either side), ``assert _lcrl_close(<computed>,
<literal>)`` (a held-out check comparing floats) or, in a class, ``self.assertEqual(<computed>,
<literal>)`` (and its ``assert*Equal`` siblings); the literal may be folded from literals
(``'tea' + ' ' * 3``) or be a ``pytest.mark.parametrize`` column written out in the text that
the test uses nowhere else (``assert add(a, b) == expected``: each row answered, the child given
the other columns; the rows in the decorator, or in a module name bound once to them, ``CASES``,
whose binding then leaves the child's code). A *raises-check* is a check too: ``with
pytest.raises(E, match="...")`` over a block (``self.assertRaises(E)``, ``assertRaisesRegex(E,
"...")``, the call forms ``pytest.raises(E, f, x)``), whose classes (names, ``module.Name``, a
tuple, a row's column) and pattern are written out: the block runs in a ``try`` that records the
class names of what it raised (or that it raised nothing) and its message, and this process
wants one of the names it expects among them and its pattern found in the message. A
*comparison* of one computed value with values written out (``assert 0 < f(x) <= 1``, ``"sep" in
text(x)``, ``pytest.approx``, ``math.isclose``, ``self.assertGreater``, ``assertAlmostEqual``,
``assertCountEqual``, ``assertRegex``) records the computed value; the operators, the values, the
tolerances and which way the test wants it stay here (``_holds.py``). Every other ``assert`` (an
``and`` split into its operands; ``self.assertTrue``, ``assertIsNone``, ``assertIs``,
``assertIsInstance`` and their negations, a comparison method over two computed values) is a
*truth check*: the child records the truth of what it checks, each ``not`` taken off and ``is
not``/``not in``/``!=`` turned, and this process wants the truth the test wants, which the
child's code does not say. A test function with one or more
(no decorator but such a ``parametrize``, no parameter but ``self``, ``tmp_path`` and its rows')
is *answerable*. The answer run (a grading run of its own, in a fresh workspace) applies the
diff and the tests as the first run does, reads the answerable functions of the FAIL_TO_PASS
tests it is given, keeps each check's literal **here**, in this process (undumpable, never
running a line of the repository), and then removes every
graded test file, the repository's git objects and every compiled file from the work tree. A
child with no test file in it runs each test module's code other than its tests (imports,
helpers, setup), then each answerable function with each check replaced by a record of its
computed side (every other statement as written, ``self`` a bare ``unittest.TestCase``,
``tmp_path`` a fresh directory), writing each value's ``repr`` and each test's end to a pipe of
its own; this process compares each record with its literal, and wants every check recorded and
every test ended without an error.

The child may write anything: to pass, it must write the value the test expects, which is in no
file, no process and no argument it can reach. A diff that forged the first run's reports and
computes the bug gives the bug's value here; a diff that computes the answer honestly gives it
here too (its run is the reference's, which validation asked: a test whose reference answers
disagree is not asked again). What is left: the values a truth check builds, which run in the
child (``f(x) == build(3)``: the child can read them there, though not whether the test wants
the truth), and the other statements of an answered test (``pytest.warns``); a
raises-check with no pattern, whose class can be guessed (``ValueError``) by code that tells this
run apart and raises it on the right call; test files the task does not grade, left in the work
tree; an answer the diff carries written out (the visible tests' answers hard-coded; the
held-out checks, which the agent never sees, are answerable tests too); and marks a run leaves
on the machine (the host's page cache) used as a channel from the first run's process, which
holds the test's values.
"""

import ast
import cmath
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Mapping

import _mirror
from _holds import OPERATORS, UNITTEST_KINDS, Holds

MAX_ANSWER = 1 << 16
"""Longest ``repr`` of one value the child may answer with (a longer one differs)."""
MAX_OUTPUT = 8 << 20
"""Most bytes read from the child's answer pipe (the rest differs)."""
CLOSE = "_lcrl_close"
"""The held-out checks' float and complex comparison (``problems/synth/held_out.py: CLOSE_FUNCTION``)."""
AGREE, DIFFER, NONE = "agree", "differ", "none"
"""A test's verdict: every check recorded with its literal and the test ended; not; not answerable."""


FIXTURES = frozenset({"tmp_path"})
"""Fixtures a test may take and still be answered: each made afresh for it, as pytest makes it."""
RECORD = "_lcrl_record"
"""What each check becomes in the child: ``_lcrl_record(<index>, <computed>)``."""
TRUTH = "_lcrl_truth"
"""What a truth check becomes in the child: ``_lcrl_truth(<index>, <checked>)``, which records
``bool(<checked>)``; whether the test wants it true or false stays here."""
RAISED = "_lcrl_raised"
"""What a raises-check's block ends with in the child: ``_lcrl_raised(<index>, <the exception it
raised, or None>)``, which records the exception's class names and message."""
ERROR = "_lcrl_error"
"""The name the child's ``except`` binds the exception a raises-check's block raised to."""
MAX_MESSAGE = 4096
"""Longest exception message the child records for a raises-check's ``match`` (the rest is cut)."""
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class _NotAnswerable(Exception):
    """A generator or a coroutine: pytest does not run its body as a test."""


class _Param:
    """The expected side of a check is the test's parameter ``name``: its value in each row."""

    def __init__(self, name: str) -> None:
        self.name = name


class _Raises:
    """A raises-check's expectation: the block raises an exception one of whose classes (its own
    or one it derives from) is named one of ``names``, with a message ``pattern`` finds
    (``re.search``, as ``pytest.raises(match=)`` and ``assertRaisesRegex`` match); either may be a
    :class:`_Param` until a row gives it."""

    def __init__(self, names: "tuple[str, ...] | _Param", pattern: "str | None | _Param") -> None:
        self.names, self.pattern = names, pattern

    def __eq__(self, other: object) -> bool:  # for the tests that read a plan
        return isinstance(other, _Raises) and (self.names, self.pattern) == (other.names, other.pattern)

    def __repr__(self) -> str:
        return f"_Raises({self.names!r}, {self.pattern!r})"

    def met_by(self, value: object) -> bool:
        """Whether the child's record ``[class names, message]`` meets it."""
        if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
            return False
        names, message = value
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            return False
        if not set(names) & set(self.names):  # type: ignore[arg-type]
            return False
        try:
            return self.pattern is None or re.search(self.pattern, message) is not None  # type: ignore[arg-type]
        except (re.error, TypeError, RecursionError):
            return False


class _Records(ast.NodeTransformer):
    """Each check of a test becomes a record of its computed side, its expected value kept aside
    (a literal's value, or a :class:`_Param` for one of ``params``)."""

    def __init__(
        self,
        method: bool,
        params: frozenset[str],
        constants: Mapping[str, object],
        imports: Mapping[str, str] | None = None,
    ) -> None:
        self.method, self.params, self.constants = method, params, constants
        self.imports = imports or {}
        self.expected: list[tuple[object, bool]] = []

    def _index(self, expected: object, close: bool = False) -> ast.Constant:
        """The next check's index in the child's code, its expected value kept here."""
        self.expected.append((expected, close))
        return ast.Constant(len(self.expected) - 1)

    def _record(self, computed: ast.expr, value: object, close: bool) -> ast.stmt:
        return ast.Expr(ast.Call(ast.Name(RECORD, ast.Load()), [self._index(value, close), computed], []))

    def _truth(self, checked: ast.expr, wanted: bool) -> ast.stmt:
        return ast.Expr(ast.Call(ast.Name(TRUTH, ast.Load()), [self._index(wanted), checked], []))

    def _checked(self, checked: ast.expr, wanted: bool) -> list[ast.stmt]:
        """The records of ``checked`` that the test wants ``wanted``: one per conjunct
        (:func:`_conjuncts`), each an equality's record, a comparison's (:func:`_comparison`) or
        the truth of what it checks."""
        out = []
        for conjunct, want in _conjuncts(checked, wanted):
            if want and (check := _check(ast.Assert(conjunct), False, self.params, self.constants)):
                out.append(self._record(*check))
            elif comparison := _comparison(conjunct, want, self.params, self.constants, self.imports):
                out.append(self._record(*comparison, False))
            else:
                out.append(self._truth(*_truth_check(conjunct, want)))
        return out

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        return self._checked(node.test, True)

    def visit_Expr(self, node: ast.Expr) -> ast.stmt | list[ast.stmt]:
        check = _check(node, self.method, self.params, self.constants)
        if check is not None:
            return self._record(*check)
        truth = _truth_method(node.value) if self.method else None
        if truth is not None:
            return self._checked(*truth)
        holds = _method_holds(node.value, self.params, self.constants) if self.method else None
        if holds is not None:
            return self._record(*holds, False)
        raises = _raises_check(node.value, self.method, self.params, self.constants, call_form=True)
        if raises is None:
            return self.generic_visit(node)
        expectation, body = raises
        return self._raised(expectation, [ast.Expr(body)], None)  # type: ignore[arg-type]

    def visit_With(self, node: ast.With) -> ast.stmt:
        """``with pytest.raises(E, match=...) [as info]:`` (``self.assertRaises(E)``,
        ``assertRaisesRegex(E, pattern)``) over a block: the block in a ``try`` whose exception,
        or its absence, is recorded; ``info`` the exception's record (``.value``, ``.exception``)."""
        self.generic_visit(node)
        if len(node.items) != 1:
            return node
        item = node.items[0]
        raises = _raises_check(item.context_expr, self.method, self.params, self.constants)
        if raises is None or not isinstance(item.optional_vars, ast.Name | None):
            return node
        return self._raised(raises[0], node.body, item.optional_vars)

    def _raised(self, expectation: _Raises, body: list[ast.stmt], target: ast.Name | None) -> ast.stmt:
        index = self._index(expectation)

        def raised(error: ast.expr) -> ast.expr:
            return ast.Call(ast.Name(RAISED, ast.Load()), [index, error], [])

        caught = (
            ast.Expr(raised(ast.Name(ERROR, ast.Load())))
            if target is None
            else ast.Assign([ast.Name(target.id, ast.Store())], raised(ast.Name(ERROR, ast.Load())))
        )
        handler = ast.ExceptHandler(ast.Name("BaseException", ast.Load()), ERROR, [caught])
        return ast.Try(body, [handler], [ast.Expr(raised(ast.Constant(None)))], [])

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
            raise _NotAnswerable
        return super().generic_visit(node)


Answerable = tuple[str, list[str], list[tuple[str, list[tuple[object, bool]]]]]
"""An answerable test as the child runs it: ``(source, fixtures, rows)``: the function renamed
``_lcrl_test`` with each check a record numbered from 0, the fixtures it takes, and per row of
its parameters (one for a test with none) the source of the inputs the child passes it (a dict
display) and each check's ``(expected value, close)`` in that order."""


def answerable(
    function: ast.AST,
    method: bool,
    constants: Mapping[str, object] | None = None,
    tables: Mapping[str, ast.expr] | None = None,
    imports: Mapping[str, str] | None = None,
) -> Answerable | None:
    """``function`` as the child runs it (:data:`Answerable`); ``None``: it is not answerable (no
    check, a generator, a decorator other than ``pytest.mark.parametrize`` over rows written out,
    a fixture not made here). A check is an equality of a computed value with a literal
    (``assert``, or a ``self.assert*Equal`` call in a class), anywhere in the body (a loop, a
    ``with``, a helper it defines), or with a parameter whose value is a literal in every row and
    that the test uses nowhere else (``assert add(a, b) == expected``); each is recorded and its
    literal leaves the child's code (a parameter it checks against leaves the signature: the
    child is passed the others, the *inputs*). A comparison with values written out
    (:func:`_comparison`, :func:`_method_holds`) records its computed value, the rest kept here
    (a :class:`~_holds.Holds`). Every other ``assert`` (``unittest``'s truth checks too,
    :data:`TRUTH_METHODS`, :data:`COMPARE_METHODS`) records its truth (:func:`_truth_check`), the
    truth the test wants kept here. Every other statement stands as written: the input built
    first, a raises-check that does not name its expectation in the text, ``pytest.warns``,
    which fails the test in the child as in pytest. A raises-check whose classes and pattern are written
    out (:func:`_raises_check`) is recorded as what its block raised, its expectation kept here
    (a :class:`_Raises`). ``constants``: the module's names that hold only
    expected values (:func:`answer_constants`), read as the literals they are bound to;
    ``tables``: those that hold only rows (:func:`row_tables`), read in a decorator as the
    display they are bound to; ``imports``: what the module's imported names stand for
    (:func:`imported_names`)."""
    if not isinstance(function, ast.FunctionDef):
        return None
    rows = parameter_rows(function, tables)
    a = function.args
    names = [p.arg for p in [*a.posonlyargs, *a.args]]
    if method:
        if names[:1] != ["self"]:
            return None
        names = names[1:]
    if rows is None or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
        return None
    given = set(rows[0]) if rows else set()
    if not set(names) - given <= FIXTURES or not given <= set(names):
        return None
    # a parameter is an expected value where every use of it is a check's expected side: take
    # out those used otherwise until none is (``assert f(x, expected) == expected`` reads it)
    params = frozenset(n for n in given if not _stores(function, n))
    while True:
        records = _Records(method, params, constants or {}, imports)
        copy = ast.parse(ast.unparse(function)).body[0]
        try:
            body = []
            for statement in copy.body:
                made = records.visit(statement)
                body += made if isinstance(made, list) else [made]
        except (_NotAnswerable, RecursionError):
            return None
        still = {n.id for b in body for n in ast.walk(b) if isinstance(n, ast.Name) and n.id in params}
        if not still:
            break
        params -= still
    if not records.expected:
        return None
    copy.body, copy.name, copy.decorator_list = body, "_lcrl_test", []
    copy.args.args = [p for p in copy.args.args if p.arg not in params]
    out = []
    for row in rows or [{}]:
        expected = []
        for value, close in records.expected:
            if isinstance(value, _Param):
                value = _expected_value(row[value.name])
            elif isinstance(value, _Raises):
                value = _unaliased(_row_raises(value, row), imports or {})
            elif isinstance(value, Holds):
                value = _row_holds(value, row)
            if value is _NO_VALUE:
                return None
            expected.append((value, close))
        inputs = {k: v for k, v in row.items() if k not in params}
        display = ast.Dict([ast.Constant(k) for k in inputs], list(inputs.values()))
        out.append((ast.unparse(display), expected))
    return ast.unparse(ast.fix_missing_locations(copy)), [n for n in names if n not in given], out


def _row_raises(expectation: _Raises, row: dict[str, ast.expr]) -> _Raises | object:
    """``expectation`` with a row's exception class and pattern where they are its parameters;
    :data:`_NO_VALUE` where the row's are not written out (a class built there, a pattern that is
    no string)."""
    names, pattern = expectation.names, expectation.pattern
    if isinstance(names, _Param):
        names = _exception_names(row[names.name])  # type: ignore[assignment]
    if isinstance(pattern, _Param):
        pattern = _expected_value(row[pattern.name])  # type: ignore[assignment]
    if names is None or not (pattern is None or isinstance(pattern, str)):
        return _NO_VALUE
    return _Raises(names, pattern)  # type: ignore[arg-type]


def _row_holds(expectation: Holds, row: dict[str, ast.expr]) -> Holds | object:
    """``expectation`` with a row's values where they are its parameters; :data:`_NO_VALUE`
    where one is not written out."""
    given = expectation.given(lambda v: _expected_value(row[v.name]) if isinstance(v, _Param) else v)
    if any(v is _NO_VALUE for v in (*given.values, *(o for _, o in given.options))):
        return _NO_VALUE
    return given


def _stores(function: ast.FunctionDef, name: str) -> bool:
    """Whether ``function`` binds ``name`` anywhere but as its own parameter (an assignment, a
    ``del``, a ``global``, a parameter of a function or lambda it defines)."""
    a = function.args
    own = next((p for p in [*a.posonlyargs, *a.args] if p.arg == name), None)
    return any(
        (isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load))
        or (isinstance(n, ast.arg) and n.arg == name and n is not own)
        or (isinstance(n, ast.Global | ast.Nonlocal) and name in n.names)
        for n in ast.walk(function)
    )


MAX_ROWS = 256
"""Rows of a parametrized test answered at most (a test with more is not answerable)."""


def parameter_rows(
    function: ast.FunctionDef, tables: Mapping[str, ast.expr] | None = None
) -> list[dict[str, ast.expr]] | None:
    """Each row of ``function``'s ``pytest.mark.parametrize`` decorators, by parameter name (the
    product of stacked ones, as pytest makes it); ``[]`` for a test with no decorator; ``None``
    for another decorator, rows not written out in the text (a comprehension, a name other than
    one of ``tables``, :func:`row_tables`), a
    ``pytest.param`` with ``marks`` (a skip or an expected failure), ``indirect``, or more than
    :data:`MAX_ROWS` rows."""
    rows: list[dict[str, ast.expr]] = [{}]
    for decorator in function.decorator_list:
        group = _decorator_rows(decorator, tables or {})
        if group is None or any(set(group[0]) & set(r) for r in rows[:1]):
            return None
        rows = [{**r, **g} for r in rows for g in group]
        if len(rows) > MAX_ROWS:
            return None
    return rows if function.decorator_list else []


def _decorator_rows(decorator: ast.expr, tables: Mapping[str, ast.expr]) -> list[dict[str, ast.expr]] | None:
    if not (
        isinstance(decorator, ast.Call)
        and ast.unparse(decorator.func) in ("pytest.mark.parametrize", "mark.parametrize")
        and len(decorator.args) == 2
        and all(k.arg == "ids" for k in decorator.keywords)
    ):
        return None
    names_node, values = decorator.args
    if isinstance(values, ast.Name) and values.id in tables:
        values = tables[values.id]  # ``parametrize("a, b, expected", CASES)``: the rows it is bound to
    if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
        names = [n.strip() for n in names_node.value.split(",") if n.strip()]
        whole = len(names) == 1  # one name as a string takes each value whole
    elif isinstance(names_node, ast.Tuple | ast.List) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts
    ):
        names, whole = [e.value for e in names_node.elts], False  # type: ignore[attr-defined]
    else:
        return None
    if not names or len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        return None
    if not isinstance(values, ast.List | ast.Tuple) or not values.elts:
        return None
    rows = []
    for entry in values.elts:
        if isinstance(entry, ast.Call) and ast.unparse(entry.func) in ("pytest.param", "param"):
            if any(k.arg != "id" for k in entry.keywords):
                return None
            items = list(entry.args)
        elif whole:
            items = [entry]
        elif isinstance(entry, ast.Tuple | ast.List):
            items = list(entry.elts)
        else:
            return None
        if len(items) != len(names) or any(isinstance(i, ast.Starred) for i in items):
            return None
        rows.append(dict(zip(names, items, strict=True)))
    return rows


def _check(
    statement: ast.stmt, method: bool, params: frozenset[str], constants: Mapping[str, object]
) -> tuple[ast.expr, object, bool] | None:
    """``(computed side, expected value, close)`` where ``statement`` is a check: the expected
    value a literal's, or a :class:`_Param` for a parameter of ``params``."""
    close = False
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, test.comparators[0]]
        elif _call_of(test, CLOSE) and len(test.args) == 2:
            sides, close = list(test.args), True
        else:
            return None
    elif method and isinstance(statement, ast.Expr) and _self_call(statement.value):
        call = statement.value
        if call.func.attr not in _mirror.EQUAL_METHODS or len(call.args) not in (2, 3) or call.keywords:
            return None  # a message may follow
        sides = list(call.args[:2])
    else:
        return None
    found = _hole(sides, params, constants)
    if found is None or (close and found[2] != 0):  # ``_lcrl_close``'s expected value is second
        return None
    computed, (value,), _ = found
    return computed, value, close


def _truth_check(checked: ast.expr, wanted: bool) -> tuple[ast.expr, bool]:
    """``(what the child records the truth of, the truth the test wants)`` for ``assert
    <checked>``: each ``not`` taken off and ``is not``/``not in`` made ``is``/``in``, the truth
    wanted turned over each time, so the child's code does not say which way the test checks
    (``assert f(x) is not None`` and ``assert f(x) is None`` both record ``f(x) is None``)."""
    while isinstance(checked, ast.UnaryOp) and isinstance(checked.op, ast.Not):
        checked, wanted = checked.operand, not wanted
    if isinstance(checked, ast.Compare) and len(checked.ops) == 1 and type(checked.ops[0]) in _TURNED:
        turned = _TURNED[type(checked.ops[0])]()
        checked, wanted = ast.Compare(checked.left, [turned], checked.comparators), not wanted
    return checked, wanted


_TURNED = {ast.IsNot: ast.Is, ast.NotIn: ast.In, ast.NotEq: ast.Eq}

TRUTH_METHODS: dict[str, tuple[int, str, bool]] = {
    "assertTrue": (1, "", True), "assertFalse": (1, "", False),
    "assertIsNone": (1, "is None", True), "assertIsNotNone": (1, "is None", False),
    "assertIn": (2, "in", True), "assertNotIn": (2, "in", False),
    "assertIs": (2, "is", True), "assertIsNot": (2, "is", False),
    "assertIsInstance": (2, "isinstance", True), "assertNotIsInstance": (2, "isinstance", False),
}  # fmt: skip
"""``unittest``'s truth checks: how many arguments they check, what of them, the truth wanted."""


COMPARE_METHODS = {
    "assertNotEqual": "NotEq", "assertGreater": "Gt", "assertGreaterEqual": "GtE",
    "assertLess": "Lt", "assertLessEqual": "LtE", **dict.fromkeys(_mirror.EQUAL_METHODS, "Eq"),
}  # fmt: skip
"""``unittest``'s comparisons of two values: the operator each checks (an equality method that
:func:`_check` did not take, a message as ``msg=`` or both sides computed, is one too)."""
_METHOD_CHECKS = frozenset({*TRUTH_METHODS, *COMPARE_METHODS})


def _truth_method(call: ast.expr) -> tuple[ast.expr, bool] | None:
    """``self.assertTrue(x)`` (:data:`TRUTH_METHODS`, :data:`COMPARE_METHODS`, a message after
    its arguments or as ``msg=``) as an ``assert`` would check it: what it checks and the truth
    wanted (``self.assertGreater(a, b)``: ``a > b``, true)."""
    if not (_self_call(call) and call.func.attr in _METHOD_CHECKS):  # type: ignore[attr-defined]
        return None
    name = call.func.attr  # type: ignore[attr-defined]
    count, kind, wanted = TRUTH_METHODS.get(name, (2, COMPARE_METHODS.get(name), True))  # type: ignore[arg-type]
    args = call.args  # type: ignore[attr-defined]
    keywords = call.keywords  # type: ignore[attr-defined]
    if len(args) not in (count, count + 1) or any(k.arg != "msg" for k in keywords):
        return None
    if len(args) > count and keywords or any(isinstance(a, ast.Starred) for a in args):
        return None
    if kind == "is None":
        checked: ast.expr = ast.Compare(args[0], [ast.Is()], [ast.Constant(None)])
    elif kind == "isinstance":
        checked = ast.Call(ast.Name("isinstance", ast.Load()), list(args[:2]), [])
    elif kind in OPERATORS:
        checked = ast.Compare(args[0], [getattr(ast, kind)()], [args[1]])
    elif kind:
        op = ast.In() if kind == "in" else ast.Is()
        checked = ast.Compare(args[0], [op], [args[1]])
    else:
        checked = args[0]
    return checked, wanted


def _conjuncts(checked: ast.expr, wanted: bool) -> list[tuple[ast.expr, bool]]:
    """``checked`` wanted ``wanted`` as the checks it is made of: each ``not`` taken off, an
    ``and`` wanted true (or an ``or`` wanted false) split into its operands, each checked on its
    own (``assert f(1) == 2 and not g(3)``: ``f(1) == 2`` true, ``g(3)`` false). An operand after
    a failing one runs in the child where pytest would not have run it: the check already
    failed."""
    while isinstance(checked, ast.UnaryOp) and isinstance(checked.op, ast.Not):
        checked, wanted = checked.operand, not wanted
    if isinstance(checked, ast.BoolOp) and isinstance(checked.op, ast.And if wanted else ast.Or):
        return [part for value in checked.values for part in _conjuncts(value, wanted)]
    return [(checked, wanted)]


APPROX = ("pytest.approx",)
APPROX_OPTIONS = ("rel", "abs", "nan_ok")
ISCLOSE = ("math.isclose",)
"""What ``approx(...)`` and ``isclose(...)`` must stand for (:func:`_qualified`): numpy's
``isclose`` or a helper of the tests named ``approx`` decides otherwise."""


def _comparison(
    checked: ast.expr,
    wanted: bool,
    params: frozenset[str],
    constants: Mapping[str, object],
    imports: Mapping[str, str],
) -> tuple[ast.expr, Holds] | None:
    """``(computed side, expectation)`` where ``checked`` compares one computed value with values
    written in the text (literals, ``constants``, a parameter of ``params``): a chain of
    :data:`~_holds.OPERATORS` (``0 <= f(x) < 1``, ``"sep" in text(x)``), an equality or not with
    ``pytest.approx(...)`` or ``math.isclose(...)``, their tolerances written out too."""
    if isinstance(checked, ast.Compare):
        ops = tuple(type(op).__name__ for op in checked.ops)
        operands = [checked.left, *checked.comparators]
        if not set(ops) <= set(OPERATORS):
            return None
        if len(ops) == 1 and ops[0] in ("Eq", "NotEq"):
            for i, side in enumerate(operands):
                approx = _written_call(side, APPROX, APPROX_OPTIONS, params, constants, imports)
                if approx is not None:
                    computed = operands[1 - i]
                    if _side(computed, params, constants) is not _NO_VALUE:
                        return None
                    expected, options = approx
                    return computed, Holds(
                        "approx", (expected,), options=options, wanted=wanted == (ops[0] == "Eq")
                    )
        found = _hole(operands, params, constants)
        if found is None:
            return None
        computed, values, hole = found
        return computed, Holds("compare", values, hole, ops, wanted=wanted)
    if isinstance(checked, ast.Call) and _qualified(checked.func, imports) in ISCLOSE:
        found = _hole(checked.args, params, constants)
        options = _written_options(checked.keywords, ("rel_tol", "abs_tol"), params, constants)
        if found is None or options is None or len(checked.args) != 2:
            return None
        computed, values, _ = found
        return computed, Holds("isclose", values, options=options, wanted=wanted)
    return None


UNITTEST_OPTIONS = {
    "assertAlmostEqual": ("places", "msg", "delta"), "assertNotAlmostEqual": ("places", "msg", "delta"),
    "assertCountEqual": ("msg",), "assertRegex": ("msg",), "assertNotRegex": ("msg",),
}  # fmt: skip
"""What :data:`~_holds.UNITTEST_KINDS` take after their two values (a message is dropped)."""


def _method_holds(
    call: ast.expr, params: frozenset[str], constants: Mapping[str, object]
) -> tuple[ast.expr, Holds] | None:
    """``(computed side, expectation)`` for ``self.assertAlmostEqual(f(x), 3.1416, places=3)``
    (``assertNotAlmostEqual``, ``assertCountEqual``, ``assertRegex``, ``assertNotRegex``): one of
    its two values computed, the other and its ``places``/``delta`` written out."""
    if not (_self_call(call) and call.func.attr in UNITTEST_KINDS):  # type: ignore[attr-defined]
        return None
    kind = call.func.attr  # type: ignore[attr-defined]
    names = UNITTEST_OPTIONS[kind]
    args = list(call.args)  # type: ignore[attr-defined]
    extra = [ast.keyword(name, value) for name, value in zip(names, args[2:], strict=False)]
    found = _hole(args[:2], params, constants)
    options = _written_options([*extra, *call.keywords], names, params, constants)  # type: ignore[attr-defined]
    if found is None or options is None or len(args) not in range(2, 2 + len(names) + 1):
        return None
    computed, values, hole = found
    return computed, Holds(kind, values, hole, options=tuple((k, v) for k, v in options if k != "msg"))


def _side(node: ast.expr, params: frozenset[str], constants: Mapping[str, object]) -> object:
    """A value written in the text: a parameter's placeholder, or :func:`_expected_value`'s."""
    if isinstance(node, ast.Name) and node.id in params:
        return _Param(node.id)
    return _expected_value(node, constants)


def _hole(
    args: list[ast.expr], params: frozenset[str], constants: Mapping[str, object]
) -> tuple[ast.expr, tuple, int] | None:
    """``(the computed one, the others' values, its position)`` where exactly one of ``args`` is
    not written out."""
    if any(isinstance(a, ast.Starred) for a in args):
        return None
    values = [_side(a, params, constants) for a in args]
    holes = [i for i, v in enumerate(values) if v is _NO_VALUE]
    if len(holes) != 1:
        return None
    return args[holes[0]], tuple(v for v in values if v is not _NO_VALUE), holes[0]


def _written_call(
    node: ast.expr,
    names: tuple[str, ...],
    options: tuple[str, ...],
    params: frozenset[str],
    constants: Mapping[str, object],
    imports: Mapping[str, str],
) -> tuple[object, tuple[tuple[str, object], ...]] | None:
    """``(first argument's value, keyword options)`` of a call of one of ``names`` whose arguments
    are all written out (positional ones after the first are ``options`` in order)."""
    if not (isinstance(node, ast.Call) and _qualified(node.func, imports) in names and node.args):
        return None
    first = _side(node.args[0], params, constants)
    extra = [ast.keyword(name, value) for name, value in zip(options, node.args[1:], strict=False)]
    written = _written_options([*extra, *node.keywords], options, params, constants)
    if first is _NO_VALUE or written is None or len(node.args) > 1 + len(options):
        return None
    return first, written


def _written_options(
    keywords: list[ast.keyword],
    names: tuple[str, ...],
    params: frozenset[str],
    constants: Mapping[str, object],
) -> tuple[tuple[str, object], ...] | None:
    """Keywords among ``names`` as ``(name, value)`` pairs, each value written out (``msg``: any);
    ``None`` for another keyword, a ``**`` or a value computed."""
    out = []
    for keyword in keywords:
        if keyword.arg not in names:
            return None
        value = None if keyword.arg == "msg" else _side(keyword.value, params, constants)
        if value is _NO_VALUE:
            return None
        out.append((keyword.arg, value))
    if len({k for k, _ in out}) != len(out):
        return None
    return tuple(out)


RAISES_KEYWORDS = {"raises": {"expected_exception", "match"}, "assertRaises": {"msg"}}
"""The keywords a raises-check over a ``with`` block may take and be answered (``check=``, a
callable that decides for pytest, is none of them); the call form passes every keyword on to the
callable, as pytest and ``unittest`` do."""


def _raises_check(
    call: ast.expr,
    method: bool,
    params: frozenset[str],
    constants: Mapping[str, object],
    call_form: bool = False,
) -> tuple[_Raises, ast.Call | None] | None:
    """``(expectation, the call it checks)`` where ``call`` is a raises-check that names its
    exception classes (a name, ``module.Name``, a tuple of them, or a parameter of ``params``) and
    its message pattern if any (a literal, a constant, a parameter): ``pytest.raises(E,
    match=...)`` or, in a class, ``self.assertRaises(E)``, ``self.assertRaisesRegex(E, pattern)``
    as a ``with`` item (the call ``None``), or with the callable and its arguments after them as a
    statement (``call_form``: ``pytest.raises(E, f, x)``, the call ``f(x)``)."""
    if not isinstance(call, ast.Call):
        return None
    func = ast.unparse(call.func)
    if func in ("pytest.raises", "raises"):
        kind, regex = "raises", False
    elif method and _self_call(call) and call.func.attr in _mirror.RAISES_CALLS:  # type: ignore[attr-defined]
        kind, regex = "assertRaises", call.func.attr != "assertRaises"  # type: ignore[attr-defined]
    else:
        return None
    keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
    if len(keywords) != len(call.keywords):
        return None
    args = list(call.args)
    if call_form:  # its keywords are the callable's (``match=`` too, ``msg=`` too)
        keywords = {}
    elif not set(keywords) <= RAISES_KEYWORDS[kind]:
        return None
    elif "expected_exception" in keywords:
        args.insert(0, keywords["expected_exception"])
    fixed = 2 if regex else 1
    if len(args) < fixed or (len(args) > fixed) != call_form:
        return None
    if any(isinstance(a, ast.Starred) for a in args[: fixed + 1]):
        return None
    names = _exception_names(args[0], params)
    pattern_node = args[1] if regex else keywords.get("match")
    pattern: str | None | _Param = None
    if isinstance(pattern_node, ast.Name) and pattern_node.id in params:
        pattern = _Param(pattern_node.id)
    elif pattern_node is not None:
        value = _expected_value(pattern_node, constants)
        pattern = value if isinstance(value, str) else _NO_VALUE  # type: ignore[assignment]
    if names is None or pattern is _NO_VALUE:
        return None
    checked = ast.Call(args[fixed], args[fixed + 1 :], call.keywords) if call_form else None
    return _Raises(names, pattern), checked


def _exception_names(node: ast.expr, params: frozenset[str] = frozenset()) -> tuple[str, ...] | _Param | None:
    """The class names a raises-check's exception argument names: ``ValueError``, ``errors.Bad``
    (``Bad``), a tuple of such; a parameter of ``params`` (a :class:`_Param`); else ``None``."""
    if isinstance(node, ast.Name) and node.id in params:
        return _Param(node.id)
    if isinstance(node, ast.Name | ast.Attribute):
        return (node.id if isinstance(node, ast.Name) else node.attr,)
    if isinstance(node, ast.Tuple) and node.elts:
        names = [_exception_names(e) for e in node.elts]
        if all(isinstance(n, tuple) for n in names):
            return tuple(n for group in names for n in group)  # type: ignore[union-attr]
    return None


_NO_VALUE = object()
"""What :func:`_expected_value` gives for a side that is not written out in the text."""
MAX_FOLDED = 1 << 16
"""Longest string, bytes, list or tuple, and most bits of an integer, that folding a constant
expression of the expected side may make (a longer one is not a literal to the answer run)."""
_FOLDED_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


def _expected_value(node: ast.expr, constants: Mapping[str, object] | None = None) -> object:
    """The value of a side written out in the text: a literal (:func:`_mirror._is_literal`), a
    name of ``constants``, or ``+``, ``-`` and ``*`` of them (``'tea' + ' ' * 13 + '2.50'``,
    ``'-' * WIDTH``, ``[0] * 3``), folded here within :data:`MAX_FOLDED`; else :data:`_NO_VALUE`."""
    try:
        if _mirror._is_literal(node):
            return ast.literal_eval(node)
        if isinstance(node, ast.Name) and node.id in (constants or {}):
            return (constants or {})[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _FOLDED_OPS:
            left, right = _expected_value(node.left, constants), _expected_value(node.right, constants)
            if left is _NO_VALUE or right is _NO_VALUE:
                return _NO_VALUE
            if isinstance(node.op, ast.Mult):  # bound a repetition before it is made
                count = right if isinstance(left, str | bytes | list | tuple) else left
                seq = left if isinstance(left, str | bytes | list | tuple) else right
                if isinstance(seq, str | bytes | list | tuple) and (
                    not isinstance(count, int) or count * len(seq) > MAX_FOLDED
                ):
                    return _NO_VALUE
            value = _FOLDED_OPS[type(node.op)](left, right)
            if isinstance(value, bool) or not isinstance(
                value, int | float | complex | str | bytes | list | tuple
            ):
                return _NO_VALUE
            too_big = (
                len(value) > MAX_FOLDED
                if isinstance(value, str | bytes | list | tuple)
                else (isinstance(value, int) and value.bit_length() > MAX_FOLDED)
            )
            return _NO_VALUE if too_big else value
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError, OverflowError):
        return _NO_VALUE
    return _NO_VALUE


def _call_of(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == name
        and not node.keywords
    )


def _self_call(node: ast.AST) -> bool:
    """``self.assert...(...)``: a unittest check (an equality one is answered, another is not)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr.startswith(("assert", "fail"))
    )


def support(module: ast.Module, answers: Collection[str] = ()) -> str:
    """The module's code other than its tests: its imports, helpers and setup, which the computed
    sides may read. Test functions and every class holding a test are left out (their literals
    are the expected values), and so are ``if __name__ == "__main__":`` and the bindings of the
    names in ``answers`` (:func:`answer_constants`, :func:`row_tables`)."""
    return ast.unparse(ast.Module(body=_support_nodes(module, answers), type_ignores=[]))


def _support_nodes(module: ast.Module, answers: Collection[str] = ()) -> list[ast.stmt]:
    """The top-level statements :func:`support` keeps."""
    kept = []
    for node in module.body:
        if _binds_constant(node) in answers:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            continue
        if isinstance(node, ast.ClassDef) and (
            node.name.startswith("Test")
            or any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
                for n in node.body
            )
        ):
            continue
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        kept.append(node)
    return kept


def _binds_constant(node: ast.stmt) -> str | None:
    """The name a top-level ``NAME = <value>`` (or ``NAME: T = <value>``) binds, else ``None``."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def answer_constants(module: ast.Module) -> dict[str, object]:
    """The module's names that may hold expected values: each bound once, at the top level, to a
    literal (or one folded from literals, :func:`_expected_value`), bound nowhere else (no other
    assignment, ``global``, ``del``, import, definition or parameter of that name) and read
    nowhere in the module's code other than its tests. Which of them the asked tests read only
    as a check's expected side, :func:`plan` decides."""
    values = {name: _expected_value(node) for name, node in _single_names(module).items()}
    return {name: value for name, value in values.items() if value is not _NO_VALUE}


def row_tables(module: ast.Module) -> dict[str, ast.expr]:
    """The module's names that may hold a parametrized test's rows (``CASES = [(2, 3, 5), ...]``,
    ``@pytest.mark.parametrize("a, b, expected", CASES)``): each bound as :func:`answer_constants`'
    are, to a list or tuple display of anything (an input may be built: ``Fraction(1, 2)``). Their
    binding leaves the child's code as a constant's does, so the expected column is in no process
    the code under test runs in; one an asked test reads otherwise stays, and its rows are no
    answer (:func:`plan`)."""
    return {n: v for n, v in _single_names(module).items() if isinstance(v, ast.List | ast.Tuple)}


def _single_names(module: ast.Module) -> dict[str, ast.expr]:
    """The value of each top-level ``NAME = <value>`` whose name is bound nowhere else in the
    module and read nowhere in its code other than its tests (:func:`_support_nodes`)."""
    values: dict[str, ast.expr] = {}
    for node in module.body:
        name = _binds_constant(node)
        if name is not None and not name.startswith("__"):
            values.setdefault(name, node.value)  # type: ignore[union-attr, arg-type]
    bound = _bindings(module)
    read = {
        n.id
        for kept in _support_nodes(module)
        for n in ast.walk(kept)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return {name: node for name, node in values.items() if bound.get(name) == 1 and name not in read}


def _bindings(module: ast.Module) -> dict[str, int]:
    """How many times each name is bound anywhere in ``module`` (assigned, imported, defined, a
    parameter, declared ``global``)."""
    bound: dict[str, int] = {}
    for node in ast.walk(module):
        names: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names = list(node.names)
        elif isinstance(node, ast.alias):
            names = [(node.asname or node.name).partition(".")[0]]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        for name in names:
            bound[name] = bound.get(name, 0) + 1
    return bound


def module_name(path: str) -> tuple[str, str]:
    """``(name, basedir)``: the dotted name pytest's ``append`` import mode gives the test file
    ``path`` and the directory it puts on ``sys.path`` (the first one up without ``__init__.py``)."""
    parts = [os.path.splitext(os.path.basename(path))[0]]
    directory = os.path.dirname(path)
    while directory and os.path.isfile(os.path.join(directory, "__init__.py")):
        parts.insert(0, os.path.basename(directory))
        directory = os.path.dirname(directory)
    return ".".join(parts), directory or "."


PROGRAM = r"""
import json as _j, os as _o, pathlib as _p, random as _r, sys as _s, tempfile as _t, unittest as _u

_s.path += {path!r}  # after the standard library, as in the pytest child
_s.dont_write_bytecode = True
_out = _o.fdopen({fd}, "w", buffering=1)


_SCALARS = (bool, int, float, complex, str, bytes)
_NUMERIC = ("__index__", "__int__", "__float__", "__complex__")


def _plain(value, seen=()):
    kind = next((t for t in (dict, list, tuple, set, frozenset) if isinstance(value, t)), None)
    if kind is None and type(value) not in _SCALARS:
        # a scalar of another type that is equal to a plain one answers as it: a subclass of
        # one (an IntEnum, numpy's float64), a numpy scalar (its .item(): int64, bool_), or a
        # number of another kind equal to an int, a float or a complex (Fraction(5), Decimal("2.5"):
        # the test's == holds for them as for the reference's plain number; Fraction(1, 3) equals
        # no float and stays itself, whose repr is no literal)
        try:
            kind = next((t for t in _SCALARS if isinstance(value, t)), None)
            if kind is not None:
                return kind(value)
            if getattr(value, "shape", None) == () and hasattr(value, "dtype"):
                return value.item()
        except Exception:
            pass
        if any(hasattr(type(value), m) for m in _NUMERIC):
            for number in (int, float, complex):
                try:
                    plain = number(value)
                    if plain == value:
                        return plain
                except Exception:
                    pass
        return value
    if kind is None or id(value) in seen or len(seen) > 50:
        return value
    seen = (*seen, id(value))
    if kind is dict:
        return {{k: _plain(v, seen) for k, v in value.items()}}
    return kind(_plain(v, seen) for v in value)


def _reseed():  # as the workspace's pytest plugin does before each test (sandbox/pytest_steady.py)
    _r.seed(0)
    try:
        _s.modules["numpy"].random.seed(0)
    except Exception:
        pass


_at = [0]  # the index of the running row's first check


def _record(index, value):
    index += _at[0]
    try:
        plain = _plain(value)
        try:
            same = plain is value or bool(value == plain)
        except Exception:
            same = False
        text = repr(plain if same else value)
        row = [index, "ok", text] if len(text) <= {limit} else [index, "big", ""]
    except BaseException as error:
        row = [index, "raise", type(error).__name__]
    _out.write(_j.dumps(row) + "\n")


def _fixture(name):
    return _p.Path(_t.mkdtemp(prefix="lcrl-answer-"))


class _Info:  # what ``pytest.raises(...) as info`` and ``assertRaises(...) as cm`` give the test
    def __init__(self, error):
        self.value = self.exception = error
        self.type, self.typename, self.tb = type(error), type(error).__name__, error.__traceback__

    def match(self, regexp):
        import re
        assert re.search(regexp, str(self.value)), "Regex pattern did not match."
        return True

    def errisinstance(self, kind):
        return isinstance(self.value, kind)


def _truth(index, value):
    _record(index, bool(value))


def _raised(index, error):
    if error is None:
        _record(index, None)
        raise AssertionError("DID NOT RAISE")
    try:
        row = [[str(c.__name__) for c in type(error).__mro__], str(error)[:{message}]]
    except BaseException:
        row = None
    _record(index, row)
    return _Info(error)


def _end(index, error=None):
    _out.write(_j.dumps(["end", index, "ok"] if error is None else ["end", index, "raise", type(error).__name__]) + "\n")


for _name, _package, _file, _code, _tests in {modules!r}:
    _ns = {{"__name__": _name, "__package__": _package, "__file__": _file}}
    try:
        exec(compile(_code, _file, "exec"), _ns)
    except BaseException as _e:
        for _method, _src, _fixtures, _rows in _tests:
            for _run, _start, _inputs in _rows:
                _end(_run, _e)
        continue
    for _method, _src, _fixtures, _rows in _tests:
        try:
            _ns["{record}"], _ns["{truth}"], _ns["{raised}"] = _record, _truth, _raised
            exec(compile(_src, _file, "exec"), _ns)
            _test = _ns["_lcrl_test"]
        except BaseException as _e:
            for _run, _start, _inputs in _rows:
                _end(_run, _e)
            continue
        for _run, _start, _inputs in _rows:
            _reseed()
            _at[0] = _start
            try:
                _args = eval(_inputs, _ns)  # the row's inputs, evaluated where pytest evaluates them
                # a method gets a bare TestCase: its assert* methods, none of what its own setUp built
                _self = [_u.TestCase()] if _method else []
                _test(*_self, **{{f: _fixture(f) for f in _fixtures}}, **_args)
                _end(_run)
            except BaseException as _e:
                _end(_run, _e)
"""
"""The child: each module's support code, then each test with its checks recorded, one JSON line
per record and one at each test's end on its own descriptor (the tests' prints go to
``/dev/null``: a print without a line end must not swallow an answer)."""


def plan(
    tests: list[str], listed: dict[str, int] | None = None
) -> tuple[dict[str, str], list[tuple], list[tuple[str, object, bool]], list[str]]:
    """Read the answerable functions of ``tests`` (FAIL_TO_PASS node ids; a parametrized test's
    rows go together, as its function's) from their files: ``(verdicts, modules, expected,
    asked)``: each test function's verdict so far (``none`` where it is not answerable), the
    child's modules (name, package, file, support code, ``[(method, source, fixtures, [(run
    index, index of its first check, inputs)])]``), by check index ``(test, expected value,
    close)``, and the test of each run (a row of a test) by run index. ``listed``: how many node
    ids of each test the task lists; a test with another number of rows is not answered."""
    verdicts: dict[str, str] = {}
    modules, expected, asked = [], [], []
    for path, qualnames in _mirror.plan(tests).items():
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        constants = {} if tree is None else answer_constants(tree)
        tables = {} if tree is None else row_tables(tree)
        imports = {} if tree is None else imported_names(tree)
        # a constant or table an asked test reads other than as an answer stays in the child's code
        while True:
            found = {}
            for qualname in qualnames:
                parts = qualname.split("::")
                function = None if tree is None else _mirror._functions(tree, parts)
                made = (
                    None
                    if function is None
                    else answerable(function, len(parts) > 1, constants, tables, imports)
                )
                count = (listed or {}).get(f"{path}::{qualname}")
                found[qualname] = None if made is None or count not in (None, len(made[2])) else made
            sources = [
                text for f in found.values() if f is not None for text in (f[0], *(i for i, _ in f[2]))
            ]
            read = {
                n.id
                for text in sources
                for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.Name) and (n.id in constants or n.id in tables)
            }
            if not read:
                break
            constants = {k: v for k, v in constants.items() if k not in read}
            tables = {k: v for k, v in tables.items() if k not in read}
        functions = []
        for qualname, test_found in found.items():
            test = f"{path}::{qualname}"
            verdicts[test] = NONE if test_found is None else AGREE
            if test_found is not None:
                source, fixtures, rows = test_found
                runs = []
                for inputs, checks in rows:
                    runs.append((len(asked), len(expected), inputs))
                    expected += [(test, value, use_close) for value, use_close in checks]
                    asked.append(test)
                functions.append(("::" in qualname, source, fixtures, runs))
        if functions and tree is not None:
            name, _ = module_name(path)
            package = name.rpartition(".")[0]
            modules.append(
                (name, package, os.path.abspath(path), support(tree, {*constants, *tables}), functions)
            )
    return verdicts, modules, expected, asked


def imported_names(module: ast.Module) -> dict[str, str]:
    """What each name a test module imports at its top stands for, each bound nowhere else
    (``from errors import ParseError as Bad``: ``{"Bad": "errors.ParseError"}``; ``import numpy as
    np``: ``{"np": "numpy"}``): a raises-check's class named by an alias is wanted by its own
    name, which the child records, and ``approx``/``isclose`` are pytest's and the standard
    library's only where imported from them."""
    names: dict[str, str] = {}
    for node in module.body:
        if isinstance(node, ast.ImportFrom):
            prefix = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{prefix}.{alias.name}".lstrip(".")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                head = alias.name.partition(".")[0]
                names[alias.asname or head] = alias.name if alias.asname else head
    bindings = _bindings(module)
    return {name: target for name, target in names.items() if bindings.get(name) == 1}


def _unaliased(expected: object, imports: Mapping[str, str]) -> object:
    """A raises-check's expectation with each class named by what its name was imported as."""
    if isinstance(expected, _Raises) and isinstance(expected.names, tuple):
        names = tuple(imports.get(n, n).rpartition(".")[2] for n in expected.names)
        return _Raises(names, expected.pattern)
    return expected


def _qualified(node: ast.expr, imports: Mapping[str, str]) -> str:
    """``node``'s dotted name with its first part as the module imported it
    (``np.isclose``: ``numpy.isclose``); a name not imported stands for itself."""
    head, dot, rest = ast.unparse(node).partition(".")
    return imports.get(head, head) + dot + rest


def close(actual: object, expected: object) -> bool:
    """The held-out checks' ``_lcrl_close``: equality, floats and complex numbers within 1e-9 at
    any depth of lists, tuples and dicts' values."""
    if isinstance(expected, float):
        return (
            isinstance(actual, int | float)
            and not isinstance(actual, bool)
            and math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, complex):
        return (
            isinstance(actual, int | float | complex)
            and not isinstance(actual, bool)
            and cmath.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(close(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(close(actual[k], v) for k, v in expected.items())
        )
    return actual == expected


def agrees(row: object, expected: object, use_close: bool) -> bool:
    """Whether one answer line of the child (``[index, "ok", repr]``) is ``expected`` (or meets
    it: a raises-check's :class:`_Raises`, a comparison's :class:`~_holds.Holds`)."""
    if not (isinstance(row, list) and len(row) == 3 and row[1] == "ok" and isinstance(row[2], str)):
        return False
    if len(row[2]) > MAX_ANSWER:
        return False
    try:
        value = ast.literal_eval(row[2])
        if isinstance(expected, _Raises | Holds):
            return expected.met_by(value)
        return bool(close(value, expected) if use_close else value == expected)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False


def clear_tests(test_files: list[str]) -> None:
    """Remove what holds the tests' text from the work tree: the graded test files, the
    repository's git objects (the base's tests are blobs there) and every compiled file."""
    for path in test_files:
        try:
            os.unlink(path)
        except OSError:
            pass
    shutil.rmtree(".git", ignore_errors=True)
    for directory, subdirs, files in os.walk(".", topdown=True):
        for name in list(subdirs):
            if name == "__pycache__":
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
                subdirs.remove(name)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass


def answer(
    tests: list[str],
    test_files: list[str],
    path: list[str],
    env: dict[str, str],
    timeout_s: float,
    listed: dict[str, int] | None = None,
) -> dict[str, str]:
    """Each of ``tests``' verdict (:data:`AGREE`, :data:`DIFFER`, :data:`NONE`) after the child
    answered: ``path`` its ``sys.path`` before its own (the toolchain, the repository's roots),
    ``env`` its environment, ``timeout_s`` its time (an answer it did not give differs);
    ``listed``: :func:`plan`'s."""
    verdicts, modules, expected, asked = plan(tests, listed)
    clear_tests(test_files)
    if not expected:
        return verdicts
    bases = [module_name(m[2])[1] for m in modules]
    read_end, write_end = os.pipe()
    program = PROGRAM.format(
        path=[*path, *bases],
        fd=write_end,
        limit=MAX_ANSWER,
        message=MAX_MESSAGE,
        modules=modules,
        record=RECORD,
        truth=TRUTH,
        raised=RAISED,
    )
    child = subprocess.Popen(
        [sys.executable, "-s", "-S", "-P", "-c", program],
        pass_fds=(write_end,),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(write_end)
    data, deadline = bytearray(), time.monotonic() + timeout_s
    while len(data) <= MAX_OUTPUT:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([read_end], [], [], wait)[0]:
            break
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    child.wait()
    rows: dict[int, list] = {}
    ends: dict[int, list] = {}
    for line in bytes(data[:MAX_OUTPUT]).split(b"\n"):
        try:
            row = json.loads(line)
            end, index = row[0] == "end", row[1] if row[0] == "end" else row[0]
        except Exception:  # noqa: BLE001, S112 - a line that is not one of ours answers nothing
            continue
        if type(index) is int and 0 <= index < (len(asked) if end else len(expected)):
            (ends if end else rows).setdefault(index, []).append(row)
    for index, test in enumerate(asked):
        if [row[2:] for row in ends.get(index, [])] != [["ok"]]:
            verdicts[test] = DIFFER  # it raised, did not end, or ended twice
    for index, (test, value, use_close) in enumerate(expected):
        answered = rows.get(index, [])
        if not answered or not all(agrees(row, value, use_close) for row in answered):
            verdicts[test] = DIFFER  # none, or another value (a check in a loop answers each time)
    return verdicts
