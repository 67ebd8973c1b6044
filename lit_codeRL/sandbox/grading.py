"""The trusted half of grading: which tests are compared outside the program's process, and how.

A test of the form ``assert <expr> == <literal>`` (either side; MBPP's asserts, the seed format's
input/output pairs) is split here, in the trainer: only ``<expr>`` goes into the sandbox, the
child evaluates it and sends back its value as plain data (see ``_server._value_encoder``), and
:func:`value_matches` compares it with the literal, which never entered the sandbox. A program
that walks its caller's frames, code objects, locals, source lines or the ``gc`` heap finds the
expression it is asked to compute and nothing else. So are ``assert f(x)`` / ``assert not f(x)``
(the truth of ``f``'s value judged here), ``assert <expr> is True/False/None`` and the tolerance
shapes ``abs(<expr> - <number>) < <number>`` and ``math.isclose(<expr>, <number>)``
(:func:`split_trusted_test`, :class:`Expected`). The same holds for stdin/stdout tasks: the
expected output stays here and :func:`stdout_matches` compares it with what the program printed.

Every other test shape (several statements, a builtin such as ``all(...)`` around the call, a
non-literal expected value, what is left of HumanEval's ``check(candidate)`` once
``problems/humaneval.py`` has taken its asserts of these shapes out) runs in the program's
process as before: see ``docs/sandbox.md`` for what that path does and does not defend.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from lit_codeRL import pyparse

_SAFE_CALLS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "dict": dict, "float": float}
"""Constructors allowed in an expected value besides literals (``set()``, ``float('inf')``)."""


def _literal(node: ast.expr) -> tuple[bool, Any]:
    """``(True, value)`` when ``node`` is a constant expression we can evaluate without running
    anything: a Python literal, or one of :data:`_SAFE_CALLS` applied to literals."""
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _SAFE_CALLS
        and not node.keywords
        and len(node.args) <= 1
    ):
        args = [_literal(a) for a in node.args]
        if all(ok for ok, _ in args):
            try:
                return True, _SAFE_CALLS[node.func.id](*(v for _, v in args))
            except (ValueError, TypeError):
                return False, None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        ok, v = _literal(node.operand)
        if ok and isinstance(v, int | float | complex) and not isinstance(v, bool):
            return True, -v if isinstance(node.op, ast.USub) else v
    return False, None


def _asserted(test: str) -> ast.expr | None:
    """What ``test`` asserts, when it is one ``assert`` statement."""
    try:
        tree = pyparse.parse(test)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    return tree.body[0].test


@functools.lru_cache(maxsize=1 << 16)
def split_value_test(test: str) -> tuple[str, Any] | None:
    """``(expression source, expected value)`` for a test ``assert <expr> == <literal>`` (or
    ``assert <literal> == <expr>``, with or without a message), else ``None``.

    Cached: the same tests come back for every sample of a problem. The expected value is shared
    between calls, so callers must not mutate it.
    """
    cmp = _asserted(test)
    if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq)):
        return None
    left, right = cmp.left, cmp.comparators[0]
    for expr, lit in ((left, right), (right, left)):
        ok, expected = _literal(lit)
        if ok and not _literal(expr)[0]:
            src = _source_of(test, expr)
            if src is None:
                return None
            # parenthesized on lines of its own: a multi-line expression stays one expression
            return f"(\n{src}\n)", expected
    return None


def _source_of(test: str, node: ast.expr) -> str | None:
    """The source text of ``node``. A one-line test is sliced by its UTF-8 offsets directly:
    ``ast.get_source_segment`` re-splits the whole source on every call, which made splitting
    tests the trainer's largest per-program cost in the sandbox benchmark."""
    if node.lineno == node.end_lineno == 1 and "\n" not in test and "\r" not in test:
        return test.encode()[node.col_offset : node.end_col_offset].decode()
    return ast.get_source_segment(test, node)


@dataclass(frozen=True)
class Expected:
    """What the value of a trusted test's expression must be, judged here on builtin data.

    ``kind``: ``"eq"`` (``== value``), ``"truthy"`` (``bool(v) is value``: ``assert f(x)``,
    ``assert not f(x)``; the sandbox sends ``not not f(x)``), ``"is"`` (``v is value``, one of ``True``/``False``/``None``), ``"close"``
    (``abs(v - value) < tol``, or ``<=`` when not ``strict``), ``"isclose"``
    (``math.isclose(v, value, rel_tol=rel_tol, abs_tol=tol)``)."""

    kind: str
    value: Any = None
    tol: float = 0.0
    strict: bool = True
    rel_tol: float = 1e-9

    def matches(self, v: Any) -> bool:
        if self.kind == "eq":
            return bool(v == self.value)
        if self.kind == "truthy":
            return bool(v) is self.value
        if self.kind == "is":
            return v is self.value
        if type(v) not in (int, float, bool) and not (self.kind == "close" and type(v) is complex):
            return False  # what abs()/isclose() of anything else would have raised or answered
        if self.kind == "close":
            gap = abs(v - self.value)
            return gap < self.tol if self.strict else gap <= self.tol
        return math.isclose(v, self.value, rel_tol=self.rel_tol, abs_tol=self.tol)


_BUILTINS = frozenset(dir(builtins))


