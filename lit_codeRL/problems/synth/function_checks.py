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
the bug no longer meets) answers otherwise too.

Only plain test functions are sites: top level, no decorator but one ``pytest.mark.parametrize``
of literals (each of its first parameter sets a site of its own, bound at the top of the body),
positional parameters only (fixtures, passed through by the check), no ``yield``.
Their module's code other than its tests (helpers, constants, fixtures) is the checks' header
(:func:`module_support`).
"""

from __future__ import annotations

import ast
import copy
import random
from collections.abc import Iterator

from lit_codeRL import pyparse
from lit_codeRL.problems.synth.held_out import RUN_NAME, VARIANTS_PER_CALL, mutate

MAX_SOURCE = 4000
"""Longest changed test function kept (its source, as written into the checks)."""
MAX_PARAMETER_SETS = 4
"""A parametrized test's parameter sets made sites at most (the first ones)."""
_SEEN = "_lcrl_seen"
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_CONTAINERS = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict)


def module_support(tree: ast.Module) -> str:
    """The module's source without its tests (``test*`` functions, ``Test*`` classes and
    ``TestCase`` subclasses): the imports, helpers, constants and fixtures its tests use."""
    kept = [node for node in tree.body if not _is_test(node)]
    return "\n".join(ast.unparse(node) for node in kept)


