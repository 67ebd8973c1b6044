"""Held-out checks made from whole test functions: a test's literals changed, its asserts turned
into records of the values they compare, the record answered by the clean repository.

:mod:`.repo_held_out` changes the literal arguments of a call written inside an assert. Tests
that build their input first (``words = ["a", "bb"]; assert remove_short(words, 2) == 1;
assert words == ["bb"]``), take a fixture (``tmp_path``), call through an object
(``Tokenizer().tokenize("a+b")``) or check an error (``pytest.raises``) have no such call, and a
hard-coded answer to them passed with the bug in place. Here the test function itself is the
site: one or two of its input literals (anything but an assert's literal side, its message, a
subscript, an f-string, a ``pytest.*`` call's arguments, a docstring) are mutated as
:func:`.held_out.mutate` mutates arguments, and each ``assert`` becomes a record of the values it
compares (``assert a == 3``: ``a``; ``assert ok(x)``: ``bool(ok(x))``). The function returns its
records; the check compares them with the clean run's, and a test that raises (a ``pytest.raises``
the bug no longer meets) answers otherwise too. The assert's test still runs on the recorded
values; a failure is noted, and an error after one (``assert r is not None; r.fixed``) ends the
run with the records so far.

Only plain test functions are sites: top level, no decorator but ``pytest.mark.parametrize``
(each of its first parameter sets a site of its own, bound at the top of the body: a literal, or
a value built from the module's names, written there or in a module constant the decorator
names; stacked ones give the sets of their product), positional parameters only (fixtures, passed through by the check), no ``yield``.
Their module's code other than its tests (helpers, constants, fixtures) is the checks' header
(:func:`module_support`). A module constant a test reads (``top_student(MARKS)``) is bound in it
as a copy, so it changes like a literal (:func:`with_constants`).

An async test (``async def test_...``, a function or a pytest class's method: pytest-asyncio,
anyio) is a site the same way: its recorded body is a coroutine that a plain function of the same
parameters runs in an event loop of its own (:func:`_awaited`), so its candidates and checks are
plain tests; ``@pytest.mark.asyncio`` and ``@pytest.mark.anyio`` are no decorator that keeps it
out, and the module's ``pytestmark`` loses them in the checks' header (:data:`_UNMARK`). An
``IsolatedAsyncioTestCase``'s coroutine methods are awaited by the case itself, in the loop its
``asyncSetUp`` ran in (``held_out.CASE_FUNCTION``).

A test class's methods are sites the same way (:func:`test_methods`): a ``unittest.TestCase``
(``setUp`` and input built on ``self``: the usual style of a unittest suite) or a pytest class.
The variant is a function that defines a copy of the class (its tests left out, the changed
method added) and runs the method as the runner would: ``setUpClass``, ``setUp``, the method,
``tearDown``, the cleanups (pytest's ``setup_class``/``setup_method`` and their teardowns for a
plain class). A pytest class's fixture methods go on a class the candidates and checks are
methods of (:func:`class_fixtures`), so pytest finds the fixtures the method takes. unittest's
comparisons (``self.assertEqual(f(x), 3)``, ``assertIn``, ``assertAlmostEqual``...) are recorded
as ``assert`` is; ``assertTrue``/``assertIsNone`` as truth; the others (``assertRaises``,
``assertRegex``) are left to check in place.

A test that checks through a helper (``check(text, expected)``, ``self.assertRestocks(...)``,
a ``def y(fmt, s, e)`` it defines) records the helper's asserts too: a function the test defines
is recorded with it (its returns kept), a module function that asserts (or calls one that does)
is copied into the site (:func:`with_helpers`), and a helper method of the class or a mixin is
recorded in the class's copy (:func:`with_method_helpers`). Otherwise a changed input, passed to
the helper with its expected value, failed the helper's assert in the clean run as well, and a
variant that raises there is never a check: such tests had none.
"""

from __future__ import annotations

import ast
import builtins
import copy
import itertools
import random
import unittest
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from lit_codeRL import pyparse
from lit_codeRL.problems.synth.held_out import RUN_NAME, VARIANTS_PER_CALL, is_literal, mutate

MAX_SOURCE = 4000
"""Longest changed test function kept (its source, as written into the checks)."""
MAX_PARAMETER_SETS = 8
"""A parametrized test's parameter sets made sites at most: spread over its table, the first
and the last among them (:func:`spread`)."""
MAX_PARAMETER_ROWS = 1024
"""Rows of one ``parametrize`` read at most (and sets of a stacked product)."""
MAX_LONG_VARIANTS = 96
"""Variants of a test too long for one check at most (:func:`function_variants`)."""
MAX_CONSTANT = 1000
"""Longest module constant (its source) bound in a test that reads it (:func:`with_constants`)."""
T = TypeVar("T")
_SEEN = "_lcrl_seen"
_FAILED = "_lcrl_failed"
"""A run's note that an assert failed: after one, an error the code then meets (``assert r is
not None; r.fixed``) ends the run with the records so far and the error's name."""
_ASYNC = "_lcrl_async"
"""An async test's recorded body, inside the plain function that runs it (:func:`_awaited`)."""
LOOP_MARKS = frozenset({"pytest.mark.asyncio", "mark.asyncio", "pytest.mark.anyio", "mark.anyio"})
"""The marks that ask a plugin to run an async test in its event loop: its recording runs in a
loop of its own."""
_UNMARK = (
    "pytestmark = [_lcrl_m for _lcrl_m in (pytestmark if isinstance(pytestmark, (list, tuple)) else "
    "[pytestmark]) if getattr(_lcrl_m, 'name', None) not in ('asyncio', 'anyio')]"
)
"""The module's marks without those of :data:`LOOP_MARKS`: the checks are plain functions, and
pytest-asyncio fails a plain test that carries its mark (a warning, an error under the
repository's ``filterwarnings = error``)."""
_NameOf = Callable[[ast.AST], "str | None"]
"""What names the function a node calls (:func:`_name_call`, :func:`_self_call`), if it calls one."""
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_CONTAINERS = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)
_CASE_METHODS = frozenset(dir(unittest.TestCase))
BUILTIN_NAMES = frozenset(dir(builtins))
"""Names every module reads without binding them (``class TestX(object)``, ``len``)."""
UNBUILDABLE = (
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr,
    ast.Await, ast.Yield, ast.YieldFrom, ast.Starred,
)  # fmt: skip
"""Nodes that bind names or need their function: an expression with one is not rebuilt."""
_COMPARING = frozenset(
    f"assert{name}"
    for name in (
        "Equal", "Equals", "NotEqual", "NotEquals", "ListEqual", "TupleEqual", "DictEqual",
        "SetEqual", "SequenceEqual", "MultiLineEqual", "In", "NotIn", "Is", "IsNot", "Greater",
        "GreaterEqual", "Less", "LessEqual", "AlmostEqual", "AlmostEquals", "NotAlmostEqual",
        "IsInstance", "NotIsInstance", "CountEqual",
    )
)  # fmt: skip
"""unittest's assertions of their first two arguments: each that is not a literal is recorded."""
_TRUTH = {"assertTrue": "bool", "assertFalse": "bool", "assertIsNone": "none", "assertIsNotNone": "none"}
"""unittest's assertions of one value's truth (``bool(x)``) or its being ``None``."""


