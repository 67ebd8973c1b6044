"""Reference trajectories of debugging tasks: the task's fix made the way an engineer debugs, for BC.

Derived from the task's files and its reference fix alone (``DebugTask.files``/``.fix``: the
changed line ranges of each non-test file, by difflib; ``envs/reference.py``), in the gym's own
tool-call format, one call per turn, each after a one-sentence lead-in:

1. ``<eval/>``: the tests' output (left out when the env already shows it in the first
   observation, ``env.debug.show_initial_eval``: a turn and a copy of the output saved);
2. ``<view>PATH</view>``: the whole file when it has at most ``WHOLE_FILE_LINES`` lines (the
   prompt names no line, so the policy must learn to look before it edits); a longer file is
   viewed around each change (``<view>PATH A-B</view>``, ``SITE_CONTEXT`` lines above and below;
   one view per site, nearby changes share one);
3. ``<replace path="PATH"><old>QUOTE</old><new>NEW</new></replace>`` where the env has ``replace``
   (the ``debug`` and ``full`` presets): each change quotes the lines it changes, grown until the
   quote is unique (``envs/reference.py``'s ``text_replacement``), so the policy names the place by
   copying what the view showed, not by a line number; else (the ``lines`` preset, or no unique
   quote) ``<edit path="PATH" lines="A-B">NEW LINES</edit>``. Each change goes bottom-up, so the
   line numbers the view showed stay valid (in a long file, later sites are viewed after the
   earlier edits, with the numbers the file has then). A file whose edits would write as many lines as the whole fixed
   file, or more than ``MAX_EDITS`` of them, is rewritten (``<rewrite>``) instead; so is a new
   file, or every file when the preset has no ``edit`` (``env.debug.tools: rewrite``). With
   ``explain``, an edit's lead-in first names the bug (``envs/reference.py``'s ``edit_reason``:
   ```//` should be `/`.`` before a ``<replace>``, ``In line 19, `//` should be `/`.`` before an
   ``<edit>``);
4. ``<eval/>`` again;
5. ``<submit/>``.

For example, ``debug/median`` (line 19 divides with ``//``)::

    I will run the tests to see what fails.
    <eval/>
    I will look at stats.py.
    <view>stats.py</view>
    I will change stats.py.
    <replace path="stats.py">
    <old>return (ordered[middle - 1] + ordered[middle]) // 2</old>
    <new>return (ordered[middle - 1] + ordered[middle]) / 2</new>
    </replace>
    I will run the tests again.
    <eval/>
    The tests pass. <submit/>

Two more kinds teach what fixes alone never show: a recovery trajectory (:func:`recovery_actions`:
a masked wrong edit, the tests failing, then the fix) and a misquote trajectory
(:func:`misquote_actions`: a masked ``<replace>`` whose quote has a line written wrong, the tool's
refusal showing the closest lines, then the change quoting them).

:func:`reference_episodes` plays the trajectories through the env's real batched interface (the
observations are the env's own; the grade is the env's real one); a trajectory is kept for BC only
when it resolves its task (``rollout/demonstrations.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Sequence

from lit_codeRL.envs.debug.env import DebugEnv
from lit_codeRL.envs.debug.tools import ToolCall, parse_tool_call, stop_strings
from lit_codeRL.envs.reference import (
    MISQUOTED,
    LineEdit,
    ReferenceEpisode,
    edit_sites,
    imitable,
    line_edits,
    misquote,
    play_misquotes,
    play_references,
    reason_lead,
    text_replacement,
    wants_recovery,
)
from lit_codeRL.envs.replacement import replacement_parts
from lit_codeRL.envs.text import python_lines
from lit_codeRL.problems.debug import DebugTask, debug_problem, debug_task
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.synth.mutations import apply_mutation, mutation_sites

MAX_EDITS = 6
"""A file needing more targeted edits than this is rewritten whole."""
WHOLE_FILE_LINES = 40
"""A file this short is viewed whole (``<view>PATH</view>``); a longer one in windows around each
change."""

EVAL = "I will run the tests to see what fails.\n<eval/>"
EVAL_AGAIN = "I will run the tests again.\n<eval/>"
SUBMIT = "The tests pass. <submit/>"
STILL_FAILING = "The tests still fail. "


def _file_actions(path: str, old: str | None, new: str, tools: Sequence[str], explain: bool) -> list[str]:
    """The view and edit calls (or the view and one rewrite) that turn ``old`` into ``new``."""
    if old is None:  # a new file
        return [f"I will create {path}.\n" + _rewrite(path, new)]
    old_lines, new_lines = python_lines(old, keepends=True), python_lines(new, keepends=True)
    try:
        edits = line_edits(old_lines, new_lines)
    except ValueError:  # an empty file on one side
        return [f"I will rewrite {path} with the fix.\n" + _rewrite(path, new)]
    sites = edit_sites(edits, len(old_lines))
    written = sum(len(e.new) for e in edits)
    if "edit" not in tools or len(edits) > MAX_EDITS or written >= max(1, len(new_lines)):
        first, last = sites[0].first, sites[-1].last
        view = (
            _whole_view(path)
            if len(old_lines) <= WHOLE_FILE_LINES
            else f"I will look at {path} around line {edits[0].start}.\n<view>{path} {first}-{last}</view>"
        )
        return [view, f"I will rewrite {path} with the fix.\n" + _rewrite(path, new)]
    # The file as each change finds it, for a change that quotes what it replaces (``replace``).
    text = old if "replace" in tools else None
    if len(old_lines) <= WHOLE_FILE_LINES:
        # One view of the whole file, then every edit bottom-up: each line number an edit names is
        # the one that view showed. The policy sees no line number before it looks, so a window
        # "around line N" would teach it to guess where the bug is (BC learned to edit line 1).
        actions = [_whole_view(path)]
        for site in reversed(sites):
            for edit in site.edits:
                action, text = _change(path, edit, explain, text=text)
                actions.append(action)
        return actions
    actions, shift = [], 0
    for k, site in enumerate(sites):
        lead = "I will look at" if k == 0 else "Next I will look at"
        line = site.edits[-1].start + shift
        actions.append(
            f"{lead} {path} around line {line}.\n<view>{path} {site.first + shift}-{site.last + shift}</view>"
        )
        for edit in site.edits:  # bottom-up: the view's numbers stay valid
            at = dataclasses.replace(edit, start=edit.start + shift, end=edit.end + shift)
            action, text = _change(path, at, explain, text=text)
            actions.append(action)
        shift += site.delta
    return actions


def _change(
    path: str, edit: LineEdit, explain: bool, again: str = "", text: str | None = None
) -> tuple[str, str | None]:
    """The lead-in and the call that writes ``edit.new`` over its lines, and the file after it.
    With ``text`` (the file before it; ``None``: the env has no ``replace``) the call is a
    ``<replace>`` quoting the changed lines (``text_replacement``), else (or when no quote of them
    is unique) an ``<edit>`` of their numbers. With ``explain`` the lead-in names the bug first,
    where there is a short way to say it (without a line number before a ``<replace>``)."""
    quote = text_replacement(text, edit) if text is not None else None
    after = None
    if text is not None:
        lines = python_lines(text, keepends=True)
        after = "".join(lines[: edit.start - 1]) + "".join(edit.new) + "".join(lines[edit.end :])
    if quote is not None:
        lead = reason_lead(edit, explain, numbered=False)
        return f"{lead}I will change {path}{again}.\n" + _replace(path, *quote), after
    lead = reason_lead(edit, explain)
    lines = f"{edit.start}-{edit.end}"
    return f"{lead}I will change lines {lines} of {path}{again}.\n" + _edit(
        path, lines, "".join(edit.new)
    ), after


def _whole_view(path: str) -> str:
    return f"I will look at {path}.\n<view>{path}</view>"


def _edit(path: str, lines: str, content: str) -> str:
    return f'<edit path="{path}" lines="{lines}">\n{content}</edit>'


def _replace(path: str, old: str, new: str) -> str:
    return f'<replace path="{path}">\n{replacement_parts(old, new)}</replace>'


def _rewrite(path: str, content: str) -> str:
    return f'<rewrite path="{path}">\n{content}</rewrite>'


def reference_actions(
    task: DebugTask, tools: Sequence[str], output_shown: bool = False, explain: bool = False
) -> list[str]:
    """The reference trajectory's actions (see the module docstring) with the enabled ``tools``;
    ``output_shown``: the first observation holds the tests' output (no first ``<eval/>``);
    ``explain``: each edit's lead-in names the bug first.

    Raises:
        ValueError: the task has no fix, the fix changes nothing, or an action would not be read
            back as written (a stop string or a tag inside the fix, a path the tag cannot hold).
    """
    if not task.fix:
        raise ValueError("the task has no reference fix")
    if "eval" not in tools or "view" not in tools:
        raise ValueError(f"the tools {', '.join(tools)} lack eval or view")
    middle = []
    for path in sorted(task.fix):
        old, new = task.files.get(path), task.fix[path]
        if old != new:
            middle += _file_actions(path, old, new, tools, explain)
    if not middle:
        raise ValueError("the fix changes nothing")
    actions = [*([] if output_shown else [EVAL]), *middle, EVAL_AGAIN, SUBMIT]
    _check(actions, tools)
    return actions


def _check(actions: list[str], tools: Sequence[str]) -> None:
    """Each action must end where a sampled one would, and the env must read it back as written:
    the call it parses to, written again, is how the action ends (a path with a quote or a space,
    a fix that holds a closing tag or a code fence, would not survive)."""
    imitable(actions, stop_strings(tuple(tools)))
    for action in actions:
        call = parse_tool_call(action, tuple(tools))
        if not call.ok or call.ignored_text or not action.endswith(_written(call)):
            raise ValueError(f"the env would not read {action[-80:]!r} back as written")


def _written(call: ToolCall) -> str:
    args = call.args
    if call.tool == "view":
        return (
            f"<view>{args['path']} {args['lines']}</view>"
            if args.get("lines")
            else f"<view>{args['path']}</view>"
        )
    if call.tool == "edit":
        return _edit(args["path"], args["lines"], args["content"])
    if call.tool == "replace":
        return _replace(args["path"], args["old"], args["new"])
    if call.tool == "rewrite":
        return _rewrite(args["path"], args["content"])
    return f"<{call.tool}/>"


def recovery_actions(
    task: DebugTask,
    tools: Sequence[str],
    output_shown: bool = False,
    explain: bool = False,
    elsewhere: bool = False,
) -> tuple[list[str], int]:
    """A reference trajectory with a failed attempt: view the file, make a **wrong** edit of the
    lines the fix changes (the fixed lines with one mutation of ``problems/synth/mutations.py``:
    plausible code that is neither the bug nor the fix), run the tests and see them fail, replace
    the same lines with the fix, run the tests again, submit. Returns the actions and the index of
    the wrong edit: BC keeps it as context, not as a target, so the policy learns to recover from a
    failed edit, not to make one (trajectories of fixes alone never show failing tests after an
    edit, and BC on them answered a failing ``<eval/>`` with "The tests pass. <submit/>").

    ``elsewhere``: the wrong edit is of **another** line (one mutation of a line the fix leaves
    alone); after the failing tests the trajectory changes that line back, then makes the fix. Its
    lesson is the one the same-line kind cannot teach: a failed edit may have been in the wrong
    place (BC on same-line recoveries re-edited the lines of its first edit in 172 of 178 second
    edits on the H200 run, while its first edit was off the buggy lines in 126 of 200 episodes).

    Only a fix that is one edit of one file of at most ``WHOLE_FILE_LINES`` lines has one; the
    mutation is drawn in an order seeded by the task id.

    Raises:
        ValueError: no such trajectory for this task (see above; or no mutation of the fixed lines
            keeps the file's line count and differs from both the bug and the fix).
    """
    if "edit" not in tools or "eval" not in tools or "view" not in tools:
        raise ValueError(f"the tools {', '.join(tools)} lack edit, eval or view")
    changed = [path for path in sorted(task.fix) if task.files.get(path) != task.fix[path]]
    if len(changed) != 1 or task.files.get(changed[0]) is None:
        raise ValueError("the fix does not change exactly one existing file")
    path = changed[0]
    old_lines = python_lines(task.files[path], keepends=True)
    new_lines = python_lines(task.fix[path], keepends=True)
    if len(old_lines) > WHOLE_FILE_LINES:
        raise ValueError(f"{path} has more than {WHOLE_FILE_LINES} lines")
    edits = line_edits(old_lines, new_lines)
    if len(edits) != 1 or len(edits[0].new) >= len(new_lines):
        raise ValueError("the fix is not one edit of part of the file")
    (edit,) = edits
    text = task.files[path] if "replace" in tools else None
    if elsewhere:
        k, wrong_line = _wrong_line_elsewhere(old_lines, edit, task.task_id)
        line = old_lines[k - 1]
        wrong_edit, text = _change(path, LineEdit(k, k, (line,), (wrong_line,)), explain, text=text)
        back, text = _change(path, LineEdit(k, k, (wrong_line,), (line,)), explain, again=" back", text=text)
        fix, _ = _change(path, edit, explain, text=text)  # the line count never changed
        after_failure = [STILL_FAILING + back, fix]
    else:
        wrong = _wrong_lines(new_lines, edit, task.task_id)
        a, b, c = edit.start, edit.end, edit.start + len(edit.new) - 1  # c: the fix's last line, then
        wrong_edit, text = _change(path, LineEdit(a, b, edit.old, tuple(wrong)), explain, text=text)
        fix, _ = _change(path, LineEdit(a, c, tuple(wrong), edit.new), explain, again=" again", text=text)
        after_failure = [STILL_FAILING + fix]
    actions = [
        *([] if output_shown else [EVAL]),
        _whole_view(path),
        wrong_edit,
        EVAL_AGAIN,
        *after_failure,
        EVAL_AGAIN,
        SUBMIT,
    ]
    _check(actions, tools)
    return actions, 1 if output_shown else 2


def _wrong_lines(new_lines: list[str], edit: LineEdit, seed: str) -> list[str]:
    """The fixed lines of ``edit`` with one mutation inside them: the same count of lines, neither
    the fix nor the bug, the rest of the file unchanged."""
    first, count = edit.start - 1, len(edit.new)  # 0-based: the fix's lines in the fixed file
    source = "".join(new_lines)
    sites = [site for site in mutation_sites(source) if edit.start <= site.line < edit.start + count]
    random.Random(hashlib.sha256(seed.encode()).hexdigest()).shuffle(sites)
    for site in sites:
        try:
            mutant = python_lines(apply_mutation(source, site), keepends=True)
        except ValueError:
            continue
        same_rest = (
            mutant[:first] == new_lines[:first] and mutant[first + count :] == new_lines[first + count :]
        )
        wrong = mutant[first : first + count]
        if len(mutant) == len(new_lines) and same_rest and wrong not in (list(edit.new), list(edit.old)):
            return wrong
    raise ValueError("no mutation of the fixed lines is a wrong edit of them")


def _wrong_line_elsewhere(old_lines: list[str], edit: LineEdit, seed: str) -> tuple[int, str]:
    """A line the fix does not touch (1-based) and that line with one mutation inside it: the rest
    of the file unchanged, the line count too."""
    source = "".join(old_lines)
    sites = [site for site in mutation_sites(source) if not edit.start <= site.line <= edit.end]
    random.Random(hashlib.sha256(f"{seed}:elsewhere".encode()).hexdigest()).shuffle(sites)
    for site in sites:
        try:
            mutant = python_lines(apply_mutation(source, site), keepends=True)
        except ValueError:
            continue
        changed = [k for k, (a, b) in enumerate(zip(mutant, old_lines, strict=False)) if a != b]
        if (
            len(mutant) == len(old_lines)
            and len(changed) == 1
            and not edit.start <= changed[0] + 1 <= edit.end
        ):
            return changed[0] + 1, mutant[changed[0]]
    raise ValueError("no mutation of a line the fix leaves alone is a wrong edit of it")


def misquote_actions(
    task: DebugTask, tools: Sequence[str], output_shown: bool = False, explain: bool = False
) -> tuple[list[str], int]:
    """A reference trajectory whose first change is first tried with a misquoted ``<replace>``
    (``envs/reference.py``'s :func:`misquote`: a line of the quote written wrong, as a model
    writes it from memory); the tool refuses it and shows the file's closest lines, and the next
    action makes the change quoting them. Returns the actions and the index of the misquoted
    call: BC keeps it as context, not as a target, so the policy learns to read the refusal and
    quote again, not to misquote.

    Raises:
        ValueError: the task's first change is not a ``<replace>`` (the env has no ``replace``, or
            no quote of the lines is unique) or no misquote of it shows its own lines.
    """
    actions = reference_actions(task, tools, output_shown, explain)
    for k, action in enumerate(actions):
        call = parse_tool_call(action, tuple(tools))
        if call.tool in ("edit", "rewrite"):
            break
        if call.tool != "replace":
            continue
        path, old, new = call.args["path"], call.args["old"], call.args["new"]
        wrong = misquote(task.files.get(path) or "", old, task.task_id)
        if wrong is None:
            break
        lead = action[: action.rindex("<replace ")]
        actions[k : k + 1] = [lead + _replace(path, wrong, new), MISQUOTED + action]
        _check(actions, tools)
        return actions, k
    raise ValueError("the first change is not a <replace> whose quote can be misquoted")


def reference_episodes(
    env: DebugEnv,
    problems: Sequence[Problem],
    recoveries: float = 0.0,
    explain: bool = False,
    elsewhere: float = 0.0,
    misquotes: float = 0.0,
) -> list[ReferenceEpisode]:
    """Play every problem's reference trajectory in ``env``, ``env.settings.parallel`` at a time,
    and, for the ``recoveries`` fraction of them (:func:`wants_recovery`), its recovery trajectory
    (:func:`recovery_actions`) right after it; for the ``elsewhere`` fraction of those (another
    hash of the task id), one whose wrong edit is of another line (``elsewhere=True``; the
    same-line kind where the file has no such line); for the ``misquotes`` fraction (a third
    hash), its misquote trajectory (:func:`misquote_actions`) after those. A misquote trajectory
    whose refusal showed no closest lines is unresolved (its next quote would come from nowhere).

    A task that cannot have one (no fix, nothing failing at its base: ``DebugTaskInvalid``, an
    action that would not be read back as written) gets an unplayed, unresolved episode whose
    ``verdict`` says why. A recovery whose wrong edit passes the tests is unresolved too.
    ``explain``: each edit's lead-in names the bug first (:func:`reference_actions`)."""

    def script(problem: Problem) -> list[str]:
        env.task_of(problem)  # measures the base once per machine; refuses a task with nothing to fix
        return reference_actions(debug_task(problem), env.tools, env.settings.show_initial_eval, explain)

    episodes = play_references(env, problems, script, env.settings.parallel)
    later = [
        _recoveries(env, problems, recoveries, explain, elsewhere),
        _misquoted(env, problems, misquotes, explain),
    ]
    return [
        e
        for first in episodes
        for e in (first, *(more.get(first.task_id) for more in later))
        if e is not None
    ]


