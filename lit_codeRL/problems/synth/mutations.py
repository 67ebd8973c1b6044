"""Single-site bug injection into Python source, on a concrete syntax tree (libcst).

The model is SWE-smith's procedural bug generators (``swesmith/bug_gen/procedural/``: operator flips,
changed constants, swapped operands, removed statements and branches, inverted conditions): a task is
a working module with one small, plausible bug, and the repository's own tests tell whether the bug
is visible. Working on libcst's concrete tree instead of ``ast`` keeps every comment and every byte
of formatting outside the mutated node, so the mutant differs from the original by one small hunk,
as a human slip would.

The kinds, each a bug that real code gets wrong:

``compare_op``
    a boundary or polarity slip: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``,
    ``in`` <-> ``not in``, ``is`` <-> ``is not`` (``i < n`` -> ``i <= n``).
``arith_op``
    the wrong operator, SWE-smith's pairs: ``+`` <-> ``-``, ``*`` <-> ``/``, ``//`` <-> ``%``,
    ``<<`` <-> ``>>``, ``**`` -> ``*``, ``&`` -> ``|``, ``|`` -> ``&``, ``^`` -> ``&``, also in augmented
    assignments (``total += x`` -> ``total -= x``). Never on string arithmetic (``"a" + s``,
    ``"%s" % x``): ``"a" - s`` is a crash on first use, not a logic bug.
``bool_op``
    ``and`` <-> ``or``: a guard that is too loose or too strict.
``off_by_one``
    a decimal integer literal that is a ``range(...)`` argument or a subscript index or slice bound: 0 goes up
    to 1, n > 0 down to n - 1, a negative index -n to -(n + 1) (``x[:-1]`` -> ``x[:-2]``); or the
    literal operand of a ``+``/``-``/``+=``/``-=`` anywhere, which goes up (``i + 1`` -> ``i + 2``): going
    down would leave a ``+ 0`` that reads as planted.
``swap_args``
    the first two positional arguments of a call swapped (``pow(b, e)`` -> ``pow(e, b)``), when they
    differ and neither is starred.
``invert_condition``
    the test of an ``if``/``elif``/``while``/ternary negated (``if x:`` -> ``if not x:``,
    ``if a or b:`` -> ``if not (a or b):``, and ``if not x:`` -> ``if x:``). Constant tests
    (``while True:``) are deliberate and left alone, by every kind.
``drop_branch``
    one ``elif`` or ``else`` clause removed, or a whole ``if`` without ``else`` removed from a block that
    keeps another statement: a forgotten case.
``drop_statement``
    one simple statement (assignment, augmented or annotated assignment with a value, call or await of
    a call) removed from a block that keeps another statement: a forgotten update. Comments above it
    are kept.
``wrong_constant``
    a decimal integer or float literal not claimed by ``off_by_one`` (0 <-> 1, an int n -> n + 1 with
    its sign kept, ``-1`` -> ``-2``; a float 0.0 <-> 1.0, x -> 2x), or ``True`` <-> ``False``. Strings
    and ``None`` are left alone: they make weak bugs.
``wrong_return``
    ``return EXPR`` -> ``return None`` (when EXPR is not ``None``). Negating a boolean return is
    deliberately not done here; ``invert_condition`` covers negation where it reads naturally.

Only code inside function bodies is mutated (methods and nested functions included): module-level
code, class bodies, decorators, parameter defaults, annotations and docstrings never are, and neither
is anything in a function whose name starts with ``test`` or in a class whose name starts with
``Test`` (test code). Every listed site mutates to a different source that compiles; sites whose
mutation would leave an empty block (``pass`` is never inserted) or be a no-op are not listed, and
nothing is removed from a function whose nested functions declare ``nonlocal`` (the binding could
go). A site is ``(kind, index)``, the index counting that kind's sites in source order; listing and
applying are deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

try:  # what Module.code_for_node renders with; private: without it every mutant renders the module
    from libcst._nodes.internal import CodegenState
except ImportError:  # pragma: no cover - another libcst layout
    CodegenState = None

MUTATION_KINDS: tuple[str, ...] = (
    "compare_op",
    "arith_op",
    "bool_op",
    "off_by_one",
    "swap_args",
    "invert_condition",
    "drop_branch",
    "drop_statement",
    "wrong_constant",
    "wrong_return",
)
_REMOVALS = frozenset({"drop_branch", "drop_statement"})


def _both_ways(*pairs: tuple[type, type]) -> dict[type, type]:
    return {**dict(pairs), **{b: a for a, b in pairs}}


_COMPARE_FLIP = _both_ways(
    (cst.LessThan, cst.LessThanEqual),
    (cst.GreaterThan, cst.GreaterThanEqual),
    (cst.Equal, cst.NotEqual),
    (cst.In, cst.NotIn),
    (cst.Is, cst.IsNot),
)
# SWE-smith's FLIPPED_OPERATORS pairs: `**` and `^` have no natural partner and only go one way
_ARITH_FLIP = {
    **_both_ways(
        (cst.Add, cst.Subtract),
        (cst.Multiply, cst.Divide),
        (cst.FloorDivide, cst.Modulo),
        (cst.LeftShift, cst.RightShift),
        (cst.BitAnd, cst.BitOr),
    ),
    cst.Power: cst.Multiply,
    cst.BitXor: cst.BitAnd,
}
# every binary operator has its augmented twin (`+` / `+=`): the same pairs
_AUG_FLIP = {
    getattr(cst, f"{a.__name__}Assign"): getattr(cst, f"{b.__name__}Assign") for a, b in _ARITH_FLIP.items()
}
_BOOL_FLIP = {cst.And: cst.Or, cst.Or: cst.And}
_STRINGS = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
# `not X` means `not (X)` without parentheses for these. Anything else gets parenthesised: and/or,
# ternary, walrus and lambda need it, and `not (a < b)` reads better than `not a < b`.
_NO_PARENS_AFTER_NOT = (
    cst.Name,
    cst.Attribute,
    cst.Call,
    cst.Subscript,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.Await,
)


@dataclass(frozen=True)
class MutationSite:
    """One place where one bug can be injected; ``(kind, index)`` identifies it within a module."""

    kind: str  # one of MUTATION_KINDS
    path_hint: str  # qualified name of the enclosing function, e.g. "Parser.parse" or "median"
    line: int  # 1-based line of the mutated node in the original source
    index: int  # occurrence number of this kind in the module, in source order (0-based)
    before: str  # the original code of the mutated node, for logs and de-duplication
    after: str  # its replacement; "" for removals


@dataclass
class _Frame:
    name: str
    is_function: bool
    is_test: bool
    # a nested `nonlocal` needs a binding here: removing statements could turn that into a SyntaxError
    has_nonlocal: bool = False


@dataclass(frozen=True)
class _Candidate:
    kind: str
    path_hint: str
    line: int
    column: int
    target: cst.CSTNode  # the node of the parsed tree that is replaced
    replacement: cst.CSTNode
    # what MutationSite.before/after show, rendered only when asked for (codegen is the costly part)
    shown_before: cst.CSTNode
    shown_after: cst.CSTNode | None  # None: a removal
    frame: _Frame
    prefix: str = ""  # an elif clause renders as a standalone `if`: "el" makes it read as it is
    # the module-level statement holding the target, and the statement of a module-level class's
    # body holding it (a method) if there is one: what mutants() renders again
    units: tuple[cst.CSTNode, ...] = ()

    def texts(self, module: cst.Module) -> tuple[str, str]:
        after = "" if self.shown_after is None else module.code_for_node(self.shown_after).strip()
        return self.prefix + module.code_for_node(self.shown_before).strip(), after


def _swap_operator(op: cst.CSTNode, new_cls: type) -> cst.CSTNode:
    """``new_cls`` with ``op``'s surrounding whitespace; two-word operators get one space inside."""
    kwargs = {"whitespace_before": op.whitespace_before, "whitespace_after": op.whitespace_after}
    if new_cls in (cst.NotIn, cst.IsNot):
        kwargs["whitespace_between"] = cst.SimpleWhitespace(" ")
    return new_cls(**kwargs)


