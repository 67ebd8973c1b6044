"""Reference trajectories of SWE tasks: the gold patch made the way an engineer debugs, for BC.

Derived from the task's gold patch alone (``SWETask.patch``, a unified git diff: each file's hunks
applied to its text at the base, then the changed line ranges by difflib, ``envs/reference.py``),
one shell command per turn in ``<execute>``, each after a one-sentence lead-in:

1. ``{test_command} -q TARGET``: the first FAIL_TO_PASS node id (the one a synthesized issue
   names) when its file is at the base and the ``test_patch`` leaves it alone (an MBPP task's
   held-out checks are a file of their own), else the FAIL_TO_PASS tests' files that exist at the
   base (the hidden tests are not there yet), else the whole suite;
2. ``sed -n 'A,Bp' PATH``: the code around the change (``SITE_CONTEXT`` lines above and below; one
   view per site, nearby changes share one); with the ``edit`` tool bundle, ``view PATH A-B`` (the
   lines numbered) and step 3's edits are ``replace PATH <<'EOF'`` with ``<old>QUOTE</old>`` and
   ``<new>NEW</new>`` (the debugging gym's ``<replace>``: the changed lines quoted until unique;
   ``edit PATH A-B <<'EOF'``, a line range, where no quote is).
   The first view is written from step 1's output (``envs/swe/locate.py``): its lead-in quotes the
   traceback's last frame in the file, or a ``grep`` for the definition of a function the output
   shows being called comes first, so the path it opens is one the agent has seen;
3. each change as a targeted edit: a ``python3 - <<'EOF'`` script that replaces the exact old text
   (the changed lines, widened by neighbouring lines until they occur once in the file) with the
   new text, and exits non-zero unless the old text occurs exactly once (with ``explain``, its
   lead-in first names the bug: ``envs/reference.py``'s ``edit_reason``);
4. the tests again: the FAIL_TO_PASS tests' files, so the tests that passed are seen to pass;
5. ``<submit/>``.

A patch that is not a set of small text edits (a new, deleted, renamed or binary file, a mode
change, CR line ends, a file without its last newline, more than ``MAX_EDITS`` edits, an old text
that no widening makes unique) is applied whole with ``git apply`` through a heredoc instead
(:func:`apply_patch_action`), between the same two test runs.

For example, ``lit-coderl__numkit-1`` (``median`` of an even count)::

    I will run the tests to see what fails.
    <execute>python -m pytest -q tests/test_stats.py</execute>
    I will look at numkit/stats.py around line 20.
    <execute>sed -n '17,23p' numkit/stats.py</execute>
    I will edit numkit/stats.py.
    <execute>python3 - <<'EOF'
    from pathlib import Path

    path = Path('numkit/stats.py')
    text = path.read_text()
    old = r'''    return ordered[mid]
    '''
    new = r'''    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    '''
    if text.count(old) != 1:
        raise SystemExit('the old text is not in the file exactly once')
    path.write_text(text.replace(old, new))
    EOF</execute>
    I will run the tests again.
    <execute>python -m pytest -q tests/test_stats.py</execute>
    The tests pass. <submit/>

:func:`reference_episodes` plays the trajectories through the env's real batched interface (the
observations are the env's own; the grade is the env's real one, which validates the task too); a
trajectory is kept for BC only when it resolves its task (``rollout/demonstrations.py``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from lit_codeRL.envs.reference import (
    MISQUOTED,
    LineEdit,
    ReferenceEpisode,
    Step,
    edit_sites,
    imitable,
    line_edits,
    misquote,
    play_misquotes,
    play_references,
    reason_lead,
    text_replacement,
)
from lit_codeRL.envs.replacement import found_once, replacement_parts
from lit_codeRL.envs.swe.actions import STOP_STRINGS, runs_as_written
from lit_codeRL.envs.swe.env import ContainerEnv, swe_task
from lit_codeRL.envs.swe.locate import FirstLook, defined_functions
from lit_codeRL.envs.text import python_lines
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import SWETask, to_problem

__all__ = [
    "HEREDOC",
    "SUBMIT_ACTION",
    "ReferenceEpisode",
    "apply_patch_action",
    "reference_actions",
    "reference_episode",
    "reference_episodes",
]

HEREDOC = "LCRL_PATCH"
"""The heredoc marker of :func:`apply_patch_action`."""
EDIT_MARKER = "EOF"
"""The heredoc marker of an edit script (``EOF_1``, ``EOF_2``... when a line of it is ``EOF``)."""
MAX_EDITS = 8
"""A patch needing more targeted edits than this is applied whole."""
MAX_WIDEN = 6
"""Neighbouring lines an edit's old text may take on to become unique in its file."""

