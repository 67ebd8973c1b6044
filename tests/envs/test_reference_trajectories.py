"""Reference trajectories of both agent envs, derived from the gold fix and played for real
(bubblewrap workspaces, real pytest, the real grader): every shipped task resolves with the
eval/view/edit.../eval/submit shape; a fix in two places with a line shift between them; a wrong
fix plays, does not resolve and is dropped from the BC rows; the BC rows hold exactly the tokens
of the episode runner's record of the same text; BC trains on debugging demonstrations."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.debug.reference import (
    STILL_FAILING,
    WHOLE_FILE_LINES,
    misquote_actions,
    recovery_actions,
    wants_recovery,
)
from lit_codeRL.envs.debug.reference import reference_actions as debug_actions
from lit_codeRL.envs.debug.reference import reference_episode as debug_episode
from lit_codeRL.envs.debug.reference import reference_episodes as debug_episodes
from lit_codeRL.envs.debug.tools import PRESETS, apply_edit, apply_replace, parse_tool_call, stop_strings
from lit_codeRL.envs.reference import ReferenceEpisode, edit_sites, line_edits
from lit_codeRL.envs.settings import EnvSettings
from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.envs.swe.reference import reference_episode as swe_episode
from lit_codeRL.envs.swe.reference import reference_episodes as swe_episodes
from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.debug import DebugTask, debug_problem
from lit_codeRL.problems.registry import load_problems
from lit_codeRL.problems.swe import to_problem
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.demonstrations import (
    DemonstrationSettings,
    episode_segments,
    reference_demonstrations,
)
from lit_codeRL.rollout.episodes import Episode, Turn
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

DEBUG_TASKS = {p.task_id: p for p in load_problems("debug", "all")}
SWE_TASKS = {p.task_id: p for p in load_problems("swe", "all")}


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def debug_settings(tmp_path_factory) -> DebugSettings:
    return DebugSettings(
        repo_cache=str(tmp_path_factory.mktemp("debug-cache")), workspace={"backend": "bwrap"}
    )


@pytest.fixture(scope="module")
def debug_env(debug_settings):
    require_bwrap()
    with DebugEnv(debug_settings) as env:
        yield env


@pytest.fixture(scope="module")
def swe_env(tmp_path_factory):
    require_bwrap()
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")), workspace=WorkspaceConfig(backend="bwrap")
    )
    with ContainerEnv(None, settings=settings) as env:
        yield env


@pytest.fixture(scope="module")
def debug_played(debug_env) -> dict[str, ReferenceEpisode]:
    episodes = debug_episodes(debug_env, list(DEBUG_TASKS.values()))
    return {e.task_id: e for e in episodes}


@pytest.fixture(scope="module")
def swe_played(swe_env) -> dict[str, ReferenceEpisode]:
    episodes = swe_episodes(swe_env, list(SWE_TASKS.values()))
    return {e.task_id: e for e in episodes}


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    from lit_codeRL.policy.loading import load_tokenizer

    return ChatFormat(load_tokenizer("tiny-random"))


# ------------------------------------------------------------------------------ shapes
def debug_shape(actions: list[str]) -> str:
    return " ".join(parse_tool_call(a, PRESETS["debug"]).tool for a in actions)


def swe_shape(actions: list[str], test_command: str) -> str:
    kinds = []
    for action in actions:
        parsed = parse_action(action)
        command = parsed.command
        kinds.append(
            "submit"
            if parsed.kind == "submit"
            else "test"
            if command.startswith(test_command)
            else "view"
            if command.startswith("sed -n ")
            else "edit"
            if command.startswith("python3 - <<'EOF'")
            else "apply"
            if command.startswith("git apply")
            else "other"
        )
    return " ".join(kinds)


DEBUG_SHAPE = re.compile(r"eval (view ((edit|replace) )+)+eval submit")
DEBUG_SHAPE_OUTPUT_SHOWN = re.compile(r"(view ((edit|replace) )+)+eval submit")
"""With ``show_initial_eval`` (the default) the first observation already holds the tests' output."""
SWE_SHAPE = re.compile(r"test (view (edit )+)+test submit")


def test_every_shipped_debug_task_resolves_with_the_engineers_shape(debug_played):
    assert set(debug_played) == set(DEBUG_TASKS)
    for task_id, episode in debug_played.items():
        assert episode.resolved and episode.reward == 1.0 and episode.verdict == "passed", (task_id, episode)
        shape = debug_shape(episode.actions)
        assert DEBUG_SHAPE_OUTPUT_SHOWN.fullmatch(shape), (task_id, shape)
        assert len(episode.observations) == len(episode.actions) - 1
        first, last = episode.prompt, episode.observations[-1]
        assert "failed" in first and "exit code 1" in first, task_id
        assert "passed" in last and "failed" not in last and "[exit code 0]" in last, task_id
        assert "<eval/>" in episode.prompt and debug_env_prompt_tools(episode.prompt)


def debug_env_prompt_tools(prompt: str) -> bool:
    return all(tool in prompt for tool in ("<pdb>", "<view>", "<edit ", "<submit/>"))


