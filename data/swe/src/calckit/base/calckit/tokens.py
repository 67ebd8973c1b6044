"""Turn an expression string into tokens."""

from dataclasses import dataclass

OPERATORS = "+-*/^"


class CalcError(ValueError):
    """An expression that cannot be read or evaluated."""


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "op", "(" or ")"
    value: object = None


def tokenize(text):
    """Tokens of ``text``; numbers become floats."""
    tokens = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char.isdigit() or char == ".":
            start = i
            while i < len(text) and (text[i].isdigit() or text[i] == "."):
                i += 1
            try:
                tokens.append(Token("number", float(text[start:i])))
            except ValueError:
                raise CalcError(f"bad number {text[start:i]!r} at {start}") from None
        elif char in OPERATORS:
            tokens.append(Token("op", char))
            i += 1
        elif char in "()":
            tokens.append(Token(char))
            i += 1
        else:
            raise CalcError(f"unexpected character {char!r} at {i}")
    return tokens