SUBMIT_ACTION = "The tests pass. <submit/>"
_REPLACE_CALL = re.compile(
    r"<execute>replace (?P<path>[^\n]+) <<'(?P<marker>EOF(?:_\d+)?)'\n"
    r"<old>\n?(?P<old>.*)</old>\n<new>\n?(?P<new>.*)</new>\n(?P=marker)</execute>",
    re.S,
)
RUN_TESTS = "I will run the tests to see what fails.\n<execute>{}</execute>"
RUN_AGAIN = "I will run the tests again.\n<execute>{}</execute>"


def apply_patch_action(patch: str) -> str:
    """The whole patch through ``git apply`` and a heredoc (the fallback form)."""
    body = patch if patch.endswith("\n") else patch + "\n"
    if f"\n{HEREDOC}\n" in f"\n{body}":
        raise ValueError("the patch contains the heredoc marker")
    return f"I will apply the fix.\n<execute>git apply <<'{HEREDOC}'\n{body}{HEREDOC}</execute>"


# ---------------------------------------------------------------------------------- the patch
@dataclass
class FilePatch:
    """One file of a unified git diff."""

    path: str
    hunks: list[tuple[int, list[str]]] = field(default_factory=list)
    """``(old start, lines with their ' '/'-'/'+' prefix and no line end)`` per hunk."""
    plain: bool = True
    """A text change of an existing file, line ends ``\\n`` (no new/deleted/renamed/binary file,
    mode change, ``\\ No newline``, CR, quoted name): what targeted edits can make."""


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NOT_PLAIN = (
    "new file mode",
    "deleted file mode",
    "rename from",
    "copy from",
    "old mode",
    "new mode",
    "Binary files",
    "GIT binary patch",
)


def parse_patch(patch: str) -> list[FilePatch]:
    """The files of a unified git diff and their hunks."""
    files: list[FilePatch] = []
    lines = patch.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            files.append(FilePatch(line.split(" b/", 1)[-1]))
            files[-1].plain = '"' not in line
        elif files and line.startswith("+++ "):
            name = line[4:]
            files[-1].path = name[2:] if name.startswith("b/") else name
            files[-1].plain &= not name.startswith('"') and name != "/dev/null"
        elif files and line.startswith(_NOT_PLAIN):
            files[-1].plain = False
        elif files and (match := _HUNK.match(line)):
            old_len = int(match.group(2) or 1)
            new_len = int(match.group(4) or 1)
            body: list[str] = []
            i += 1
            while (old_len > 0 or new_len > 0) and i < len(lines):
                text = lines[i]
                if text.startswith("\\"):
                    files[-1].plain = False
                elif text[:1] in (" ", "-", "+") or text == "":
                    text = text or " "  # a blank context line some tools write without its space
                    old_len -= text[0] != "+"
                    new_len -= text[0] != "-"
                    body.append(text)
                else:
                    break
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):
                files[-1].plain = False
            files[-1].hunks.append((int(match.group(1)), body))
            continue
        i += 1
    for f in files:
        f.plain &= bool(f.hunks) and not any("\r" in text for _, body in f.hunks for text in body)
    return files


def apply_hunks(text: str, hunks: Sequence[tuple[int, list[str]]]) -> str:
    """``text`` with the hunks applied at their line numbers.

    A diff's lines end at ``\\n``; ``str.splitlines`` also ended one at a form feed or U+2028 in a
    string, which put every hunk below it at a wrong line (the patch then fell back to ``git
    apply``). Split as Python splits (:func:`python_lines`), which is the diff's split on text
    without ``\\r`` (a file with one is applied whole, :func:`_targeted_edits`).

    Raises:
        ValueError: a hunk's old lines are not at its place.
    """
    lines = python_lines(text, keepends=True)
    out: list[str] = []
    at = 0
    for start, body in hunks:
        old = [t[1:] + "\n" for t in body if t[0] != "+"]
        new = [t[1:] + "\n" for t in body if t[0] != "-"]
        pos = start - 1 if old else start  # ``-N,0``: an insertion after line N
        if pos < at or lines[pos : pos + len(old)] != old:
            raise ValueError(f"a hunk at line {start} does not match the file")
        out += lines[at:pos] + new
        at = pos + len(old)
    return "".join(out + lines[at:])


