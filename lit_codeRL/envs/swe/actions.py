"""What an agent's turn asks for: one ``<execute>`` command, ``<submit/>``, or nothing usable.

The rules (also in the prompt the agent sees, ``prompt.py``):

* The turn is read from the start; the **first** complete ``<execute>...</execute>`` block or the
  first ``<submit/>`` tag, whichever comes first, is the action. Anything after it is ignored
  (the generation stops at ``</execute>`` anyway; a model that writes two commands in one turn
  gets the first run and is told the rest was ignored).
* A turn cut off at the token limit with an unclosed ``<execute>`` is not run: half a command
  could do anything (``rm -rf build`` cut to ``rm -rf``); the agent is told it was cut off.
* A turn with neither tag runs nothing and gets a reminder of the format; it costs a turn.
* ``<submit>`` and ``<submit />`` are accepted as ``<submit/>``; tags are case-sensitive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lit_codeRL.envs.text import enclosed

EXECUTE_OPEN, EXECUTE_CLOSE = "<execute>", "</execute>"
STOP_STRINGS = [EXECUTE_CLOSE]
"""Generation stops once a command is complete: the env answers before the model goes on."""

_SUBMIT = re.compile(r"<submit\s*/?>")

ActionKind = Literal["execute", "submit", "cut_off", "empty_command", "no_action"]


@dataclass(frozen=True)
class ParsedAction:
    kind: ActionKind
    command: str = ""
    """The shell command (``execute`` only), stripped of surrounding whitespace."""
    ignored_text: bool = False
    """More tags followed the one that was used (they were not run)."""


def _first_tag(text: str, start: int = 0) -> tuple[int, str | None] | None:
    """The first complete tag at or after ``start``: ``(where it ends, the command)``, the command
    ``None`` for ``<submit/>``; ``None`` without one. A linear search (:func:`enclosed`): the regex
    ``<execute>(.*?)</execute>`` scanned the rest of the text from every ``<execute>``, quadratic
    on one repeated (seconds of the GIL at 70k characters, every sample of the batch waiting)."""
    execute = enclosed(text, EXECUTE_OPEN, EXECUTE_CLOSE, start)
    submit = _SUBMIT.search(text, start)
    if submit is not None and (execute is None or submit.start() < execute[0]):
        return submit.end(), None
    if execute is None:
        return None
    return execute[2], text[execute[0] + len(EXECUTE_OPEN) : execute[1]]


def parse_action(text: str, cut_off: bool = False) -> ParsedAction:
    """The action a turn's text asks for (see the module docstring)."""
    first = _first_tag(text)
    if first is None:
        if cut_off and EXECUTE_OPEN in text:
            return ParsedAction("cut_off")
        return ParsedAction("no_action")
    end, command = first
    more = _first_tag(text, end) is not None
    if command is None:
        return ParsedAction("submit", ignored_text=more)
    command = command.strip()
    if not command:
        return ParsedAction("empty_command", ignored_text=more)
    return ParsedAction("execute", command, ignored_text=more)


def runs_as_written(action: str) -> bool:
    """Whether the env would run the command between ``action``'s ``<execute>`` tags exactly as
    written, and nothing else (a reference action must read back as the one it imitates)."""
    start = action.find(EXECUTE_OPEN)
    if start < 0 or not action.endswith(EXECUTE_CLOSE):
        return False
    parsed = parse_action(action)
    command = action[start + len(EXECUTE_OPEN) : -len(EXECUTE_CLOSE)]
    return parsed.kind == "execute" and parsed.command == command and not parsed.ignored_text
