"""The trusted half of grading: which tests are compared outside the program's process, and how.

A test of the form ``assert <expr> == <literal>`` (either side; MBPP's asserts, the seed format's
input/output pairs) is split here, in the trainer: only ``<expr>`` goes into the sandbox, the
child evaluates it and sends back its value as plain data (see ``_server._value_encoder``), and
:func:`value_matches` compares it with the literal, which never entered the sandbox. A program
that walks its caller's frames, code objects, locals, source lines or the ``gc`` heap finds the
expression it is asked to compute and nothing else. The same holds for stdin/stdout tasks: the
expected output stays here and :func:`stdout_matches` compares it with what the program printed.

Every other test shape (several statements, ``math.isclose(...)``, a non-literal expected value,
what is left of HumanEval's ``check(candidate)`` once ``problems/humaneval.py`` has taken its plain
asserts out) runs in the program's process as before: see ``docs/sandbox.md`` for what that path
does and does not defend.
"""

from __future__ import annotations

import ast
import functools
import json
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


@functools.lru_cache(maxsize=1 << 16)
def split_value_test(test: str) -> tuple[str, Any] | None:
    """``(expression source, expected value)`` for a test ``assert <expr> == <literal>`` (or
    ``assert <literal> == <expr>``, with or without a message), else ``None``.

    Cached: the same tests come back for every sample of a problem. The expected value is shared
    between calls, so callers must not mutate it.
    """
    try:
        tree = pyparse.parse(test)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    cmp = tree.body[0].test
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


def shape_of(test: str) -> str:
    """``"value"`` (compared in the trusted process) or ``"in-process"`` (run in the program's)."""
    return "value" if split_value_test(test) is not None else "in-process"


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
    """Does the program's value (as the sandbox sent it) equal the expected one? Both sides are
    builtin data built here, so ``==`` runs no code the program wrote. Anything undecodable (or a
    forged record we could not parse) is a mismatch."""
    if encoded is None:
        return False
    try:
        return bool(decode_value(encoded) == expected)
    except (ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        return False


def stdout_matches(actual: str, expected: str) -> bool:
    """Output comparison for stdin/stdout tasks: trailing whitespace per line and leading/trailing
    blank lines ignored."""

    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").split("\n")] if s.strip() else []

    return norm(actual) == norm(expected)


__all__ = ["decode_value", "split_value_test", "stdout_matches", "shape_of", "value_matches"]
