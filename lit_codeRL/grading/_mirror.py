"""The mirror run of grading (trusted, stdlib only; the runner's parent imports it).

Code that reads the answer from the test that calls it (a parametrized test's ``expected`` from a
caught exception's ``tb_frame.f_back.f_locals``, the assert's constant through ``gc`` or a warm
``linecache``) passes a test without computing anything. The checks of ``_guard.py`` name the
ways they can see; this names the class: a diff that resolved a task is graded a second time
with every expected value its FAIL_TO_PASS tests compare against *changed*, by a random amount,
and nothing else changed. A function computes the same value for the same inputs, so a fix that
passed the test fails it now; code that passes both read the value.

The values change in the tree pytest compiles the test module from (:func:`install`, in the
pytest child, before the repository's first line runs), never in the file: a file rewritten on
disk differs from the first run's in its bytes, size and change time, from the base's blob in
the repository's git objects, and from any copy of it the diff carries, and code that tells the
runs apart answers honestly in the mirror run only. Here the two runs' files, directories and
processes are the same; the values live only in the test module's code.

A test function is *armed* when each value it checks equality against can be changed in its
text and changing it can only turn the test's pass into a failure:

- ``assert <computed> == <literal>`` (either side; a literal is a constant, a negated number or
  a tuple, list, set or dict of literals) and ``self.assertEqual(<computed>, <literal>)`` (and
  its ``assert*Equal`` siblings), as a statement of the function's body itself, of the body of
  a ``for`` over rows written out in the text (no ``break``, ``continue`` or ``else``), or of
  ``with self.subTest(...)`` or of a ``try`` with no ``except`` (``try``/``finally``; not inside
  an ``if``, a ``try`` that catches or another ``with``), in a
  function without ``return`` or ``yield``, so every run of the test reaches it;
- the same with a name in place of the literal, when every use of the name in the test is such
  an operand and its one value is a literal in the text: assigned once in the function, once at
  the module's top level, a column of those rows of a ``for``, or a column of the function's
  ``pytest.mark.parametrize`` rows, every row (``pytest.param`` rows too) a literal there.

- ``with pytest.raises(E):`` and ``with self.assertRaises(E):`` (``assertRaisesRegex``, more
  than one item, ``E`` a tuple or given as ``expected_exception=``), and their call forms
  ``pytest.raises(E, f, ...)``, as a statement every run reaches (as above): ``E`` is replaced by
  a class the child made in every run before the repository's first line, which no code raises
  without reading it from the test (:func:`_expect_fresh`). The code under test runs as before
  and raises what it raised, which no longer passes; a forged report or an answer taken from
  the test passes.

- where a function has none of these, each equality check reached as above (a computed
  expected value: ``len(ITEMS) + 2``, a helper's result, a fixture's value): its second operand
  is evaluated as before and passed through :func:`unmatched`, which returns an object no honest
  ``__eq__`` equals. A forged pass, or an always-equal object the child's comparison check did
  not ask, passes that; an answer read from the test does not (what it reads did not change).

- where a function has no check every run reaches (``is``, ``in``, ``<``, truth values,
  ``assertTrue``, a check under an ``if``, an early ``return``, none at all): each of its
  ``return`` statements becomes one that raises the class no code raises, and one more is added
  at the end of its body. A test that passed ran to its end or to a ``return``, so an honest fix
  fails there; a forged pass does not. A generator (which pytest does not run) is left alone.

The first shiftable constant of each such literal changes (``int`` and ``float`` by the salt,
``bool`` negated, ``str`` and ``bytes`` suffixed), or its first empty list, tuple or dict gains
the salt as its one item; pytest's node ids may change with a
parametrized value, so the host asks only whether any test of an armable function passed
(``repo.py: mirror_verdict``), which an honest fix never does: one the parent found armable in
the file (:func:`armable`) whose module ran without the change (loaded past pytest's rewriter)
counts as one that passed changed. What makes a gold patch pass a
mirrored test (a test whose checks cannot fail, an object with a loose ``__eq__``) drops the
task at validation, with the reason."""

import ast
import math
import os
import secrets
import sys
from builtins import (  # noqa: A004, UP029 - bound here: the code under test may replace the builtins
    all,
    any,
    bool,
    bytes,
    enumerate,
    float,
    frozenset,
    getattr,
    id,
    int,
    isinstance,
    len,
    list,
    next,
    open,
    set,
    setattr,
    sorted,
    str,
    sum,
    type,
)
from collections.abc import Callable

