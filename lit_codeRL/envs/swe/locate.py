"""The SWE reference trajectory's first look at the code, written from what the tests printed.

A policy imitates what it can copy. A first view that names the gold file and line ("I will look
at numkit/stats.py around line 20") copies nothing the agent has seen, and BC learned to guess a
path from the package's name (``calckit.py``) on held-out tasks. So the first view of a reference
trajectory (``envs/swe/reference.py``) is written after the first test run, from its output:

1. the traceback's last frame in a repository source file (pytest's ``path:line:`` lines, or
   Python's ``File "...", line N``; test files are skipped) is the file being fixed: the lead-in
   quotes it and the view is the lines just above and at the frame's (``ABOVE_FRAME``), a window
   written from the number the agent has seen, where the change is inside it;
2. else, a function the output shows being called (``name(``) that the file being fixed defines
   (the changed function first): ``grep`` finds where it is defined, then the view of that file;
3. else the view as before: the output does not say where to look.

Of the 140 tasks ``lit-coderl synth swe debug --per-function 3`` writes (one failing node id
run first), 57 first looks follow a traceback frame (52 of them with the frame's window), 66 a
``grep``, 17 neither; all 140 trajectories resolve when played.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass

from lit_codeRL import pyparse
from lit_codeRL.envs.reference import ends_at_stop
from lit_codeRL.envs.swe.actions import STOP_STRINGS, runs_as_written
from lit_codeRL.grading._scan import is_test_path
from lit_codeRL.sandbox.workspace_argv import REPO

ABOVE_FRAME = 7
BELOW_FRAME = 3
"""The view after a traceback frame: lines ``frame - ABOVE_FRAME`` to ``frame + BELOW_FRAME``, a
window the policy can write from the frame's number alone. Of the 57 synthesized tasks whose
traceback names the file being fixed, the changed line is at the frame's in 20 and at most 7
lines above it in 52; the view is the change's own window where the change is outside."""

_PYTEST_FRAME = re.compile(r"^([\w./-]+\.py):(\d+): ", re.M)
# [ \t]*, not \s*: \s* ran over every following newline from each line start (quadratic in blank lines)
_PYTHON_FRAME = re.compile(r'^[ \t]*File "([^"\n]+\.py)", line (\d+)', re.M)
_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(|\.([A-Za-z_]\w*)\(")


def last_source_frame(output: str) -> tuple[str, int] | None:
    """The last traceback frame in ``output`` in a repository file that is not a test file, as
    ``(path relative to the repository, line)``; ``None`` when there is none."""
    frames: list[tuple[int, str, int]] = []
    for pattern in (_PYTEST_FRAME, _PYTHON_FRAME):
        for match in pattern.finditer(output):
            path = match.group(1)
            if path.startswith(REPO + "/"):
                path = path[len(REPO) + 1 :]
            if path.startswith("./"):
                path = path[2:]
            if path.startswith("/") or ".." in path.split("/") or is_test_path(path):
                continue
            frames.append((match.start(), path, int(match.group(2))))
    if not frames:
        return None
    _, path, line = max(frames)
    return path, line


def defined_functions(source: str, line: int) -> tuple[str, ...]:
    """The functions and methods ``source`` defines (no dunders), the innermost one holding
    ``line`` first; nothing when it does not parse."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError):
        return ()
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    holding = [n for n in defs if n.lineno <= line <= (n.end_lineno or n.lineno)]
    ordered = sorted(holding, key=lambda n: -n.lineno)[:1] + sorted(defs, key=lambda n: n.lineno)
    return tuple(dict.fromkeys(n.name for n in ordered if not n.name.startswith("__")))


def called_name(output: str, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` (in their order) that ``output`` shows being called."""
    called = {a or b for a, b in _CALL.findall(output)}
    return next((n for n in names if n in called), None)


@dataclass(frozen=True)
class FirstLook:
    """The first view of the code, as a step of ``envs/reference.py``'s ``play_scripts``: called
    with the first test run's observation, it writes the actions that open ``path`` there."""

    path: str
    line: int
    """The line the lead-in names when the output names none (the change's)."""
    first: int
    last: int
    """The view's lines, around the change."""
    line_tools: bool
    """The ``edit`` bundle's numbered ``view`` (else ``sed -n``)."""
    names: tuple[str, ...] = ()
    """The functions ``path`` defines at the base, the changed one first (:func:`defined_functions`)."""
    changed: tuple[int, int] = (0, 0)
    """The first and last line the site's edits replace (base numbering)."""
    num_lines: int = 0
    """Lines in the file at the base."""

    def _view(self, first: int, last: int) -> str:
        quoted = shlex.quote(self.path)
        return f"view {quoted} {first}-{last}" if self.line_tools else f"sed -n '{first},{last}p' {quoted}"

    def fallback(self) -> str:
        """The view when the output does not say where to look."""
        return f"I will look at {self.path} around line {self.line}.\n<execute>{self._view(self.first, self.last)}</execute>"

    def __call__(self, observation: str) -> list[str]:
        frame = last_source_frame(observation)
        if frame is not None and frame[0] == self.path:
            at = frame[1]
            lead = f"The traceback ends in {self.path} at line {at}."
            first, last = max(1, at - ABOVE_FRAME), min(self.num_lines, at + BELOW_FRAME)
            if first <= self.changed[0] and self.changed[1] <= last:
                view = f"{lead} I will look at lines {first}-{last}, the code before it."
            else:
                first, last = self.first, self.last
                view = f"{lead} I will look at {self.path} around line {self.line}, where it goes wrong."
            return _checked([f"{view}\n<execute>{self._view(first, last)}</execute>"], self.fallback())
        name = called_name(observation, self.names)
        if name is not None:
            find = f"grep -rn --include='*.py' 'def {name}(' ."
            return _checked(
                [
                    f"The test calls `{name}`. I will find where it is defined.\n<execute>{find}</execute>",
                    self.fallback(),
                ],
                self.fallback(),
            )
        return [self.fallback()]


def _checked(actions: list[str], fallback: str) -> list[str]:
    """``actions`` when the env would run each as written and stop where it ends, else ``fallback``."""
    if all(runs_as_written(a) and ends_at_stop(a, STOP_STRINGS) for a in actions):
        return actions
    return [fallback]