def _number(node: ast.expr) -> float | int | None:
    """A number written with literals and ``+ - * /`` (``2.0 / 3.0``), without running anything."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _number(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
        a, b = _number(node.left), _number(node.right)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        return a / b if b else None
    return None


def _shape(assertion: ast.expr) -> tuple[ast.expr, Expected] | None:
    """The expression sent into the sandbox and what its value must be, for the shapes beyond
    ``==`` (see :func:`split_trusted_test`)."""
    node, negated = assertion, False
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node, negated = node.operand, True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _BUILTINS:
        return node, Expected("truthy", not negated)  # the program's function: its value judged here
    if negated or not isinstance(node, ast.Compare) or len(node.ops) != 1:
        if negated or not isinstance(node, ast.Call):
            return None
        func = node.func  # math.isclose(E, A, rel_tol=..., abs_tol=...)
        if not (
            isinstance(func, ast.Attribute) and func.attr == "isclose"
            and isinstance(func.value, ast.Name) and func.value.id == "math" and len(node.args) == 2
        ):  # fmt: skip
            return None
        kw = {k.arg: _number(k.value) for k in node.keywords}
        if set(kw) - {"rel_tol", "abs_tol"} or any(v is None for v in kw.values()):
            return None
        for expr, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            target = _number(other)
            if target is not None and _number(expr) is None:
                rel, tol = kw.get("rel_tol", 1e-9), kw.get("abs_tol", 0.0)
                return expr, Expected("isclose", target, tol=float(tol), rel_tol=float(rel))
        return None
    op, right = node.ops[0], node.comparators[0]
    if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value in (True, False, None):
        if type(right.value) in (bool, type(None)):
            return node.left, Expected("is", right.value)
        return None
    left = node.left  # abs(E - A) < T, abs(A - E) <= T
    if not (
        isinstance(op, ast.Lt | ast.LtE) and isinstance(left, ast.Call) and isinstance(left.func, ast.Name)
        and left.func.id == "abs" and len(left.args) == 1 and not left.keywords
        and isinstance(left.args[0], ast.BinOp) and isinstance(left.args[0].op, ast.Sub)
    ):  # fmt: skip
        return None
    tol = _number(right)
    diff = left.args[0]
    for expr, other in ((diff.left, diff.right), (diff.right, diff.left)):
        target = _number(other)
        if tol is not None and target is not None and _number(expr) is None:
            return expr, Expected("close", target, tol=tol, strict=isinstance(op, ast.Lt))
    return None


@functools.lru_cache(maxsize=1 << 16)
def split_trusted_test(test: str) -> tuple[str, Expected] | None:
    """``(expression source, what its value must be)`` for every test shape compared here:
    ``assert <expr> == <literal>`` (:func:`split_value_test`), ``assert f(...)`` and
    ``assert not f(...)`` (``f`` not a builtin: the program's function, whose value's truth is
    judged here), ``assert <expr> is True/False/None``, ``assert abs(<expr> - <number>) < <number>``
    (or ``<=``, either order) and ``assert math.isclose(<expr>, <number>, ...)``, a number being
    literals under ``+ - * /``. Else ``None`` (the test runs in the program's process). Cached;
    callers must not mutate the result."""
    split = split_value_test(test)
    if split is not None:
        return split[0], Expected("eq", split[1])
    asserted = _asserted(test)
    shape = None if asserted is None else _shape(asserted)
    if shape is None:
        return None
    src = _source_of(test, shape[0])
    if src is None:
        return None
    if shape[1].kind == "truthy":
        # the truth is taken in the sandbox (a match object, a NumPy bool: honest answers that
        # are not plain data), the same way for `assert f(x)` and `assert not f(x)`: the program
        # cannot tell which of the two it is asked
        return f"(not not (\n{src}\n))", shape[1]
    return f"(\n{src}\n)", shape[1]


def shape_of(test: str) -> str:
    """``"value"`` (compared in the trusted process) or ``"in-process"`` (run in the program's)."""
    return "value" if split_trusted_test(test) is not None else "in-process"


def decode_value(text: str) -> Any:
    """Inverse of the sandbox child's value encoder: tagged JSON -> builtin objects only."""
    return _decode(json.loads(text))


def _decode(x: Any) -> Any:
    if x is None or type(x) in (bool, int, str):
        return x
    if type(x) is not list or not x or type(x[0]) is not str:
        raise ValueError("not an encoded value")
    tag, rest = x[0], x[1:]
    if tag == "l":
        return [_decode(v) for v in rest]
    if tag == "t":
        return tuple(_decode(v) for v in rest)
    if tag == "s":
        return {_decode(v) for v in rest}
    if tag == "z":
        return frozenset(_decode(v) for v in rest)
    if tag == "d":
        if len(rest) % 2:
            raise ValueError("odd dict encoding")
        return {_decode(rest[i]): _decode(rest[i + 1]) for i in range(0, len(rest), 2)}
    if tag == "f" and len(rest) == 1:
        return float.fromhex(rest[0])
    if tag == "b" and len(rest) == 1:
        return bytes.fromhex(rest[0])
    if tag == "c" and len(rest) == 2:
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    raise ValueError(f"unknown tag {tag!r}")


def value_matches(encoded: str | None, expected: Any) -> bool:
    """Does the program's value (as the sandbox sent it) equal the expected one (or, for an
    :class:`Expected`, meet it)? Both sides are builtin data built here, so ``==`` runs no code
    the program wrote. Anything undecodable (or a forged record we could not parse) is a mismatch."""
    if encoded is None:
        return False
    try:
        value = decode_value(encoded)
        if isinstance(expected, Expected):
            return expected.matches(value)
        return bool(value == expected)
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        return False


def stdout_matches(actual: str, expected: str) -> bool:
    """Output comparison for stdin/stdout tasks: trailing whitespace per line and leading/trailing
    blank lines ignored."""

    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").split("\n")] if s.strip() else []

    return norm(actual) == norm(expected)


__all__ = [
    "Expected",
    "decode_value",
    "shape_of",
    "split_trusted_test",
    "split_value_test",
    "stdout_matches",
    "value_matches",
]
