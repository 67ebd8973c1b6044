"""What an SWE episode's change did, measured against the task's reference patch.

A resolve rate of 0 says nothing of which skill is missing. On the third H200 run's 81 held-out
SWE tasks, reading the episodes by hand showed BC running the failing test, viewing the frame the
traceback names and changing code the fix does not touch; :func:`diff_behaviour` measures that
for one episode from its final diff (the ``git diff`` the grader applies), :func:`behaviour_counts`
for an evaluation, so every SWE evaluation of ``scripts/agent_recipe.py`` reports it:

* ``changed``: the episode left a change in the repository at all;
* ``fix_file``: it changed a file the reference patch changes;
* ``fix_lines``: it changed lines the reference patch changes (numbered as in the base; a
  change that inserts lines counts the two lines beside it, so an insertion where the fix
  inserts, or an edit of a line next to it, is there);
* ``other_files``: it changed a file the reference patch does not (a test, a guessed path);
* ``same_change``: its diff changes the same lines to the same text as the reference patch
  (the fix itself, whatever the grade says).

The debugging gym measures the first edit of an episode instead (``envs/debug/behaviour.py``):
its transcript holds each edit as a tool call, while an SWE edit is a shell command whose effect
only the repository's diff shows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lit_codeRL.envs.behaviour_counts import flag_counts

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
_DIFF_LINE = re.compile(r"[^\n]*\n|[^\n]+")
"""A diff's line with its ``\\n``: ``git`` ends lines there only (``str.splitlines`` also ends one at
a form feed, NEL, U+2028... that a changed or context line may hold)."""


@dataclass
class FileChange:
    """One file's part of a unified diff: the base lines it touches (see the module docstring)
    and the (removed, added) text of every hunk, for comparing two diffs' changes."""

    touched: set[int] = field(default_factory=set)
    hunks: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class DiffBehaviour:
    """What one episode's final diff did (see the module docstring)."""

    changed: bool = False
    fix_file: bool = False
    fix_lines: bool = False
    other_files: bool = False
    same_change: bool = False


def _path(header: str) -> str | None:
    """The path of a ``--- a/x`` / ``+++ b/x`` line (``None`` for /dev/null); git quotes a path
    with unusual bytes (``"a/x\\ty"``): its escapes are kept as written, enough to tell files apart."""
    name = _unquoted(header[4:].rstrip("\n").split("\t")[0])
    if name == "/dev/null":
        return None
    return name[2:] if name[:2] in ("a/", "b/") else name


def _header_path(line: str) -> str | None:
    """The path of a ``diff --git a/x b/x`` line when both sides name the same file (a rename's
    paths come from its ``rename from`` line; a quoted name is kept as written)."""
    rest = line[len("diff --git ") :].rstrip("\n")
    half = (len(rest) - 1) // 2
    old, new = _unquoted(rest[:half]), _unquoted(rest[half + 1 :])
    if rest[half : half + 1] == " " and old[:2] == "a/" and new[:2] == "b/" and old[2:] == new[2:]:
        return old[2:]
    return None


def _unquoted(name: str) -> str:
    return name[1:-1] if len(name) > 1 and name[0] == name[-1] == '"' else name


def file_changes(diff: str) -> dict[str, FileChange]:
    """The files a ``git diff`` changes, each with the base lines it touches and its hunks'
    text. A file changed without a text hunk (a binary file, a pure rename, a mode change) is
    there with no lines touched. Lines the parser cannot place (a truncated or hand-made diff)
    are skipped, never raised."""
    out: dict[str, FileChange] = {}
    current: FileChange | None = None
    old_path: str | None = None
    section: str | None = None  # the file of the current ``diff --git`` section, from its header
    line_no, removed, added = 0, [], []

    def close_hunk() -> None:
        if current is not None and (removed or added):
            current.hunks.append(("".join(removed), "".join(added)))
        removed.clear()
        added.clear()

    def close_section() -> None:
        if current is None and section is not None:  # no text hunk: still a changed file
            out.setdefault(section, FileChange())

    for line in _DIFF_LINE.findall(diff):
        if line.startswith("diff --git "):
            close_hunk()
            close_section()
            current, old_path, section = None, None, _header_path(line)
        elif line.startswith(("rename from ", "copy from ")) and current is None:
            section = _unquoted(line.split(" from ", 1)[1].rstrip("\n"))
        elif line.startswith("Binary files ") and current is None and section is None:
            old, _, new = line[len("Binary files ") :].rstrip("\n").removesuffix(" differ").partition(" and ")
            section = _path(f"--- {old}") or _path(f"+++ {new}")
        elif line.startswith("--- ") and current is None:
            old_path = _path(line)
        elif line.startswith("+++ ") and current is None:
            path = old_path or _path(line)
            current = out.setdefault(path, FileChange()) if path else None
        elif (match := _HUNK.match(line)) is not None:
            close_hunk()
            line_no = int(match.group(1))
            if match.group(2) == "0":  # an empty old side: the insertion follows line `start`
                line_no += 1
        elif current is None or not line or line[0] not in " -+":
            continue
        elif line[0] == " ":
            close_hunk()
            line_no += 1
        elif line[0] == "-":
            current.touched.add(line_no)
            removed.append(line[1:])
            line_no += 1
        else:  # an inserted line sits between line_no - 1 and line_no
            current.touched.update((line_no - 1, line_no) if not removed else ())
            added.append(line[1:])
    close_hunk()
    close_section()
    return out


def diff_behaviour(diff: str, reference: str) -> DiffBehaviour:
    """What ``diff`` (an episode's final ``git diff``) did against ``reference`` (the task's gold
    patch); see the module docstring."""
    mine, fix = file_changes(diff or ""), file_changes(reference or "")
    if not mine:
        return DiffBehaviour()
    shared = mine.keys() & fix.keys()
    return DiffBehaviour(
        changed=True,
        fix_file=bool(shared),
        fix_lines=any(mine[p].touched & fix[p].touched for p in shared),
        other_files=bool(mine.keys() - fix.keys()),
        same_change=mine.keys() == fix.keys()
        and all(
            mine[p].touched == fix[p].touched and _normal(mine[p].hunks) == _normal(fix[p].hunks) for p in fix
        ),
    )


def _normal(hunks: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Hunks with trailing whitespace ignored (an editor's newline at the end of a line)."""
    return [(a.rstrip(), b.rstrip()) for a, b in hunks]


def behaviour_counts(behaviours: Iterable[DiffBehaviour]) -> dict[str, int]:
    """How many episodes did each thing: ``{"episodes": n, "changed": k, ...}``."""
    return flag_counts(behaviours, DiffBehaviour)