def module_support(tree: ast.Module) -> str:
    """The module's source without its tests (``test*`` functions, ``Test*`` classes and
    ``TestCase`` subclasses that define tests): the imports, helpers, constants, fixtures and
    test base classes its tests use; its ``pytestmark`` without an event loop's marks (:data:`_UNMARK`)."""
    tests = _tests(tree)
    kept = [node for node in tree.body if id(node) not in tests]
    marked = "pytestmark" in _bindings(tree.body)
    return "\n".join([*(ast.unparse(node) for node in kept), *([_UNMARK] if marked else [])])


def _tests(tree: ast.Module) -> set[int]:
    """The ids of the module's tests: ``test*`` functions, and ``Test*`` classes and ``TestCase``
    subclasses that define tests or inherit them from a class of the module (a mixin of tests:
    ``class LRUTest(unittest.TestCase, CacheTests)``). A class that has none (a base with helpers
    and ``setUp``; the mixin itself, which no runner collects) is not one."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    out = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            out.add(id(node))
        elif isinstance(node, ast.ClassDef) and _test_class(node) and _class_tests(node, classes):
            out.add(id(node))
    return out


def _test_class(node: ast.ClassDef) -> bool:
    """Would a runner collect this class (``Test*``, or a ``TestCase`` subclass)?"""
    return node.name.startswith("Test") or _unittest(node)


def _class_tests(owner: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.FunctionDef]:
    """``owner``'s ``test*`` methods: its own, then those of the module's classes it names as
    bases (left to right, theirs in turn), each name once."""
    out: dict[str, ast.FunctionDef] = {}
    for node in _family(owner, classes):
        for member in node.body:
            if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and member.name.startswith("test"):
                out.setdefault(member.name, member)  # type: ignore[arg-type]
    return list(out.values())


def _family(owner: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """``owner``, then the module's classes it names as bases (left to right, theirs in turn),
    each once: where a name it reads is looked up, as far as the module tells."""
    out: list[ast.ClassDef] = []
    todo, seen = [owner], set()
    while todo:
        node = todo.pop(0)
        if node.name not in seen:
            seen.add(node.name)
            out.append(node)
            todo += [classes[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
    return out


def test_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's test functions that can be sites (see the module's docstring), a
    parametrized one as one plain function per parameter set (:func:`parameter_sets`)."""
    constants, displays, bound = module_constants(tree), module_displays(tree), _bound(tree)
    helpers = module_helpers(tree)
    out = []
    for test in tree.body:
        if isinstance(test, ast.FunctionDef | ast.AsyncFunctionDef) and test.name.startswith("test"):
            test = without_loop_marks(test)
            plain = [with_constants(node, constants) for node in parameter_sets(test, displays, bound)]
            out += [site for node in plain if _plain_site(site := with_helpers(node, helpers))]
    return out


def test_methods(tree: ast.Module) -> list[tuple[ast.ClassDef, ast.FunctionDef]]:
    """The test methods that can be sites, each with its class: a top-level ``TestCase``
    subclass's undecorated ``test*`` methods (its own and those a mixin of the module gives it),
    a pytest ``Test*`` class's as a test function's (:func:`parameter_sets`). A class is left out
    when it is decorated, has a metaclass, a base its module's support does not bind (a test
    class), ``__init__``, async tests, or, its own or a mixin's, autouse fixture methods that
    set state on ``self`` (they would set up the instance pytest makes, not the case's copy) or
    any fixture method of a ``TestCase`` (pytest passes it none). A pytest class's other fixture
    methods go on the class the check is a method of (:func:`class_fixtures`)."""
    bound = _bound(tree)
    constants, displays, helpers = module_constants(tree), module_displays(tree), module_helpers(tree)
    tests = _tests(tree)
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    out = []
    for owner in tree.body:
        if not (
            isinstance(owner, ast.ClassDef) and id(owner) in tests and _plain_class(owner, bound, classes)
        ):
            continue
        if "_lcrl" in ast.unparse(owner):
            continue  # the records' own names
        unit = _unittest(owner)
        for test in _class_tests(owner, classes):
            if isinstance(test, ast.FunctionDef) or (
                isinstance(test, ast.AsyncFunctionDef) and (not unit or _isolated(owner))
            ):
                if unit:  # pytest does not parametrize a TestCase's methods
                    plain = [] if test.decorator_list else [test]
                else:
                    plain = parameter_sets(without_loop_marks(test), displays, bound)
                for each in plain:
                    site = with_constants(each, constants)
                    site = with_helpers(with_attributes(site, owner, classes), helpers)
                    case = with_method_helpers(owner, site, classes, helpers)
                    if _plain_site(site, method=True, helped=case is not owner):
                        out.append((case, site))
    return out


def _unittest(owner: ast.ClassDef) -> bool:
    """Does ``owner`` name a ``TestCase`` as a base (``unittest.TestCase``, a project's
    ``BaseTestCase``; not a ``TestCaseProtocol`` a mixin types itself with)?"""
    return any(ast.unparse(base).rsplit(".", 1)[-1].endswith("TestCase") for base in owner.bases)


