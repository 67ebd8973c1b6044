"""From the policy's text to a game move: SPIRAL's ``\\boxed{...}`` convention.

Upstream (``SelfPlayActor.extract_action``, spiral-rl/spiral ``train_spiral.py``):

1. the content of the **last** ``\\boxed{...}`` (braces matched, ``\\text{...}`` unwrapped); no
   ``\\boxed`` at all: the whole text;
2. any ``\\boxed{x}`` left inside becomes ``[x]``;
3. a short answer without brackets (at most five words) is wrapped as ``[answer]``; whitespace is
   collapsed;
4. board and card games: the result must be *exactly* one of the legal moves (case-sensitive),
   otherwise the move is invalid. Free-text games (negotiation) take the stripped content of the
   last ``\\boxed{}``, and no ``\\boxed{}`` (or an empty one) is invalid.
"""

from __future__ import annotations

import re

_BOXED = "\\boxed{"
_TEXT = re.compile(r"\\text\{([^{}]*)\}")
_INNER_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    """Content of the last brace-matched ``\\boxed{...}`` in ``text`` (``None`` when there is none
    or it never closes)."""
    start = text.rfind(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return _TEXT.sub(r"\1", text[start + len(_BOXED) : i])
            i += 1
        start = text.rfind(_BOXED, 0, start)  # unclosed: try an earlier one
    return None


def normalize_move(raw: str) -> str:
    """Steps 2-3 above: ``\\boxed{x}`` -> ``[x]``, short bare answers -> ``[answer]``."""
    move = _INNER_BOXED.sub(r"[\1]", raw)
    move = " ".join(move.split())
    if "[" not in move and "]" not in move and 0 < len(move.split()) <= 5:
        move = f"[{move}]"
    return move


def parse_move(text: str, legal: list[str]) -> str | None:
    """The move ``text`` names, or ``None`` when it is not a valid move.

    ``legal``: the exact legal moves (``"[4]"``, ``"[check]"``); empty for free-text games, where
    the content of the last ``\\boxed{}`` is the move as it stands.
    """
    boxed = last_boxed(text)
    if not legal:
        move = (boxed or "").strip()
        return move or None
    move = normalize_move(boxed if boxed is not None else text)
    return move if move in legal else None


__all__ = ["last_boxed", "normalize_move", "parse_move"]