def _spaced(ws: cst.BaseParenthesizableWhitespace | cst.MaybeSentinel) -> cst.SimpleWhitespace:
    """A keyword's trailing whitespace, made non-empty: ``if(x)`` must not become ``ifnot (x)``."""
    if isinstance(ws, cst.SimpleWhitespace) and ws.value:
        return ws
    return cst.SimpleWhitespace(" ")


def _invert(test: cst.BaseExpression) -> cst.BaseExpression:
    """``test`` negated: a leading ``not`` is removed, else one is added (parenthesising if needed)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        operand = test.expression
        # `(not x)` -> `(x)`: the outer parentheses move onto the operand
        return operand.with_changes(lpar=[*test.lpar, *operand.lpar], rpar=[*operand.rpar, *test.rpar])
    if not test.lpar and not isinstance(test, _NO_PARENS_AFTER_NOT):
        test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.UnaryOperation(operator=cst.Not(), expression=test)


def _is_constant(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, (cst.Integer, cst.Float)) or (
        isinstance(expr, cst.Name) and expr.value in ("True", "False", "None")
    )


def _is_stringy(expr: cst.BaseExpression) -> bool:
    """A string literal, or arithmetic on one (``"%s" % x``, ``"-" * 3``): the value is a string."""
    if isinstance(expr, cst.BinaryOperation):
        return _is_stringy(expr.left) or _is_stringy(expr.right)
    return isinstance(expr, _STRINGS)


def _is_decimal(node: cst.CSTNode) -> bool:
    # hex masks, octal modes and `1_000` are not the counters off-by-one bugs are about
    return isinstance(node, cst.Integer) and node.value.isdigit()


def _is_removable(stmt: cst.BaseStatement) -> bool:
    """A one-statement line that updates state: assignment or a call (awaited or not)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Expr):
        value = small.value.expression if isinstance(small.value, cst.Await) else small.value
        return isinstance(value, cst.Call)
    if isinstance(small, cst.AnnAssign):
        return small.value is not None
    return isinstance(small, (cst.Assign, cst.AugAssign))