def without_loop_marks(
    test: ast.FunctionDef | ast.AsyncFunctionDef,
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """An async ``test`` without the marks of :data:`LOOP_MARKS` (``@pytest.mark.asyncio``, with
    its arguments or not): its recording runs in a loop of its own, so the mark says nothing of
    its inputs (any other decorator still keeps it from being a site)."""
    if not isinstance(test, ast.AsyncFunctionDef):
        return test
    kept = [
        d
        for d in test.decorator_list
        if ast.unparse(d.func if isinstance(d, ast.Call) else d) not in LOOP_MARKS
    ]
    if len(kept) == len(test.decorator_list):
        return test
    out = copy.copy(test)
    out.decorator_list = kept
    return out


def _isolated(owner: ast.ClassDef) -> bool:
    """Does ``owner`` name ``unittest.IsolatedAsyncioTestCase`` as a base (its methods awaited in
    the case's own loop, after ``asyncSetUp``)?"""
    return any(ast.unparse(base).rsplit(".", 1)[-1] == "IsolatedAsyncioTestCase" for base in owner.bases)


def _plain_class(owner: ast.ClassDef, bound: set[str], classes: dict[str, ast.ClassDef]) -> bool:
    if owner.decorator_list or owner.keywords:
        return False
    if any(root_name(base) not in bound | BUILTIN_NAMES for base in owner.bases):
        return False  # a test class as a base, or a base made by a call
    isolated = _isolated(owner)
    if not isolated and any("Async" in ast.unparse(base) for base in owner.bases):
        return False  # another framework's loop (``AsyncTestCase``): not run here
    mixins = [classes[b.id] for b in owner.bases if isinstance(b, ast.Name) and b.id in classes]
    unit = _unittest(owner)
    for member in [m for node in (owner, *mixins) for m in node.body]:
        if not isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if member.name == "__init__" or (unit and not isolated and isinstance(member, ast.AsyncFunctionDef)):
            return False  # a plain ``TestCase`` does not await a coroutine method: unittest never ran it
        if _fixture(member) and (unit or _sets_up_self(member)):
            return False  # such a fixture sets up the instance pytest makes, not the case's copy
    return True


def _fixture(member: ast.stmt) -> bool:
    """Is ``member`` a fixture method (``@pytest.fixture``, ``@pytest.fixture(scope=...)``)?"""
    return isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) and any(
        "fixture" in ast.unparse(d) for d in member.decorator_list
    )


def _sets_up_self(member: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Is ``member`` an autouse fixture that sets state on ``self`` (``self.client = ...``)? pytest
    runs it on the instance it makes, which the case's copy is not; one that sets none (a clock
    frozen around each test) runs for the check as it does for the test."""
    autouse = any("autouse" in ast.unparse(d) for d in member.decorator_list)
    return autouse and any(
        isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store | ast.Del) and root_name(n) == "self"
        for n in ast.walk(member)
    )


_RUNNER_METHODS = frozenset(
    {
        "setup_method",
        "teardown_method",
        "setup_class",
        "teardown_class",
        "setup",
        "teardown",
        "setUp",
        "tearDown",
    }
)
"""The methods a runner calls around each test: the case's copy runs them (``_lcrl_case``), the
class of the check's fixtures must not run them again."""


def class_fixtures(owner: ast.ClassDef, tree: ast.Module) -> str:
    """The body of the class a check of a method of ``owner`` is a method of, so that pytest finds
    the fixtures it takes: the fixture methods of ``owner`` and the module's classes it names as
    bases (``TestSigner.signer``, overridden by a subclass), with every other member they may read
    through ``self`` (class attributes, helper methods), each name once, the subclass's first; no
    test, no runner method, no ``pytestmark``. Empty when the class has no fixture methods (the
    check is a plain function)."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    family = _family(classes.get(owner.name, owner), classes)
    if not any(_fixture(m) for node in family for m in node.body):
        return ""
    members: dict[str, ast.stmt] = {}
    for node in family:
        for member in node.body:
            if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [member.name]
            elif isinstance(member, ast.Assign | ast.AnnAssign):
                targets = member.targets if isinstance(member, ast.Assign) else [member.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
            else:
                continue
            kept = [
                n
                for n in names
                if not n.startswith("test") and n not in _RUNNER_METHODS | {"__test__", "pytestmark"}
            ]
            if kept and kept == names and not any(n in members for n in names):
                members.update((n, member) for n in names)
    kept_once = {id(m): m for m in members.values()}.values()  # an ``a = b = 1`` binds two names
    return "\n\n".join(
        "\n".join(f"    {line}" if line else line for line in ast.unparse(m).splitlines()) for m in kept_once
    )


def _bound(tree: ast.Module) -> set[str]:
    """The names the module's support (:func:`module_support`) binds at its top."""
    names: set[str] = set()
    tests = _tests(tree)
    for node in tree.body:
        if id(node) in tests:
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's top-level names bound once, to a literal of at most :data:`MAX_CONSTANT`
    characters, that no function declares ``global`` (``MARKS = {"ann": [92, 98]}``)."""
    return {
        name: value
        for name, value in _single_values(tree).items()
        if is_literal(value) and len(ast.unparse(value)) <= MAX_CONSTANT
    }


def module_displays(tree: ast.Module) -> dict[str, ast.expr]:
    """The module's top-level names bound once to a list, tuple or set display (of anything:
    ``CASES = {(4, "19", date(1901, 1, 1)), ...}``), that no function declares ``global``: what a
    parametrization by name iterates."""
    return {n: v for n, v in _single_values(tree).items() if isinstance(v, ast.List | ast.Tuple | ast.Set)}


def _bindings(body: list[ast.stmt]) -> dict[str, list[ast.expr | None]]:
    """Each name ``body`` (a module's, a class's) binds at its top, with the value of each binding
    (``None``: not one plain value, as a ``def``, an import or a binding under ``if``/``for``/``try``)."""
    bound: dict[str, list[ast.expr | None]] = {}
    for node in body:
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            simple = len(targets) == 1 and isinstance(targets[0], ast.Name)
            value = node.value if simple and not isinstance(node, ast.AugAssign) else None
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        bound.setdefault(name.id, []).append(value)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                bound.setdefault(alias.asname or alias.name.split(".")[0], []).append(None)
        else:  # bound under ``if``/``for``/``try``: not one value
            for name in ast.walk(node):
                if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store):
                    bound.setdefault(name.id, []).append(None)
    return bound


def _single_values(tree: ast.Module) -> dict[str, ast.expr]:
    bound = _bindings(tree.body)
    shared = {n for node in ast.walk(tree) if isinstance(node, ast.Global | ast.Nonlocal) for n in node.names}
    return {
        name: value
        for name, (value, *more) in bound.items()
        if not more and value is not None and name not in shared
    }


def rebuildable(node: ast.expr, names: set[str] | frozenset[str]) -> bool:
    """Can ``node`` be evaluated again elsewhere: every name it reads is one of ``names`` or a
    builtin (never ``self``), and it binds none and needs no function of its own (no lambda,
    comprehension, ``await``...)?"""
    if any(isinstance(n, UNBUILDABLE) for n in ast.walk(node)):
        return False
    loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return loads <= names | BUILTIN_NAMES and "self" not in loads


def buildable(node: ast.expr, names: set[str] | frozenset[str]) -> bool:
    """A parameter set :func:`rebuildable` from ``names`` (bound at the top of its module);
    ``pytest.param(...)`` is not a value."""
    if any(isinstance(n, ast.Call) and root_name(n.func) == "pytest" for n in ast.walk(node)):
        return False
    return rebuildable(node, names)


def with_constants(function: ast.FunctionDef, constants: dict[str, ast.expr]) -> ast.FunctionDef:
    """``function`` with the module constants it reads bound at the top of its body, as copies
    (so they are inputs a variant may change): those it reads other than as an assert's compared
    side (an expected value), and never binds itself."""
    stored = _stored(function)
    expected = {id(side) for node in ast.walk(function) for side in _compared_nodes(node)}
    used: list[str] = []
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in constants
            and node.id not in stored
            and id(node) not in expected
            and node.id not in used
        ):
            used.append(node.id)
    if not used:
        return function
    out = copy.deepcopy(function)
    binds = [
        ast.Assign([ast.Name(name, ast.Store())], copy.deepcopy(constants[name])) for name in sorted(used)
    ]
    out.body = [*binds, *out.body]
    return ast.fix_missing_locations(out)


def with_attributes(
    method: ast.FunctionDef, owner: ast.ClassDef, classes: dict[str, ast.ClassDef]
) -> ast.FunctionDef:
    """``method`` with the class attributes it reads through ``self`` (``self.CASES``, bound in
    the class body of ``owner`` or a mixin of the module to a literal of at most
    :data:`MAX_CONSTANT` characters, once, and never set on an instance or the class) bound as
    copies on ``self`` at the top of its body, so they change like a literal: a table of inputs
    a unittest class keeps as an attribute. Not a name read as an assertion's expected side."""
    values: dict[str, ast.expr | None] = {}
    family = _family(owner, classes)
    for node in family:
        for name, bound in _bindings(node.body).items():
            values.setdefault(name, bound[0] if len(bound) == 1 else None)  # a subclass's first
    set_anywhere = {
        n.attr
        for c in family
        for n in ast.walk(c)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    expected = {id(side) for node in ast.walk(method) for side in _compared_nodes(node)}
    used: list[str] = []
    for node in ast.walk(method):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr not in used
            and id(node) not in expected
            and not node.attr.startswith("__")
            and node.attr not in _CASE_METHODS
            and node.attr not in set_anywhere
            and (value := values.get(node.attr)) is not None
            and is_literal(value)
            and len(ast.unparse(value)) <= MAX_CONSTANT
        ):
            used.append(node.attr)
    if not used:
        return method
    out = copy.deepcopy(method)
    binds = [
        ast.Assign(
            [ast.Attribute(ast.Name("self", ast.Load()), name, ast.Store())], copy.deepcopy(values[name])
        )
        for name in sorted(used)
    ]
    out.body = [*binds, *out.body]
    return ast.fix_missing_locations(out)


