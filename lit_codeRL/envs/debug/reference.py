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
3. ``<edit path="PATH" lines="A-B">NEW LINES</edit>``: each change, bottom-up, so the line numbers
   the view showed stay valid (in a long file, later sites are viewed after the earlier edits, with
   the numbers the file has then). A file whose edits would write as many lines as the whole fixed
   file, or more than ``MAX_EDITS`` of them, is rewritten (``<rewrite>``) instead; so is a new
   file, or every file when the preset has no ``edit`` (``env.debug.tools: rewrite``);
4. ``<eval/>`` again;
5. ``<submit/>``.

For example, ``debug/median`` (line 19 divides with ``//``)::

    I will run the tests to see what fails.
    <eval/>
    I will look at stats.py.
    <view>stats.py</view>
    I will change lines 19-19 of stats.py.
    <edit path="stats.py" lines="19-19">
        return (ordered[middle - 1] + ordered[middle]) / 2
    </edit>
    I will run the tests again.
    <eval/>
    The tests pass. <submit/>

:func:`reference_episodes` plays the trajectories through the env's real batched interface (the
observations are the env's own; the grade is the env's real one); a trajectory is kept for BC only
when it resolves its task (``rollout/demonstrations.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from lit_codeRL.envs.debug.env import DebugEnv
from lit_codeRL.envs.debug.tools import ToolCall, parse_tool_call, stop_strings
from lit_codeRL.envs.reference import ReferenceEpisode, edit_sites, imitable, line_edits, play_references
from lit_codeRL.problems.debug import DebugTask, debug_problem, debug_task
from lit_codeRL.problems.record import Problem

MAX_EDITS = 6
"""A file needing more targeted edits than this is rewritten whole."""
WHOLE_FILE_LINES = 40
"""A file this short is viewed whole (``<view>PATH</view>``); a longer one in windows around each
change."""

EVAL = "I will run the tests to see what fails.\n<eval/>"
EVAL_AGAIN = "I will run the tests again.\n<eval/>"
SUBMIT = "The tests pass. <submit/>"


def _file_actions(path: str, old: str | None, new: str, tools: Sequence[str]) -> list[str]:
    """The view and edit calls (or the view and one rewrite) that turn ``old`` into ``new``."""
    if old is None:  # a new file
        return [f"I will create {path}.\n" + _rewrite(path, new)]
    old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
    try:
        edits = line_edits(old_lines, new_lines)
    except ValueError:  # an empty file on one side
        return [f"I will rewrite {path} with the fix.\n" + _rewrite(path, new)]
    sites = edit_sites(edits, len(old_lines))
    written = sum(len(e.new) for e in edits)
    if "edit" not in tools or len(edits) > MAX_EDITS or written >= max(1, len(new_lines)):
        first, last = sites[0].first, sites[-1].last
        view = (
            f"I will look at {path}.\n<view>{path}</view>"
            if len(old_lines) <= WHOLE_FILE_LINES
            else f"I will look at {path} around line {edits[0].start}.\n<view>{path} {first}-{last}</view>"
        )
        return [view, f"I will rewrite {path} with the fix.\n" + _rewrite(path, new)]
    if len(old_lines) <= WHOLE_FILE_LINES:
        # One view of the whole file, then every edit bottom-up: each line number an edit names is
        # the one that view showed. The policy sees no line number before it looks, so a window
        # "around line N" would teach it to guess where the bug is (BC learned to edit line 1).
        actions = [f"I will look at {path}.\n<view>{path}</view>"]
        for site in reversed(sites):
            for edit in site.edits:
                actions.append(
                    f"I will change lines {edit.start}-{edit.end} of {path}.\n"
                    + _edit(path, f"{edit.start}-{edit.end}", "".join(edit.new))
                )
        return actions
    actions, shift = [], 0
    for k, site in enumerate(sites):
        lead = "I will look at" if k == 0 else "Next I will look at"
        line = site.edits[-1].start + shift
        actions.append(
            f"{lead} {path} around line {line}.\n<view>{path} {site.first + shift}-{site.last + shift}</view>"
        )
        for edit in site.edits:  # bottom-up: the view's numbers stay valid
            a, b = edit.start + shift, edit.end + shift
            actions.append(
                f"I will change lines {a}-{b} of {path}.\n" + _edit(path, f"{a}-{b}", "".join(edit.new))
            )
        shift += site.delta
    return actions


def _edit(path: str, lines: str, content: str) -> str:
    return f'<edit path="{path}" lines="{lines}">\n{content}</edit>'


def _rewrite(path: str, content: str) -> str:
    return f'<rewrite path="{path}">\n{content}</rewrite>'


def reference_actions(task: DebugTask, tools: Sequence[str], output_shown: bool = False) -> list[str]:
    """The reference trajectory's actions (see the module docstring) with the enabled ``tools``;
    ``output_shown``: the first observation holds the tests' output (no first ``<eval/>``).

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
            middle += _file_actions(path, old, new, tools)
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
        return f"<view>{args['path']} {args['lines']}</view>" if args.get("lines") else f"<view>{args['path']}</view>"
    if call.tool == "edit":
        return _edit(args["path"], args["lines"], args["content"])
    if call.tool == "rewrite":
        return _rewrite(args["path"], args["content"])
    return f"<{call.tool}/>"


def reference_episodes(env: DebugEnv, problems: Sequence[Problem]) -> list[ReferenceEpisode]:
    """Play every problem's reference trajectory in ``env``, ``env.settings.parallel`` at a time.

    A task that cannot have one (no fix, nothing failing at its base: ``DebugTaskInvalid``, an
    action that would not be read back as written) gets an unplayed, unresolved episode whose
    ``verdict`` says why."""

    def script(problem: Problem) -> list[str]:
        env.task_of(problem)  # measures the base once per machine; refuses a task with nothing to fix
        return reference_actions(debug_task(problem), env.tools, env.settings.show_initial_eval)

    return play_references(env, problems, script, env.settings.parallel)


def reference_episode(env: DebugEnv, problem: Problem | DebugTask) -> ReferenceEpisode:
    """The reference trajectory of one task, played in ``env``."""
    return reference_episodes(env, [problem if isinstance(problem, Problem) else debug_problem(problem)])[0]