def _without(block: cst.IndentedBlock, i: int) -> cst.IndentedBlock:
    """``block`` without statement ``i``; comment lines above it stay where they were."""
    removed = block.body[i]
    body = [*block.body[:i], *block.body[i + 1 :]]
    if i < len(body):
        body[i] = body[i].with_changes(leading_lines=[*removed.leading_lines, *body[i].leading_lines])
        return block.with_changes(body=body)
    return block.with_changes(body=body, footer=[*removed.leading_lines, *block.footer])


class _Collector(cst.CSTVisitor):
    """Collects every candidate of the wanted kinds, in traversal order, with its replacement."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, module: cst.Module, kinds: frozenset[str]) -> None:
        super().__init__()
        self.module = module
        self.kinds = kinds
        self.candidates: list[_Candidate] = []
        self.frames: list[_Frame] = []
        # id() of int literals by context: off_by_one "bound", "negative" or "operand"; or "negated"
        # (`-1` outside an index), which stays a wrong_constant but keeps its sign
        self.int_roles: dict[int, str] = {}
        # constant tests (`while True:`, `if False:`) are deliberate: flipping them reads as planted
        self.skip_constants: set[int] = set()
        self._top_ids = {id(stmt) for stmt in module.body}
        self._member_ids = {id(member) for _, members in _class_members(module) for member in members}
        self.units: tuple[cst.CSTNode, ...] = ()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self._top_ids:
            self.units = (node,)
        elif id(node) in self._member_ids:
            self.units = (self.units[0], node)
        return super().on_visit(node)

    # -- scopes: what may be mutated ---------------------------------------------------------------
    def _mutable(self) -> bool:
        return bool(self.frames) and self.frames[-1].is_function and not any(f.is_test for f in self.frames)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.frames.append(_Frame(node.name.value, False, node.name.value.startswith("Test")))

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.frames.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.frames.append(_Frame(node.name.value, True, node.name.value.startswith("test")))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.frames.pop()

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        for frame in self.frames:
            frame.has_nonlocal = True

    # defaults, annotations and decorators are not function bodies: never descend into them
    def visit_Parameters(self, node: cst.Parameters) -> bool:
        return False

    def visit_Annotation(self, node: cst.Annotation) -> bool:
        return False

    def visit_Decorator(self, node: cst.Decorator) -> bool:
        return False

    # -- recording ---------------------------------------------------------------------------------
    def _wants(self, kind: str) -> bool:
        return kind in self.kinds and self._mutable()

    def _add(
        self,
        kind: str,
        at: cst.CSTNode,
        target: cst.CSTNode,
        replacement: cst.CSTNode,
        shown: tuple[cst.CSTNode, cst.CSTNode | None] | None = None,
        prefix: str = "",
    ) -> None:
        """Records a candidate at ``at``'s position; ``shown`` defaults to (target, replacement)."""
        start = self.get_metadata(PositionProvider, at).start
        shown_before, shown_after = (target, replacement) if shown is None else shown
        self.candidates.append(
            _Candidate(
                kind=kind,
                path_hint=".".join(f.name for f in self.frames),
                line=start.line,
                column=start.column,
                target=target,
                replacement=replacement,
                shown_before=shown_before,
                shown_after=shown_after,
                frame=self.frames[-1],
                prefix=prefix,
                units=self.units,
            )
        )

    # -- operators ---------------------------------------------------------------------------------
    def visit_Comparison(self, node: cst.Comparison) -> None:
        if not self._wants("compare_op"):
            return
        targets = list(node.comparisons)
        for i, target in enumerate(targets):
            new_cls = _COMPARE_FLIP.get(type(target.operator))
            if new_cls is not None:
                flipped = target.with_changes(operator=_swap_operator(target.operator, new_cls))
                self._add(
                    "compare_op",
                    node,
                    node,
                    node.with_changes(comparisons=[*targets[:i], flipped, *targets[i + 1 :]]),
                )

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            for operand in (node.left, node.right):
                if _is_decimal(operand):
                    self.int_roles[id(operand)] = "operand"
        new_cls = _ARITH_FLIP.get(type(node.operator))
        if new_cls is None or _is_stringy(node):
            return
        if self._wants("arith_op"):
            self._add(
                "arith_op", node, node, node.with_changes(operator=_swap_operator(node.operator, new_cls))
            )

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) and _is_decimal(node.value):
            self.int_roles[id(node.value)] = "operand"  # `k -= 1` is `k = k - 1`
        new_cls = _AUG_FLIP.get(type(node.operator))
        if new_cls is not None and not _is_stringy(node.value) and self._wants("arith_op"):
            self._add(
                "arith_op", node, node, node.with_changes(operator=_swap_operator(node.operator, new_cls))
            )

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        if self._wants("bool_op"):
            new_op = _swap_operator(node.operator, _BOOL_FLIP[type(node.operator)])
            self._add("bool_op", node, node, node.with_changes(operator=new_op))

    # -- literals ----------------------------------------------------------------------------------
    def _mark_bound(self, expr: cst.BaseExpression | None) -> None:
        if _is_decimal(expr):
            self.int_roles[id(expr)] = "bound"
        elif isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
            if _is_decimal(expr.expression):
                self.int_roles[id(expr.expression)] = "negative"

    def visit_SubscriptElement(self, node: cst.SubscriptElement) -> None:
        if isinstance(node.slice, cst.Index):
            self._mark_bound(node.slice.value)
        elif isinstance(node.slice, cst.Slice):
            self._mark_bound(node.slice.lower)
            self._mark_bound(node.slice.upper)

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        # a negative constant keeps its sign: `return -1` -> `return -2`, not `return -0`
        if isinstance(node.operator, cst.Minus) and _is_decimal(node.expression):
            self.int_roles.setdefault(id(node.expression), "negated")

    def visit_Integer(self, node: cst.Integer) -> None:
        if not _is_decimal(node) or id(node) in self.skip_constants:
            return
        value, role = int(node.value), self.int_roles.get(id(node))
        if role is None:
            kind, new = "wrong_constant", 1 if value == 0 else 0 if value == 1 else value + 1
        elif role == "negated":
            kind, new = "wrong_constant", value + 1
        elif role == "bound":
            kind, new = "off_by_one", 1 if value == 0 else value - 1
        else:  # "operand" and "negative": away from zero, see the module docstring
            kind, new = "off_by_one", value + 1
        if self._wants(kind):
            self._add(kind, node, node, node.with_changes(value=str(new)))

    def visit_Float(self, node: cst.Float) -> None:
        if not self._wants("wrong_constant"):
            return
        value = float(node.value)
        new = 1.0 if value == 0 else 0.0 if value == 1 else value * 2
        if math.isfinite(new):
            self._add("wrong_constant", node, node, node.with_changes(value=repr(new)))

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in ("True", "False") and id(node) not in self.skip_constants:
            if self._wants("wrong_constant"):
                new = "False" if node.value == "True" else "True"
                self._add("wrong_constant", node, node, node.with_changes(value=new))

    # -- calls and returns -------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        args = node.args
        if isinstance(node.func, cst.Name) and node.func.value == "range":
            for arg in args:
                if arg.keyword is None and not arg.star:
                    self._mark_bound(arg.value)
        if len(args) < 2 or not self._wants("swap_args"):
            return
        first, second = args[0], args[1]
        if any(a.keyword is not None or a.star for a in (first, second)):
            return
        code = self.module.code_for_node
        if code(first.value).strip() == code(second.value).strip():
            return  # swapping equal arguments is a no-op
        swapped = [first.with_changes(value=second.value), second.with_changes(value=first.value), *args[2:]]
        self._add("swap_args", node, node, node.with_changes(args=swapped))

    def visit_Return(self, node: cst.Return) -> None:
        value = node.value
        if value is None or (isinstance(value, cst.Name) and value.value == "None"):
            return
        if self._wants("wrong_return"):
            new = node.with_changes(
                value=cst.Name("None"), whitespace_after_return=_spaced(node.whitespace_after_return)
            )
            self._add("wrong_return", node, node, new)

    # -- control flow ------------------------------------------------------------------------------
    def _add_inversion(self, node: cst.CSTNode, test: cst.BaseExpression, ws_field: str) -> None:
        if _is_constant(test):
            self.skip_constants.add(id(test))
            return
        if self._wants("invert_condition"):
            new_test = _invert(test)
            new = node.with_changes(test=new_test, **{ws_field: _spaced(getattr(node, ws_field))})
            self._add("invert_condition", test, node, new, (test, new_test))

    def visit_If(self, node: cst.If) -> None:
        self._add_inversion(node, node.test, "whitespace_before_test")
        if not self._wants("drop_branch"):
            return
        orelse = node.orelse
        if isinstance(orelse, cst.Else):
            shown = (orelse.with_changes(leading_lines=()), None)
            self._add("drop_branch", orelse, node, node.with_changes(orelse=None), shown)
        elif isinstance(orelse, cst.If):
            # the elif clause alone goes: its own elif/else chain moves up and stays
            shown = (orelse.with_changes(orelse=None, leading_lines=()), None)
            self._add("drop_branch", orelse, node, node.with_changes(orelse=orelse.orelse), shown, "el")

    def visit_While(self, node: cst.While) -> None:
        self._add_inversion(node, node.test, "whitespace_after_while")

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._add_inversion(node, node.test, "whitespace_after_if")

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if len(node.body) < 2:  # removing the only statement would leave an empty block
            return
        for i, stmt in enumerate(node.body):
            if isinstance(stmt, cst.If) and stmt.orelse is None:
                kind = "drop_branch"
            elif _is_removable(stmt):
                kind = "drop_statement"
            else:
                continue
            if self._wants(kind):
                self._add(kind, stmt, node, _without(node, i), (stmt.with_changes(leading_lines=()), None))


