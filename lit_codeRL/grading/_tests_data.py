"""The tests' own data, kept from the code under test (the grading child; stdlib only).

A test compares what the code under test returns with data its own modules hold: ``WANT = 5``
in the test module, ``CASES = {(2, 3): 5}`` in a helper. Those modules are objects the code under
test can reach through ``sys.modules``, so ``add`` can write its own wrong answer there before the
assert reads it: ``setattr(test_module, "WANT", a - b)``, ``CASES[(a, b)] = a - b``. That graded
``resolved`` with the bug in place, the mirror run too (the forgery wrote the operand the mirror
shifts), and neither write raises an audit event.

So each name a module of the tests binds once at its top level, to a literal (``ast.literal_eval``
of its source), is compared with that literal at the Watch's points: when the module is first
seen (written to while the code under test was imported) and after each test's call. Left out,
because the tests may change them themselves: a name a module of the tests declares ``global``,
sets or deletes as an attribute, passes as a keyword or names in a string (``setattr``,
``monkeypatch.setattr``, ``mock.patch("tests.helpers.WANT")``, ``globals()["WANT"]``), and a
container (a list, dict or set of immutable literals) used in any way that could change it in
place (a method not in :data:`READING`, an item set, passed to anything but a built-in that only
reads it, bound to another name). A container holding containers is not kept at all: its items
could change through any name that reached them.
"""

from __future__ import annotations

import ast
from os.path import realpath as _realpath  # bound: the code under test may replace it
from types import ModuleType

IMMUTABLE = (int, float, complex, str, bytes, bool, type(None))
CONTAINERS = (list, dict, set)
READING = frozenset(
    {
        "copy",
        "count",
        "get",
        "index",
        "items",
        "keys",
        "values",
        "isdisjoint",
        "issubset",
        "issuperset",
        "union",
        "intersection",
        "difference",
        "symmetric_difference",
        "startswith",
        "endswith",
    }
)
"""Methods of a container (or a string) that only read it."""
PURE = frozenset(
    {
        "all",
        "any",
        "bool",
        "dict",
        "enumerate",
        "filter",
        "frozenset",
        "hash",
        "id",
        "isinstance",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "print",
        "range",
        "repr",
        "reversed",
        "set",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
        "zip",
    }
)
"""Built-ins that read their arguments and never change them."""
MAX_NODES = 20_000
"""Largest literal kept, in syntax nodes."""
MAX_CONTAINER_ITEMS = 5_000
"""The most items of lists, dicts and sets kept in all: each is compared item by item after every
test (an immutable value is compared only when its name holds another object)."""


def _frozen(value: object) -> bool:
    if isinstance(value, tuple | frozenset):
        return all(map(_frozen, value))
    return type(value) in IMMUTABLE


def _kept(value: object) -> bool:
    """Immutable all through, or a list, dict or set of such values."""
    if type(value) is dict:
        return all(map(_frozen, [*value, *value.values()]))
    return all(map(_frozen, value)) if type(value) in CONTAINERS else _frozen(value)


def _size(value: object) -> int:
    if isinstance(value, dict):
        return 1 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 1 + sum(map(_size, value))
    return 1


def same(value: object, literal: object) -> bool:
    """``value`` is ``literal``'s value, of its exact built-in types all through (an object of the
    code under test that says it is equal is not)."""
    if type(value) is not type(literal):
        return False
    if isinstance(literal, list | tuple):
        return len(value) == len(literal) and all(map(same, value, literal))  # type: ignore[arg-type]
    if isinstance(literal, dict):
        return len(value) == len(literal) and all(  # type: ignore[arg-type]
            k in value and same(dict.__getitem__(value, k), v)  # type: ignore[operator, arg-type]
            for k, v in literal.items()
        )
    if isinstance(literal, set | frozenset):
        return len(value) == len(literal) and all(k in value for k in literal)  # type: ignore[arg-type, operator]
    if isinstance(literal, float | complex) and literal != literal:  # noqa: PLR0124 - nan
        return value != value  # noqa: PLR0124
    return value == literal


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _reads_only(node: ast.expr, parents: dict[ast.AST, ast.AST]) -> bool:
    """``node`` (a container's name) is used in a way that cannot change the container."""
    parent = parents.get(node)
    if isinstance(parent, ast.Compare | ast.BoolOp | ast.UnaryOp | ast.BinOp | ast.FormattedValue):
        return True
    if isinstance(parent, ast.For | ast.AsyncFor | ast.comprehension):
        return parent.iter is node
    if isinstance(parent, ast.Assert | ast.If | ast.While | ast.IfExp):
        return parent.test is node
    if isinstance(parent, ast.Subscript):  # an item read: the items are immutable
        return parent.value is node and isinstance(parent.ctx, ast.Load)
    if isinstance(parent, ast.Attribute):  # a reading method, called
        call = parents.get(parent)
        return parent.attr in READING and isinstance(call, ast.Call) and call.func is parent
    if isinstance(parent, ast.Call):
        return isinstance(parent.func, ast.Name) and parent.func.id in PURE and node in parent.args
    return False