def test_each_debug_edit_uses_the_line_numbers_its_view_showed(debug_played):
    """A view lists ``N| line``: the lines an edit replaces are in the view just before it."""
    for task_id, episode in debug_played.items():
        shown = ""
        for action, observation in zip(episode.actions, [*episode.observations, ""], strict=True):
            call = parse_tool_call(action, PRESETS["debug"])
            if call.tool == "edit":
                first, _, last = call.args["lines"].partition("-")
                for n in (int(first), int(last)):
                    assert re.search(rf"^ *{n}\| ", shown, re.MULTILINE), (task_id, action, shown)
            if call.tool == "view":
                shown = observation


@pytest.mark.parametrize("preset", ["debug", "lines"])
def test_the_debug_edits_make_the_fix_line_for_line(preset):
    """No sandbox: every shipped task's edits (``<replace>`` where the env has it, else ``<edit>``),
    applied in order by the gym's own functions, turn its files into its fix."""
    tools = PRESETS[preset]
    kinds = set()
    for task_id, problem in DEBUG_TASKS.items():
        task: DebugTask = problem.metadata["debug_task"]
        files = dict(task.files)
        for action in debug_actions(task, tools):
            call = parse_tool_call(action, tools)
            kinds.add(call.tool)
            if call.tool == "edit":
                files[call.args["path"]], error = apply_edit(
                    files[call.args["path"]], call.args["lines"], call.args["content"]
                )
                assert error is None, (task_id, error)
            if call.tool == "replace":
                files[call.args["path"]], error = apply_replace(
                    files[call.args["path"]], call.args["old"], call.args["new"]
                )
                assert error is None, (task_id, error)
        for path, content in task.fix.items():
            assert files[path] == content, (task_id, path)
    assert kinds - {"eval", "view", "submit", "rewrite"} == ({"replace"} if preset == "debug" else {"edit"})


def test_each_replace_quotes_what_its_view_showed_with_no_line_number(debug_played):
    """Under the default preset every shipped task is fixed with ``<replace>``: its ``<old>`` is text
    the view before it showed (each line of it, numbers stripped) and the lead-in names no line."""
    replaced = 0
    for task_id, episode in debug_played.items():
        shown = ""
        for action, observation in zip(episode.actions, [*episode.observations, ""], strict=True):
            call = parse_tool_call(action, PRESETS["debug"])
            if call.tool == "replace":
                replaced += 1
                seen = [re.sub(r"^ *\d+\| ", "", line) for line in shown.splitlines()]
                for line in call.args["old"].splitlines():
                    assert any(line.strip() and line in s for s in seen) or not line.strip(), (task_id, line)
                assert "line" not in action.split("<replace")[0], (task_id, action)
            if call.tool == "view":
                shown = observation
    assert replaced >= len(debug_played)


def test_the_rewrite_preset_gets_a_rewrite():
    task = DEBUG_TASKS["debug/median"].metadata["debug_task"]
    actions = debug_actions(task, PRESETS["rewrite"])
    tools = [parse_tool_call(a, PRESETS["rewrite"]).tool for a in actions]
    assert tools == ["eval", "view", "rewrite", "eval", "submit"]
    # an env that shows the tests' output in its first observation gets no first <eval/>
    assert debug_actions(task, PRESETS["rewrite"], output_shown=True) == actions[1:]
    assert parse_tool_call(actions[2], PRESETS["rewrite"]).args["content"] == task.fix["stats.py"]


def test_every_shipped_swe_task_resolves_with_targeted_edits(swe_played):
    assert set(swe_played) == set(SWE_TASKS)
    for task_id, episode in swe_played.items():
        task = SWE_TASKS[task_id].metadata["swe_task"]
        shape = swe_shape(episode.actions, task.test_command)
        assert episode.resolved and episode.reward == 1.0, (task_id, episode.verdict)
        assert SWE_SHAPE.fullmatch(shape), (task_id, shape)  # no git apply fallback for these
        assert len(episode.observations) == len(episode.actions) - 1
        # the tests run at the start are the F2P tests' files (the hidden tests are not there yet)
        files = sorted({node.split("::")[0] for node in task.fail_to_pass})
        assert parse_action(episode.actions[0]).command == f"{task.test_command} -q {' '.join(files)}"
        assert (
            episode.observations[0].startswith("Exit code: 0")
            and "(no changes yet)" in episode.observations[0]
        )
        for action, observation in zip(episode.actions, episode.observations, strict=False):
            if "python3 - <<'EOF'" in action:
                assert observation.startswith("Exit code: 0\nOutput:\n(no output)"), (task_id, observation)


# ------------------------------------------------------------------------------ two places
TWO_PLACES_OLD = (
    "def scale(values, factor):\n"
    '    """Every value times ``factor``."""\n'
    "    return [v + factor for v in values]\n"
    + "".join(f"\n\ndef helper_{k}(x):\n    return x + {k}\n" for k in range(10))  # over 40 lines: windows
    + "\n\ndef total(values):\n"
    '    """The sum of the values (0 for none)."""\n'
    "    return sum(values[1:])\n"
)
TWO_PLACES_FIX = TWO_PLACES_OLD.replace(
    "    return [v + factor for v in values]\n",
    "    if factor == 0:\n        return [0 for _ in values]\n    return [v * factor for v in values]\n",
).replace("sum(values[1:])", "sum(values)")
TWO_PLACES_TESTS = (
    "from calc import scale, total\n\n\n"
    "def test_scale():\n    assert scale([1, 2], 3) == [3, 6]\n\n\n"
    "def test_total():\n    assert total([1, 2, 3]) == 6\n"
)