def _is_test(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name.startswith("test")
    if isinstance(node, ast.ClassDef):
        return node.name.startswith("Test") or any("TestCase" in ast.unparse(b) for b in node.bases)
    return False


def test_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    """The module's test functions that can be sites (see the module's docstring), a
    parametrized one as one plain function per parameter set (:func:`parameter_sets`)."""
    out = []
    for test in tree.body:
        if isinstance(test, ast.FunctionDef) and test.name.startswith("test"):
            out += [node for node in parameter_sets(test) if _plain_site(node)]
    return out


def parameter_sets(test: ast.FunctionDef) -> list[ast.FunctionDef]:
    """``test`` itself when it has no decorator; for one ``@pytest.mark.parametrize`` of literal
    names and values (``ids=`` aside), a copy per parameter set (the first
    :data:`MAX_PARAMETER_SETS`) whose body starts by binding them and whose signature no longer
    takes them; none for any other decorator (its signature is not the test's to fill)."""
    if not test.decorator_list:
        return [test]
    (decorator, *more) = test.decorator_list
    if more or not isinstance(decorator, ast.Call) or len(decorator.args) != 2:
        return []
    if ast.unparse(decorator.func) not in ("pytest.mark.parametrize", "mark.parametrize"):
        return []
    if any(k.arg != "ids" for k in decorator.keywords) or not is_literal(decorator.args[0]):
        return []
    names = ast.literal_eval(decorator.args[0])
    # pytest binds a value whole only to one name given as a string; names given as a list or a
    # tuple unpack each value, even one name
    from_text = isinstance(names, str)
    names = [n.strip() for n in names.split(",") if n.strip()] if from_text else names
    whole = from_text and len(names) == 1
    params = [a.arg for a in test.args.args]
    values = decorator.args[1]
    if not (isinstance(names, list | tuple) and names and all(isinstance(n, str) for n in names)):
        return []
    if not set(names) <= set(params):
        return []
    if not isinstance(values, ast.List | ast.Tuple):
        return []
    out = []
    for entry in values.elts:
        if len(out) == MAX_PARAMETER_SETS:
            break
        if not is_literal(entry):
            continue  # ``pytest.param(..., marks=...)``
        if not whole and not (isinstance(entry, ast.Tuple | ast.List) and len(entry.elts) == len(names)):
            continue
        target: ast.expr = (
            ast.Name(names[0], ast.Store())
            if whole
            else ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
        )
        plain = copy.deepcopy(test)
        plain.decorator_list = []
        plain.args.args = [a for a in plain.args.args if a.arg not in names]
        plain.body = [ast.Assign([target], copy.deepcopy(entry)), *plain.body]
        out.append(ast.fix_missing_locations(plain))
    return out


def _plain_site(node: ast.FunctionDef) -> bool:
    args = node.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or args.defaults:
        return False
    own = list(_own_nodes(node))
    if any(isinstance(n, ast.Yield | ast.YieldFrom | ast.Await) for n in own):
        return False
    if "_lcrl" in ast.unparse(node):
        return False  # the records' own names
    checks = any(isinstance(n, ast.Assert) for n in own) or any(
        isinstance(n, ast.Call) and ast.unparse(n.func) == "pytest.raises" for n in own
    )
    return checks and bool(input_literals(node))


def _own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """Every node of ``function``'s body, not those of a function or class defined in it."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, _SCOPES))


def input_literals(function: ast.FunctionDef) -> list[ast.expr]:
    """The literals of ``function`` a variant may change, in source order: each whole literal
    (``[1, 2]``, not its ``1``) that is not an expected value, a message, a subscript, an
    f-string's part, a ``pytest.*`` call's argument, a docstring, ``None`` or ``...``."""
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


def is_literal(node: ast.expr) -> bool:
    """Is ``node`` a Python literal (what ``ast.literal_eval`` reads)?"""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False
    return True


class _Records(ast.NodeTransformer):
    """Each assert of the function (not of a function defined in it) a record of what it
    compares; each ``return`` the records."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST | list[ast.stmt]:
        sides = compared_sides(node.test)
        if sides:
            recorded = [side for side in sides if not _expected(side)]
        else:
            recorded = [ast.Call(ast.Name("bool", ast.Load()), [asserted(node.test)], [])]
        return [_record(side) for side in recorded] or ast.Pass()

    def visit_Return(self, node: ast.Return) -> ast.Return:
        return ast.Return(ast.Name(_SEEN, ast.Load()))

    def _nested(self, node: ast.AST) -> ast.AST:
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _nested


def _record(value: ast.expr) -> ast.stmt:
    append = ast.Attribute(ast.Name(_SEEN, ast.Load()), "append", ast.Load())
    kept = ast.Call(ast.Name("_lcrl_keep", ast.Load()), [value], [])
    return ast.Expr(ast.Call(append, [kept], []))


def recording(function: ast.FunctionDef) -> str:
    """``function`` (a copy) as :data:`RUN_NAME`: asserts recorded, the records returned."""
    out = _Records().generic_visit(copy.deepcopy(function))  # its body; visit() leaves a def
    out.name = RUN_NAME
    out.decorator_list = []
    out.returns = None
    start = ast.Assign([ast.Name(_SEEN, ast.Store())], ast.List([], ast.Load()))
    out.body = [start, *out.body, ast.Return(ast.Name(_SEEN, ast.Load()))]
    return ast.unparse(ast.fix_missing_locations(out))


class _Replace(ast.NodeTransformer):
    def __init__(self, new: dict[int, ast.expr]) -> None:
        self.new = new

    def visit(self, node: ast.AST) -> ast.AST:
        return self.new[id(node)] if id(node) in self.new else self.generic_visit(node)


def function_variants(function: ast.FunctionDef, rng: random.Random, seen: set[str]) -> list[str]:
    """Sources of ``function`` as :func:`recording`, each with one or two of its
    :func:`input_literals` mutated (none the test's own, none repeated)."""
    seen.add(recording(function))
    out = []
    for _ in range(VARIANTS_PER_CALL):
        changed = copy.deepcopy(function)
        slots = input_literals(changed)
        new: dict[int, ast.expr] = {}
        for at in {rng.randrange(len(slots)) for _ in range(1 if rng.random() < 0.7 else 2)}:
            before = ast.literal_eval(slots[at])
            after = mutate(before, rng)
            try:
                node = pyparse.parse(repr(after), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # inf, nan: no literal
                continue
            if repr(after) != repr(before):
                new[id(slots[at])] = node
        if not new:
            continue
        source = recording(_Replace(new).visit(changed))
        if source not in seen and len(source) <= MAX_SOURCE:
            seen.add(source)
            out.append(source)
    return out
