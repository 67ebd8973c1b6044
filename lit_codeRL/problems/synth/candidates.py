"""Candidate bugs of a repository: one mutation of one function each, as a diff, de-duplicated.

Every non-test Python file is parsed on a concrete syntax tree (:mod:`.mutations`); each site in a
function body is one candidate. Candidates are grouped by function and ordered by a seeded shuffle
per function, so a synthesis that keeps ``per_function`` bugs of each function tries the same
candidates on every machine. Two candidates whose diffs change the same lines the same way (after
whitespace normalisation) are one: SWE-smith names its diffs by a hash for the same reason.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import hashlib
import logging
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from lit_codeRL.problems.debug_task import _is_test_path
from lit_codeRL.problems.synth.mutations import (
    MUTATION_KINDS,
    MutationSite,
    Splice,
    compiles,
    mutant_splices,
    splice_into,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Candidate:
    """One injected bug, not yet validated."""

    path: str
    """The file it changes (relative to the repository root)."""
    site: MutationSite
    """Where and what the mutation is."""
    base: str = field(repr=False)
    """The clean file: one string shared by all of its candidates."""
    splice: Splice
    """The bug as ``(start, end, text)`` in ``base``: held whole, a file's candidates took its size
    times their number (more-itertools: 440 MB), where a splice is the size of one function."""
    diff: str
    """The bug as a unified diff against the clean file (``git apply`` reads it)."""

    @property
    def content(self) -> str:
        """The file's content with the bug."""
        return splice_into(self.base, self.splice)

    @property
    def function(self) -> str:
        """``path::qualified.function``: the unit held-out splits and de-duplication work on."""
        return f"{self.path}::{self.site.path_hint}"

    @property
    def key(self) -> str:
        """A hash of the normalised change: equal for two candidates that make the same edit."""
        changed = [re.sub(r"\s+", " ", line[1:]).strip() for line in _changed(self.diff)]
        data = "\0".join([self.path, *changed])
        return hashlib.sha256(data.encode()).hexdigest()[:12]


def _changed(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("---", "+++"))]


def unified_diff(path: str, old: str, new: str) -> str:
    """``old`` -> ``new`` of ``path`` as a unified diff ``git apply`` accepts, including the
    ``\\ No newline at end of file`` marker difflib leaves out.

    difflib compares only the lines around the one place the files differ (the lines before and
    after it that are the same in both are left out, but for a margin): a bug changes one place,
    and matching a whole big file for every candidate was most of the candidates' time
    (more-itertools: 125 of 180 s). In a file of ``_SMALL`` lines or more, a change among equal
    lines may be placed otherwise than over the whole files; the diff is as valid and as small."""
    a, b = _lines(old), _split_lines(new)
    same_start = _common_run(lambda k: a[:k] == b[:k], min(len(a), len(b)))
    same_end = _common_run(lambda k: a[len(a) - k :] == b[len(b) - k :], min(len(a), len(b)) - same_start)
    return _diff(path, a, b, same_start, same_end)


def splice_diff(path: str, old: str, splice: Splice) -> str:
    """``unified_diff(path, old, splice_into(old, splice))``, the same text, without making the new
    file: its lines are the old file's line objects but for the lines the splice touches, and the
    equal runs are counted from the splice outwards. Made and split whole, and its equal runs found
    by comparing whole slices, each candidate cost the size of its file: a file's candidates took
    time quadratic in its length (1,000 functions: 44 s)."""
    start, end, text = splice
    a, starts = _lines(old), _line_starts(old)
    first = bisect.bisect_right(starts, start) - 1  # the line the splice starts in
    if first == len(a) and a and not a[-1].endswith("\n"):
        first -= 1  # at the end of a file without a final newline: its last line goes on
    # the line after the one it ends in: text it inserts without a final newline joins that line
    stop = min(bisect.bisect_right(starts, end), len(a))
    middle = _split_lines(old[starts[first] : start] + text + old[end : starts[stop]])
    b = [*a[:first], *middle, *a[stop:]]
    most = min(len(a), len(b))
    same_start = first
    while same_start < most and a[same_start] == b[same_start]:
        same_start += 1
    same_end = min(len(a) - stop, most - same_start)
    while same_end < most - same_start and a[len(a) - 1 - same_end] == b[len(b) - 1 - same_end]:
        same_end += 1
    return _diff(path, a, b, same_start, same_end)


def _diff(path: str, a: list[str], b: list[str], same_start: int, same_end: int) -> str:
    """The diff of the lines ``a`` -> ``b``, whose first ``same_start`` and last ``same_end``
    (not overlapping those) lines are equal; see :func:`unified_diff`."""
    # difflib may place a change anywhere among equal lines next to it (which of two `continue`s
    # a removal takes): the margin is the context plus the change's own length
    margin = _CONTEXT + max(len(a), len(b)) - same_start - same_end
    offset, tail = max(0, same_start - margin), max(0, same_end - margin)
    if len(b) < _SMALL:  # a small file's diff stays the whole-file one, as tasks were made before
        offset = tail = 0
    out = []
    name_a, name_b = _git_quoted(f"a/{path}"), _git_quoted(f"b/{path}")
    lines = difflib.unified_diff(
        a[offset : len(a) - tail], b[offset : len(b) - tail], name_a, name_b, n=_CONTEXT
    )
    for line in lines:
        if offset and line.startswith("@@ "):
            line = _HUNK.sub(lambda m: f"{m[1]}{int(m[2]) + offset}", line, count=2)
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return f"diff --git {name_a} {name_b}\n" + "".join(out)


