"""Pull the Python program out of a model's answer: fences, bare code, prose, truncation.

Policies answer in every shape: a fenced block after some prose, several blocks (solution then
example usage), a block cut off by the token limit, bare code followed by an explanation, or
noise. :func:`extract_code` turns any of them into the one program the sandbox should run, and
never raises. Its choices, in order:

1. Chat debris goes: special tokens (``<|im_end|>``, ``</s>``) and closed ``<think>`` sections.
2. Fenced blocks (```` ``` ````, ```` ```python ````, ```` ```py ````, ``~~~``; an unterminated last
   fence is a truncated answer). Blocks tagged with another language (``bash``, ``output``...)
   are ignored unless nothing else is there. With an ``entry_point`` the last block that defines
   it wins; otherwise the longest block that compiles, else the longest block. Blocks holding
   only imports are prepended to the chosen one (a common way to split a solution).
3. No fences: the text from its first line that looks like code (a line that compiles on its own,
   or a block header like ``def f(x):``, and is more than a bare word), so prose before the code
   goes.
4. Truncation repair, only where the end of the code may be cut or followed by prose (an
   unterminated fence, or bare code): if the code does not compile, drop trailing top-level
   statements, then trailing lines, until it does (at most ``MAX_REPAIR_ATTEMPTS`` compiles). A
   closed fence is kept as written: its syntax errors are the policy's own and earn their reward.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings

from lit_codeRL import pyparse
from lit_codeRL.envs.text import drop_enclosed

MAX_REPAIR_ATTEMPTS = 50
"""Compile attempts spent on cutting a truncated program back to a compiling prefix."""
MAX_SCAN_LINES = 200
"""Lines examined when looking for where bare code starts (bounds the cost on long noise)."""
MAX_BLOCKS = 64
"""Fenced blocks considered (the last ones; noise with thousands of fences stays cheap)."""

_PYTHON_TAGS = {"", "python", "python3", "py", "py3", "pycon", "ipython", "sage"}
_SPECIAL_TOKEN = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?s>|\[/?INST\]")
# A fence line: the fence, its language, then anything but a backtick. The "anything" is checked
# apart: as ``[^\n`]*$`` after ``[\w.+#-]*`` the regex tried every split of a long word before a
# backtick, quadratic in the line's length.
_FENCE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([\w.+#-]*)")
_CODE_START = re.compile(r"^(?:async\s+def|def|class|import|from\s+[\w.]+\s+import|@\w)\b")


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The program in ``text`` (a model completion), or ``""`` when there is none. Never raises.

    ``entry_point``: the function the tests call; a block that defines it is preferred.
    """
    try:
        with warnings.catch_warnings():
            # compile() of arbitrary text emits SyntaxWarnings ("invalid escape sequence").
            warnings.simplefilter("ignore")
            return _extract(text, entry_point)
    except Exception:  # noqa: BLE001 - extraction must never take a rollout down
        return ""


def _extract(text: str, entry_point: str | None) -> str:
    if not isinstance(text, str) or not text.strip():
        return ""
    text = drop_enclosed(text, "<think>", "</think>")  # not a regex: linear in the text
    text = _SPECIAL_TOKEN.sub("", text).replace("\r\n", "\n").replace("\x00", "")
    blocks = _fenced_blocks(text)
    if blocks:
        code, truncated = _choose_block(blocks, entry_point)
        code = textwrap.dedent(code).strip("\n")
        if code.strip():
            code = _with_import_blocks(code, blocks)
        if truncated and code.strip():
            code = _repair(code)
        return code.rstrip() + "\n" if code.strip() else ""
    code = _bare_code(text)
    return code.rstrip() + "\n" if code.strip() else ""


# ------------------------------------------------------------------------------------ fences


def _fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """``(language, body, truncated)`` for each fenced block, in order."""
    blocks: list[tuple[str, str, bool]] = []
    lang: str | None = None
    fence = ""
    body: list[str] = []
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if m and "`" in line[m.end() :]:
            m = None
        if lang is None:
            if m:
                fence, lang, body = m.group(1), m.group(2).lower(), []
            continue
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            blocks.append((lang, "\n".join(body), False))
            # "```python" right after a block's body: the policy forgot to close it and opened
            # the next one; a bare "```" is just the closer.
            lang = m.group(2).lower() if m.group(2) else None
            body = []
            continue
        body.append(line)
    if lang is not None:
        blocks.append((lang, "\n".join(body), True))
    return blocks[-MAX_BLOCKS:]