# ---------------------------------------------------------------------------------- the actions
def _literal(text: str) -> str:
    """``text`` as a Python literal: a raw triple-quoted string where it reads back exactly."""
    printable = all(c in "\t\n" or c.isprintable() for c in text)
    if printable and text.endswith("\n") and "'''" not in text:
        return f"r'''{text}'''"
    return repr(text)


def edit_command(path: str, old: str, new: str) -> str:
    """A shell command that replaces the one occurrence of ``old`` in ``path`` with ``new`` and
    fails (exit 1, nothing written) unless ``old`` occurs exactly once."""
    script = (
        "from pathlib import Path\n\n"
        f"path = Path({path!r})\n"
        "text = path.read_text()\n"
        f"old = {_literal(old)}\n"
        f"new = {_literal(new)}\n"
        "if text.count(old) != 1:\n"
        "    raise SystemExit('the old text is not in the file exactly once')\n"
        "path.write_text(text.replace(old, new))\n"
    )
    marker, n = EDIT_MARKER, 0
    while marker in script.split("\n"):
        n += 1
        marker = f"{EDIT_MARKER}_{n}"
    return f"python3 - <<'{marker}'\n{script}{marker}"


def _unique_edit(lines: list[str], start: int, end: int, new: Sequence[str]) -> tuple[str, str]:
    """The old and new text of replacing ``lines[start-1:end]`` with ``new``, both widened by the
    same neighbouring lines until the old text occurs once in the file.

    Raises:
        ValueError: ``MAX_WIDEN`` lines do not make it unique.
    """
    text = "".join(lines)
    lo, hi = start - 1, end
    before: list[str] = []
    after: list[str] = []
    for k in range(MAX_WIDEN + 1):
        old = "".join(before + lines[start - 1 : end] + after)
        if old.strip() and found_once(text, old):
            return old, "".join([*before, *new, *after])
        if k == MAX_WIDEN:
            break
        if (k % 2 == 0 or hi >= len(lines)) and lo > 0:
            lo -= 1
            before.insert(0, lines[lo])
        elif hi < len(lines):
            after.append(lines[hi])
            hi += 1
        else:
            break
    raise ValueError(f"lines {start}-{end} do not become unique within {MAX_WIDEN} neighbouring lines")


def lines_command(path: str, first: int, last: int, new: Sequence[str]) -> str:
    """The ``edit`` bundle's command (``env/tools/edit``) that replaces lines ``first..last`` of
    ``path`` with ``new`` (lines with their endings), through a heredoc."""
    marker, n = EDIT_MARKER, 0
    while marker in [line.rstrip("\n") for line in new]:
        n += 1
        marker = f"{EDIT_MARKER}_{n}"
    return f"edit {shlex.quote(path)} {first}-{last} <<'{marker}'\n{''.join(new)}{marker}"


def replace_command(path: str, old: str, new: str) -> str:
    """The ``edit`` bundle's command (``env/tools/edit``) that replaces the one occurrence of
    ``old`` in ``path`` with ``new``: the debugging gym's ``<replace>`` through a heredoc."""
    body = replacement_parts(old, new)
    marker, n = EDIT_MARKER, 0
    while marker in body.split("\n"):
        n += 1
        marker = f"{EDIT_MARKER}_{n}"
    return f"replace {shlex.quote(path)} <<'{marker}'\n{body}{marker}"