# and these: the mirror changes test modules as pytest compiles them, after the code under test
# may have run (a conftest imports it)
_isfinite, _realpath, _relpath = math.isfinite, os.path.realpath, os.path.relpath
_modules = sys.modules

EQUAL_METHODS = frozenset(
    {
        "assertEqual", "assertEquals", "failUnlessEqual", "assertListEqual", "assertTupleEqual",
        "assertDictEqual", "assertSetEqual", "assertSequenceEqual", "assertMultiLineEqual",
        "assert_equal",
    }
)  # fmt: skip
"""Methods whose first two arguments are checked for equality (``unittest``, ``numpy.testing``)."""


def shifted(value: object, salt: int) -> object:
    """``value`` changed by ``salt`` (an ``int`` >= 1), or ``None`` when it cannot be: a number
    plus the salt, a ``bool`` negated, a string or bytes with ``#salt`` appended."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + salt
    if isinstance(value, float):
        new = value + salt
        return new if _isfinite(value) and new != value else None
    if isinstance(value, str):
        return f"{value}#{salt}"
    if isinstance(value, bytes):
        return value + b"#%d" % salt
    return None


def _is_literal(node: ast.AST) -> bool:
    """Whether ``node`` is a value written out in the text (no name, no call)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int | float)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values
        )
    return False


_EMPTY = ast.List | ast.Tuple | ast.Set | ast.Dict


def _leaf(node: ast.AST, salt: int) -> ast.Constant | ast.List | ast.Tuple | ast.Set | ast.Dict | None:
    """The first constant of the literal ``node`` that :func:`shifted` can change, or the first
    empty container (``[]``, ``()``, ``{}``), which gains one (:func:`_change`)."""
    if isinstance(node, ast.Constant):
        return node if shifted(node.value, salt) is not None else None
    if isinstance(node, ast.UnaryOp):
        return _leaf(node.operand, salt)
    if isinstance(node, _EMPTY) and not (node.keys if isinstance(node, ast.Dict) else node.elts):
        return node
    if isinstance(node, ast.Dict):
        parts: list[ast.AST] = [*node.values, *[k for k in node.keys if k is not None]]
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        parts = list(node.elts)
    else:
        return None
    return next((c for c in (_leaf(p, salt) for p in parts) if c is not None), None)


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """Every node of ``function``'s body, not of the functions and classes defined in it."""
    found, todo = [], list(ast.iter_child_nodes(function))
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return found


def _call_name(node: ast.AST) -> str:
    """``f`` of ``f(...)``, ``m`` of ``x.m(...)``; ``""`` for anything else."""
    if not isinstance(node, ast.Call):
        return ""
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def _rows(target: ast.expr, rows: ast.expr) -> dict[str, list[ast.expr]] | None:
    """For ``for <target> in <rows>`` over rows written out in the text (a non-empty list or
    tuple): the expression each row binds to each name of ``target``; ``None`` otherwise."""
    if not isinstance(rows, ast.List | ast.Tuple) or not rows.elts:
        return None
    if isinstance(target, ast.Name):
        return {target.id: list(rows.elts)}
    if not (isinstance(target, ast.Tuple | ast.List) and all(isinstance(t, ast.Name) for t in target.elts)):
        return None
    width = len(target.elts)
    if not all(isinstance(r, ast.Tuple | ast.List) and len(r.elts) == width for r in rows.elts):
        return None
    return {t.id: [r.elts[i] for r in rows.elts] for i, t in enumerate(target.elts)}  # type: ignore[attr-defined]