def _choose_block(blocks: list[tuple[str, str, bool]], entry_point: str | None) -> tuple[str, bool]:
    candidates = [b for b in blocks if b[0] in _PYTHON_TAGS and b[1].strip()]
    if not candidates:
        candidates = [b for b in blocks if b[1].strip()]
    if not candidates:
        return "", False
    if entry_point:
        defines = re.compile(
            rf"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+{re.escape(entry_point)}\b"
            rf"|^{re.escape(entry_point)}[ \t]*=",
            re.MULTILINE,
        )
        defining = [b for b in candidates if defines.search(b[1])]
        if defining:
            compiling = [b for b in defining if b[2] or _compiles(textwrap.dedent(b[1]))]
            chosen = (compiling or defining)[-1]
            return chosen[1], chosen[2]
    # Longest wins over last: "solution, then a short usage example" is the common shape.
    compiling = [b for b in candidates if _compiles(textwrap.dedent(b[1]))]
    pool = compiling or candidates
    chosen = max(reversed(pool), key=lambda b: len(b[1].strip()))
    return chosen[1], chosen[2]


def _with_import_blocks(code: str, blocks: list[tuple[str, str, bool]]) -> str:
    """Prepend the imports of blocks that hold nothing but imports ("```python\\nimport math\\n```"
    before the solution's block is a common split), unless the chosen code already has them."""
    have = {line.strip() for line in code.split("\n")}
    extra: list[str] = []
    for lang, body, _ in blocks:
        body = textwrap.dedent(body).strip()
        if lang not in _PYTHON_TAGS or not body or body == code.strip():
            continue
        try:
            tree = pyparse.parse(body)
        except Exception:  # noqa: BLE001
            continue
        if tree.body and all(isinstance(node, ast.Import | ast.ImportFrom) for node in tree.body):
            extra += [line for line in body.split("\n") if line.strip() and line.strip() not in have]
            have.update(line.strip() for line in body.split("\n"))
    return "\n".join(extra + [code]) if extra else code


# --------------------------------------------------------------------------------- bare code


def _bare_code(text: str) -> str:
    lines = textwrap.dedent(text.strip("\n")).split("\n")
    start = _code_start(lines)
    if start is None:
        return ""
    code = "\n".join(lines[start:])
    return _repair(code)


def _code_start(lines: list[str]) -> int | None:
    """Index of the first line that looks like the start of a Python program."""
    for i, line in enumerate(lines[:MAX_SCAN_LINES]):
        stripped = line.strip()
        if not stripped or line[0].isspace():
            continue
        if _CODE_START.match(stripped) or stripped.startswith("#!"):
            return i
        if _looks_like_statement(stripped):
            return i
    return None


def _looks_like_statement(line: str) -> bool:
    """A line that compiles alone (or as a block header) and is more than a word or a literal."""
    if line.endswith(":"):
        return _compiles(line + "\n    pass")
    try:
        tree = pyparse.parse(line)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError, MemoryError
        return False
    if len(tree.body) != 1:
        return bool(tree.body)
    node = tree.body[0]
    # Prose that happens to parse: "Sure", "Solution", "42", "'quoted'".
    return not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Name | ast.Constant))


# -------------------------------------------------------------------------------- truncation


def _compiles(code: str) -> bool:
    try:
        compile(code, "<completion>", "exec", dont_inherit=True)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (null bytes), RecursionError...
        return False
    return True


def _repair(code: str) -> str:
    """``code`` if it compiles, else its longest compiling prefix (whole top-level statements
    first, then single lines), else ``code`` unchanged so the sandbox reports the syntax error."""
    if _compiles(code):
        return code
    lines = code.split("\n")
    # Cut points: where a top-level statement starts (drops a half-written function whole),
    # then every line (a function cut inside its last statement keeps its complete prefix).
    top_level = [i for i in range(len(lines) - 1, 0, -1) if lines[i][:1].strip() and lines[i][:1] != "#"]
    starts = set(top_level)
    every_line = [i for i in range(len(lines) - 1, 0, -1) if i not in starts]
    attempts = 0
    for cuts in (top_level, every_line):
        for i in cuts:
            if attempts >= MAX_REPAIR_ATTEMPTS:
                return code
            prefix = "\n".join(lines[:i]).rstrip()
            if not prefix.strip():
                continue
            attempts += 1
            if _compiles(prefix) and _has_statements(prefix):
                return prefix
    return code


def _has_statements(code: str) -> bool:
    try:
        return bool(pyparse.parse(code).body)
    except Exception:  # noqa: BLE001
        return False


def has_no_statements(code: str) -> bool:
    """True for code that would run nothing: empty, blank, or only comments. Code that does not
    parse is not empty (it is a syntax error, and graded as one)."""
    if not code.strip():
        return True
    try:
        return not pyparse.parse(code).body  # (pyparse silences the code's own warnings)
    except Exception:  # noqa: BLE001
        return False