def compiles(source: str) -> bool:
    """Whether this Python compiles ``source``: libcst accepts some sources CPython rejects
    (``return`` at module level), so compile decides which get bugs."""
    try:
        compile(source, "<mutations>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def _candidates(source: str, kinds: frozenset[str]) -> tuple[cst.Module, list[_Candidate]] | None:
    """The parsed module and its candidates of ``kinds`` in source order; None when it does not parse."""
    if not compiles(source):
        return None
    try:
        module = cst.parse_module(source)
    except (SyntaxError, ValueError, cst.ParserSyntaxError, RecursionError):
        return None
    collector = _Collector(module, kinds)
    # no copy: the candidates' targets must be nodes of `module` itself for deep_replace to find them
    MetadataWrapper(module, unsafe_skip_copy=True).visit(collector)
    found = [c for c in collector.candidates if not (c.kind in _REMOVALS and c.frame.has_nonlocal)]
    # the stable sort keeps traversal order among sites that start at the same place (a < b < c)
    return module, sorted(found, key=lambda c: (c.line, c.column))


def _check_kinds(kinds: Sequence[str]) -> frozenset[str]:
    unknown = sorted(set(kinds) - set(MUTATION_KINDS))
    if unknown:
        raise ValueError(f"unknown mutation kinds {unknown}; known: {', '.join(MUTATION_KINDS)}")
    return frozenset(kinds)


def mutation_sites(source: str, kinds: Sequence[str] = MUTATION_KINDS) -> list[MutationSite]:
    """Every site of the given kinds inside function bodies, in source order.

    Module-level code, class bodies outside methods, decorators, default values, docstrings and type
    annotations are never mutated. A source that does not parse (or compile) gives []. Raises
    ValueError for an unknown kind.
    """
    return [site for site, _ in _sites(source, kinds)[1]]


Splice = tuple[int, int, str]
"""``(start, end, text)``: the mutant is ``source[:start] + text + source[end:]``."""


def mutants(source: str, kinds: Sequence[str] = MUTATION_KINDS) -> list[tuple[MutationSite, str]]:
    """Every site of :func:`mutation_sites` with the module mutated there (what
    :func:`apply_mutation` gives for it), from one parse of ``source``: :func:`mutant_splices`
    spliced into ``source``."""
    return [(site, splice_into(source, splice)) for site, splice in mutant_splices(source, kinds)]


def splice_into(source: str, splice: Splice) -> str:
    start, end, text = splice
    return source[:start] + text + source[end:]


def mutant_splices(source: str, kinds: Sequence[str] = MUTATION_KINDS) -> list[tuple[MutationSite, Splice]]:
    """Every site of :func:`mutation_sites` with its mutant as a splice into ``source``, from one
    parse.

    Why not ``apply_mutation`` per site: it parses the module and resolves its positions again for
    each site, and a whole-module ``deep_replace`` and render rebuilds every node, which made
    candidate generation quadratic in a file's size (10 minutes of one core for a 1,106-line
    module before its first test ran). Here only the statement holding the site (a module-level
    function, or a method of a module-level class) is rebuilt and rendered, and its place in the
    module's code is kept beside it. Why a splice and not the mutated file: a file's mutants, held
    whole, were its size times its sites (more-itertools' 2,683 candidates: 440 MB).

    A file without a final newline renders its last statement otherwise alone than in the module,
    so no statement's span was kept and every site rendered the whole module again (250 functions:
    211 s). Its splices are found in the file with a newline added, which means the same code, and
    a splice that reaches that newline gives it back."""
    if source and not source.endswith(("\n", "\r")):
        padded = _splices(source + "\n", kinds)
        if all(end <= len(source) or text.endswith("\n") for _, (_, end, text) in padded):
            return [
                (site, (start, end, text) if end <= len(source) else (start, len(source), text[:-1]))
                for site, (start, end, text) in padded
            ]
    return _splices(source, kinds)


def _splices(source: str, kinds: Sequence[str]) -> list[tuple[MutationSite, Splice]]:
    """:func:`mutant_splices` of a file (see there)."""
    module, sites = _sites(source, kinds)
    if module is None:
        return []
    full = module.code  # a property that renders the whole module: read once
    spans = _unit_spans(module, full) if full == source else {}
    out: list[tuple[MutationSite, Splice]] = []
    for site, c in sites:
        unit = next((u for u in reversed(c.units) if id(u) in spans), None)
        if unit is None:  # the whole module: no splice point was found
            out.append((site, (0, len(source), module.deep_replace(c.target, c.replacement).code)))
            continue
        start, end, indent = spans[id(unit)]
        out.append((site, (start, end, _render(module, unit.deep_replace(c.target, c.replacement), indent))))
    return out


def _render(module: cst.Module, node: cst.CSTNode, indent: tuple[str, ...] = ()) -> str:
    """``node``'s code as the module renders it inside blocks indented by ``indent``."""
    state = CodegenState(module.default_indent, module.default_newline, indent_tokens=list(indent))
    node._codegen(state)
    return "".join(state.tokens)


def _class_members(module: cst.Module) -> list[tuple[cst.ClassDef, tuple[cst.BaseStatement, ...]]]:
    return [
        (stmt, tuple(stmt.body.body))
        for stmt in module.body
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock)
    ]