def _reached(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> tuple[list[ast.stmt], dict[str, list[ast.expr]]]:
    """The statements every run of ``function`` reaches (its body's own; the body of a ``for``
    over rows written out in the text, with no ``break``, ``continue`` or ``else``, on every
    row; the body of ``with self.subTest(...)``; the body and the finally of a ``try`` with no
    ``except``), and the rows' expressions of each name such a
    ``for`` binds. None in a function that can return early or is a generator."""
    if any(isinstance(n, ast.Return | ast.Yield | ast.YieldFrom) for n in _own_nodes(function)):
        return [], {}
    reached: list[ast.stmt] = []
    bound: dict[str, list[ast.expr]] = {}

    def visit(body: list[ast.stmt]) -> None:
        for statement in body:
            reached.append(statement)
            if isinstance(statement, ast.For) and not statement.orelse:
                rows = _rows(statement.target, statement.iter)
                jumps = any(isinstance(n, ast.Break | ast.Continue) for n in _own_nodes(statement))
                if rows is not None and not jumps:
                    bound.update(rows)
                    visit(statement.body)
            elif isinstance(statement, ast.With) and all(
                _call_name(item.context_expr) == "subTest" for item in statement.items
            ):
                visit(statement.body)
            elif isinstance(statement, ast.Try) and not statement.handlers and not statement.orelse:
                # try/finally: its body runs to the end or fails the test once the finally ran (a
                # finally that returns is refused above, one that jumps out of a loop with the for)
                visit(statement.body)
                visit(statement.finalbody)

    visit(function.body)
    return reached, bound


class _Expected:
    """The second operand of one equality check (``holder[index]``: ``assert a == b``'s ``b``,
    ``assertEqual(a, b)``'s ``b``), to be replaced where nothing in the text can be changed."""

    def __init__(self, left: ast.expr, holder: list[ast.expr], index: int) -> None:
        self.left, self.holder, self.index = left, holder, index

    def right(self) -> ast.expr:
        return self.holder[self.index]


class _End:
    """Where a test function ends: the end of its body and each of its own ``return`` statements,
    each of which the mirror run makes a statement that fails the test (:meth:`arm`)."""

    def __init__(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.function = function

    def arm(self, fail: Callable[[ast.AST], ast.stmt]) -> None:
        """Replace each ``return`` of the function's own (not of a function defined in it) by
        ``fail(it)``, and add one at the end of its body. A run of the test that completes goes
        through one of them; an exception the test itself catches goes on to another."""
        todo: list[ast.AST] = [self.function]
        while todo:
            node = todo.pop()
            for _field, value in ast.iter_fields(node):
                if not isinstance(value, list):
                    continue
                value[:] = [fail(v) if isinstance(v, ast.Return) else v for v in value]
                todo += [
                    v
                    for v in value
                    if isinstance(v, ast.AST)
                    and not isinstance(v, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda)
                ]
        self.function.body.append(fail(self.function.body[-1]))


def _checks(statements: list[ast.stmt]) -> list[_Expected]:
    """Each equality check among ``statements``."""
    checks = []
    for statement in statements:
        if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare):
            test = statement.test
            if len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
                checks.append(_Expected(test.left, test.comparators, 0))
        elif isinstance(statement, ast.Expr) and _call_name(statement.value) in EQUAL_METHODS:
            args = statement.value.args  # type: ignore[attr-defined]
            if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
                checks.append(_Expected(args[0], args, 1))
    return checks


def _operands(statements: list[ast.stmt]) -> list[tuple[ast.expr, ast.expr]]:
    """The two sides of each equality check among ``statements``."""
    return [(check.left, check.right()) for check in _checks(statements)]


RAISES_CALLS = frozenset({"raises", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp"})
"""The checks that an exception is raised: ``pytest.raises``, ``unittest``'s ``assertRaises*``."""


def _expected_exception(call: ast.Call) -> ast.expr | None:
    """The exception a raises-check names: its first argument or ``expected_exception=``."""
    if call.args:
        return None if isinstance(call.args[0], ast.Starred) else call.args[0]
    return next((k.value for k in call.keywords if k.arg == "expected_exception"), None)


def _raises_checks(statements: list[ast.stmt]) -> list[ast.Call]:
    """The raises-checks among ``statements``: each item of ``with pytest.raises(E):`` (``with
    self.assertRaises(E):``...), and the call forms ``pytest.raises(E, f, ...)`` as a statement."""
    calls = []
    for statement in statements:
        if isinstance(statement, ast.With | ast.AsyncWith):
            calls += [item.context_expr for item in statement.items]
        elif isinstance(statement, ast.Expr):
            calls.append(statement.value)
    return [
        c
        for c in calls
        if isinstance(c, ast.Call) and _call_name(c) in RAISES_CALLS and _expected_exception(c) is not None
    ]


NEVER_RAISED = "_lcrl_raised"
"""Where the child's ``_pytest.assertion.rewrite`` holds the exception class no code raises (the
name gets a random suffix in each run, :func:`install`), as ``_compare.py``'s helpers do."""
UNMATCHED = "_lcrl_unmatched"
"""Where it holds :func:`unmatched` (the same suffix)."""


def unmatched(value: object) -> object:
    """What a check whose expected value is computed compares against in the mirror run, for
    ``value`` (evaluated as before, so the test runs as it did): an object of a class made
    before the repository's first line ran (the child imports this module first), unknown to
    every honest ``__eq__`` (``NotImplemented`` both ways: unequal); an always-equal object says
    yes to it."""
    return _Unmatched()


class _Unmatched:
    __slots__ = ()


def _helper(name: str, where: ast.AST) -> ast.Attribute:
    """``@pytest_ar.<name>``: the alias pytest's rewriter gives ``_pytest.assertion.rewrite`` in
    every module it compiles, where :func:`install` puts the mirror's helpers."""
    node = ast.Attribute(ast.Name("@pytest_ar", ast.Load()), name, ast.Load())
    for part in ast.walk(node):
        ast.copy_location(part, where)
    return node


def _expect_fresh(call: ast.Call, never_raised: str) -> None:
    """Make the raises-check ``call`` expect the class ``@pytest_ar.<never_raised>`` (the alias
    pytest's rewriter gives ``_pytest.assertion.rewrite`` in every module it compiles), made
    before the repository's first line ran in every run, which nothing raises without reading it
    from the test. The code under test runs as in the first run and raises what it raised there,
    which now fails the test."""
    old = _expected_exception(call)
    fresh = _helper(never_raised, old)
    if call.args:
        call.args[0] = fresh
        return
    for i, k in enumerate(call.keywords):
        if k.arg == "expected_exception":
            call.keywords[i] = ast.copy_location(ast.keyword("expected_exception", fresh), k)


def _loads(nodes: list[ast.AST], name: str) -> int:
    return sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in nodes)


def _stores(nodes: list[ast.AST], name: str) -> list[ast.AST]:
    return [n for n in nodes if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)]


def _assigned_literal(body: list[ast.stmt], nodes: list[ast.AST], name: str) -> ast.expr | None:
    """The literal ``name`` is bound to by its only binding, a plain ``name = <literal>`` among
    ``body``'s statements (``nodes``: everything that could bind it elsewhere)."""
    if len(_stores(nodes, name)) != 1:
        return None
    for statement in body:
        if (
            isinstance(statement, ast.Assign)
            and len(statement.targets) == 1
            and isinstance(statement.targets[0], ast.Name)
            and statement.targets[0].id == name
            and _is_literal(statement.value)
        ):
            return statement.value
    return None


def _parametrized(function: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> list[ast.expr] | None:
    """The literal of ``name`` in each row of ``function``'s ``parametrize`` decorator that names
    it, or ``None`` when some row's value is not a literal in the text."""
    for decorator in function.decorator_list:
        if not (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute | ast.Name)
            and (getattr(decorator.func, "attr", None) or getattr(decorator.func, "id", "")) == "parametrize"
            and len(decorator.args) >= 2
        ):
            continue
        names_node, rows = decorator.args[0], decorator.args[1]
        if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str):
            names = [n.strip() for n in names_node.value.split(",") if n.strip()]
        elif isinstance(names_node, ast.Tuple | ast.List) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in names_node.elts
        ):
            names = [e.value for e in names_node.elts]  # type: ignore[attr-defined]
        else:
            continue
        if name not in names:
            continue
        if not isinstance(rows, ast.List | ast.Tuple) or not rows.elts:
            return None
        column, values = names.index(name), []
        for row in rows.elts:
            if (
                isinstance(row, ast.Call)
                and getattr(row.func, "attr", getattr(row.func, "id", "")) == "param"
            ):
                items = row.args if len(names) > 1 else row.args[:1]
            elif len(names) == 1:
                items = [row]
            elif isinstance(row, ast.Tuple | ast.List):
                items = row.elts
            else:
                return None
            if len(items) != len(names) or any(isinstance(i, ast.Starred) for i in items):
                return None
            values.append(items[column])
        return values if all(_is_literal(v) for v in values) else None
    return None