def module_helpers(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The module's functions other than its tests that assert (``def check(text, expected):
    assert slugify(text) == expected``) or call one that does, bound once, undecorated, neither
    async nor generators: what a test calls to check its values."""
    tests, bound = _tests(tree), _bindings(tree.body)
    plain = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and id(node) not in tests and len(bound[node.name]) == 1
    }
    return _asserting(plain, _name_call, {})


def _asserting(
    functions: dict[str, ast.FunctionDef], name_of: _NameOf, known: dict[str, ast.FunctionDef]
) -> dict[str, ast.FunctionDef]:
    """Those of ``functions`` (undecorated, neither async nor generators) that assert, or call
    (``name_of``) one that does or one of ``known`` (module helpers, called by name)."""
    plain = {
        name: f
        for name, f in functions.items()
        if not f.decorator_list
        and not name.startswith("_lcrl")
        and not any(isinstance(n, ast.Yield | ast.YieldFrom | ast.Await) for n in _own_nodes(f))
    }
    found: dict[str, ast.FunctionDef] = {}
    while True:
        more = {
            name: f
            for name, f in plain.items()
            if name not in found
            and any(
                isinstance(n, ast.Assert)
                or _case_call(n, "assert")
                or name_of(n) in found
                or _name_call(n) in known
                for n in _own_nodes(f, helpers=True)
            )
        }
        if not more:
            return {name: f for name, f in plain.items() if name in found | more.keys()}
        found.update(more)


def with_helpers(function: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> ast.FunctionDef:
    """``function`` with copies of the module's :func:`module_helpers` it calls by name (and
    those they call) defined at the top of its body, so that :func:`recording` records their
    asserts too: a changed input or expected value passed to a helper otherwise fails the
    helper's assert in the clean run as well, and a check that raises there is no check."""
    called = (
        _called(function, helpers, _name_call) - _stored(function) if _may_record_helpers(function) else set()
    )
    if not called:
        return function
    out = copy.deepcopy(function)
    out.body = [*(copy.deepcopy(h) for name, h in helpers.items() if name in called), *out.body]
    return ast.fix_missing_locations(out)


def with_method_helpers(
    owner: ast.ClassDef,
    test: ast.FunctionDef,
    classes: dict[str, ast.ClassDef],
    helpers: dict[str, ast.FunctionDef],
) -> ast.ClassDef:
    """``owner`` itself, or a copy of it when ``test`` calls asserting helper methods through
    ``self`` (``self.check(text, expected)``; its class's or a mixin's, and those they call):
    in the copy each is recorded (:class:`_Helper`) into the site's records, which
    :func:`recording` then binds outside the class."""
    members: dict[str, ast.FunctionDef] = {}
    for node in _family(owner, classes):
        for m in node.body:
            if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name not in members:
                members[m.name] = m  # type: ignore[assignment]
    methods = {
        name: m
        for name, m in members.items()
        if isinstance(m, ast.FunctionDef)
        and not name.startswith(("test", "setup", "teardown"))
        and name not in _CASE_METHODS
        and [a.arg for a in m.args.args[:1]] == ["self"]
    }
    asserting = _asserting(methods, _self_call, helpers)
    called = _called(test, asserting, _self_call) if _may_record_helpers(test) else set()
    if not called:
        return owner
    case = copy.deepcopy(owner)
    recorded = {
        name: _Helper().visit(copy.deepcopy(with_helpers(asserting[name], helpers))) for name in called
    }
    case.body = [recorded.pop(m.name) if getattr(m, "name", None) in recorded else m for m in case.body]
    case.body += [recorded[name] for name in asserting if name in recorded]  # a mixin's, overridden
    return ast.fix_missing_locations(case)


