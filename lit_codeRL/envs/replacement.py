"""Replacing text by text: what "found once" means, and how a replacement is written.

The debugging gym's ``<replace>`` tool (``envs/debug/tools.py``), the SWE edit bundle's
``replace`` command and both envs' reference trajectories (``envs/reference.py``,
``envs/*/reference.py``) share these, so a quote the reference writes is one the tool accepts.
"""

from __future__ import annotations

import difflib

from lit_codeRL.envs.text import python_lines


def occurrences(text: str, part: str, limit: int | None = None) -> list[int]:
    """Where ``part`` starts in ``text``, overlapping occurrences counted ("a\\na" is twice in
    "a\\na\\na"), at most ``limit`` of them (a one-letter quote in a large file)."""
    starts: list[int] = []
    at = text.find(part) if part else -1
    while at >= 0 and (limit is None or len(starts) < limit):
        starts.append(at)
        at = text.find(part, at + 1)
    return starts


def found_once(text: str, part: str) -> bool:
    """Whether ``part`` (not empty) occurs exactly once in ``text``."""
    return len(occurrences(text, part, 2)) == 1


def replacement_parts(old: str, new: str) -> str:
    """``<old>OLD</old>`` and ``<new>NEW</new>``, a line each, as the tool and the command read
    them back: they drop one newline after an opening tag, so a part that starts with one gets
    another."""

    def part(tag: str, text: str) -> str:
        return f"<{tag}>{chr(10) if text.startswith(chr(10)) else ''}{text}</{tag}>"

    return f"{part('old', old)}\n{part('new', new)}\n"


CLOSEST_MAX_LINES = 8
"""Lines of the file a failed quote's hint shows at most."""
CLOSEST_SCAN_LINES = 2000
"""Lines of a file searched for a failed quote's closest lines (the first ones)."""
CLOSEST_LINE_CHARS = 100
"""Characters of a line compared (its first ones, indentation left out)."""
CLOSEST_MAX_RATIOS = 400
"""Full similarity computations (``SequenceMatcher.ratio``, the costly one) an anchor's search
makes at most: a failed quote is answered in the trainer's process, and a file of lines made to
pass the cheap bounds (anagrams of the quote) would otherwise cost seconds."""


def closest_lines(text: str, old: str, cutoff: float = 0.6) -> tuple[int, list[str]] | None:
    r"""Where ``text`` reads most like ``old``, a quote it does not have: ``(first line number,
    lines)``, as many lines as the quote has (at most :data:`CLOSEST_MAX_LINES`), or ``None`` when
    no place is alike (mean similarity of the lines under ``cutoff``).

    A quote is most often the right place written from memory: other indentation, other spacing,
    a name misspelt. Lines are compared without their indentation, by their first
    :data:`CLOSEST_LINE_CHARS` characters (difflib's ratio); the quote's first line and its longest
    each anchor a candidate place at the file line most like it, and the place whose lines are most
    like the quote's, on average, wins. The work is bounded (:data:`CLOSEST_SCAN_LINES`,
    :data:`CLOSEST_MAX_RATIOS`) whatever the file holds. Lines are numbered as Python numbers them
    (``envs/text.py: python_lines``), as the debugging gym's ``view`` shows them. The SWE edit
    bundle's ``replace`` (``env/tools/edit/bin/replace``, which runs where this package is not
    installed) has a copy, with its own copy of ``python_lines``; tests/envs/test_replace_hint.py
    holds the copies to the same answers (every shipped program, text made of line breaks)."""
    quote = python_lines(old.strip("\n"))[:CLOSEST_MAX_LINES]
    want = [line.strip()[:CLOSEST_LINE_CHARS] for line in quote]
    lines = python_lines(text)[:CLOSEST_SCAN_LINES]
    have = [line.strip()[:CLOSEST_LINE_CHARS] for line in lines]
    filled = [j for j, line in enumerate(want) if line]
    if not filled or not lines:
        return None
    matcher = difflib.SequenceMatcher(autojunk=False)
    starts = set()
    for j in dict.fromkeys((filled[0], max(filled, key=lambda k: len(want[k])))):
        matcher.set_seq2(want[j])
        best, at, budget = -1.0, 0, CLOSEST_MAX_RATIOS
        for i, candidate in enumerate(have):
            matcher.set_seq1(candidate)
            if matcher.real_quick_ratio() > best and matcher.quick_ratio() > best:
                if budget == 0:
                    break
                budget -= 1
                ratio = matcher.ratio()
                if ratio > best:
                    best, at = ratio, i
        starts.add(min(max(0, at - j), max(0, len(lines) - len(want))))

    def score(start: int) -> float:
        # a place cut short by the end of the file scores its missing lines 0
        pairs = zip(want, have[start : start + len(want)], strict=False)
        return sum(difflib.SequenceMatcher(None, w, h, autojunk=False).ratio() for w, h in pairs) / len(want)

    scores = {start: score(start) for start in sorted(starts)}
    start = max(scores, key=scores.__getitem__)
    if scores[start] < cutoff:
        return None
    return start + 1, lines[start : start + len(want)]
