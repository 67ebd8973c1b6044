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

EXECUTE_OPEN, EXECUTE_CLOSE = "<execute>", "</execute>"
STOP_STRINGS = [EXECUTE_CLOSE]
"""Generation stops once a command is complete: the env answers before the model goes on."""

_TAG = re.compile(r"<execute>(.*?)</execute>|<submit\s*/?>", re.DOTALL)

ActionKind = Literal["execute", "submit", "cut_off", "empty_command", "no_action"]


@dataclass(frozen=True)
class ParsedAction:
    kind: ActionKind
    command: str = ""
    """The shell command (``execute`` only), stripped of surrounding whitespace."""
    ignored_text: bool = False
    """More tags followed the one that was used (they were not run)."""


def parse_action(text: str, cut_off: bool = False) -> ParsedAction:
    """The action a turn's text asks for (see the module docstring)."""
    match = _TAG.search(text)
    if match is None:
        if cut_off and EXECUTE_OPEN in text:
            return ParsedAction("cut_off")
        return ParsedAction("no_action")
    more = _TAG.search(text, match.end()) is not None
    if match.group(0).startswith("<submit"):
        return ParsedAction("submit", ignored_text=more)
    command = match.group(1).strip()
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