def _may_record_helpers(test: ast.FunctionDef) -> bool:
    """May the helpers ``test`` checks through be recorded? Not when it names ``AssertionError``
    (``pytest.raises(AssertionError)``: a test of the helper itself, which expects its assert to
    raise; recorded, it would not)."""
    return not any(isinstance(n, ast.Name) and n.id == "AssertionError" for n in ast.walk(test))


def _called(start: ast.AST, members: dict[str, ast.FunctionDef], name_of: _NameOf) -> set[str]:
    """The names of ``members`` that ``start`` calls (``name_of(node)``), and those they call."""
    found: set[str] = set()
    todo = [start]
    while todo:
        for node in ast.walk(todo.pop()):
            name = name_of(node)
            if name in members and name not in found:
                found.add(name)
                todo.append(members[name])
    return found


def _name_call(node: ast.AST) -> str | None:
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def _self_call(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return (
            node.func.attr if isinstance(node.func.value, ast.Name) and node.func.value.id == "self" else None
        )
    return None


def _stored(function: ast.FunctionDef) -> set[str]:
    """The names ``function`` binds: its parameters, what it assigns, defines or imports."""
    stored = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    stored |= {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    for node in ast.walk(function):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not function:
            stored.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            stored |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
    return stored


def _compared_nodes(node: ast.AST) -> list[ast.expr]:
    """The sides an assert or a ``TestCase`` comparison compares."""
    if isinstance(node, ast.Assert):
        return compared_sides(node.test)
    if _case_call(node, "assert") and node.func.attr in _COMPARING:  # type: ignore[attr-defined]
        return list(node.args[:2])  # type: ignore[attr-defined]
    return []


def parameter_sets(
    test: ast.FunctionDef,
    displays: dict[str, ast.expr] | None = None,
    names_bound: set[str] | frozenset[str] = frozenset(),
) -> list[ast.FunctionDef]:
    """``test`` itself when it has no decorator but marks it carries (:func:`carried_mark`, kept on
    every copy); for ``@pytest.mark.parametrize`` decorators of
    literal names (``ids=`` aside) over a list, tuple or set written there or bound to a name of
    ``displays``, a copy per parameter set (:data:`MAX_PARAMETER_SETS` :func:`spread` over those
    that are literals or :func:`buildable` from ``names_bound``: ``date(1985, 4, 12)``; a
    ``pytest.param`` without marks by its values; stacked decorators, each with names of its own,
    give the sets of their product, as pytest does) whose body starts by binding them and whose signature no
    longer takes them; none for any other decorator (its signature is not the test's to fill)."""
    marks, others = [], []
    for decorator in test.decorator_list:
        (marks if carried_mark(decorator) else others).append(decorator)
    if not others:
        return [test]
    params = [a.arg for a in test.args.args]
    groups: list[list[ast.Assign]] = []
    taken: set[str] = set()
    for decorator in others:
        found = _parameter_rows(decorator, params, displays, names_bound)
        if found is None or taken & set(found[0]):
            return []
        taken |= set(found[0])
        groups.append(found[1])
    combinations = list(itertools.islice(itertools.product(*groups), MAX_PARAMETER_ROWS))
    out = []
    for combination in spread(combinations, MAX_PARAMETER_SETS):
        plain = copy.deepcopy(test)
        plain.decorator_list = copy.deepcopy(marks)
        plain.args.args = [a for a in plain.args.args if a.arg not in taken]
        plain.body = [*copy.deepcopy(list(combination)), *plain.body]
        out.append(ast.fix_missing_locations(plain))
    return out


NOT_CARRIED_MARKS = frozenset({"parametrize", "xfail", "skip"})
"""Marks that keep a test from being a site (``parametrize`` is read into its parameter sets): a
test expected to fail, or never run, is no check."""


def carried_mark(decorator: ast.expr) -> bool:
    """Is ``decorator`` a pytest mark that goes on the test's checks as it is (``@pytest.mark.slow``,
    ``@pytest.mark.skipif(sys.platform == "win32", reason=...)``, ``filterwarnings``,
    ``usefixtures``)? It changes where and how the test runs, not what it computes, and pytest
    applies it to the check the same way; a test with such marks was no site before."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    if not isinstance(node, ast.Attribute) or node.attr in NOT_CARRIED_MARKS:
        return False
    owner = ast.unparse(node.value)
    return owner in ("pytest.mark", "mark")


def spread(items: Sequence[T], count: int) -> list[T]:
    """``count`` of ``items`` at even steps, the first and the last among them (all of them when
    there are no more). A table's rows are kept in the order its author wrote them, often by
    kind (``-1``, ``-2`` ... ``11``, ``12``, ``112`` ... ``1001``): the first few are one kind,
    and a bug of another kind (``12`` read as ``nd``) had no site near an input it fails."""
    if len(items) <= count:
        return list(items)
    if count <= 1:
        return list(items[:count])
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)]


def _parameter_rows(
    decorator: ast.expr,
    params: list[str],
    displays: dict[str, ast.expr] | None,
    names_bound: set[str] | frozenset[str],
) -> tuple[list[str], list[ast.Assign]] | None:
    """For one ``@pytest.mark.parametrize``: its names, and per parameter set (the first
    :data:`MAX_PARAMETER_ROWS` of the right shape that are literals or :func:`buildable`) the
    assignment that binds it; ``None`` for any other decorator, or names the test does not take."""
    if not isinstance(decorator, ast.Call) or len(decorator.args) != 2:
        return None
    if ast.unparse(decorator.func) not in ("pytest.mark.parametrize", "mark.parametrize"):
        return None
    if any(k.arg != "ids" for k in decorator.keywords) or not is_literal(decorator.args[0]):
        return None
    names = ast.literal_eval(decorator.args[0])
    # pytest binds a value whole only to one name given as a string; names given as a list or a
    # tuple unpack each value, even one name
    from_text = isinstance(names, str)
    names = [n.strip() for n in names.split(",") if n.strip()] if from_text else names
    whole = from_text and len(names) == 1
    values = decorator.args[1]
    if isinstance(values, ast.Name) and values.id in (displays or {}):
        values = (displays or {})[values.id]  # ``parametrize("x", CASES)``: the constant's sets
    if not (isinstance(names, list | tuple) and names and all(isinstance(n, str) for n in names)):
        return None
    if not set(names) <= set(params):
        return None
    if not isinstance(values, ast.List | ast.Tuple | ast.Set):
        return None
    target: ast.expr = (
        ast.Name(names[0], ast.Store())
        if whole
        else ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
    )
    rows: list[ast.Assign] = []
    for written in values.elts:
        if len(rows) == MAX_PARAMETER_ROWS:
            break
        entry = _param_row(written, whole)
        if entry is None or not (is_literal(entry) or buildable(entry, names_bound)):
            continue  # ``pytest.param(..., marks=...)``, a local's value
        if not whole and not (isinstance(entry, ast.Tuple | ast.List) and len(entry.elts) == len(names)):
            continue
        rows.append(ast.Assign([copy.deepcopy(target)], copy.deepcopy(entry)))
    return list(names), rows


def _param_row(entry: ast.expr, whole: bool) -> ast.expr | None:
    """``entry`` as the row pytest binds: ``pytest.param(a, b, id="x")``'s values (a tuple of
    them, or the one value a single name given as a string takes whole); ``None`` for one with
    ``marks`` (a skip or an expected failure is no check) or starred values."""
    if not (isinstance(entry, ast.Call) and ast.unparse(entry.func) == "pytest.param"):
        return entry
    if any(k.arg != "id" for k in entry.keywords) or any(isinstance(a, ast.Starred) for a in entry.args):
        return None
    if whole:
        return entry.args[0] if len(entry.args) == 1 else None
    return ast.Tuple(list(entry.args), ast.Load())


def _plain_site(node: ast.FunctionDef, method: bool = False, helped: bool = False) -> bool:
    """Can ``node`` be a site: plain parameters, no ``yield``, something it checks (an assert,
    its own or in a helper it defines or calls, ``pytest.raises``, a ``TestCase`` assertion, or
    an asserting helper method: ``helped``) and a literal to change?"""
    args = node.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
        return False
    if method and [a.arg for a in args.args[:1]] != ["self"]:
        return False
    if any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own_nodes(node)):
        return False  # a generator (an async one too) is no test a runner calls for its values
    if "_lcrl" in ast.unparse(node):
        return False  # the records' own names
    checks = helped or any(
        isinstance(n, ast.Assert)
        or (
            isinstance(n, ast.Call)
            and (ast.unparse(n.func) == "pytest.raises" or (method and _case_call(n, "assert")))
        )
        for n in _own_nodes(node, helpers=True)
    )
    return checks and bool(input_literals(node))


def _case_call(node: ast.AST, prefix: str = "") -> bool:
    """Is ``node`` a call of a ``TestCase`` method through ``self`` (``self.assertEqual(...)``)
    whose name starts with ``prefix``?"""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr in _CASE_METHODS
        and node.func.attr.startswith(prefix)
    )


def _own_nodes(function: ast.FunctionDef, helpers: bool = False) -> Iterator[ast.AST]:
    """Every node of ``function``'s body, not those of a function or class defined in it (but
    those of a plain function defined in it when ``helpers``: what :class:`_Helper` records)."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(
            child
            for child in ast.iter_child_nodes(node)
            if not isinstance(child, _SCOPES)
            or (helpers and type(child) is ast.FunctionDef and not child.decorator_list)
        )