def _file_actions(
    path: str, old_text: str, new_text: str, explain: bool, line_tools: bool, look: bool
) -> tuple[list[Step], int]:
    """The views and targeted edits that turn ``old_text`` into ``new_text``, and how many edits
    (``line_tools``: the ``edit`` bundle's numbered ``view``, and its ``replace`` of the changed
    lines quoted until unique (``text_replacement``; its line-range ``edit`` where no quote is),
    else ``sed`` and a ``python3`` replacement of the exact old text). With ``look`` the first view
    is a :class:`FirstLook`, written from the test output before it. Lines are numbered as Python
    numbers them (:func:`python_lines`): a traceback's numbers, the ``edit`` bundle's ``view`` and
    ``edit``, and the quotes of ``text_replacement``."""
    lines = python_lines(old_text, keepends=True)
    sites = edit_sites(line_edits(lines, python_lines(new_text, keepends=True)), len(lines))
    actions: list[Step] = []
    shift = 0
    for k, site in enumerate(sites):
        line = site.edits[-1].start + shift
        view = FirstLook(path, line, site.first + shift, site.last + shift, line_tools)
        if look and k == 0:
            changed = (min(e.start for e in site.edits), max(max(e.end, e.start) for e in site.edits))
            names = defined_functions(old_text, line)
            actions.append(replace(view, names=names, changed=changed, num_lines=len(lines)))
        else:
            actions.append(view.fallback())
        for edit in site.edits:  # bottom-up, as the lines list is edited
            a, b = edit.start + shift, edit.end + shift
            here = LineEdit(a, b, edit.old, edit.new)
            quote = text_replacement("".join(lines), here) if line_tools else None
            lead = reason_lead(here, explain, numbered=quote is None)
            if quote is not None:
                command = replace_command(path, *quote)
                actions.append(f"{lead}I will change {path}.\n<execute>{command}</execute>")
            elif line_tools:
                command = lines_command(path, a, b, edit.new)
                actions.append(f"{lead}I will change lines {a}-{b} of {path}.\n<execute>{command}</execute>")
            else:
                old, new = _unique_edit(lines, a, b, edit.new)
                actions.append(
                    f"{lead}I will edit {path}.\n<execute>{edit_command(path, old, new)}</execute>"
                )
            lines[a - 1 : b] = edit.new
        shift += site.delta
    if "".join(lines) != new_text:
        raise ValueError(f"the edits of {path} do not give the patched file")
    return actions, sum(len(site.edits) for site in sites)