def two_places_task(fix: str = TWO_PLACES_FIX) -> DebugTask:
    return DebugTask(
        "test/two-places" if fix == TWO_PLACES_FIX else "test/two-places-wrong",
        "scale and total",
        {"calc.py": TWO_PLACES_OLD, "test_calc.py": TWO_PLACES_TESTS},
        fix={"calc.py": fix},
    )


def test_a_fix_in_two_places_is_two_views_and_the_second_is_shifted():
    """A file over ``WHOLE_FILE_LINES`` is viewed in windows. The first change grows it by two
    lines: the second site's view and edit use the numbers the file has after the first edit (line
    48 of the base is line 50 then)."""
    old = TWO_PLACES_OLD.splitlines(keepends=True)
    assert len(old) > WHOLE_FILE_LINES
    edits = line_edits(old, TWO_PLACES_FIX.splitlines(keepends=True))
    assert [(e.start, e.end, e.delta) for e in edits] == [(3, 3, 2), (48, 48, 0)]
    assert len(edit_sites(edits, len(old))) == 2
    actions = debug_actions(two_places_task(), PRESETS["lines"])
    assert debug_shape(actions) == "eval view edit view edit eval submit"
    assert "<view>calc.py 1-6</view>" in actions[1] and 'lines="3-3"' in actions[2]
    assert "<view>calc.py 47-50</view>" in actions[3] and 'lines="50-50"' in actions[4]


def test_a_fix_in_two_places_resolves_when_played(debug_env):
    episode = debug_episode(debug_env, two_places_task())
    assert episode.resolved, episode.verdict
    assert "50|     return sum(values[1:])" in episode.observations[2]  # the shifted view (no first eval)


def short_two_places_task() -> DebugTask:
    """The two-places task without its helpers: 8 lines."""
    helpers = "".join(f"\n\ndef helper_{k}(x):\n    return x + {k}\n" for k in range(10))

    def cut(text: str) -> str:
        return text.replace(helpers, "")

    return DebugTask(
        "test/two-places-short",
        "scale and total",
        {"calc.py": cut(TWO_PLACES_OLD), "test_calc.py": TWO_PLACES_TESTS},
        fix={"calc.py": cut(TWO_PLACES_FIX)},
    )


def test_a_short_file_is_viewed_whole_then_edited_bottom_up_with_the_numbers_it_showed(debug_env):
    """A short file: one ``<view>PATH</view>`` (the prompt names no line: a window around the fix
    would be an oracle the policy cannot imitate), then the edits bottom-up, so the lower edit (line
    8, below the first change's two new lines) keeps the number the view showed."""
    task = short_two_places_task()
    assert len(task.files["calc.py"].splitlines()) <= WHOLE_FILE_LINES
    actions = debug_actions(task, PRESETS["lines"], output_shown=True)
    assert debug_shape(actions) == "view edit edit eval submit"
    assert actions[0].endswith("<view>calc.py</view>")
    assert 'lines="8-8"' in actions[1] and "sum(values)\n" in actions[1]
    assert 'lines="3-3"' in actions[2] and "v * factor" in actions[2]
    episode = debug_episode(debug_env, task)
    assert episode.resolved, episode.verdict
    assert "\n8|     return sum(values[1:])" in episode.observations[0]  # the whole file, numbered
    assert "\n1| def scale(values, factor):" in episode.observations[0]


def test_an_swe_fix_in_two_places_views_each(swe_played):
    """``calckit-1``: a new function inserted near the top, then the loop below it changed; the
    second view starts 8 lines lower than in the base and shows the line the edit replaces."""
    episode = swe_played["lit-coderl__calckit-1"]
    shape = swe_shape(episode.actions, "python -m pytest")
    assert shape == "test view edit view edit test submit"
    assert "sed -n '22,28p' calckit/evaluator.py" in episode.actions[3]
    assert "PRECEDENCE[stack[-1].value] > PRECEDENCE[token.value]" in episode.observations[3]


# ------------------------------------------------------------------------------ a wrong fix
def test_a_wrong_fix_plays_does_not_resolve_and_is_dropped(debug_settings, debug_env, chat, caplog):
    wrong = two_places_task(TWO_PLACES_FIX.replace("sum(values)", "sum(values) + 1"))
    episode = debug_episode(debug_env, wrong)
    assert not episode.resolved and episode.reward == 0.0 and episode.verdict == "unresolved"
    assert debug_shape(episode.actions) == "view replace view replace eval submit"
    assert "failed" in episode.observations[-1]
    problems = [debug_problem(two_places_task()), debug_problem(wrong)]
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.rollout.demonstrations"):
        rows = reference_demonstrations(problems, chat, EnvSettings(debug=debug_settings))
    assert len(rows) == 1
    (message,) = [r.getMessage() for r in caplog.records if "reference trajectories" in r.getMessage()]
    assert message.startswith("1 of 2 debug reference trajectories") and "test/two-places-wrong" in message