def _written(tree: ast.AST) -> set[str]:
    """Names the module may change itself: see the module docstring."""
    parents, names = _parents(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 200:
            names.add(node.value.rpartition(".")[2])
        elif isinstance(node, ast.Subscript) and not isinstance(node.ctx, ast.Load):
            target = node.value
            if isinstance(target, ast.Name | ast.Attribute):
                names.add(target.id if isinstance(target, ast.Name) else target.attr)
    for node in ast.walk(tree):
        name = (
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        )
        if name is not None and isinstance(node.ctx, ast.Load) and not _reads_only(node, parents):
            names.add(f"\0{name}")  # changeable in place: only immutable values stay kept
    return names


def _bindings(tree: ast.Module) -> dict[str, int]:
    """How often each name is bound in the module's own scope (not in functions or classes)."""
    counts: dict[str, int] = {}
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            counts[node.name] = counts.get(node.name, 0) + 1
            todo += node.decorator_list
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            counts[node.id] = counts.get(node.id, 0) + 1
        elif isinstance(node, ast.alias):
            name = (node.asname or node.name).partition(".")[0]
            counts[name] = counts.get(name, 0) + 1
        todo += ast.iter_child_nodes(node)
    return counts


def literal_names(tree: ast.Module) -> dict[str, object]:
    """The names ``tree`` binds once, at its top level, to a literal that can be kept."""
    counts, found = _bindings(tree), {}
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if sum(1 for _ in ast.walk(node.value)) > MAX_NODES:
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        for target in targets:
            dunder = isinstance(target, ast.Name) and target.id.startswith("__")  # the tools' (``__all__``)
            if isinstance(target, ast.Name) and not dunder and counts.get(target.id) == 1 and _kept(value):
                found[target.id] = value
    return found


class TestsData:
    """The literals of the tests' own modules (:func:`literal_names`), each compared with its
    value at every :meth:`changed`; a name imported from another of the tests' modules is kept
    with the literal it is there."""

    def __init__(self) -> None:
        self.written: set[str] = set()
        self.kept: list[tuple[str, dict, str, object, object]] = []  # label, space, key, literal, last seen
        self.literals: dict[tuple[str, str], object] = {}  # (module, name) -> literal
        self.imported: list[tuple[str, dict, str, str, str]] = []  # label, space, key, module, its name
        self.nodes = 0
        self.trees: dict[str, dict[str, object]] = {}  # a compiled module's real path -> its literals

    def compiled(self, path: str, tree: ast.Module) -> None:
        """A test module's tree as pytest compiles it: in the mirror run, with the expected values
        changed (``_mirror.py``), which are what the module binds; its file is not."""
        try:
            self.trees[path] = literal_names(tree)
        except (ValueError, RecursionError, MemoryError):
            self.trees[path] = {}

    def add(
        self, name: str, module: ModuleType, path: str, tree: ast.Module, imports: list[tuple[str, str, str]]
    ) -> None:
        """Keep the literals of ``module`` (named ``name``, its file ``path`` parsed as ``tree``),
        and the names it imports, ``(name here, module, name there)``, from the tests' other
        modules."""
        self.written |= _written(tree)
        space, real = vars(module), _realpath(path)
        literals = self.trees[real] if real in self.trees else literal_names(tree)
        for key, literal in literals.items():
            self.literals[(name, key)] = literal
            self._keep(f"{name}.{key}", space, key, literal)
        self.imported += [(f"{name}.{key}", space, key, origin, there) for key, origin, there in imports]

    def _keep(self, label: str, space: dict, key: str, literal: object) -> None:
        size = 0 if _frozen(literal) else _size(literal)
        if self.nodes + size <= MAX_CONTAINER_ITEMS:
            self.nodes += size
            self.kept.append((label, space, key, literal, None))

    def changed(self) -> list[str]:
        """The kept names whose value is not their literal now (each named once)."""
        for label, space, key, origin, there in self.imported:  # their modules are all seen by now
            if (origin, there) in self.literals:
                self._keep(label, space, key, self.literals[(origin, there)])
        self.imported = []
        found, kept = [], []
        for label, space, key, literal, seen in self.kept:
            if key in self.written or (f"\0{key}" in self.written and not _frozen(literal)):
                continue  # the tests may change it themselves (their modules seen since it was kept)
            value = space.get(key, literal)
            if value is not seen or not _frozen(literal):
                if not same(value, literal):
                    found.append(label)
                    continue
                seen = value
            kept.append((label, space, key, literal, seen))
        self.kept = kept
        return found