def input_literals(function: ast.FunctionDef) -> list[ast.expr]:
    """The literals of ``function`` a variant may change, in source order: each whole literal
    (``[1, 2]``, not its ``1``) that is not an expected value, a message, a subscript, an
    f-string's part, a ``pytest.*`` call's argument, a literal argument of a ``TestCase`` method
    (``self.assertEqual(f([1]), 2)``: ``2``, not ``[1]``), a docstring, ``None`` or ``...``."""
    excluded: set[int] = set()

    def exclude(node: ast.AST | None) -> None:
        excluded.update(id(n) for n in ast.walk(node)) if node is not None else None

    for node in _own_nodes(function):
        if isinstance(node, ast.Assert):
            exclude(node.msg)
            for side in compared_sides(node.test):
                if _expected(side):
                    exclude(side)
        elif isinstance(node, ast.Call) and root_name(node.func) == "pytest":
            exclude(node)
        elif _case_call(node):
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                exclude(argument) if is_literal(argument) else None
            if node.func.attr in _TRUTH and node.args:  # type: ignore[attr-defined]
                # ``assertTrue(len(x) > 1)`` as ``assert len(x) > 1``: the literal side is expected
                for side in compared_sides(node.args[0]):
                    exclude(side) if _expected(side) else None
        elif isinstance(node, ast.Subscript):
            exclude(node.slice)
        elif isinstance(node, ast.JoinedStr):
            exclude(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            exclude(node)  # a docstring, or a string standing as a statement
    found: list[ast.expr] = []

    def visit(node: ast.AST) -> None:
        if id(node) in excluded or isinstance(node, _SCOPES):
            return
        if isinstance(node, _CONTAINERS) and is_literal(node):
            if not (isinstance(node, ast.Constant) and (node.value is None or node.value is Ellipsis)):
                found.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    for statement in function.body:
        visit(statement)
    return found


def asserted(test: ast.expr) -> ast.expr:
    """What an assert's test checks, its ``not``s stripped (``not f(x)``: ``f(x)``)."""
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    return test


def compared_sides(test: ast.expr) -> list[ast.expr]:
    """The values an assert's test compares (each side of ``a < b <= c``; none if it compares none)."""
    test = asserted(test)
    return [test.left, *test.comparators] if isinstance(test, ast.Compare) else []


def _expected(side: ast.expr) -> bool:
    """A compared side that states the answer: a literal, or ``pytest.approx(...)``."""
    return is_literal(side) or root_name(side.func if isinstance(side, ast.Call) else side) == "pytest"


def root_name(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (``pytest`` of ``pytest.raises``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Records(ast.NodeTransformer):
    """Each assert of the function (and of a plain function defined in it) a record of what it
    compares, then a check of it (``held_out.KEEP_FUNCTION``'s ``_lcrl_check``) that notes when
    it fails; each ``return`` the records. Each value is evaluated once."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST | list[ast.stmt]:
        sides = compared_sides(node.test)
        recorded = [side for side in sides if not _expected(side)] if sides else [asserted(node.test)]
        out, names = _kept(recorded, truth=not sides)
        return [*out, _checked(_Replace(names).visit(node.test))]  # the test of the values recorded

    def visit_Expr(self, node: ast.Expr) -> ast.AST | list[ast.stmt]:
        call = node.value
        if not _case_call(call, "assert") or any(k.arg is None for k in call.keywords):  # type: ignore[union-attr]
            return self.generic_visit(node)
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        name, args = call.func.attr, call.args
        if name in _COMPARING and len(args) >= 2:
            recorded = [a for a in args[:2] if not is_literal(a)]
            if name == "assertCountEqual":  # order is not compared
                repr_key = [ast.keyword("key", ast.Name("repr", ast.Load()))]
                sort = {id(a): ast.Call(ast.Name("sorted", ast.Load()), [a], repr_key) for a in recorded}
                call.args = [sort.get(id(a), a) for a in args]
                recorded = [sort[id(a)] for a in recorded]
            out, names = _kept(recorded)
            # the assertion of the values recorded: it holds when it returns
            done = ast.Compare(_Replace(names).visit(call), [ast.Is()], [ast.Constant(None)])
            return [*out, _checked(done)]
        if name in _TRUTH and args:
            value = (
                args[0] if _TRUTH[name] == "bool" else ast.Compare(args[0], [ast.Is()], [ast.Constant(None)])
            )
            out, names = _kept([value], truth=True)
            (temp,) = names.values()
            negated = name in ("assertFalse", "assertIsNotNone")
            return [*out, _checked(ast.UnaryOp(ast.Not(), temp) if negated else temp)]
        return self.generic_visit(node)  # assertRaises, assertRegex...: checked in place

    def visit_Return(self, node: ast.Return) -> ast.Return:
        return ast.Return(ast.Name(_SEEN, ast.Load()))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        # a helper the test defines, or a copy of one it calls (:func:`with_helpers`): an
        # assert there checks the test's values as one in the test does. Not a decorated one
        # (``@given``: run as many times as its decorator chooses)
        return node if node.decorator_list else _Helper().generic_visit(node)

    def _nested(self, node: ast.AST) -> ast.AST:
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested


class _OwnRecords(_Records):
    """The test's own asserts recorded, not those of a function it defines (:func:`_may_record_helpers`)."""

    visit_FunctionDef = _Records._nested


class _Helper(_Records):
    """A helper's asserts recorded into the site's records (the enclosing run's lists); its
    returns its own."""

    def visit_Return(self, node: ast.Return) -> ast.Return:
        return self.generic_visit(node)  # type: ignore[return-value]


def _kept(values: list[ast.expr], truth: bool = False) -> tuple[list[ast.stmt], dict[int, ast.expr]]:
    """Each of ``values`` (its truth) bound to a name of its own and recorded; the names, by the
    id of the value they stand for."""
    out: list[ast.stmt] = []
    names: dict[int, ast.expr] = {}
    for number, value in enumerate(values):
        temp = f"_lcrl_v{number}"
        bound = ast.Call(ast.Name("bool", ast.Load()), [value], []) if truth else value
        out += [ast.Assign([ast.Name(temp, ast.Store())], bound), _record(ast.Name(temp, ast.Load()))]
        names[id(value)] = ast.Name(temp, ast.Load())
    return out, names


def _checked(condition: ast.expr) -> ast.stmt:
    """``_lcrl_check(_lcrl_failed, lambda: condition)``: a failed assert noted, not raised."""
    thunk = ast.Lambda(ast.arguments([], [], None, [], [], None, []), condition)
    return ast.Expr(ast.Call(ast.Name("_lcrl_check", ast.Load()), [ast.Name(_FAILED, ast.Load()), thunk], []))


def _record(value: ast.expr) -> ast.stmt:
    append = ast.Attribute(ast.Name(_SEEN, ast.Load()), "append", ast.Load())
    kept = ast.Call(ast.Name("_lcrl_keep", ast.Load()), [value], [])
    return ast.Expr(ast.Call(append, [kept], []))


def recording(function: ast.FunctionDef, owner: ast.ClassDef | None = None) -> str:
    """``function`` (a copy) as :data:`RUN_NAME`: asserts recorded, the records returned. A
    method of ``owner`` is recorded as a method of a copy of its class (its tests left out),
    defined and run by a :data:`RUN_NAME` function that takes the method's fixtures."""
    # helper methods recorded by :func:`with_method_helpers` append to the run's list: bound
    # outside the class, the method's records are theirs
    shared = owner is not None and any(isinstance(n, ast.Name) and n.id == _SEEN for n in ast.walk(owner))
    # an ``IsolatedAsyncioTestCase`` awaits its method itself, in the loop its ``asyncSetUp`` ran in
    out = _recorded(function, bind=not shared, own_loop=owner is None or not _isolated(owner))
    if owner is None:
        return ast.unparse(ast.fix_missing_locations(out))
    case = copy.deepcopy(owner)
    case.body = [
        m
        for m in case.body
        if not (isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test"))
    ]
    case.body.append(out)
    params = [a.arg for a in function.args.args[1:]]
    run = pyparse.parse(
        f"def {RUN_NAME}({', '.join(params)}):\n"
        f"    return _lcrl_case({owner.name}, {RUN_NAME!r}{''.join(f', {p}' for p in params)})\n"
    ).body[0]
    assert isinstance(run, ast.FunctionDef)
    run.body.insert(0, case)  # the class is made per call: a copy of its own, its name kept
    if shared:
        run.body[:0] = _lists()
    return ast.unparse(ast.fix_missing_locations(run))


def _recorded(function: ast.FunctionDef, bind: bool = True, own_loop: bool = True) -> ast.FunctionDef:
    records = _Records() if _may_record_helpers(function) else _OwnRecords()
    out = records.generic_visit(copy.deepcopy(function))  # its body; visit() leaves a def
    out.name = RUN_NAME
    out.decorator_list = []
    out.returns = None
    # an error after a failed assert ends the run: its name the last record
    error = pyparse.parse(
        f"if not {_FAILED}:\n    raise\n{_SEEN}.append(('<raised>', type(_lcrl_error).__name__))"
    ).body
    caught = ast.ExceptHandler(ast.Name("Exception", ast.Load()), "_lcrl_error", error)
    body = [ast.Try(out.body, [caught], [], [])]
    out.body = [*(_lists() if bind else []), *body, ast.Return(ast.Name(_SEEN, ast.Load()))]
    return _awaited(out) if own_loop and isinstance(out, ast.AsyncFunctionDef) else out


def _awaited(function: ast.AsyncFunctionDef) -> ast.FunctionDef:
    """An async test's recording as a plain function of the same parameters that runs it to its
    end in an event loop of its own (``held_out.KEEP_FUNCTION``'s ``_lcrl_await``) and returns its
    records: the candidate and the check are plain tests, which no plugin need run, and the
    interval timer of an answer reaches into the loop."""
    params = [a.arg for a in function.args.args]
    run = pyparse.parse(f"def {RUN_NAME}():\n    return _lcrl_await({_ASYNC}({', '.join(params)}))\n").body[0]
    assert isinstance(run, ast.FunctionDef)
    inner = copy.copy(function)
    inner.name = _ASYNC
    run.args = copy.deepcopy(function.args)  # passed on, not closed over: the test may rebind one
    run.body.insert(0, inner)
    return ast.fix_missing_locations(run)


def _lists() -> list[ast.stmt]:
    """The run's records and its note of failed asserts, bound empty."""
    return [ast.Assign([ast.Name(name, ast.Store())], ast.List([], ast.Load())) for name in (_SEEN, _FAILED)]


def _holding(function: ast.FunctionDef) -> list[int]:
    """The indices of ``function``'s statements that hold an input literal."""
    inputs = {id(slot) for slot in input_literals(function)}
    return [i for i, st in enumerate(function.body) if any(id(n) in inputs for n in ast.walk(st))]


def _trimmed(function: ast.FunctionDef, changed: set[int], owner: ast.ClassDef | None) -> ast.FunctionDef:
    """A copy of ``function`` cut after the last statement holding a changed literal (the ids
    ``changed``; when that statement builds input, after the first check that follows it), and
    without the statements before it that only check other values: asserts, and calls of a
    helper it defines or of a ``TestCase`` method (``self.check(...)``, ``self.assertEqual(...)``).
    Whatever it leaves out, the clean run answers the copy itself."""
    nested = {n.name for n in function.body if isinstance(n, ast.FunctionDef)}
    methods = {m.name for m in owner.body if isinstance(m, ast.FunctionDef)} if owner is not None else set()

    def checks_only(statement: ast.stmt) -> bool:
        if isinstance(statement, ast.Assert):
            return True
        call = statement.value if isinstance(statement, ast.Expr) else None
        return isinstance(call, ast.Call) and (
            _name_call(call) in nested or _self_call(call) in methods or _case_call(call, "assert")
        )

    holding = [any(id(n) in changed for n in ast.walk(statement)) for statement in function.body]
    last = max(i for i, held in enumerate(holding) if held)
    if not checks_only(function.body[last]):  # changed input (``stock = {...}``): up to a check
        last = next((i for i in range(last, len(holding)) if checks_only(function.body[i])), last)
        holding[last] = True
    out = copy.copy(function)  # its statements shared: :func:`recording` copies them
    out.body = [st for i, st in enumerate(function.body[: last + 1]) if holding[i] or not checks_only(st)]
    return out


class _Replace(ast.NodeTransformer):
    def __init__(self, new: dict[int, ast.expr]) -> None:
        self.new = new

    def visit(self, node: ast.AST) -> ast.AST:
        return self.new[id(node)] if id(node) in self.new else self.generic_visit(node)


def _mutate_input(value: object, rng: random.Random) -> object:
    """:func:`.held_out.mutate`, but a table of cases (a list or tuple of two or more rows, each
    a list, tuple or dict: ``CASES = [("ab", "Ab"), ...]``) gets one field of one row changed:
    its rows dropped, doubled or swapped give no input the visible test did not already have, and
    a row of another length no longer unpacks."""
    rows = isinstance(value, list | tuple) and len(value) > 1
    if rows and all(isinstance(row, list | tuple | dict) and row for row in value):  # type: ignore[union-attr]
        out = list(value)  # type: ignore[arg-type]
        at = rng.randrange(len(out))
        row = out[at]
        if isinstance(row, dict):
            out[at] = mutate(row, rng, depth=1)
        else:  # a field of the row changed, its arity kept (``for text, want in CASES``)
            fields = list(row)
            field = rng.randrange(len(fields))
            fields[field] = mutate(fields[field], rng, depth=2)
            out[at] = type(row)(fields)
        return type(value)(out)  # type: ignore[call-arg]
    return mutate(value, rng)


def function_variants(
    function: ast.FunctionDef, rng: random.Random, seen: set[str], owner: ast.ClassDef | None = None
) -> list[str]:
    """Sources of ``function`` (a method of ``owner``) as :func:`recording`, each with one or two
    of its :func:`input_literals` mutated (none the test's own, none repeated). A test too long
    for one check (cut by :func:`_trimmed`) is a table of checks: its statements that hold an
    input take turns, each a site of its own (up to :data:`MAX_LONG_VARIANTS` variants)."""
    visible = recording(function, owner)
    seen.add(visible)
    holding = _holding(function) if len(visible) > MAX_SOURCE else []
    rounds = min(VARIANTS_PER_CALL * len(holding), MAX_LONG_VARIANTS) if holding else VARIANTS_PER_CALL
    turns = rng.sample(holding, len(holding))
    out = []
    for number in range(rounds):
        changed = copy.deepcopy(function)
        slots = input_literals(changed)
        if turns:  # the slots of this round's statement
            inside = {id(n) for n in ast.walk(changed.body[turns[number % len(turns)]])}
            slots = [slot for slot in slots if id(slot) in inside]
        new: dict[int, ast.expr] = {}
        for at in {rng.randrange(len(slots)) for _ in range(1 if rng.random() < 0.7 else 2)}:
            before = ast.literal_eval(slots[at])
            after = _mutate_input(before, rng)
            try:
                node = pyparse.parse(repr(after), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # inf, nan: no literal
                continue
            if repr(after) != repr(before):
                new[id(slots[at])] = node
        if not new:
            continue
        changed = _Replace(new).visit(changed)
        source = recording(changed, owner)
        if len(source) > MAX_SOURCE:  # a long test (a table of ``check(...)`` calls): its checks
            source = recording(_trimmed(changed, set(map(id, new.values())), owner), owner)
        if source not in seen and len(source) <= MAX_SOURCE:
            seen.add(source)
            out.append(source)
    return out