def test_reference_trajectories_are_graded_without_the_mirror_runs(debug_settings, chat, monkeypatch):
    """A reference trajectory's diff is the task's own fix: its resolved grade is not graded again
    with the failing tests' values changed (the mirror runs, about half of what playing cost) or
    answered outside pytest (the answer run),
    and the user's settings, which keep the check for the policy's episodes, are left as given."""
    from lit_codeRL.grading import SWEGrader

    runs: list[bool] = []
    real_run = SWEGrader.run

    def counted(self, *args, **kwargs):
        runs.append(kwargs.get("mirror") is not None or kwargs.get("answers") is not None)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(SWEGrader, "run", counted)
    assert debug_settings.mirror_check
    rows = reference_demonstrations(
        [debug_problem(two_places_task())], chat, EnvSettings(debug=debug_settings)
    )
    assert len(rows) == 1 and runs and not any(runs), runs
    assert debug_settings.mirror_check and debug_settings.answer_check


def test_a_wrong_swe_patch_does_not_resolve(swe_env):
    task = SWE_TASKS["lit-coderl__numkit-1"].metadata["swe_task"]
    wrong = dataclasses.replace(task, patch=task.patch.replace("ordered[mid]) / 2", "ordered[mid]) / 3"))
    episode = swe_episode(swe_env, to_problem(wrong))
    assert swe_shape(episode.actions, task.test_command) == "test view edit test submit"
    assert not episode.resolved and episode.reward == 0.0


# ------------------------------------------------------------------------------ recovery
# Inside a string on line 1: every character ``str.splitlines`` breaks a line at and Python does not
# (form feed, line and paragraph separator, NEL, vertical tab, the file/group/record separators).
BANNER = 'BANNER = "form\x0cfeed, line\u2028separator, next\x85line, \x0b\x1c\x1d\x1e\u2029end"\n'
BUG_LINE = "    return (ordered[middle - 1] + ordered[middle]) // 2\n"
_MEDIAN: DebugTask = DEBUG_TASKS["debug/median"].metadata["debug_task"]
BANNER_TASK = dataclasses.replace(
    _MEDIAN,
    task_id="debug/banner",
    files={**_MEDIAN.files, "stats.py": BANNER + _MEDIAN.files["stats.py"]},
    fix={**_MEDIAN.fix, "stats.py": BANNER + _MEDIAN.fix["stats.py"]},
)
"""``debug/median`` with :data:`BANNER` as line 1 of stats.py: the bug is Python's line 20 (line 28
to ``str.splitlines``)."""


@pytest.mark.parametrize("preset", ["debug", "lines"])
def test_a_file_with_line_breaks_python_does_not_count_is_edited_at_pythons_line(preset):
    """No sandbox: the reference of :data:`BANNER_TASK` names line 20 (its view's number, pdb's and
    a traceback's), its lead-in says so, its edits applied by the gym make the fix, and a misquote
    of the bug line gets a refusal that shows line 20."""
    tools = PRESETS[preset]
    actions = debug_actions(BANNER_TASK, tools, output_shown=True, explain=True)
    changes = [a for a in actions if "<edit" in a or "<replace" in a]
    assert len(changes) == 1 and changes[0].startswith(
        "In line 20, `//` should be `/`." if preset == "lines" else "`//`"
    )
    call = parse_tool_call(changes[0], tools)
    if preset == "lines":
        assert call.args["lines"] == "20-20"
        fixed, error = apply_edit(BANNER_TASK.files["stats.py"], "20-20", call.args["content"])
    else:
        fixed, error = apply_replace(BANNER_TASK.files["stats.py"], call.args["old"], call.args["new"])
    assert error is None and fixed == BANNER_TASK.fix["stats.py"]
    text = BANNER_TASK.files["stats.py"]
    _, said = apply_replace(text, "return (ordered[middle-1]+ordered[middle])//2", "x")
    assert "closest text is at line 20" in said and "20|     return (ordered[middle - 1]" in said
    _, said = apply_replace(text, "ordered[middle]", "x")  # lines 19 and 20 hold it
    assert "(lines 19, 20)" in said, said
    if preset == "debug":  # a misquoted first try, whose refusal shows the lines quoted next
        actions, k = misquote_actions(BANNER_TASK, tools, output_shown=True)
        _, said = apply_replace(text, *(parse_tool_call(actions[k], tools).args[a] for a in ("old", "new")))
        assert "closest text is at line 20" in said and BUG_LINE.strip() in said


def test_a_file_with_line_breaks_python_does_not_count_resolves_when_played(debug_env):
    episode = debug_episode(debug_env, BANNER_TASK)
    assert episode.resolved, episode.verdict


RECOVERY_TASK = DebugTask(
    "test/recovery",
    "scale",
    {
        "calc.py": "def scale(values, factor):\n    return [v + factor for v in values]\n",
        "test_calc.py": "from calc import scale\n\n\ndef test_scale():\n    assert scale([1, 2], 3) == [3, 6]\n",
    },
    fix={"calc.py": "def scale(values, factor):\n    return [v * factor for v in values]\n"},
)


