"""What a debugging episode's first edit did, measured against the task's reference fix.

A resolve rate says whether an agent fixed the bug; it does not say which skill is missing. BC on
the H200 run resolved 2% of held-out tasks, and reading the episodes by hand showed why: the
policy had learned the trajectory's shape and often edited the buggy line, but wrote the wrong
line there. :func:`first_edit` measures exactly that for one episode, :func:`behaviour_counts`
for an evaluation, so every stage of ``scripts/agent_recipe.py`` reports it:

* ``edited``: the episode made an ``<edit>``, ``<replace>`` or ``<rewrite>`` at all;
* ``on_bug_line``: its first edit replaces lines of a file the fix changes, among the lines the
  fix changes (numbered as in the starting file; a ``<replace>``: the lines its quote covers; a
  fix that inserts lines: either line beside them);
* ``right``: the file after that edit is the fixed file (a task fixed in one edit);
* ``named`` / ``named_right``: the edit's lead-in names a bug (``In line N, `a` should be `b`.``
  or, before a ``<replace>``, ```a` should be `b`.``: the forms of reference trajectories with
  ``demonstrations.explain``) / names the one :func:`~lit_codeRL.envs.reference.edit_reason`
  gives for the fix;
* ``named_right_elsewhere``: it names the fix's bug (its line number, if it gives one, aside) but
  edits other lines: the policy knew what to change but not where (33 of the 56 first edits of BC
  on the H200 run that named it, all ``<edit>`` by line numbers: why ``<replace>`` quotes the
  place instead).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lit_codeRL.envs.behaviour_counts import flag_counts
from lit_codeRL.envs.debug.tools import apply_edit, apply_replace, line_range, parse_tool_call
from lit_codeRL.envs.reference import LineEdit, edit_reason, line_edits
from lit_codeRL.envs.text import line_number, python_lines
from lit_codeRL.problems.debug_task import DebugTask

_LEAD_IN = " I will "


def _reason(action: str) -> str | None:
    """The lead-in of ``action`` that names a bug: on its first line that is not blank, a
    sentence quoting code (a backtick), up to the first ``.`` followed by the edit's ``I will ...``;
    ``None`` without one. What the regex ``^\\s*([^\\n]*?`[^\\n]*?\\.) I will `` matched, found
    with two searches: the regex tried every backtick and every period of a line, quadratic in
    its length (an action is the policy's text)."""
    start = len(action) - len(action.lstrip())
    line = action[start:].split("\n", 1)[0]
    tick = line.find("`")
    end = line.find("." + _LEAD_IN, tick + 1) if tick >= 0 else -1
    return line[: end + 1] if end >= 0 else None


_TURN = re.compile(r"^\[turn \d+\]\n", re.MULTILINE)


@dataclass(frozen=True)
class FirstEdit:
    """What one episode's first edit did (see the module docstring)."""

    edited: bool = False
    on_bug_line: bool = False
    right: bool = False
    named: bool = False
    named_right: bool = False
    named_right_elsewhere: bool = False


def transcript_actions(transcript: str) -> list[str]:
    """The actions of an episode dumped as ``[turn k]`` / ``[feedback]`` blocks (an evaluation
    report's ``completion``); a one-turn completion without the markers is one action."""
    chunks = _TURN.split(transcript)
    if len(chunks) == 1:
        return [transcript]
    return [chunk.split("\n[feedback]\n", 1)[0] for chunk in chunks[1:]]


def first_edit(task: DebugTask, actions: Sequence[str], tools: tuple[str, ...]) -> FirstEdit:
    """What the first ``<edit>`` or ``<rewrite>`` among ``actions`` did to ``task`` (see the module
    docstring); ``FirstEdit()`` when there is none or the task has no fix."""
    if not task.fix:
        return FirstEdit()
    for action in actions:
        call = parse_tool_call(action, tools)
        if not call.ok or call.tool not in ("edit", "replace", "rewrite"):
            continue
        path = str(call.args.get("path", ""))
        old, fixed = task.files.get(path), task.fix.get(path)
        if old is None or fixed is None:
            return FirstEdit(edited=True, named=_reason(action) is not None)
        fix_edits = line_edits(python_lines(old, keepends=True), python_lines(fixed, keepends=True))
        if call.tool == "rewrite":
            after, error = str(call.args.get("content", "")), None
            on_bug_line = True
        elif call.tool == "replace":
            quoted = str(call.args["old"])
            after, error = apply_replace(old, quoted, str(call.args["new"]))
            at = old.find(quoted)
            start, end = line_number(old, at), line_number(old, at + len(quoted) - 1)
            on_bug_line = error is None and any(_touches(start, end, e) for e in fix_edits)
        else:
            spec = str(call.args.get("lines", ""))
            try:
                after, error = apply_edit(old, spec, str(call.args.get("content", "")))
            except ValueError as err:  # a range that is not numbers
                after, error = old, str(err)
            start, end = line_range(spec) if error is None else (0, -1)
            on_bug_line = error is None and any(_touches(start, end, e) for e in fix_edits)
        said = _reason(action)
        expected = {edit_reason(e, numbered) for e in fix_edits for numbered in (True, False)} - {None}
        named_right = said is not None and said in expected
        what = said is not None and _unnumbered(said) in {_unnumbered(e) for e in expected}
        return FirstEdit(
            edited=True,
            on_bug_line=on_bug_line,
            right=error is None and after.rstrip("\n") == fixed.rstrip("\n"),
            named=said is not None,
            named_right=named_right,
            named_right_elsewhere=what and not on_bug_line,
        )
    return FirstEdit()


def _touches(start: int, end: int, fix: LineEdit) -> bool:
    """Whether lines ``start..end`` are among the lines ``fix`` changes; for a fix that only
    inserts lines (``line_edits`` anchors it on one unchanged line beside them), either line
    beside the insertion counts: both are where it goes."""
    first, last = fix.start, fix.end
    kept = len(fix.old)
    if len(fix.new) > kept and fix.new[:kept] == fix.old:  # inserted after the anchor
        last += 1
    elif len(fix.new) > kept and fix.new[-kept:] == fix.old:  # inserted before it
        first -= 1
    return start <= last and first <= end


def _unnumbered(reason: str) -> str:
    """A bug's name without where it is: ``In line 7, `a` should be `b`.`` -> ```a` should be `b`.``."""
    return re.sub(r"^After line \d+, the line ", "The line ", re.sub(r"^In line \d+, ", "", reason))


def behaviour_counts(edits: Iterable[FirstEdit]) -> dict[str, int]:
    """How many episodes had each :class:`FirstEdit` property, and how many there were."""
    return flag_counts(edits, FirstEdit)
