"""Text from the workspace made safe for a tokenizer, a terminal and a JSON reader.

Files, file names and program output in an agent's workspace are bytes, not text. Where they
must be text (an observation the policy reads, a transcript printed by ``lit-coderl episode``),
bytes that are not UTF-8 arrive as surrogate escapes (``Workspace.diff``, file names from a
listing) or, through JSON, as other lone surrogates: a tokenizer and a UTF-8 terminal both fail
on those. :func:`clean_text` is the one defined replacement: every such character becomes U+FFFD.
Diffs keep their exact bytes for grading (``grading/repo.py: patch_bytes``); only what is shown
is cleaned.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate (an undecodable byte, a broken escape) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: text that cannot be written as UTF-8."""
    return _SURROGATE.search(text) is not None


def enclosed(text: str, open_tag: str, close_tag: str, start: int = 0) -> tuple[int, int, int] | None:
    """The first ``open_tag ... close_tag`` in ``text`` at or after ``start`` (the nearest closing
    tag): ``(where it opens, where its body ends, where it ends)``, or ``None`` without one.

    What the regex ``open(.*?)close`` finds, in time linear in ``text``: the regex tries every
    opening tag and scans the rest of the text from each, which is quadratic on an opening tag
    repeated (``"<execute>" * 10_000`` takes seconds). Without a closing tag after the first
    opening one there is none after any later one either, so one forward search decides."""
    at = text.find(open_tag, start)
    if at < 0:
        return None
    close = text.find(close_tag, at + len(open_tag))
    if close < 0:
        return None
    return at, close, close + len(close_tag)


def drop_enclosed(text: str, open_tag: str, close_tag: str) -> str:
    """``text`` without its closed ``open_tag ... close_tag`` sections (``re.sub`` of
    ``open.*?close`` with DOTALL, in linear time: :func:`enclosed`)."""
    parts, at = [], 0
    while (found := enclosed(text, open_tag, close_tag, at)) is not None:
        parts.append(text[at : found[0]])
        at = found[2]
    return "".join(parts) + text[at:] if parts else text