def test_a_recovery_trajectory_makes_a_wrong_edit_of_the_fix_lines_then_the_fix():
    actions, wrong = recovery_actions(RECOVERY_TASK, PRESETS["lines"], output_shown=True)
    assert debug_shape(actions) == "view edit eval edit eval submit" and wrong == 1
    first, second = (parse_tool_call(actions[k], PRESETS["lines"]).args for k in (1, 3))
    assert first["lines"] == second["lines"] == "2-2"
    assert second["content"] == "    return [v * factor for v in values]\n"  # the fix
    bad = first["content"]  # one mutation of the fixed line: neither the fix nor the bug
    assert bad != second["content"] and bad != "    return [v + factor for v in values]\n"
    assert bad.startswith("    return ") and bad.endswith("\n") and bad.count("\n") == 1
    assert actions[3].startswith(STILL_FAILING)
    # the same wrong edit on every call (seeded by the task id); an env without the output shown first
    assert recovery_actions(RECOVERY_TASK, PRESETS["lines"], output_shown=True) == (actions, 1)
    assert recovery_actions(RECOVERY_TASK, PRESETS["lines"])[0][1:] == actions
    # with <replace>: the wrong line quoted as the file has it, then the wrong line quoted back
    quoted, _ = recovery_actions(RECOVERY_TASK, PRESETS["debug"], output_shown=True)
    assert debug_shape(quoted) == "view replace eval replace eval submit"
    wrong_call, fix_call = (parse_tool_call(quoted[k], PRESETS["debug"]).args for k in (1, 3))
    assert wrong_call["old"] == "return [v + factor for v in values]"
    assert wrong_call["new"] == bad.strip() == fix_call["old"]
    assert fix_call["new"] == "return [v * factor for v in values]"
    with pytest.raises(ValueError, match="not one edit"):
        recovery_actions(short_two_places_task(), PRESETS["debug"])  # two edits
    with pytest.raises(ValueError, match="more than 40 lines"):
        recovery_actions(two_places_task(), PRESETS["debug"])
    with pytest.raises(ValueError, match="lack edit"):
        recovery_actions(RECOVERY_TASK, PRESETS["rewrite"])


def test_recoveries_are_played_their_wrong_edit_fails_and_bc_does_not_imitate_it(debug_settings, chat):
    problems = [debug_problem(RECOVERY_TASK), debug_problem(short_two_places_task())]
    with DebugEnv(debug_settings) as env:
        episodes = debug_episodes(env, problems, recoveries=1.0)
    # each task's reference trajectory, then its recovery where it has one (two edits: none)
    assert [(e.task_id, e.context) for e in episodes] == [
        ("test/recovery", ()),
        ("test/recovery", (1,)),
        ("test/two-places-short", ()),
        ("test/two-places-short", ()),
    ]
    reference, recovery, _, unplayable = episodes
    assert reference.resolved and recovery.resolved and recovery.verdict == "passed"
    assert "v / factor" in recovery.observations[1]  # the wrong edit, shown
    assert "failed" in recovery.observations[2] and "[exit code 1]" in recovery.observations[2]
    assert "[exit code 0]" in recovery.observations[-1], recovery.observations
    assert not unplayable.resolved and unplayable.verdict.startswith("recovery: no trajectory")
    row = episode_segments(recovery, chat, stop_strings(PRESETS["debug"]))
    actions = row[1::2]  # prompt, then each action and the observation after it
    assert [chat.tokenizer.decode(s.ids) for s in actions] == recovery.actions
    assert [s.trainable for s in actions] == [
        True,
        False,
        True,
        True,
        True,
        True,
    ]  # the wrong edit is context
    assert not any(s.trainable for s in row[0::2])
    # the same through the BC source: 1 of 2 tasks has a recovery row; recoveries 0 gives none
    rows = reference_demonstrations(problems, chat, EnvSettings(debug=debug_settings), recoveries=1.0)
    assert len(rows) == 3
    assert len(reference_demonstrations(problems[:1], chat, EnvSettings(debug=debug_settings))) == 1


def test_a_recovery_whose_wrong_edit_passes_the_tests_is_dropped(debug_settings, monkeypatch):
    """An equivalent mutant (the tests cannot tell it from the fix) would show passing tests and
    then an edit "because they still fail": such a trajectory is never kept."""
    import lit_codeRL.envs.debug.reference as debug_reference

    monkeypatch.setattr(debug_reference, "_wrong_lines", lambda new_lines, edit, seed: list(edit.new))
    with DebugEnv(debug_settings) as env:
        _, recovery = debug_episodes(env, [debug_problem(RECOVERY_TASK)], recoveries=1.0)
    assert recovery.context == (1,) and not recovery.resolved
    assert recovery.verdict == "recovery: its wrong edit did not fail the tests"


ELSEWHERE_TASK = DebugTask(
    "test/recovery-elsewhere",
    "scale",
    {
        "calc.py": "def scale(values, factor):\n    offset = 0\n    return [v + factor + offset for v in values]\n",
        "test_calc.py": "from calc import scale\n\n\ndef test_scale():\n    assert scale([1, 2], 3) == [3, 6]\n",
    },
    fix={
        "calc.py": "def scale(values, factor):\n    offset = 0\n    return [v * factor + offset for v in values]\n"
    },
)


