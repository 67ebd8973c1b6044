"""Replacing text by text: what "found once" means, and how a replacement is written.

The debugging gym's ``<replace>`` tool (``envs/debug/tools.py``), the SWE edit bundle's
``replace`` command and both envs' reference trajectories (``envs/reference.py``,
``envs/*/reference.py``) share these, so a quote the reference writes is one the tool accepts.
"""

from __future__ import annotations


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