def _unit_spans(module: cst.Module, full: str) -> dict[int, tuple[int, int, tuple[str, ...]]]:
    """``id(statement) -> (start, end, indentation)`` in ``module.code`` of every module-level
    statement and every statement of a module-level class's body, each rendered alone: a span is
    kept only where the renders are found in the module's code exactly (a file without a final
    newline renders its last statement otherwise)."""
    if CodegenState is None:
        return {}
    pos = sum(len(_render(module, line)) for line in module.header)
    spans: dict[int, tuple[int, int, tuple[str, ...]]] = {}
    for stmt in module.body:
        piece = _render(module, stmt)
        if full[pos : pos + len(piece)] != piece:
            return {}
        spans[id(stmt)] = (pos, pos + len(piece), ())
        pos += len(piece)
    if full[pos:] != "".join(_render(module, line) for line in module.footer):
        return {}
    for cls, members in _class_members(module):
        indent = (module.default_indent if cls.body.indent is None else cls.body.indent,)
        pieces = [_render(module, member, indent) for member in members]
        start, end, _ = spans[id(cls)]
        at = full.find("".join(pieces), start, end)
        if at < 0 or full.find("".join(pieces), at + 1, end) >= 0:
            continue  # not found once: its methods are rendered with the whole class
        for member, piece in zip(members, pieces, strict=True):
            spans[id(member)] = (at, at + len(piece), indent)
            at += len(piece)
    return spans