@pytest.mark.parametrize("preset", ["debug", "lines"])
def test_a_recovery_elsewhere_breaks_another_line_changes_it_back_then_fixes(preset):
    tools = PRESETS[preset]
    actions, wrong = recovery_actions(ELSEWHERE_TASK, tools, output_shown=True, elsewhere=True)
    edit = "replace" if preset == "debug" else "edit"
    assert debug_shape(actions) == f"view {edit} eval {edit} {edit} eval submit" and wrong == 1
    files = dict(ELSEWHERE_TASK.files)
    for k in (1, 3, 4):
        call = parse_tool_call(actions[k], tools)
        if edit == "replace":
            files["calc.py"], error = apply_replace(files["calc.py"], call.args["old"], call.args["new"])
        else:
            files["calc.py"], error = apply_edit(files["calc.py"], call.args["lines"], call.args["content"])
        assert error is None
        if k == 1:  # the wrong edit: line 2 (the only other line with a site), not the fix's line 3
            lines = files["calc.py"].splitlines()
            assert (
                lines[1] != "    offset = 0"
                and lines[2] == "    return [v + factor + offset for v in values]"
            )
        if k == 3:  # changed back
            assert files["calc.py"] == ELSEWHERE_TASK.files["calc.py"]
    assert files["calc.py"] == ELSEWHERE_TASK.fix["calc.py"]
    assert actions[3].startswith(STILL_FAILING) and " back.\n" in actions[3]
    # the same draw every call; a fix with no other line to break has none
    assert recovery_actions(ELSEWHERE_TASK, tools, output_shown=True, elsewhere=True) == (actions, 1)
    with pytest.raises(ValueError, match="leaves alone"):
        recovery_actions(RECOVERY_TASK, tools, elsewhere=True)


def test_recoveries_elsewhere_are_played_resolve_and_mask_only_the_wrong_edit(debug_settings, chat):
    """Played for real: the wrong edit of another line fails the tests, the line changed back and
    the fix resolve; BC imitates the change back and the fix, not the wrong edit. A task with no
    other line to break gets the same-line kind."""
    problems = [debug_problem(ELSEWHERE_TASK), debug_problem(RECOVERY_TASK)]
    with DebugEnv(debug_settings) as env:
        episodes = debug_episodes(env, problems, recoveries=1.0, elsewhere=1.0)
    _, elsewhere, _, same_line = episodes
    assert elsewhere.resolved and elsewhere.context == (1,), elsewhere.verdict
    assert debug_shape(elsewhere.actions) == "view replace eval replace replace eval submit"
    assert "failed" in elsewhere.observations[2]
    assert "    offset = 0" in elsewhere.observations[3]  # the line changed back
    assert same_line.resolved and debug_shape(same_line.actions) == "view replace eval replace eval submit"
    row = episode_segments(elsewhere, chat, stop_strings(PRESETS["debug"]))
    assert [s.trainable for s in row[1::2]] == [True, False, True, True, True, True, True]
    with pytest.raises(ConfigError, match="recoveries_elsewhere"):
        DemonstrationSettings(source="debug", recoveries_elsewhere=1.5)


def test_the_recovery_share_is_a_stable_fraction_of_task_ids():
    ids = [f"mbpp-debug/{k}" for k in range(2000)]
    share = sum(wants_recovery(i, 0.3) for i in ids) / len(ids)
    assert 0.26 < share < 0.34
    assert not any(wants_recovery(i, 0.0) for i in ids) and all(wants_recovery(i, 1.0) for i in ids)
    assert [wants_recovery(i, 0.3) for i in ids] == [wants_recovery(i, 0.3) for i in ids]
    with pytest.raises(ConfigError, match="recoveries"):
        DemonstrationSettings(source="debug", recoveries=1.5)


# ------------------------------------------------------------------------------ the BC rows
def runner_record(episode: ReferenceEpisode, chat: ChatFormat, eos_after: set[int]) -> Episode:
    """The episode runner's own record of the same text: ``Turn`` ids as the sampler would have
    emitted them (EOS only where ``eos_after`` says), observations through the runner's path."""
    tokenizer = chat.tokenizer
    record = Episode(None, 0, chat.prompt_ids(episode.prompt), chat.prompt_text(episode.prompt))
    for k, action in enumerate(episode.actions):
        ids = tokenizer(action, add_special_tokens=False)["input_ids"]
        ids += [tokenizer.eos_token_id] if k in eos_after else []
        turn = Turn(ids, [0.0] * len(ids), action, "stop")
        if k < len(episode.observations):
            turn.observation = episode.observations[k]
            turn.observation_ids = chat.observation_ids(episode.observations[k], ids)
        record.turns.append(turn)
    return record