def _function_edits(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    module: ast.Module,
    module_nodes: list[ast.AST],
    salt: int,
) -> list[object] | None:
    """What arms ``function`` (``None``: it cannot be armed): the constants to change and the
    raises-checks to make expect a fresh class; where there are none, the expected values of its
    equality checks, to be replaced at run time (:func:`unmatched`)."""
    reached, bound = _reached(function)
    checks, raises = _checks(reached), _raises_checks(reached)
    pairs = [(check.left, check.right()) for check in checks]
    if not pairs and not raises:
        # no check every run reaches (``is``, ``in``, ``<``, truth values, a check under an ``if``
        # or in a loop over a computed list, no check at all): a test that passed ran to its last
        # line or to a ``return``, so a statement that fails there is what an honest fix meets; a
        # forged pass does not. Not a generator (pytest runs none as a test)
        generator = any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own_nodes(function))
        return None if generator else [_End(function)]
    own = _own_nodes(function)
    args = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    edits: list[object] = list(raises)
    for left, right in pairs:  # a check that cannot be armed is left as it is
        names = [side.id for side in (left, right) if isinstance(side, ast.Name)]
        if _is_literal(left) != _is_literal(right):
            leaf = _leaf(left if _is_literal(left) else right, salt)
            if leaf is not None:
                edits.append(leaf)
            continue
        if not names or (len(names) == 2 and names[0] == names[1]):
            continue
        # ``assert result == expected``: either name may be the value the test fixed; take the
        # first one that is a literal in the text and used nowhere but in such checks
        for name in names:
            operand_uses = sum(isinstance(s, ast.Name) and s.id == name for p in pairs for s in p)
            if _loads(own, name) != operand_uses:
                continue
            if name in args:
                values = _parametrized(function, name)
            elif name in bound:
                values = bound[name] if len(_stores(own, name)) == 1 else None
            else:
                value = _assigned_literal(function.body, own, name)
                if value is None and not _stores(own, name):  # a module-level constant
                    everywhere = _loads(module_nodes, name)
                    checked = sum(
                        isinstance(s, ast.Name) and s.id == name
                        for f in module_nodes
                        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                        for p in _operands(_reached(f)[0])
                        for s in p
                    )
                    value = (
                        _assigned_literal(module.body, module_nodes, name) if everywhere == checked else None
                    )
                values = None if value is None else [value]
            leaves = [_leaf(v, salt) for v in values or []]
            if values and all(leaf is not None for leaf in leaves):
                edits.extend(leaves)
                break
    # nothing written out to change (``assert len(lines) == len(ITEMS) + 2``, a fixture's value):
    # every check compares against an object no honest value equals. A pass forged past the
    # child's checks, or an always-equal object they missed, passes that too; an answer read
    # from the test does not (what it reads is unchanged), which ``_guard.py`` is left to see
    return edits or checks or None


