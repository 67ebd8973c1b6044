"""The debugging gym's tool calls: their text format, the presets, and how a turn is read.

A turn holds one tool call, written as a tag (the format is in the prompt the agent sees):

* ``<pdb>COMMAND</pdb>``: one pdb command (``b solution.py:12``, ``c``, ``n``, ``s``, ``p x``, ``l``,
  ``w``, ``!expr``) in a debugger running the tests;
* ``<view>FILE</view>`` or ``<view>FILE START-END</view>``: the file with line numbers (Python's, as
  ``edit`` counts them too: ``envs/text.py: python_lines``, the numbers of a traceback and of pdb);
* ``<replace path="FILE"><old>TEXT</old><new>TEXT</new></replace>``: replace the one place in FILE
  that reads TEXT exactly (no line numbers: where an edit goes is named by what is there, the way
  SWE-agent's and aider's editors work; text found nowhere or more than once changes nothing);
* ``<edit path="FILE" lines="START-END">NEW LINES</edit>``: replace lines START..END (1-based,
  inclusive; ``START = END + 1`` inserts before line START; ``lines="N"`` is one line);
* ``<rewrite path="FILE">WHOLE FILE</rewrite>``: replace (or create) the whole file;
* ``<eval/>``: run the tests and see their output;
* ``<listdir>DIR</listdir>`` or ``<listdir/>``: the files under DIR (default the repository);
* ``<bash>COMMAND</bash>``: a shell command (only when enabled);
* ``<submit/>``: end the episode and be graded.

Rules: the *first* complete tag in the turn is the call, later ones are not run (the agent is told);
a turn cut off at the token limit inside an open tag is not run; a turn without a tag, with an
unknown or disabled tool, or with malformed arguments runs nothing and gets a message saying what
was wrong and what would work. A code block fence (```) around an edit's or a rewrite's content
is removed, as models write one out of habit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from lit_codeRL.envs.replacement import closest_lines, occurrences
from lit_codeRL.envs.text import enclosed, has_surrogate, line_number, python_lines

TOOLS = ("pdb", "view", "replace", "edit", "rewrite", "eval", "listdir", "bash", "submit")
PRESETS: dict[str, tuple[str, ...]] = {
    "debug": ("pdb", "view", "replace", "edit", "rewrite", "eval", "listdir", "submit"),
    "lines": ("pdb", "view", "edit", "rewrite", "eval", "listdir", "submit"),
    "rewrite": ("view", "rewrite", "eval", "listdir", "submit"),
    "full": ("pdb", "view", "replace", "edit", "rewrite", "eval", "listdir", "bash", "submit"),
}
"""``debug``: debug-gym's debug agent (pdb plus editing) with ``replace``; ``lines``: the same
without ``replace`` (edits by line numbers only: the ablation); ``rewrite``: debug-gym's
rewrite-only agent (no debugger, whole-file rewrites); ``full``: ``debug`` plus ``bash``."""

_BODY = ("pdb", "view", "replace", "edit", "rewrite", "listdir", "bash")
_SELF_CLOSING = ("eval", "submit", "listdir")
_OPEN = re.compile(r"<(pdb|view|replace|edit|rewrite|eval|listdir|bash|submit)\b([^<>]*?)(/?)>")
# A name starts only where a word does: started inside a long word, \w+ would scan to its end
# again from every letter (quadratic in the tag's length, the GIL held for seconds).
_ATTR = re.compile(r'(?<!\w)(\w+)\s*=\s*"([^"]*)"')
_FENCE_OPEN = re.compile(r"\s*```[\w+-]*[ \t]*\n")
MAX_LINE_DIGITS = 9
"""Digits of a line number at most: an agent's number of thousands of digits would fail ``int()``
(Python's 4300-digit limit) and no file has a billion lines."""
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def stop_strings(tools: tuple[str, ...]) -> list[str]:
    """Where generation stops: the end of each enabled tool's call."""
    out = []
    for tool in tools:
        if tool in _BODY:
            out.append(f"</{tool}>")
        if tool in _SELF_CLOSING:
            out.append(f"<{tool}/>")
        if tool in ("eval", "submit"):
            out.append(f"<{tool}>")  # <eval></eval> and <submit> mean the same: stop at the opening
    return out


@dataclass(frozen=True)
class ToolCall:
    """What a turn asks for."""

    tool: str
    """A tool name, or ``error`` (nothing runs; ``message`` says why)."""
    args: dict[str, str] = field(default_factory=dict)
    message: str = ""
    """For ``error``: the feedback the agent gets."""
    ignored_text: bool = False
    """More tags followed the call (they were not run)."""

    @property
    def ok(self) -> bool:
        return self.tool != "error"


ErrorKind = Literal["no_call", "cut_off", "disabled", "bad_args"]


def usage(tools: tuple[str, ...]) -> str:
    """One line per enabled tool: how to call it (the prompt's tool list, and error feedback)."""
    lines = {
        "pdb": "<pdb>COMMAND</pdb>  one pdb command (b FILE:LINE, c, n, s, p EXPR, l, w, !STATEMENT) "
        "in a debugger running the tests; it restarts after every edit and keeps your breakpoints",
        "view": "<view>FILE</view> or <view>FILE START-END</view>  show a file with line numbers",
        "replace": '<replace path="FILE"><old>TEXT</old><new>NEW TEXT</new></replace>  replace the '
        "one place in FILE that reads TEXT exactly",
        "edit": '<edit path="FILE" lines="START-END">NEW LINES</edit>  replace lines START to END '
        "(1-based, inclusive)",
        "rewrite": '<rewrite path="FILE">NEW CONTENT</rewrite>  replace the whole file',
        "eval": "<eval/>  run the tests",
        "listdir": "<listdir>DIR</listdir>  list the files under DIR",
        "bash": "<bash>COMMAND</bash>  run a shell command",
        "submit": "<submit/>  you are done: your changes are graded",
    }
    return "\n".join(lines[t] for t in tools if t in lines)


def _error(kind: ErrorKind, tools: tuple[str, ...], detail: str = "") -> ToolCall:
    text = {
        "no_call": "No tool call found. Write exactly one tool call per turn, one of:",
        "cut_off": "Your tool call was cut off at the length limit and was not run. Write a shorter one.",
        "disabled": f"{detail} Use one of:",
        "bad_args": detail,
    }[kind]
    if kind in ("no_call", "disabled"):
        text = f"{text}\n{usage(tools)}"
    return ToolCall("error", {"kind": kind}, text)


def parse_tool_call(text: str, tools: tuple[str, ...], cut_off: bool = False) -> ToolCall:
    """The call in a turn's ``text`` (see the module docstring); ``tools``: the enabled ones."""
    for match in _OPEN.finditer(text):
        tool, attrs, closed = match.group(1), match.group(2), match.group(3) == "/"
        if closed and tool not in _SELF_CLOSING:
            continue  # <view/> means nothing: keep looking
        body, end = "", match.end()
        if not closed and tool in _BODY:
            close = text.find(f"</{tool}>", match.end())
            if close < 0:
                if cut_off:
                    return _error("cut_off", tools)
                return _error("bad_args", tools, f"<{tool}> was not closed with </{tool}>: nothing ran.")
            else:
                body, end = text[match.end() : close], close + len(tool) + 3
        elif not closed and tool in ("eval", "submit"):
            close = text.find(f"</{tool}>", match.end())  # <eval></eval> means <eval/>
            end = close + len(tool) + 3 if close >= 0 else end
        ignored = _OPEN.search(text, end) is not None
        if tool not in tools:
            return _error("disabled", tools, f"The tool {tool!r} is not available here.")
        call = _arguments(tool, dict(_ATTR.findall(attrs)), body, tools)
        if call.ok and any(has_surrogate(value) for value in call.args.values()):
            # it cannot be written to a file, a terminal or a command line as UTF-8: refused here
            # for every tool alike, not failed later in the trainer (an exception, a masked episode)
            call = _error(
                "bad_args",
                tools,
                f"<{tool}> holds a character that is not text (a lone surrogate, U+D800 to U+DFFF): nothing ran.",
            )
        return ToolCall(call.tool, call.args, call.message, ignored)
    if cut_off and re.search(r"<(pdb|view|replace|edit|rewrite|listdir|bash)\b", text):
        return _error("cut_off", tools)
    return _error("no_call", tools)


def _arguments(tool: str, attrs: dict[str, str], body: str, tools: tuple[str, ...]) -> ToolCall:
    if tool in ("eval", "submit"):
        return ToolCall(tool)
    if tool in ("pdb", "bash"):
        command = body.strip()
        if not command:
            return _error("bad_args", tools, f"<{tool}></{tool}> was empty: write a command inside it.")
        return ToolCall(tool, {"command": command})
    if tool == "listdir":
        return ToolCall(tool, {"path": body.strip() or "."})
    if tool == "view":
        parts = body.strip().split()
        if not parts:
            return _error("bad_args", tools, "<view></view> needs a file name: <view>FILE</view>.")
        args = {"path": parts[0]}
        if len(parts) > 1:
            wrong = _range_error(parts[1])
            if wrong is not None:
                text = f"The line range of <view> is START-END, e.g. <view>a.py 10-30</view>.{wrong}"
                return _error("bad_args", tools, text)
            args["lines"] = parts[1]
        return ToolCall(tool, args)
    path = attrs.get("path", "").strip()
    if not path:
        return _error("bad_args", tools, f'<{tool}> needs a path attribute: <{tool} path="FILE" ...>.')
    if tool == "replace":
        return _replace_arguments(path, body, tools)
    content = _strip_fence(body)
    if tool == "rewrite":
        return ToolCall(tool, {"path": path, "content": content})
    lines = attrs.get("lines", "").strip()
    wrong = _range_error(lines)
    if wrong is not None:
        text = f'<edit> needs lines="START-END" (1-based, inclusive), e.g. lines="3-5".{wrong}'
        return _error("bad_args", tools, text)
    return ToolCall(tool, {"path": path, "lines": lines, "content": content})


def _range_error(spec: str) -> str | None:
    """``None`` for a line range ``START-END`` or ``N`` the tools can read, else what to add to
    the format's message (``""``, or that the numbers are too long); checked before ``int()``
    reads it, so a number of any length gets a message, never an exception."""
    found = _RANGE.fullmatch(spec)
    if found is None:
        return ""
    if any(len(n) > MAX_LINE_DIGITS for n in found.groups() if n):
        return f" A line number has at most {MAX_LINE_DIGITS} digits."
    return None


def _replace_arguments(path: str, body: str, tools: tuple[str, ...]) -> ToolCall:
    """``<old>`` and ``<new>`` inside a ``<replace>``'s body: each taken as written but for one
    newline right after its opening tag (so a block of lines can start on a line of its own)."""
    parts, at = {}, 0
    for part in ("old", "new"):  # <old> first, then <new> after it
        found = enclosed(body, f"<{part}>", f"</{part}>", at)
        if found is None:
            return _error(
                "bad_args",
                tools,
                f"<replace> needs <old>TEXT</old> and then <new>NEW TEXT</new> inside it; <{part}> is missing: "
                "nothing changed.",
            )
        text, at = body[found[0] + len(part) + 2 : found[1]], found[2]
        parts[part] = text[1:] if text.startswith("\n") else text
    if not parts["old"]:
        return _error(
            "bad_args", tools, "<old></old> was empty: write the text to replace, as the file has it."
        )
    return ToolCall("replace", {"path": path, "old": parts["old"], "new": parts["new"]})


def _strip_fence(body: str) -> str:
    """The content between a tag's ``>`` and ``<``: one leading newline and a code fence removed.

    A fence is an opening line ```` ```lang ```` and a closing ```` ``` ```` with only whitespace
    after it; the closing line's indentation and the newline before it are not content. Found
    by string operations, not a regex with a lazy body: that one retried the closing pattern at
    every character, quadratic on a long run of spaces."""
    head = _FENCE_OPEN.match(body)
    end = len(body.rstrip())
    if head and body.endswith("```", 0, end) and end - 3 >= head.end():
        close = end - 3
        stop = len(body[head.end() : close].rstrip(" \t")) + head.end()
        if stop > head.end() and body[stop - 1] == "\n":
            stop -= 1
        return body[head.end() : stop] + "\n"
    return body[1:] if body.startswith("\n") else body


def line_range(spec: str) -> tuple[int, int]:
    """``"3-5"`` -> (3, 5); ``"4"`` -> (4, 4); a spec the parser took (at most
    :data:`MAX_LINE_DIGITS` digits a number: ``int()`` cannot fail on its length)."""
    start, _, end = spec.partition("-")
    return int(start), int(end or start)


def apply_edit(text: str, spec: str, content: str) -> tuple[str, str | None]:
    """``text`` with lines ``spec`` replaced by ``content``, or an error message (nothing changed).

    ``START = END + 1`` inserts ``content`` before line START (at the end when START is one past
    the last line). Lines are numbered as Python numbers them (:func:`python_lines`), so line N is
    the line N of a traceback, of pdb's ``l`` and of ``b FILE:N``."""
    lines = python_lines(text, keepends=True)
    start, end = line_range(spec)
    if start < 1 or end < start - 1 or end > len(lines):
        return text, (
            f"lines={spec!r} is outside the file ({len(lines)} lines): use 1 <= START <= END <= {len(lines)} "
            "(or START = END + 1 to insert)."
        )
    new = content if content.endswith("\n") or not content else content + "\n"
    if start == len(lines) + 1 and lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"  # appending after a last line without its newline
    return "".join(lines[: start - 1]) + new + "".join(lines[end:]), None


MAX_MATCHES = 100
"""Occurrences of a replacement's ``<old>`` counted at most (a one-letter quote in a large file)."""


def apply_replace(text: str, old: str, new: str) -> tuple[str, str | None]:
    """``text`` with its one occurrence of ``old`` replaced by ``new``, or an error message (nothing
    changed): ``old`` found nowhere, or more than once (the message names the lines, so the agent
    can quote more of the one it means)."""
    starts = occurrences(text, old, MAX_MATCHES)
    if len(starts) == 1:
        return text[: starts[0]] + new + text[starts[0] + len(old) :], None
    if not starts:
        hint = (
            " (leave out the line numbers that view shows)"
            if re.match(r"\s*\d+\| ", old)
            else " (copy it exactly, spaces included)"
        )
        return text, f"<old> was not found in the file{hint}: nothing changed.{closest_hint(text, old)}"
    starts = [line_number(text, at) for at in starts]
    lines = ", ".join(str(n) for n in list(dict.fromkeys(starts))[:10])
    times = f"{len(starts)} times" if len(starts) < MAX_MATCHES else f"{MAX_MATCHES} times or more"
    return text, (
        f"<old> was found {times} (lines {lines}): quote more of the place you mean so that it is "
        "found once; nothing changed."
    )


def closest_hint(text: str, old: str) -> str:
    """The file's lines most like a quote it does not have, numbered as ``view`` shows them (an
    agent that quoted from memory sees what is there, and need not view the file again); ``""``
    when no place is alike."""
    found = closest_lines(text, old)
    if found is None:
        return ""
    first, lines = found
    where = f"line {first}" if len(lines) == 1 else f"lines {first}-{first + len(lines) - 1}"
    shown = numbered(text, first, first + len(lines) - 1, max_lines=len(lines))
    return f" The closest text is at {where} (quote it without the numbers):\n{shown}"


def numbered(text: str, first: int = 1, last: int | None = None, max_lines: int = 200) -> str:
    """Lines ``first..last`` of ``text`` as ``  12| code``, at most ``max_lines`` of them, numbered
    as Python numbers them (:func:`python_lines`: what ``<edit>``, pdb and a traceback count)."""
    lines = python_lines(text)
    last = len(lines) if last is None else min(last, len(lines))
    first = max(1, first)
    shown = lines[first - 1 : last]
    cut = len(shown) > max_lines
    shown = shown[:max_lines]
    width = len(str(first + len(shown)))
    out = "\n".join(f"{n:>{width}}| {line}" for n, line in enumerate(shown, first))
    if cut:
        out += f"\n[... view lines {first + max_lines}-{last} to see the rest ...]"
    return out or "(empty)"