_C_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}


def _git_quoted(name: str) -> str:
    """``name`` as git writes it in a diff header: in C-style quotes when it holds a quote, a
    backslash or a control character (a file named with a newline broke the header, and its every
    candidate was rejected as ``patch_failed``)."""
    if not any(c in '"\\' or ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return name
    return (
        '"'
        + "".join(
            _C_ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in name
        )
        + '"'
    )


def _split_lines(text: str) -> list[str]:
    """``text``'s lines as git and ``patch`` see them: ended by ``\\n`` alone. ``str.splitlines``
    also ends a line at a form feed, a lone ``\\r``, U+2028 and others, and a diff of such a file
    (Emacs' page breaks between functions) did not apply."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


@functools.lru_cache(maxsize=4)
def _lines(text: str) -> list[str]:
    """A file's lines, split once for all its candidates (the clean file is every diff's ``old``)."""
    return _split_lines(text)


@functools.lru_cache(maxsize=4)
def _line_starts(text: str) -> list[int]:
    """Where each line of :func:`_lines` starts in ``text``, then ``len(text)``."""
    starts = [0]
    for line in _lines(text):
        starts.append(starts[-1] + len(line))
    return starts


def _common_run(same: Callable[[int], bool], most: int) -> int:
    """The largest ``k <= most`` with ``same(k)`` (which holds up to some k and not past it): a
    binary search of slice comparisons, which run in C, instead of a Python loop over the lines."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if same(mid) else (low, mid - 1)
    return low


_CONTEXT = 3
_SMALL = 200
"""Lines below which difflib treats no line as junk (``autojunk``): up to there, a diff over the
whole files costs little, and is kept so that the bugs of MBPP solutions and of the shipped
repositories (and their task ids) stay as they were made."""
_HUNK = re.compile(r"([-+])(\d+)")
"""A hunk header's start lines (``@@ -12,7 +12,6 @@``), shifted by the lines left out above."""


_GENERATED = re.compile(
    r"@generated|DO NOT EDIT|^#.*\b(auto-?generated|generated by)\b", re.IGNORECASE | re.MULTILINE
)
"""A generated module's header (protobuf's ``# Generated by the protocol buffer compiler.  DO NOT
EDIT!``, ``@generated``, ``# This file is autogenerated``), read in its first lines."""


def _is_generated(content: str) -> bool:
    return bool(_GENERATED.search("\n".join(content[:2000].splitlines()[:10])))


def generated_files(files: Mapping[str, str | bytes]) -> list[str]:
    """The Python files that say they are generated: they get no bugs (the fix of a bug in one
    belongs to its generator, and a parser's tables of 12,000 functions took minutes of candidate
    generation), sorted."""
    return sorted(
        p for p, c in files.items() if p.endswith(".py") and isinstance(c, str) and _is_generated(c)
    )


def source_files(files: Mapping[str, str | bytes]) -> list[str]:
    """The files bugs go into: Python files that are UTF-8 text (``str``), not tests (the grader's
    own test rule), not ``conftest.py``/``setup.py`` and not generated (:func:`generated_files`),
    sorted."""
    return sorted(
        path
        for path, content in files.items()
        if path.endswith(".py")
        and isinstance(content, str)
        and not _is_test_path(path)
        and path.rsplit("/", 1)[-1] not in ("conftest.py", "setup.py", "noxfile.py")
        and not _is_generated(content)
    )


def candidates_by_function(
    files: Mapping[str, str | bytes], kinds: Sequence[str] = MUTATION_KINDS, seed: int = 0
) -> dict[str, list[Candidate]]:
    """Every distinct candidate of every function, grouped by function (in file and source
    order), each group in a shuffled order seeded by ``seed`` and the function's name."""
    unknown = sorted(set(kinds) - set(MUTATION_KINDS))
    if unknown:
        raise ValueError(f"unknown mutation kinds {unknown}; choose from {list(MUTATION_KINDS)}")
    groups: dict[str, list[Candidate]] = {}
    seen: set[str] = set()
    unparsed: list[str] = []
    for path in source_files(files):
        source = files[path]
        assert isinstance(source, str)
        # a BOM (which compile() refuses in a str) stays where it is, before every splice
        bom = len("\ufeff") if source.startswith("\ufeff") else 0
        splices = mutant_splices(source[bom:], kinds)
        if not splices and not compiles(source[bom:]):
            unparsed.append(path)
        for site, (start, end, text) in splices:
            splice = (start + bom, end + bom, text)
            if source[splice[0] : splice[1]] == text:
                continue  # no change
            candidate = Candidate(path, site, source, splice, splice_diff(path, source, splice))
            if candidate.key in seen:
                continue
            seen.add(candidate.key)
            groups.setdefault(candidate.function, []).append(candidate)
    if unparsed:  # a Python 2 module, say: no bug can go into it, and the user should know why
        log.warning(
            "synth: %d source file(s) do not compile as this Python's code, no bugs go into them: %s",
            len(unparsed),
            unparsed[:5],
        )
    for name, group in groups.items():
        digest = hashlib.sha256(f"{seed}\0{name}".encode()).digest()
        random.Random(int.from_bytes(digest[:8], "big")).shuffle(group)
    return groups
