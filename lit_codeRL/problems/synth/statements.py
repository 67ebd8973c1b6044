"""Problem statements of synthesized tasks, written from what a user of the code would see.

A statement names the failing test, quotes its assertion message (pytest's rewritten ``assert``
shows expected and actual values: ``assert 7.0 == 3.0`` / ``where 7.0 = evaluate('8 - 3 - 2')``),
or, for a call checked against a value, says what the call returned and what was expected. It
never shows the diff: :func:`leaked_lines` checks that no line the bug changed (before or after
the change) appears in it, and a task whose statement would leak is dropped (SWE-smith's issue
generators are told the same rule, ``configs/issue_gen/ig_v2.yaml``; here it is checked).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lit_codeRL.grading.repo import junit_key

MAX_MESSAGE_CHARS = 600
"""An assertion message longer than this is cut (a huge repr teaches nothing)."""
_MIN_LEAK_CHARS = 8
"""Changed lines shorter than this (``pass``, ``i += 1``) are too generic to count as a leak: they
may well appear in a quoted assertion without telling where the bug is."""


def _cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 5].rstrip() + " ..."


def _test_name(node_id: str) -> str:
    """``test_q[a::b]`` of ``tests/t.py::C::test_q[a::b]``: the name junit gives the test
    (parameters may hold ``::``), or the node id itself when it names no test."""
    return junit_key(node_id)[1] or node_id


def repository_statement(
    failing: Sequence[str], messages: dict[str, str], passing_count: int, summary: str = ""
) -> str:
    """The statement of a repository task: what fails, with the first failing test's message.

    Args:
        failing: FAIL_TO_PASS node ids, in order.
        messages: Node id -> the failure message its junit report holds (the first line(s) of
            the assertion error, never the traceback's source lines).
        passing_count: How many other tests still pass (PASS_TO_PASS).
        summary: An optional first sentence (what the component is for).
    """
    if not failing:
        raise ValueError("a statement needs at least one failing test")
    first = failing[0]
    lines = [summary.strip()] if summary.strip() else []
    name = _test_name(first)
    lines.append(f"`{first}` fails, and it should pass.")
    message = _cut(messages.get(first, ""))
    if message:
        lines += ["", "What it reports:", "```", message, "```"]
    others = [_test_name(node) for node in failing[1:]]
    if others:
        shown = ", ".join(f"`{n}`" for n in others[:5]) + (" and more" if len(others) > 5 else "")
        lines += ["", f"Also failing: {shown}."]
    if passing_count:
        lines += ["", f"The other {passing_count} test(s) pass and must keep passing."]
    lines += ["", f"Find the bug in the code that `{name}` exercises and fix it; do not change the tests."]
    return "\n".join(lines)


def value_statement(task_text: str, path: str, call: str, expected: str, actual: str, node_id: str) -> str:
    """The statement of a single-file task whose failing test checks ``call == expected``."""
    return (
        f"`{path}` should do this: {task_text.strip()}\n\n"
        f"It does not: `{_cut(call, 300)}` should give `{_cut(expected, 300)}`, "
        f"but {_cut(actual, 300)}. (`{node_id}` fails.)\n\n"
        f"Fix the bug in `{path}` so that every test passes; do not change the tests."
    )


def assertion_statement(task_text: str, path: str, assertion: str, outcome: str, node_id: str) -> str:
    """The statement of a single-file task whose failing test is an assertion of another shape."""
    return (
        f"`{path}` should do this: {task_text.strip()}\n\n"
        f"It does not: the check `{_cut(assertion, 300)}` fails ({_cut(outcome, 300)}; "
        f"`{node_id}`).\n\n"
        f"Fix the bug in `{path}` so that every test passes; do not change the tests."
    )


def changed_lines(diff: str) -> list[str]:
    """The stripped ``-``/``+`` lines of a unified diff (file headers excluded)."""
    out = []
    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line[:1] in "+-" and line[1:].strip():
            out.append(line[1:].strip())
    return out


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def leaked_lines(statement: str, diff: str) -> list[str]:
    """The lines the bug changed that appear in ``statement`` (whitespace-normalised); ``[]``
    when it leaks none. Lines shorter than :data:`_MIN_LEAK_CHARS` are ignored."""
    text = _normal(statement)
    return [
        line
        for line in changed_lines(diff)
        if len(_normal(line)) >= _MIN_LEAK_CHARS and _normal(line) in text
    ]