@pytest.mark.parametrize("kind", ["debug", "swe"])
def test_bc_rows_are_the_runners_tokens_with_only_actions_trainable(kind, debug_played, swe_played, chat):
    if kind == "debug":
        episode, stops = debug_played["debug/median"], stop_strings(PRESETS["debug"])
        eos_after: set[int] = set()  # every call, <submit/> included, ends at a stop string
    else:
        episode, stops = swe_played["lit-coderl__numkit-1"], ContainerEnv.stop_strings
        eos_after = {len(episode.actions) - 1}  # <submit/> is no stop string: the policy ends its turn
    row = episode_segments(episode, chat, list(stops))
    want = runner_record(episode, chat, eos_after).segments()
    assert [(s.ids, s.trainable, s.turn) for s in row] == [(s.ids, s.trainable, s.turn) for s in want]
    tokenizer = chat.tokenizer
    assert row[0].ids == tokenizer(chat.prompt_text(episode.prompt), add_special_tokens=False)["input_ids"]
    actions = [s for s in row if s.trainable]
    assert [tokenizer.decode(s.ids, skip_special_tokens=True) for s in actions] == episode.actions
    assert len(actions) == len(episode.actions) and not row[0].trainable
    ends = [s.ids[-1] == tokenizer.eos_token_id for s in actions]
    assert ends == [k in eos_after for k in range(len(actions))]


# ------------------------------------------------------------------------------ BC trains on them
def test_bc_trains_on_debugging_demonstrations(debug_settings, tmp_path):
    from lit_codeRL.problems.files import embedded_data_dir
    from tests.modules.test_grpo_module import cli, read_metrics
    from tests.modules.test_reinforce_bc import csv_logger

    rows = [
        json.loads(line) for line in (embedded_data_dir() / "debug" / "tasks.jsonl").read_text().splitlines()
    ]
    source = tmp_path / "tasks.jsonl"
    source.write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["task_name"] in ("debug/median", "debug/cart"))
    )
    run = tmp_path / "bc"
    cli(
        "fit",
        "--model",
        "BCModule",
        *("--model.init_args.model.name_or_path", "tiny-random"),
        *("--model.init_args.demonstrations.source", f"debug:{source}"),
        *("--model.init_args.demonstrations.max_length", "2048"),
        *("--model.init_args.demonstrations.env.debug.repo_cache", debug_settings.repo_cache),
        *("--model.init_args.demonstrations.env.debug.workspace.backend", "bwrap"),
        *("--model.init_args.batch_size", "2"),
        *("--model.init_args.optimizer.learning_rate", "1e-2"),
        *("--model.init_args.optimizer.warmup_steps", "0"),
        *("--model.init_args.optimizer.lr_schedule", "constant"),
        *("--trainer.max_steps", "10"),
        *("--trainer.accelerator", "cpu"),
        *("--trainer.log_every_n_steps", "1"),
        *csv_logger(run),
    )
    losses = [float(r["train/loss"]) for r in read_metrics(run) if r.get("train/loss")]
    assert len(losses) == 10 and max(losses[-3:]) < 0.8 * losses[0], losses
    assert (next(run.glob("version_*")) / "hf_model" / "config.json").is_file()


# ------------------------------------------------------------------------------ the SWE forms, no sandbox
def test_an_swe_edit_command_replaces_once_and_fails_loudly(tmp_path):
    """Content holding the heredoc marker, triple quotes and backslashes still arrives exactly; a
    second run finds no old text and exits 1 without writing."""
    import subprocess

    from lit_codeRL.envs.swe.reference import edit_command

    old = "x = 1\nEOF\n"
    new = "x = '''a\\n'''\nEOF\ny = r'\\d'\n"
    path = tmp_path / "m.py"
    path.write_text("a\n" + old + "b\n")
    command = edit_command("m.py", old, new)
    assert command.startswith("python3 - <<'EOF_1'\n") and command.endswith("\nEOF_1")
    run = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert path.read_text() == "a\n" + new + "b\n"
    again = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True)
    assert again.returncode == 1 and "exactly once" in again.stderr
    assert path.read_text() == "a\n" + new + "b\n"


def test_an_swe_patch_that_is_no_set_of_text_edits_is_applied_whole():
    from lit_codeRL.envs.swe.reference import apply_patch_action, reference_actions

    task = SWE_TASKS["lit-coderl__numkit-1"].metadata["swe_task"]
    new_file = (
        "diff --git a/numkit/extra.py b/numkit/extra.py\nnew file mode 100644\nindex 0000000..e69de29\n"
    )
    new_file += "--- /dev/null\n+++ b/numkit/extra.py\n@@ -0,0 +1 @@\n+X = 1\n"
    patched = dataclasses.replace(task, patch=task.patch + new_file)
    actions = reference_actions(patched, lambda path: "" if path.startswith("tests/") else None)
    assert actions[1] == apply_patch_action(patched.patch)
    assert swe_shape(actions, task.test_command) == "test apply test submit"
    # without a test patch the F2P node ids exist at the base: the first run names the first (the
    # one a synthesized issue names), the second their files (here none exists: the whole suite)
    bare = dataclasses.replace(patched, test_patch="")
    runs = [parse_action(a).command for a in reference_actions(bare, lambda path: None)[::2]]
    assert runs == ["python -m pytest -q " + task.fail_to_pass[0], "python -m pytest -q"]


