"""Grading the predictor: did it predict the program's exact output?

The predictor answers with its predicted output between ``[OUTPUT]`` and ``[/OUTPUT]`` (CRUXEval's
``[ANSWER]...[/ANSWER]`` convention, adapted from an ``assert`` literal to a program's stdout).
A prediction is right when it equals the output after :func:`normalise_output`, or, for a
one-line output, when both sides are Python literals of the same value and type (so the spacing
and quoting of ``print([1, 'a'])`` do not matter). Nothing in a prediction is ever evaluated
beyond ``ast.literal_eval``, which accepts literal syntax only: a prediction ``f(1)`` is text.
"""

from __future__ import annotations

import ast
import re

from lit_codeRL import pyparse
from lit_codeRL.envs.text import drop_enclosed

_BLOCK = re.compile(r"\[OUTPUT\]((?:(?!\[OUTPUT\]).)*?)\[/OUTPUT\]", re.DOTALL)
MAX_LITERAL_CHARS = 10_000
"""One-line outputs longer than this are compared as text only (``literal_eval`` cost bound)."""


def parse_prediction(text: str) -> str | None:
    """The predicted output: the text of the first complete ``[OUTPUT]...[/OUTPUT]`` block, or
    ``None`` when there is none (no block, or an unclosed one).

    Closed ``<think>...</think>`` sections are dropped first (a reasoning model's drafts are not its
    answer). A block on one line (``[OUTPUT] 42 [/OUTPUT]``) is stripped; a block spanning lines
    is kept as written (:func:`normalise_output` drops its blank first and last lines), so leading
    spaces of its first output line still count.
    """
    if not isinstance(text, str):
        return None
    match = _BLOCK.search(drop_enclosed(text, "<think>", "</think>"))  # not a regex: linear
    if match is None:
        return None
    body = match.group(1)
    return body.strip() if "\n" not in body else body


def format_prediction(output: str) -> str | None:
    """The answer a predictor that knows ``output`` gives: the inverse of :func:`parse_prediction`
    (the predictor's behavioural-cloning targets, ``rollout/code_game_warmstart.py``).

    A one-line output is written on the block's line (``[OUTPUT]42[/OUTPUT]``, as CRUXEval's
    answers are); any other, and a line that the one-line form would change (leading spaces, which
    :func:`parse_prediction` strips there), between lines of its own (``[OUTPUT]\\n...\\n[/OUTPUT]``).
    Every answer returned passes :func:`prediction_correct` against ``output`` (checked here);
    ``None`` when none would: a blank output, or one holding an ``[OUTPUT]``/``[/OUTPUT]`` marker or
    a ``<think>...</think>`` section, which :func:`parse_prediction` cuts.
    """
    text = normalise_output(output)
    if "\n" not in text and text == text.strip():
        answer = f"[OUTPUT]{text}[/OUTPUT]"
    else:
        answer = f"[OUTPUT]\n{text}\n[/OUTPUT]"
    return answer if text and prediction_correct(parse_prediction(answer), output) else None


def normalise_output(s: str) -> str:
    """``s`` with ``\\r\\n`` turned into ``\\n``, the trailing whitespace of each line removed, and
    the blank lines at the start and the end removed. Leading whitespace of a line, blank lines
    between lines and the case of letters all stay: they are part of the output."""
    lines = [line.rstrip() for line in s.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def prediction_correct(predicted: str | None, actual: str) -> bool:
    """Whether ``predicted`` (from :func:`parse_prediction`; ``None`` is wrong) is ``actual``.

    1. Equal after :func:`normalise_output`: right.
    2. Otherwise, when both are single lines with the same leading whitespace that
       ``ast.literal_eval`` accepts (literals only:
       numbers, strings, bytes, tuples, lists, dicts, sets, ``True``/``False``/``None``, unary
       minus and complex ``+``; no names, calls or other operators), right when the two values
       are equal *and* of the same type at every level: ``[1, 2]`` is ``[1,2]``, ``'a'`` is
       ``"a"``, ``(1)`` is ``1`` (it is the int 1), ``{'a': 1, 'b': 2}`` is ``{'b': 2, 'a': 1}``,
       but ``True`` is not ``1``, ``1.0`` is not ``1`` and ``(1,)`` is not ``[1]``. Numbers must
       be written as ``repr`` writes them on both sides (no ``0xff``, ``1_000``, ``1e3``, ``3.140``
       or unary ``+``: a number written otherwise is another output, ``print(hex(255))`` is not
       ``255``), and a float's sign counts (``-0.0`` is not ``0.0``).
    3. Anything else is wrong. A prediction is never run: ``f(1)`` is not a literal.
    """
    if predicted is None or not isinstance(predicted, str):
        return False
    want, got = normalise_output(actual), normalise_output(predicted)
    if want == got:
        return True
    if "\n" in want or "\n" in got or not want or not got:
        return False
    if want[: len(want) - len(want.lstrip())] != got[: len(got) - len(got.lstrip())]:
        return False  # leading whitespace is output (``literal_eval`` skips it: "   5" read as 5)
    if len(want) > MAX_LITERAL_CHARS or len(got) > MAX_LITERAL_CHARS:
        return False
    missing = object()
    a, b = _literal(want, missing), _literal(got, missing)
    if a is missing or b is missing:
        return False
    try:
        return _typed(a) == _typed(b)
    except (RecursionError, TypeError):
        return False


def _literal(text: str, missing: object) -> object:
    try:
        value = ast.literal_eval(text)
        source = text.lstrip(" \t")  # as literal_eval reads it
        tree = pyparse.parse(source, mode="eval")
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return missing
    for node in ast.walk(tree):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd):
            return missing
        if (
            isinstance(node, ast.Constant)
            and type(node.value) in (int, float, complex)
            and ast.get_source_segment(source, node) != repr(node.value)
        ):
            return missing  # a number not written as repr writes it: text only
    return value


def _typed(value: object) -> object:
    """A hashable form of a literal value that also records every type, so equal forms mean equal
    values of equal types (``True`` and ``1`` differ; dict and set order does not matter)."""
    kind = type(value)
    if kind in (list, tuple):
        return (kind.__name__, tuple(_typed(v) for v in value))
    if kind in (set, frozenset):
        return (kind.__name__, frozenset(_typed(v) for v in value))
    if kind is dict:
        return ("dict", frozenset((_typed(k), _typed(v)) for k, v in value.items()))
    if kind in (float, complex):
        return (kind.__name__, repr(value))  # -0.0 == 0.0, but they print differently
    return (kind.__name__, value)


__all__ = [
    "MAX_LITERAL_CHARS",
    "format_prediction",
    "normalise_output",
    "parse_prediction",
    "prediction_correct",
]