def tests_to_run(task: SWETask, exists: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """What the first and the second test run name (see the module docstring, steps 1 and 4)."""
    files = [f for f in dict.fromkeys(node.split("::")[0] for node in task.fail_to_pass) if exists(f)]
    if not task.fail_to_pass:
        return files, files
    first = task.fail_to_pass[0].split("::")[0]
    # a test of a file the hidden patch adds or changes is not there yet (or not as graded)
    if not task.test_patch or (
        exists(first) and first not in re.findall(r"^\+\+\+ b/(.+)$", task.test_patch, re.M)
    ):
        return [task.fail_to_pass[0]], files
    return files, files


def reference_actions(
    task: SWETask,
    read_base: Callable[[str], str | None],
    explain: bool = False,
    tools: Sequence[str] = (),
) -> list[Step]:
    """The reference trajectory's actions (see the module docstring); the first view is a
    :class:`FirstLook` (a function of the first test run's output) where the fix is targeted edits.

    Args:
        task: The task; its ``patch`` is the fix.
        read_base: A file's text at the base commit (``None``: absent or not UTF-8).
        explain: Each targeted edit's lead-in names the bug first.
        tools: The env's tool bundles: with ``edit``, views and edits are its numbered ``view``
            and its ``replace`` (or line-range ``edit``) commands (the debugging gym's tools, as
            commands).

    Raises:
        ValueError: an action would not be read back as written (``</execute>`` in the patch).
    """
    first, again = tests_to_run(task, lambda path: read_base(path) is not None)
    try:
        middle = _targeted_edits(task.patch, read_base, explain, "edit" in tools)
    except ValueError:
        middle = [apply_patch_action(task.patch)]
    run = " ".join([task.test_command, "-q", *map(shlex.quote, first)])
    rerun = " ".join([task.test_command, "-q", *map(shlex.quote, again)])
    actions = [RUN_TESTS.format(run), *middle, RUN_AGAIN.format(rerun), SUBMIT_ACTION]
    written = [a.fallback() if isinstance(a, FirstLook) else a for a in actions]
    imitable(written, STOP_STRINGS)
    for action in written[:-1]:
        if not runs_as_written(action):
            raise ValueError(f"the env would not run {action.partition('<execute>')[2][:80]!r} as written")
    return actions


def misquote_actions(
    task: SWETask,
    read_base: Callable[[str], str | None],
    explain: bool = False,
    tools: Sequence[str] = (),
) -> tuple[list[Step], str]:
    """A reference trajectory (``tools`` with the ``edit`` bundle) whose first change is first
    tried with a misquoted ``replace`` (``envs/reference.py``'s :func:`misquote`: a line of the
    quote written wrong, as a model writes it from memory); the command refuses it and prints the
    file's closest lines, and the next action makes the change quoting them. Returns the steps and
    the misquoted action: BC keeps it as context, not as a target (the played episode's index of
    it is known only after play: the first look may add a ``grep``).

    Raises:
        ValueError: the first change is not a ``replace`` of a file at its base, or no misquote of
            its quote shows its own lines.
    """
    steps = reference_actions(task, read_base, explain, tools)
    for k, step in enumerate(steps):
        command = step.partition("<execute>")[2] if isinstance(step, str) else ""
        if not command.startswith(("replace ", "edit ", "python3 ", "git ")):
            continue
        call = _REPLACE_CALL.search(step) if command.startswith("replace ") else None
        if call is None:
            break
        path, old, new = shlex.split(call["path"])[0], call["old"], call["new"]
        if not step.endswith(f"<execute>{replace_command(path, old, new)}</execute>"):
            break  # not read back as written: leave the task without one
        wrong = misquote(read_base(path) or "", old, task.instance_id)
        if wrong is None:
            break
        lead = step[: step.rindex("<execute>")]
        misquoted = f"{lead}<execute>{replace_command(path, wrong, new)}</execute>"
        steps[k : k + 1] = [misquoted, MISQUOTED + step]
        return steps, misquoted
    raise ValueError("the first change is not a replace whose quote can be misquoted")


def _targeted_edits(
    patch: str, read_base: Callable[[str], str | None], explain: bool, line_tools: bool
) -> list[Step]:
    files = parse_patch(patch)
    if not files or not all(f.plain for f in files):
        raise ValueError("not a set of text edits")
    actions: list[Step] = []
    edits = 0
    for k, f in enumerate(files):
        old = read_base(f.path)
        if old is None or "\r" in old:
            raise ValueError(f"{f.path}: absent at the base, not UTF-8, or with CR line ends")
        more, n = _file_actions(f.path, old, apply_hunks(old, f.hunks), explain, line_tools, k == 0)
        actions, edits = actions + more, edits + n
    if edits > MAX_EDITS:
        raise ValueError(f"{edits} edits: more than {MAX_EDITS}")
    return actions


# ---------------------------------------------------------------------------------- playing
def _base_reader(env: ContainerEnv, task: SWETask) -> Callable[[str], str | None]:
    """A file of the task's prepared (pristine) repository at the base commit, as text."""
    root = env.repos.get(task).resolve()

    def read(path: str) -> str | None:
        file = (root / path).resolve()
        if root not in file.parents or not file.is_file():
            return None
        try:
            return file.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return None

    return read


def reference_episodes(
    env: ContainerEnv, problems: Sequence[Problem], explain: bool = False, misquotes: float = 0.0
) -> list[ReferenceEpisode]:
    """Play every problem's reference trajectory in ``env``, ``env.settings.parallel`` at a time
    (``explain``: each targeted edit's lead-in names the bug first), and for the ``misquotes``
    fraction of them (a hash of the task id), its misquote trajectory (:func:`misquote_actions`)
    right after it; one whose refusal printed no closest lines is unresolved.

    A task whose trajectory cannot be written (``</execute>`` in its patch, a repository that
    cannot be prepared) gets an unplayed, unresolved episode whose ``verdict`` says why."""

    def script(problem: Problem) -> list[Step]:
        task = swe_task(problem)
        return reference_actions(task, _base_reader(env, task), explain, env.settings.tools)

    def misquote_script(problem: Problem) -> tuple[list[Step], str]:
        task = swe_task(problem)
        return misquote_actions(task, _base_reader(env, task), explain, env.settings.tools)

    episodes = play_references(env, problems, script, env.settings.parallel)
    played = play_misquotes(env, problems, misquotes, misquote_script, env.settings.parallel)
    return [e for first in episodes for e in (first, played.get(first.task_id)) if e is not None]


def reference_episode(env: ContainerEnv, task: Problem | SWETask) -> ReferenceEpisode:
    """The reference trajectory of one task, played in ``env``."""
    return reference_episodes(env, [task if isinstance(task, Problem) else to_problem(task)])[0]
