r"""Text from the workspace made safe for a tokenizer, a terminal and a JSON reader.

Files, file names and program output in an agent's workspace are bytes, not text. Where they
must be text (an observation the policy reads, a transcript printed by ``lit-coderl episode``),
bytes that are not UTF-8 arrive as surrogate escapes (``Workspace.diff``, file names from a
listing) or, through JSON, as other lone surrogates: a tokenizer and a UTF-8 terminal both fail
on those. And a program the agent runs can print control characters: an ESC sequence clears or
retitles the terminal of whoever reads the transcript (or writes their clipboard, OSC 52), a
carriage return makes ``PASSED\rFAILED`` show one word where the policy reads two, a bidi override
shows text in an order other than its tokens'. U+2028 and U+2029 (line and paragraph separator)
break a line for some tokenizers and renderers but not for a tool that counts ``\n`` (nor for
Python's line numbers), so the line the model sees and the number it is told would disagree. And
invisible characters hide text from a reader while the tokens carry it: zero-width space, non-joiner
and joiner, word joiner and the invisible operators (U+2061..U+2064), U+FEFF (the BOM), U+180E, and
the tag characters U+E0000..U+E007F (an instruction spelt in them shows as nothing).
:func:`clean_text` is the one defined replacement: every lone surrogate becomes U+FFFD, ``\r\n``
becomes ``\n``, and every other control character but ``\n`` and ``\t`` (C0, DEL, C1), every bidi
control (the marks LRM, RLM and ALM, every embedding, override and isolate), both separators and
every invisible character above becomes its visible Python escape (``\x1b``, ``\r``, ``\u202e``,
``\u2028``, ``\u200b``, ``\U000e0041``: the characters ``repr`` writes). The soft hyphen (U+00AD)
stays: it marks where a word may break and is common in ordinary text. Diffs keep their exact bytes
for grading (``grading/repo.py: patch_bytes``) and files keep theirs; only what is shown is cleaned.

A tool that shows or takes line numbers numbers them as Python does (:func:`python_lines`,
:func:`line_number`), so they are the numbers of a traceback and of pdb.
"""

from __future__ import annotations

import io
import re

_SURROGATE = re.compile("[\ud800-\udfff]")

_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]
"""C0 but tab and newline, DEL, C1: what a terminal may act on instead of showing."""
_BIDI = [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
"""ALM, LRM, RLM (the marks), LRE, RLE, PDF, LRO, RLO and LRI, RLI, FSI, PDI: every bidi control
(Unicode's Bidi_Control property); they reorder what is shown, not the tokens, and show as nothing."""
_SEPARATORS = [0x2028, 0x2029]
r"""LINE and PARAGRAPH SEPARATOR: a line break to some readers, none to ``\n``-counting tools."""
_INVISIBLE = [0x180E, *range(0x200B, 0x200E), *range(0x2060, 0x2065), 0xFEFF, *range(0xE0000, 0xE0080)]
"""Mongolian vowel separator, zero-width space, non-joiner and joiner, word joiner, the invisible
operators, ZWNBSP (the BOM) and the tag characters: text a reader cannot see."""

_VISIBLE: dict[int, str] = {
    **{code: "\ufffd" for code in range(0xD800, 0xE000)},
    **{code: repr(chr(code))[1:-1] for code in (*_CONTROLS, *_BIDI, *_SEPARATORS, *_INVISIBLE)},
}
r"""The translation table of :func:`clean_text` (``repr`` spells each escape: ``\x1b``, ``\r``)."""

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064"
    "\u2066-\u2069\ufeff\ud800-\udfff\U000e0000-\U000e007f]"
)
"""Any character :data:`_VISIBLE` changes: most text has none and is returned as it is."""


def clean_text(text: str) -> str:
    r"""``text`` safe to show (see the module docstring): lone surrogates as U+FFFD, ``\r\n`` as
    ``\n``, every other control character but newline and tab, every bidi control, both line
    separators and every invisible character as its visible escape. Linear time (one search, one
    ``str.translate``); the result holds no character it would change (every escape is ASCII), so
    cleaning twice is cleaning once."""
    if _UNSAFE.search(text) is None:
        return text
    return text.replace("\r\n", "\n").translate(_VISIBLE)


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: text that cannot be written as UTF-8."""
    return _SURROGATE.search(text) is not None


def python_lines(text: str, keepends: bool = False) -> list[str]:
    r"""``text``'s lines as Python numbers them: a line ends at ``\r\n``, ``\r`` or ``\n`` and
    nowhere else (universal newlines: the tokenizer's line numbers in a traceback, ``linecache``
    behind pdb's ``l`` and ``b file:N``, pytest's reports). ``str.splitlines`` also ends a line at
    ``\v``, ``\f``, ``\x1c``..``\x1e``, ``\x85``, U+2028 and U+2029, which a string or a comment
    may hold: numbered by it, line N of a file past one of them is not the line N a traceback
    names. With ``keepends`` each line keeps its own line end (``"".join`` gives ``text`` back);
    an empty text has no line, a last line without a line end is one."""
    lines = io.StringIO(text, newline="").readlines()  # newline="": split there, translate nothing
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def line_number(text: str, at: int) -> int:
    """The line (1-based, numbered as :func:`python_lines` numbers them) that holds the character
    at ``at`` of ``text``: a line end belongs to the line it ends."""
    # each line end before ``at`` once: every \n and every \r, less the \r\n pairs counted twice
    n = text.count("\n", 0, at) + text.count("\r", 0, at) - text.count("\r\n", 0, at) + 1
    if 0 < at < len(text) and text[at] == "\n" and text[at - 1] == "\r":
        n -= 1  # the \n of a \r\n, whose \r the counts up to ``at`` took for a lone one
    return n


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