def test_a_fix_holding_a_stop_string_has_no_trajectory(tmp_path):
    """``</execute>`` in the new text would end a sampled command there: no form can carry it."""
    from lit_codeRL.envs.swe.reference import reference_actions
    from lit_codeRL.problems.swe import RepoCache

    task = SWE_TASKS["lit-coderl__numkit-1"].metadata["swe_task"]
    root = RepoCache(tmp_path).get(task)
    read = lambda path: (root / path).read_text() if (root / path).is_file() else None  # noqa: E731
    assert "python3 - <<'EOF'" in reference_actions(task, read)[2]
    bad = dataclasses.replace(task, patch=task.patch.replace("mid]) / 2\n", "mid]) / 2  # </execute>\n"))
    with pytest.raises(ValueError, match="stop string"):
        reference_actions(bad, read)


# ------------------------------------------------------------------------------ the cache
def test_played_trajectories_are_cached_and_played_again_when_what_they_depend_on_changes(
    debug_settings, chat, tmp_path, monkeypatch
):
    """A second BC over the same tasks replays nothing (the same rows, no env started); other
    settings, another recovery fraction, lead-ins that name the bug, other env code or a torn file play them again; where a
    task's repository lies is not part of the key."""
    from lit_codeRL.rollout import reference_cache

    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path))
    problems = [debug_problem(RECOVERY_TASK), debug_problem(short_two_places_task())]
    env = EnvSettings(debug=debug_settings)
    first = reference_demonstrations(problems, chat, env, recoveries=1.0, cache=True)
    (stored,) = (tmp_path / "reference").glob("debug-*.json.gz")
    assert len(first) == 3

    class Played(Exception):
        pass

    def refuse(self):
        raise Played

    monkeypatch.setattr(DebugEnv, "__enter__", refuse)
    os.utime(stored, (1, 1))
    again = reference_demonstrations(problems, chat, env, recoveries=1.0, cache=True)
    assert stored.stat().st_mtime > 1, "a file read is marked used (gpu_stage.sh ships only those)"
    assert [[(s.ids, s.trainable) for s in row] for row in again] == [
        [(s.ids, s.trainable) for s in row] for row in first
    ]
    for changed in (
        lambda: reference_demonstrations(problems, chat, env, recoveries=0.5, cache=True),
        lambda: reference_demonstrations(
            problems,
            chat,
            EnvSettings(debug=dataclasses.replace(debug_settings, max_output_chars=100)),
            recoveries=1.0,
            cache=True,
        ),
        lambda: reference_demonstrations(problems, chat, env, recoveries=1.0, cache=False),
        lambda: reference_demonstrations(problems, chat, env, recoveries=1.0, cache=True, explain=True),
        lambda: reference_demonstrations(
            problems, chat, env, recoveries=1.0, cache=True, recoveries_elsewhere=1.0
        ),
    ):
        with pytest.raises(Played):
            changed()
    monkeypatch.setattr(reference_cache, "code_digest", lambda: "another version of the env")
    with pytest.raises(Played):
        reference_demonstrations(problems, chat, env, recoveries=1.0, cache=True)
    monkeypatch.undo()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path))
    monkeypatch.setattr(DebugEnv, "__enter__", refuse)
    stored.write_bytes(b"torn")
    with pytest.raises(Played):
        reference_demonstrations(problems, chat, env, recoveries=1.0, cache=True)
    # where the files lie is not what they are
    swe = SWE_TASKS["lit-coderl__numkit-1"]
    moved = to_problem(dataclasses.replace(swe.metadata["swe_task"], repo_source="/elsewhere/numkit.bundle"))
    elsewhere = SWESettings(
        repo_cache="/elsewhere", workspace=WorkspaceConfig(python="/opt/venv/bin/python3")
    )
    mix = {"explain": False, "misquotes": 0.0}
    assert reference_cache.cache_key("swe", [swe], SWESettings(), mix) == reference_cache.cache_key(
        "swe", [moved], elsewhere, mix
    ), "the GPU machine's interpreter and caches lie elsewhere"


def test_the_first_run_names_the_first_failing_test_unless_the_hidden_patch_writes_its_file():
    """An MBPP task's held-out checks come in a module of their own (its ``test_patch``): the
    first failing test, the one its statement names, is at the base and runs by its node id; a
    SWE-bench test patch that changes that test's file means the test is not there yet as graded."""
    from lit_codeRL.envs.swe.reference import tests_to_run

    task = SWE_TASKS["lit-coderl__numkit-1"].metadata["swe_task"]
    added = "diff --git a/test_held_out.py b/test_held_out.py\nnew file mode 100644\n--- /dev/null\n"
    added += "+++ b/test_held_out.py\n@@ -0,0 +1 @@\n+X = 1\n"
    held_out = dataclasses.replace(
        task, fail_to_pass=("tests/test_a.py::test_x", "test_held_out.py::test_held_out_1"), test_patch=added
    )
    at_base = lambda path: path == "tests/test_a.py"  # noqa: E731
    assert tests_to_run(held_out, at_base) == (["tests/test_a.py::test_x"], ["tests/test_a.py"])
    changed = dataclasses.replace(held_out, test_patch=added.replace("test_held_out.py", "tests/test_a.py"))
    assert tests_to_run(changed, at_base) == (["tests/test_a.py"], ["tests/test_a.py"])
