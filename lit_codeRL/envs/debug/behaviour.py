"""What a debugging episode's first edit did, measured against the task's reference fix.

A resolve rate says whether an agent fixed the bug; it does not say which skill is missing. BC on
the H200 run resolved 2% of held-out tasks, and reading the episodes by hand showed why: the
policy had learned the trajectory's shape and often edited the buggy line, but wrote the wrong
line there. :func:`first_edit` measures exactly that for one episode, :func:`behaviour_counts`
for an evaluation, so every stage of ``scripts/agent_recipe.py`` reports it:

* ``edited``: the episode made an ``<edit>`` (or ``<rewrite>``) at all;
* ``on_bug_line``: its first edit replaces lines of a file the fix changes, among the lines the
  fix changes (numbered as in the starting file);
* ``right``: the file after that edit is the fixed file (a task fixed in one edit);
* ``named`` / ``named_right``: the edit's lead-in names a bug (``In line N, ...``, the form of
  reference trajectories with ``demonstrations.explain``) / names the one
  :func:`~lit_codeRL.envs.reference.edit_reason` gives for the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from lit_codeRL.envs.debug.tools import apply_edit, line_range, parse_tool_call
from lit_codeRL.envs.reference import edit_reason, line_edits
from lit_codeRL.problems.debug_task import DebugTask

_REASON = re.compile(r"^\s*((?:In|After) line \d+, .*?\.)\s", re.DOTALL)
_TURN = re.compile(r"^\[turn \d+\]\n", re.MULTILINE)


@dataclass(frozen=True)
class FirstEdit:
    """What one episode's first edit did (see the module docstring)."""

    edited: bool = False
    on_bug_line: bool = False
    right: bool = False
    named: bool = False
    named_right: bool = False


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
        if not call.ok or call.tool not in ("edit", "rewrite"):
            continue
        path = str(call.args.get("path", ""))
        old, fixed = task.files.get(path), task.fix.get(path)
        if old is None or fixed is None:
            return FirstEdit(edited=True, named=bool(_REASON.match(action)))
        fix_edits = line_edits(old.splitlines(keepends=True), fixed.splitlines(keepends=True))
        if call.tool == "rewrite":
            after, error = str(call.args.get("content", "")), None
            on_bug_line = True
        else:
            spec = str(call.args.get("lines", ""))
            try:
                after, error = apply_edit(old, spec, str(call.args.get("content", "")))
            except ValueError as err:  # a range that is not numbers
                after, error = old, str(err)
            start, end = line_range(spec) if error is None else (0, -1)
            on_bug_line = error is None and any(start <= e.end and e.start <= end for e in fix_edits)
        said = _REASON.match(action)
        expected = [edit_reason(e) for e in fix_edits]
        return FirstEdit(
            edited=True,
            on_bug_line=on_bug_line,
            right=error is None and after.rstrip("\n") == fixed.rstrip("\n"),
            named=bool(said),
            named_right=bool(said) and said.group(1) in expected,
        )
    return FirstEdit()


def behaviour_counts(edits: Iterable[FirstEdit]) -> dict[str, int]:
    """How many episodes had each :class:`FirstEdit` property, and how many there were."""
    counts = {"episodes": 0, **{name: 0 for name in asdict(FirstEdit())}}
    for edit in edits:
        counts["episodes"] += 1
        for name, value in asdict(edit).items():
            counts[name] += int(value)
    return counts