def _functions(module: ast.Module, qualname: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The test function of ``qualname`` (``["test_x"]``, ``["TestC", "test_x"]``) in ``module``."""
    body: list[ast.stmt] = module.body
    for depth, part in enumerate(qualname):
        last = depth == len(qualname) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = [n for n in body if isinstance(n, kinds) and n.name == part]
        if len(found) != 1:  # defined twice: which one runs is pytest's business
            return None
        if last:
            return found[0]  # type: ignore[return-value]
        body = found[0].body  # type: ignore[attr-defined]
    return None


def plan(tests: list[str]) -> dict[str, list[str]]:
    """The test functions of ``tests`` (node ids) by file: ``{path: [qualname, ...]}`` (``path``
    relative to the repository root, ``qualname`` as ``test_x`` or ``TestC::test_x``)."""
    by_file: dict[str, set[str]] = {}
    for node in tests:
        path, _, qualname = node.partition("[")[0].partition("::")
        if qualname and path.endswith(".py"):
            by_file.setdefault(path, set()).add(qualname)
    return {path: sorted(names) for path, names in sorted(by_file.items())}


def arm_module(module: ast.Module, qualnames: list[str], salt: int, suffix: str = "") -> list[str]:
    """Change, in ``module`` (the tree a test file is compiled from), the expected values of the
    test functions ``qualnames`` that can be armed (and the exceptions they expect to the class
    ``NEVER_RAISED + suffix`` names, :func:`_expect_fresh`); those that were."""
    module_nodes = list(ast.walk(module))
    armed, leaves = [], {}
    for qualname in qualnames:
        function = _functions(module, qualname.split("::"))
        edits = None if function is None else _function_edits(function, module, module_nodes, salt)
        if edits:
            armed.append(qualname)
            leaves.update((id(leaf), leaf) for leaf in edits)
    for leaf in leaves.values():  # after the analysis: a constant two checks share changes once
        _change(leaf, salt, suffix)
    return armed


def _change(leaf: object, salt: int, suffix: str) -> None:
    """Arm one check: a constant shifted, an empty container given the salt as its one item (as
    key and value in a dict), a raises-check made to expect the class no code raises, a computed
    expected value passed through :func:`unmatched`."""
    if isinstance(leaf, _End):

        def fail(where: ast.AST) -> ast.stmt:  # ``raise @pytest_ar.<NEVER_RAISED + suffix>()``
            call = ast.Call(_helper(NEVER_RAISED + suffix, where), [], [])
            return ast.fix_missing_locations(ast.copy_location(ast.Raise(call, None), where))

        leaf.arm(fail)
    elif isinstance(leaf, _Expected):
        old = leaf.right()
        leaf.holder[leaf.index] = ast.copy_location(
            ast.Call(_helper(UNMATCHED + suffix, old), [old], []), old
        )
    elif isinstance(leaf, ast.Call):
        _expect_fresh(leaf, NEVER_RAISED + suffix)
    elif isinstance(leaf, ast.Dict):
        leaf.keys.append(ast.copy_location(ast.Constant(salt), leaf))
        leaf.values.append(ast.copy_location(ast.Constant(salt), leaf))
    elif isinstance(leaf, _EMPTY):
        leaf.elts.append(ast.copy_location(ast.Constant(salt), leaf))
    else:
        leaf.value = shifted(leaf.value, salt)  # type: ignore[attr-defined]


def armable(tests: list[str], salt: int) -> list[str]:
    """The node ids (``path::[Class::]name``, no parameters) of the functions of ``tests`` that
    :func:`arm_module` arms in their files as they are now under the working directory."""
    found = []
    for path, qualnames in plan(tests).items():
        try:
            with open(path, "rb") as f:
                module = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        found += [f"{path}::{q}" for q in arm_module(module, qualnames, salt)]
    return found


def install(
    rewriter: type,
    root: str,
    tests: list[str],
    salt: int,
    armed: Callable[[list[str]], None],
    seen: Callable[[str, ast.Module], None] = lambda path, tree: None,
) -> set[str]:
    """Arm the test files of ``tests`` as pytest compiles them: wrap ``rewriter.run`` (pytest's
    ``AssertionRewriter``, which every test module pytest imports is compiled through) to change
    the tree of each such file first, and call ``armed`` with the node ids it armed. Returns the
    set the wrapper adds the real path of every module it compiles to: a test module missing
    from it was loaded past the rewriter, so past this change and every check the rewriter
    installs (``_compare.py``). ``seen`` is given each module's real path and its tree as
    compiled (armed or not), before pytest rewrites its asserts. With no ``tests`` (every run
    but the mirror run) it changes nothing, the same function in the same place: the code under
    test finds the same grader in both runs. The file itself is never written, so nothing
    outside the process (its bytes, size, times, the repository's git objects, a copy of the
    text the diff carries) tells the mirror run from the first."""
    planned, run, compiled = plan(tests), rewriter.run, set()
    # the class the mirror's raises-checks expect and what its computed checks compare against,
    # made in every run beside _compare's helpers: a class more among Exception's subclasses in
    # the mirror run only would tell the runs apart
    suffix = f"_{secrets.token_hex(4)}"
    setattr(_modules[rewriter.__module__], NEVER_RAISED + suffix, type("NeverRaised", (Exception,), {}))
    setattr(_modules[rewriter.__module__], UNMATCHED + suffix, unmatched)

    def run_armed(self, mod):  # noqa: ANN001, ANN202
        path = getattr(self, "module_path", None)
        if isinstance(path, str):
            compiled.add(_realpath(path))
        qualnames = planned.get(_relpath(path, root)) if isinstance(path, str) else None
        if qualnames and isinstance(mod, ast.Module):
            done = arm_module(mod, qualnames, salt, suffix)
            if done:
                armed([f"{_relpath(path, root)}::{q}" for q in done])
        if isinstance(path, str) and isinstance(mod, ast.Module):
            seen(_realpath(path), mod)
        return run(self, mod)

    rewriter.run = run_armed
    return compiled
