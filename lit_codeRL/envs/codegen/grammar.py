"""The small line grammar behind ``CodeGenerationEnv``'s action mask.

A line of code tokens is tracked as a :class:`LineState`; :func:`transition` says whether a token
of a given grammar class (:func:`token_class`) can still lead to valid Python (Huang & Ontañón 2020
on invalid action masking). The final ``compile()`` remains the judge; the mask only prunes
exploration.
"""

from __future__ import annotations

import copy
import keyword
import re
from dataclasses import dataclass, field

from lit_codeRL.envs.codegen.vocabulary import ARG_SLOT

_NUMBER = re.compile(r"^\d+(\.\d+)?$")
_BINOPS = frozenset(
    {"+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=", "and", "or", "in", "is"}
)
_UNARY = frozenset({"not", "-", "+", "~"})
_OPEN = frozenset({"(", "["})
_CLOSE = {")": "(", "]": "["}
ASSIGN_OPS = frozenset({"=", "+=", "-=", "*=", "/=", "//=", "%="})
LINE_START = frozenset({"return", "if", "elif", "else", "for", "while", "pass", "break", "continue"})


def token_class(token: str) -> str:
    """Grammar class of a code token: ``ident``, ``literal``, ``call`` (``abs(``), or the token itself
    for keywords and operators; ``other`` for tokens the mask knows nothing about (always allowed)."""
    if ARG_SLOT.match(token):
        return "ident"
    if token in ("True", "False", "None") or _NUMBER.match(token) or token[:1] in "\"'":
        return "literal"
    if token.endswith("(") and token[:-1].isidentifier():
        return "call"
    if token in LINE_START or token in _BINOPS or token in _UNARY or token in ASSIGN_OPS:
        return token
    if token in _OPEN or token in _CLOSE or token in (",", ":"):
        return token
    if token.isidentifier() and not keyword.iskeyword(token):
        return "ident"
    return "other"


@dataclass
class LineState:
    """Where a line of tokens stands in the (small) grammar the mask enforces."""

    kind: str | None = None
    """None (empty), ``return``, ``expr``, ``assign``, ``header`` (if/elif/while), ``for``, ``else``,
    ``simple`` (pass/break/continue), ``broken`` (a token the grammar rejects: nothing is masked)."""
    expect_operand: bool = True
    stack: list[str] = field(default_factory=list)
    ended: bool = False
    """Nothing may follow on this line (a header's ``:`` or a simple statement)."""
    for_stage: int = 0
    ternary: int = 0
    n_tokens: int = 0
    last: str | None = None
    single_ident: bool = False

    def complete(self) -> bool:
        """Whether a newline may follow (the line is a whole statement)."""
        if self.kind == "broken":
            return True
        if self.kind is None:
            return False
        if self.kind in ("simple", "header", "for", "else"):
            return self.ended
        if self.kind == "return" and self.n_tokens == 1:
            return True
        return not self.expect_operand and not self.stack and self.ternary == 0


def transition(state: LineState, cls: str) -> LineState | None:
    """The line state after a token of class ``cls``, or None if the grammar rejects it."""
    if state.kind == "broken" or cls == "other":
        return state
    if state.ended:
        return None
    s = copy.copy(state)
    s.stack = list(state.stack)
    first = s.kind is None
    s.n_tokens += 1
    if first:
        if cls == "return":
            s.kind = "return"
        elif cls in ("if", "elif", "while"):
            s.kind = "header"
        elif cls == "else":
            s.kind = "else"
        elif cls == "for":
            s.kind, s.for_stage = "for", 0
        elif cls in ("pass", "break", "continue"):
            s.kind, s.ended = "simple", True
        else:
            s.kind = "expr"
            s = _expression(s, cls)
            if s is not None:
                s.single_ident = cls == "ident"
        if s is not None:
            s.last = cls
        return s
    if s.kind == "else":
        if cls != ":":
            return None
        s.ended = True
    elif s.kind == "for" and s.for_stage == 0:
        if cls != "ident":
            return None
        s.for_stage = 1
    elif s.kind == "for" and s.for_stage == 1:
        if cls != "in":
            return None
        s.for_stage, s.expect_operand = 2, True
    else:
        s = _expression(s, cls)
        if s is not None:
            s.single_ident = False
    if s is not None:
        s.last = cls
    return s


def _expression(s: LineState, cls: str) -> LineState | None:
    if s.expect_operand:
        if cls in ("ident", "literal"):
            s.expect_operand = False
        elif cls == "call":
            s.stack.append("(")
        elif cls in _OPEN:
            s.stack.append(cls)
        elif cls in _UNARY:
            pass
        elif cls in _CLOSE and s.stack and s.stack[-1] == _CLOSE[cls] and s.last in ("(", "[", "call", ","):
            s.stack.pop()
            s.expect_operand = False
        else:
            return None
        return s
    if cls in _BINOPS:
        s.expect_operand = True
    elif cls in _CLOSE:
        if not s.stack or s.stack[-1] != _CLOSE[cls]:
            return None
        s.stack.pop()
    elif cls == ",":
        if not s.stack and s.kind not in ("return", "expr", "assign"):
            return None
        s.expect_operand = True
    elif cls in _OPEN:
        if s.last == "literal":  # calling or indexing a literal (``0(``) is never meant
            return None
        s.stack.append(cls)
        s.expect_operand = True
    elif cls == ":":
        if s.kind not in ("header", "for") or s.stack or s.ternary:
            return None
        s.ended = True
    elif cls == "if":
        if s.kind not in ("return", "assign", "expr") and not s.stack:
            return None
        s.ternary += 1
        s.expect_operand = True
    elif cls == "else":
        if not s.ternary:
            return None
        s.ternary -= 1
        s.expect_operand = True
    elif cls in ASSIGN_OPS:
        if s.kind != "expr" or not s.single_ident:
            return None
        s.kind, s.expect_operand = "assign", True
    else:
        return None
    return s