def _sites(
    source: str, kinds: Sequence[str]
) -> tuple[cst.Module | None, list[tuple[MutationSite, _Candidate]]]:
    """The parsed module (None when it does not parse) and its sites, each with its candidate."""
    parsed = _candidates(source, _check_kinds(kinds))
    if parsed is None:
        return None, []
    module, found = parsed
    counts = dict.fromkeys(MUTATION_KINDS, 0)
    sites = []
    for c in found:
        sites.append((MutationSite(c.kind, c.path_hint, c.line, counts[c.kind], *c.texts(module)), c))
        counts[c.kind] += 1
    return module, sites


def _apply(source: str, kind: str, index: int, before: str | None) -> str:
    parsed = _candidates(source, _check_kinds([kind]))
    if parsed is None:
        raise ValueError("the source does not parse")
    module, found = parsed
    if not 0 <= index < len(found):
        raise ValueError(f"no {kind} site #{index}: the module has {len(found)}")
    site = found[index]
    if before is not None and site.texts(module)[0] != before:
        here = site.texts(module)[0]
        raise ValueError(f"{kind} site #{index} is {here!r} here, not {before!r}: the source changed")
    return module.deep_replace(site.target, site.replacement).code


def apply_mutation(source: str, site: MutationSite) -> str:
    """The module with exactly that one site mutated (re-located by kind + index, checked against
    ``site.before``). Raises ValueError when the site is not there (the source changed)."""
    return _apply(source, site.kind, site.index, site.before)


def mutate(source: str, kind: str, index: int) -> str:
    """The module with site ``index`` of ``kind`` mutated; ValueError when there is no such site."""
    return _apply(source, kind, index, None)