def _recoveries(
    env: DebugEnv, problems: Sequence[Problem], recoveries: float, explain: bool, elsewhere: float
) -> dict[str, ReferenceEpisode]:
    """The recovery trajectories of :func:`reference_episodes`, by task id."""
    chosen = [p for p in problems if wants_recovery(p.task_id, recoveries)]
    if not chosen:
        return {}
    wrong_at: dict[str, int] = {}

    def recovery(problem: Problem) -> list[str]:
        env.task_of(problem)
        task, shown = debug_task(problem), env.settings.show_initial_eval
        if wants_recovery(f"{problem.task_id}:elsewhere", elsewhere):
            try:
                actions, wrong_at[problem.task_id] = recovery_actions(task, env.tools, shown, explain, True)
                return actions
            except ValueError:
                pass
        actions, wrong_at[problem.task_id] = recovery_actions(task, env.tools, shown, explain)
        return actions

    recovered = {}
    for episode in play_references(env, chosen, recovery, env.settings.parallel):
        wrong = wrong_at.get(episode.task_id)
        if wrong is not None:
            episode.context = (wrong,)
            seen = episode.observations[wrong + 1] if len(episode.observations) > wrong + 1 else ""
            if "[exit code 0]" in seen or "failed" not in seen:
                episode.resolved, episode.verdict = False, "its wrong edit did not fail the tests"
        episode.verdict = f"recovery: {episode.verdict}" if not episode.resolved else episode.verdict
        recovered[episode.task_id] = episode
    return recovered


def _misquoted(
    env: DebugEnv, problems: Sequence[Problem], misquotes: float, explain: bool
) -> dict[str, ReferenceEpisode]:
    """The misquote trajectories of :func:`reference_episodes`, by task id."""

    def script(problem: Problem) -> tuple[list[str], str]:
        env.task_of(problem)
        actions, at = misquote_actions(
            debug_task(problem), env.tools, env.settings.show_initial_eval, explain
        )
        return actions, actions[at]

    return play_misquotes(env, problems, misquotes, script, env.settings.parallel)


def reference_episode(env: DebugEnv, problem: Problem | DebugTask, explain: bool = False) -> ReferenceEpisode:
    """The reference trajectory of one task, played in ``env``."""
    problem = problem if isinstance(problem, Problem) else debug_problem(problem)
    return reference_episodes(env, [problem], explain=explain)[0]
