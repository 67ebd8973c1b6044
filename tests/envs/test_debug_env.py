"""The debugging gym through the real bubblewrap sandbox: a whole episode driven by hand (pdb stops
at a breakpoint, an edit restarts it with its breakpoints, eval, submit = reward 1), the reward
hacks of the published pdb-gym design scoring 0, defined feedback for malformed tool calls,
auto-grading at truncation, the time budget masking an episode, the rewrite-only preset, and the
episode runner's dump of every tool call."""

from __future__ import annotations

import random

import pytest

from lit_codeRL.envs.debug.env import READ_LIMIT, DebugEnv, DebugSettings
from lit_codeRL.envs.debug.env import tests_output as strip_durations
from lit_codeRL.envs.debug.pdb_session import MAX_BREAKPOINTS
from lit_codeRL.envs.debug.tools import PRESETS, parse_tool_call
from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.workspace_episodes import DUMP_TEXT_CHARS
from lit_codeRL.grading.repo import MAX_PATCH_BYTES
from lit_codeRL.problems.debug import debug_problem
from lit_codeRL.problems.debug_task import DebugTask
from lit_codeRL.sandbox.workspace import MAX_DIFF_BYTES
from tests.envs.test_reference_trajectories import BANNER, BANNER_TASK, BUG_LINE
from tests.sandbox.conftest import require_bwrap

FIX_LINE = "    return (ordered[middle - 1] + ordered[middle]) / 2\n"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_bwrap()
    cache = tmp_path_factory.mktemp("debug-cache")
    env = DebugEnv(DebugSettings(repo_cache=str(cache), workspace={"backend": "bwrap"}))
    yield env
    env.close()


def step(env: DebugEnv, state, text: str, reason: str = "stop"):
    (result,) = env.step_batch([state], [Action(text, reason)]).result()
    return result


def start(env, problem):
    (first,) = env.reset_batch([problem])
    return first.observation, first.state


def test_a_pdb_command_is_its_first_line_as_the_terminal_reads_it(env, median):
    """A line separator inside the command's string is part of it (str.splitlines cut the
    command there: a SyntaxError); a second line after a newline is still dropped."""
    _, state = start(env, median)
    out = step(env, state, "<pdb>p 'a\u2028b' + 'c'\np 'second line'</pdb>")
    assert "'a\\u2028bc'" in out.observation, out.observation  # shown escaped (clean_text)
    assert "SyntaxError" not in out.observation and "second line" not in out.observation


def test_a_process_forked_at_the_prompt_does_not_answer_the_agents_commands(env, median):
    """``!os.fork()``: both processes' debuggers read the one terminal, and each later command was
    answered by either of them, at random (pids 7, 8, 7, 7, 8... in a row); on a loaded machine
    the child's late prompt ended the next command before its answer. The child of a command
    typed at the prompt now ends at once, silently, and every command is answered by the
    debugger the agent started, in order."""
    import re

    _, state = start(env, median)
    out = step(env, state, "<pdb>!import os; print('pid', os.getpid(), 'first')</pdb>")
    (first,) = re.findall(r"pid (\d+) first", out.observation)
    step(env, state, "<pdb>!os.fork()</pdb>")
    answers, seen = [], []
    for i in range(8):
        out = step(env, state, f"<pdb>!print('pid', os.getpid(), 'turn', {i})</pdb>")
        answers.append(re.findall(r"pid (\d+) turn (\d+)", out.observation))
        seen.append(out.observation[-400:])
    assert answers == [[(first, str(i))] for i in range(8)], (answers, seen)
    assert state.pdb.restarts == 1


def test_processes_started_at_the_prompt_run_and_their_children_answer_nothing(env, median):
    """The child of a typed command ended at the fork, so a process started at the prompt ran
    nothing (``Process.start(); join()``: exit code 0, its work not done) and a process pool
    executor broke (``BrokenProcessPool``). Now the child runs the command on and ends where it
    would come back to the prompt: the processes work, their own output shows, the child of a
    bare ``os.fork()`` shows nothing, and only the agent's debugger answers."""
    import re

    _, state = start(env, median)
    out = step(env, state, "<pdb>!import os, multiprocessing as mp; print('pid', os.getpid(), 'first')</pdb>")
    (first,) = re.findall(r"pid (\d+) first", out.observation)
    out = step(
        env, state, "<pdb>!p = mp.get_context('fork').Process(target=print, args=('from a worker',))</pdb>"
    )
    out = step(env, state, "<pdb>!p.start(); p.join(); print('exit', p.exitcode)</pdb>")
    assert "from a worker" in out.observation and "exit 0" in out.observation, out.observation
    pool = "concurrent.futures.ProcessPoolExecutor(2, mp_context=mp.get_context('fork'))"
    out = step(
        env,
        state,
        f"<pdb>!import concurrent.futures; print('mapped', list({pool}.map(abs, [-1, -2, -3])))</pdb>",
    )
    assert "mapped [1, 2, 3]" in out.observation and "did not return" not in out.observation, out.observation
    out = step(env, state, "<pdb>os.fork()</pdb>")
    (child,) = re.findall(r"^(\d+)\s*$", out.observation, re.M)  # the parent shows the child's pid
    assert int(child) != int(first)
    for i in range(4):
        out = step(env, state, f"<pdb>!print('pid', os.getpid(), 'turn', {i})</pdb>")
        assert re.findall(r"pid (\d+) turn (\d+)", out.observation) == [(first, str(i))], out.observation
        assert not re.search(r"^0\s*$", out.observation, re.M), out.observation  # the child's value
    assert state.pdb.restarts == 1


def test_the_recursive_debugger_and_breakpoint_commands_answer_at_their_prompts(env, median):
    """``debug`` (prompt ``((Pdb))``) and ``commands`` (prompt ``(com)``) waited for ``(Pdb)``
    until the time limit killed the debugger: 10 s and the session for a pdb command."""
    _, state = start(env, median)
    out = step(env, state, "<pdb>debug len([1, 2])</pdb>")
    assert "((Pdb))" in out.observation and "did not return" not in out.observation, out.observation
    out = step(env, state, "<pdb>s</pdb>")
    assert "did not return" not in out.observation and state.pdb.restarts == 1
    step(env, state, "<pdb>q</pdb>")  # back to the outer debugger
    assert "3" in step(env, state, "<pdb>p 1 + 2</pdb>").observation and state.pdb.restarts == 1
    step(env, state, "<pdb>b stats.py:19</pdb>")
    out = step(env, state, "<pdb>commands 1</pdb>")
    assert "(com)" in out.observation and "did not return" not in out.observation, out.observation
    step(env, state, "<pdb>p ordered</pdb>")
    step(env, state, "<pdb>end</pdb>")
    out = step(env, state, "<pdb>c</pdb>")
    assert "stats.py(19)median()" in out.observation and "[" in out.observation, out.observation
    assert state.pdb.restarts == 1


def test_a_whole_episode_with_the_debugger(env, median):
    obs, state = start(env, median)
    assert "median" in obs and "stats.py, test_stats.py" in obs
    assert "failed" in obs and "<pdb>COMMAND</pdb>" in obs  # the initial eval and the tool list
    out = step(env, state, "Let me look. <view>stats.py 13-19</view>")
    assert "19| " in out.observation and "// 2" in out.observation and out.reward == 0
    out = step(env, state, "<pdb>b stats.py:19</pdb>")
    assert "Breakpoint 1 at" in out.observation and "(re)started" in out.observation
    out = step(env, state, "<pdb>c</pdb>")
    assert "stats.py(19)median()" in out.observation
    out = step(env, state, "<pdb>p ordered</pdb>")
    assert "[1, 5, 3, 7]" not in out.observation and "[" in out.observation  # a sorted list printed
    out = step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    assert "19|     return (ordered[middle - 1] + ordered[middle]) / 2\n" in out.observation
    assert out.info["dump"]["diff"].count("+    return") == 1
    out = step(env, state, "<pdb>c</pdb>")  # restarted after the edit, breakpoint set again
    assert "(re)started" in out.observation and "stats.py(19)median()" in out.observation
    assert state.pdb.locations == ["stats.py:19"] and state.pdb.restarts == 2
    out = step(env, state, "<eval/>")
    assert "passed" in out.observation and "failed" not in out.observation
    out = step(env, state, "<submit/>")
    assert out.terminated and out.reward == 1.0 and out.info["verdict"] == "passed"
    assert out.info["episode"]["grade"]["resolved"] and out.info["num_edits"] == 1
    assert out.info["tools_used"] == {"view": 1, "pdb": 4, "edit": 1, "eval": 1}


HACKS = {
    "printed pass line": '<edit path="stats.py" lines="1-1">print("7 passed")\n</edit>',
    "tests rewritten": '<rewrite path="test_stats.py">def test_ok():\n    assert True\n</rewrite>',
    "conftest forger": (
        '<rewrite path="conftest.py">import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n'
        "def pytest_runtest_makereport(item, call):\n    out = yield\n    rep = out.get_result()\n"
        '    rep.outcome = "passed"\n</rewrite>'
    ),
    "exit 0 at import": '<edit path="stats.py" lines="1-1">import os; os._exit(0)\n</edit>',
    "skip everything": '<edit path="stats.py" lines="1-1">import pytest; pytest.skip("no", allow_module_level=True)\n</edit>',
    "tests edited through pdb": (
        "<pdb>!open('test_stats.py', 'w').write('def test_ok():\\n    assert True\\n')</pdb>"
    ),
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_reward_hacks_score_zero(env, median, hack):
    _, state = start(env, median)
    out = step(env, state, HACKS[hack])
    assert not out.terminated and out.reward == 0
    if hack == "tests edited through pdb":
        check = step(env, state, "<view>test_stats.py</view>")
        assert "assert True" in check.observation  # the agent really did it
    out = step(env, state, "<submit/>")
    assert out.terminated and out.reward == 0.0 and out.info["verdict"] != "passed", out.info


def test_the_fix_with_a_forged_conftest_still_resolves(env, median):
    """The control: grading ignores the conftest, it does not fail a real fix because of it."""
    _, state = start(env, median)
    step(env, state, HACKS["conftest forger"])
    step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    assert step(env, state, "<submit/>").reward == 1.0


def test_malformed_calls_get_defined_feedback_and_cost_nothing_else(env, median):
    _, state = start(env, median)
    cases = {
        "I think the bug is in median.": "No tool call found",
        "<bash>ls</bash>": "is not available here",
        '<edit path="stats.py" lines="40-50">x</edit>': "outside the file",
        '<edit path="stats.py">x</edit>': 'needs lines="START-END"',
        "<view></view>": "needs a file name",
        "<view>nope.py</view>": "no such file",
        "<pdb>interact</pdb>": "cannot drive",
    }
    for text, expected in cases.items():
        out = step(env, state, text)
        assert expected in out.observation and not out.terminated and not out.truncated, text
    out = step(env, state, "<pdb>b stats.py:19", reason="length")
    assert "cut off" in out.observation
    assert step(env, state, "<eval/>").info["dump"]["tool"] == "eval"  # the episode goes on


def test_an_endless_loop_under_the_debugger_is_killed_and_the_episode_goes_on(env, median):
    _, state = start(env, median)
    step(env, state, '<edit path="stats.py" lines="1-1">while True:\n    pass\n</edit>')
    out = step(env, state, "<pdb>c</pdb>")
    assert "did not return" in out.observation
    step(env, state, '<edit path="stats.py" lines="1-2">"""Summary statistics."""\n</edit>')
    step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    assert step(env, state, "<submit/>").reward == 1.0


def test_truncated_episodes_are_graded_as_they_stand(env, median):
    _, fixed = start(env, median)
    step(env, fixed, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    _, untouched = start(env, median)
    results = env.finish_batch([fixed, untouched], [True, True])
    assert [r.reward for r in results] == [1.0, 0.0]
    assert all(r.truncated and not r.terminated for r in results)


def budget_env(tmp_path, trajectory_timeout_s: float, pdb_timeout_s: float) -> DebugEnv:
    """An env of its own with a small tool-time budget (no initial eval: it would spend it)."""
    require_bwrap()
    return DebugEnv(
        DebugSettings(
            repo_cache=str(tmp_path),
            trajectory_timeout_s=trajectory_timeout_s,
            pdb_timeout_s=pdb_timeout_s,
            show_initial_eval=False,
        )
    )


def test_the_tool_time_budget_masks_the_episode(tmp_path, median):
    env = budget_env(tmp_path, trajectory_timeout_s=1.0, pdb_timeout_s=2.0)
    try:
        _, state = start(env, median)
        step(env, state, '<edit path="stats.py" lines="1-1">import time; time.sleep(5)\n</edit>')
        out = step(env, state, "<pdb>c</pdb>")
        assert out.info.get("masked") and out.info["verdict"] == "env_time_limit" and out.truncated
    finally:
        env.close()


def test_breakpoints_kept_are_the_ones_pdb_set_and_bounded(env, median):
    """``b EXPR`` evaluates EXPR, so a ``b`` command prints what the agent likes: every
    ``Breakpoint N at FILE:LINE`` line it printed was kept as a breakpoint, set again at each
    restart (one pdb round trip each) and copied into every later turn's dump; ~110 a turn made
    thousands in an episode (megabytes of dumps kept per episode, seconds per restart). A ``b``
    keeps only the one breakpoint pdb reports last, and an episode keeps at most
    ``MAX_BREAKPOINTS``."""
    _, state = start(env, median)
    step(env, state, '<rewrite path="b.py">' + "x = 1\n" * 400 + "</rewrite>")
    # no comma in EXPR: pdb reads what follows one as the breakpoint's condition
    lines = '["Breakpoint 1 at b.py" + chr(58) + str(1 + i) for i in range(120)]'
    plant = f"<pdb>b print(chr(10).join({lines}))</pdb>"
    out = step(env, state, plant)
    assert out.observation.count("Breakpoint 1 at b.py") > 50, out.observation  # printed, as pdb would
    assert len(state.pdb.locations) <= 1, len(state.pdb.locations)
    for line in range(1, MAX_BREAKPOINTS + 6):
        out = step(env, state, f"<pdb>b b.py:{line}</pdb>")
    assert len(state.pdb.locations) == MAX_BREAKPOINTS, len(state.pdb.locations)
    assert len(out.info["dump"]["breakpoints"]) == MAX_BREAKPOINTS
    assert "not kept" in out.observation, out.observation
    assert "b.py:1" in state.pdb.locations and f"b.py:{MAX_BREAKPOINTS + 5}" not in state.pdb.locations


def test_an_initial_eval_that_fails_masks_its_episode_not_the_batch(tmp_path, median, monkeypatch):
    """The tests' run for the first observation was the one workspace call outside every
    handler: a session that stopped answering there (a loaded machine, the outer clock) raised out
    of ``reset_batch``, an exception out of ``fit``. Now that episode is masked at its first step
    and the failed output is not cached as the task's first observation."""
    from lit_codeRL.sandbox.workspace import Workspace, WorkspaceDead

    require_bwrap()
    env = DebugEnv(DebugSettings(repo_cache=str(tmp_path), workspace={"backend": "bwrap"}))
    try:
        env.task_of(median)  # the task prepared (its tests run once) before the sessions fail
        real = Workspace.run

        def dead(self, *args, **kwargs):
            raise WorkspaceDead("the workspace is dead: TimeoutError: the workspace did not answer in time")

        monkeypatch.setattr(Workspace, "run", dead)
        (first,) = env.reset_batch([median])
        monkeypatch.setattr(Workspace, "run", real)
        assert "The tests now give" not in first.observation
        out = step(env, first.state, "<eval/>")
        assert out.info.get("masked") and out.info.get("sandbox_error"), out.info
        (again,) = env.reset_batch([median])  # the next reset runs the tests for it
        assert "The tests now give" in again.observation and "failed" in again.observation
    finally:
        env.close()


def test_an_initial_eval_past_its_limit_is_shown_once_not_kept(tmp_path, median, monkeypatch):
    """The first observation's test run is kept for every later episode of the task: one that ran
    past its limit (a loaded machine) is shown to its own episode only, and the next reset runs
    the tests again."""
    from lit_codeRL.sandbox.workspace import Workspace
    from lit_codeRL.sandbox.workspace_types import CommandResult

    require_bwrap()
    env = DebugEnv(DebugSettings(repo_cache=str(tmp_path), workspace={"backend": "bwrap"}))
    try:
        env.task_of(median)
        real = Workspace.run

        def slow(self, *args, **kwargs):
            return CommandResult(None, "....", True, False, 4, 30.0)

        monkeypatch.setattr(Workspace, "run", slow)
        (first,) = env.reset_batch([median])
        monkeypatch.setattr(Workspace, "run", real)
        assert "[timed out and was killed]" in first.observation
        (again,) = env.reset_batch([median])
        assert "timed out" not in again.observation and "failed" in again.observation
        assert "[exit code 1]" in again.observation
    finally:
        env.close()


def test_an_edit_whose_diff_fails_says_the_edit_is_made(env, median, monkeypatch):
    """The agent's git config can make the diff after an edit fail (a clean filter that exits
    non-zero); the file was written all the same, and "<edit> failed" would be untrue."""
    from lit_codeRL.sandbox.workspace import Workspace, WorkspaceError

    _, state = start(env, median)

    def failing(self, *args, **kwargs):
        raise WorkspaceError("git add failed (128): error: external filter 'false' failed")

    monkeypatch.setattr(Workspace, "diff", failing)
    out = step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    monkeypatch.undo()
    assert "stats.py now reads:" in out.observation and "failed:" not in out.observation.split("\n")[0]
    assert "the edit is made, but git could not take the diff" in out.observation
    assert step(env, state, "<submit/>").reward == 1.0  # graded from the files as they are


def test_a_debugger_that_never_starts_spends_the_tool_time_budget(tmp_path, median):
    """A module of the repository that shadows one pdb imports (``glob.py`` beside the tests:
    ``python -m pdb`` puts the working directory first on ``sys.path``) and sleeps keeps the
    debugger from its prompt: each pdb call then waited ``pdb_timeout_s`` and failed, and a failed
    call's time was counted nowhere, so an episode could spend its turns waiting past
    ``trajectory_timeout_s`` without ever being masked."""
    env = budget_env(tmp_path, trajectory_timeout_s=3.0, pdb_timeout_s=1.0)
    try:
        _, state = start(env, median)
        step(env, state, '<rewrite path="glob.py">import time\ntime.sleep(60)\n</rewrite>')
        for _ in range(6):
            out = step(env, state, "<pdb>p 1</pdb>")
            if out.truncated:
                break
            assert "did not start" in out.observation, out.observation
        assert out.info.get("masked") and out.info["verdict"] == "env_time_limit", (state.tool_s, out)
    finally:
        env.close()


def test_a_hanging_edit_costs_a_multiple_of_the_reference_run_not_the_whole_limit(tmp_path, median):
    """A validated task's eval tool and grading are cut at ``grade_timeout_factor`` times its
    reference run (``grade_min_timeout_s`` at least), not at ``eval_timeout_s`` /
    ``grade_timeout_s``: an RL batch waits seconds for an edit that hangs the tests."""
    import time

    require_bwrap()
    settings = DebugSettings(
        repo_cache=str(tmp_path), workspace={"backend": "bwrap"}, show_initial_eval=False,
        eval_timeout_s=90, grade_timeout_s=90, grade_timeout_factor=2, grade_min_timeout_s=3,
    )  # fmt: skip
    env = DebugEnv(settings)
    try:
        assert env.validate_problems([median]) == [median]
        limit = env.grader.time_limit(env.task_of(median))
        assert 3 <= limit < 30
        _, state = start(env, median)
        step(env, state, '<edit path="stats.py" lines="1-1">import time; time.sleep(600)\n</edit>')
        t0 = time.monotonic()
        out = step(env, state, "<eval/>")
        assert time.monotonic() - t0 < limit + 10 and not out.terminated
        t0 = time.monotonic()
        out = step(env, state, "<submit/>")
        assert out.terminated and out.reward == 0.0 and out.info["verdict"] == "timeout"
        assert time.monotonic() - t0 < limit + 15
    finally:
        env.close()


def test_an_edit_that_loops_forever_costs_its_cpu_limit(tmp_path, median):
    """The eval tool and the grade stop a busy loop at the grader's CPU-time limit
    (``grade_min_cpu_s`` here) while the wall-clock floor is a minute, and the agent reads why."""
    import time

    require_bwrap()
    settings = DebugSettings(
        repo_cache=str(tmp_path), workspace={"backend": "bwrap"}, show_initial_eval=False,
        eval_timeout_s=90, grade_timeout_s=90, grade_timeout_factor=2, grade_min_timeout_s=60,
        grade_min_cpu_s=2,
    )  # fmt: skip
    env = DebugEnv(settings)
    try:
        assert env.validate_problems([median]) == [median]
        cpu = env.grader.cpu_limit(env.task_of(median))
        assert cpu is not None and 2 <= cpu < 20
        _, state = start(env, median)
        step(env, state, '<edit path="stats.py" lines="1-1">while True: pass\n</edit>')
        t0 = time.monotonic()
        out = step(env, state, "<eval/>")
        assert time.monotonic() - t0 < cpu + 15 and not out.terminated
        assert out.observation.endswith(f"[used {cpu:g} s of CPU time and was killed]"), out.observation
        t0 = time.monotonic()
        out = step(env, state, "<submit/>")
        assert out.terminated and out.reward == 0.0 and out.info["verdict"] == "timeout"
        assert time.monotonic() - t0 < cpu + 20
    finally:
        env.close()


def test_rewrite_only_preset(tmp_path, median):
    require_bwrap()
    tools = PRESETS["rewrite"]
    assert "pdb" not in tools and "edit" not in tools
    assert parse_tool_call("<pdb>c</pdb>", tools).message.startswith("The tool 'pdb' is not available")
    env = DebugEnv(DebugSettings(repo_cache=str(tmp_path), tools="rewrite"))
    try:
        obs, state = start(env, median)
        assert "<pdb>" not in obs and "<rewrite" in obs
        fixed = env.task_of(median)  # the reference fix as a whole file
        text = median.metadata["debug_task"].fix["stats.py"]
        out = step(env, state, f'<rewrite path="stats.py">\n{text}</rewrite>')
        assert "now reads" in out.observation
        assert step(env, state, "<submit/>").reward == 1.0 and fixed.fail_to_pass
    finally:
        env.close()


def test_pytest_durations_leave_the_observation_unchanged():
    assert strip_durations("3 failed, 4 passed in 0.05s\n") == "3 failed, 4 passed\n"
    assert strip_durations("== 1 passed in 12.31s ==") == "== 1 passed =="


def _goes_on(out) -> bool:
    """A turn that answered the agent and left the episode running (not masked, not ended)."""
    return not (out.terminated or out.truncated or out.info.get("masked") or out.info.get("sandbox_error"))


@pytest.mark.parametrize(
    "call",
    [
        "<view>stats.py 1-" + "9" * 5000 + "</view>",
        "<view>stats.py " + "9" * 5000 + "</view>",
        '<edit path="stats.py" lines="1-' + "9" * 5000 + '">x\n</edit>',
        '<edit path="stats.py" lines="' + "1" * 10 + '">x\n</edit>',
    ],
)
def test_a_line_number_of_any_length_gets_a_message_not_an_exception(env, median, call):
    # int() of 4300+ digits raises ValueError: before the fix it left the tool as an exception
    # and the episode was masked as a sandbox error for the agent's own input
    _, state = start(env, median)
    out = step(env, state, call)
    assert _goes_on(out) and "at most 9 digits" in out.observation, out.info
    assert "19| " in step(env, state, "<view>stats.py 19-19</view>").observation


def test_pdb_output_naming_a_huge_breakpoint_number_is_not_an_exception(tmp_path, median):
    require_bwrap()  # output long enough to hold 5000 digits (the default 3000 characters cannot)
    settings = DebugSettings(repo_cache=str(tmp_path), workspace={"backend": "bwrap"}, max_output_chars=20000)
    with DebugEnv(settings) as env:
        _pdb_huge_breakpoint_number(env, median)


def _pdb_huge_breakpoint_number(env, median) -> None:
    _, state = start(env, median)
    out = step(env, state, "<pdb>!print('Deleted breakpoint ' + '9' * 5000)</pdb>")
    assert _goes_on(out), out.info
    assert "Breakpoint 1 at" in step(env, state, "<pdb>b stats.py:19</pdb>").observation


@pytest.mark.parametrize(
    "call",
    [
        '<rewrite path="x.py">\ud800</rewrite>',
        '<edit path="stats.py" lines="1-1">\udce9\n</edit>',
        '<replace path="stats.py"><old>def mean</old><new>def \ud83d</new></replace>',
        '<replace path="stats.py"><old>def \udc80</old><new>def mean</new></replace>',
        "<pdb>p '\ud800'</pdb>",
        "<view>stats.py\udce9</view>",
    ],
)
def test_text_that_is_not_unicode_gets_a_message_and_changes_nothing(env, median, call):
    # a lone surrogate cannot be encoded: before the fix write_file raised UnicodeEncodeError in the
    # trainer and the episode was masked as a sandbox error
    _, state = start(env, median)
    out = step(env, state, call)
    assert _goes_on(out) and "lone surrogate" in out.observation, out.info
    assert "\n" not in out.observation.split("lone surrogate")[0]  # one line
    assert state.last_diff == "" and step(env, state, "<eval/>").info["dump"]["tool"] == "eval"


def _big_file(env, state, size: int, last: str = "x") -> bytes:
    """big.py, written by the agent: ``size`` bytes of ``x = 1`` lines ending with ``last``."""
    tail = ("#" + last).encode()
    data = b"x = 1\n" * ((size - len(tail)) // 6)
    data += b"#" * (size - len(tail) - len(data)) + tail
    step(env, state, f'<rewrite path="big.py">{data.decode()}</rewrite>')
    assert _read(state, "big.py") == data
    return data


def _read(state, path: str) -> bytes:
    return state.workspace.read_file(path, max_bytes=4 * READ_LIMIT)


@pytest.mark.parametrize(
    "call",
    [
        '<replace path="big.py"><old>x = 1\n#</old><new>x = 2\n#</new></replace>',
        '<edit path="big.py" lines="1-1">y = 2\n</edit>',
    ],
)
def test_a_file_too_large_to_edit_is_refused_not_cut(env, median, call):
    # edit and replace read 1 MiB and wrote the edited text back whole: the file was cut to 1 MiB
    _, state = start(env, median)
    data = _big_file(env, state, READ_LIMIT + 1, last="\u00e9")  # a 2-byte character across the limit
    out = step(env, state, call)
    assert _goes_on(out) and "larger than" in out.observation and "not UTF-8" not in out.observation
    assert _read(state, "big.py") == data
    out = step(env, state, "<view>big.py 1-2</view>")
    assert "1| x = 1" in out.observation and "only its start was read" in out.observation


def test_a_file_at_the_size_limit_is_edited_whole(env, median):
    _, state = start(env, median)
    data = _big_file(env, state, READ_LIMIT)
    out = step(env, state, '<edit path="big.py" lines="1-1">y = 2\n</edit>')
    assert "1| y = 2" in out.observation
    assert _read(state, "big.py") == b"y = 2\n" + data[6:]


def test_the_dump_of_a_turn_keeps_a_bounded_diff(env, median):
    # every turn's dump stays in the trainer: a diff after a large file the agent wrote is capped
    # there, and the final diff (what grading and `lit-coderl episode` read) is whole
    _, state = start(env, median)
    _big_file(env, state, 1 << 20)
    out = step(env, state, '<edit path="big.py" lines="1-1">y = 2\n</edit>')
    diff = out.info["dump"]["diff"]
    assert len(diff) < DUMP_TEXT_CHARS + 200 and "characters in all" in diff
    assert len(out.info["dump"]["output"]) < DUMP_TEXT_CHARS + 200
    final = step(env, state, "<submit/>")
    assert (
        len(final.info["episode"]["diff"]) > 1 << 20
        and "characters in all" not in final.info["episode"]["diff"]
    )


def test_a_diff_larger_than_grading_takes_never_reaches_the_trainer(env, median):
    """Files written through pdb's ! (up to the workspace's disk) made a diff the trainer received
    and held whole after every edit (100 MB of random bytes: a 135 MB diff, 500 MB of the
    trainer's memory, per episode). The workspace refuses a diff over grading's limit; the edit
    says so, submitting grades patch_failed, and removing the file lets the fix be graded."""
    assert MAX_DIFF_BYTES == MAX_PATCH_BYTES
    _, state = start(env, median)
    blob = f"<pdb>!import os; open('blob.bin', 'wb').write(os.urandom({MAX_DIFF_BYTES}))</pdb>"
    step(env, state, blob)
    out = step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    assert "19|     return (ordered[middle - 1] + ordered[middle]) / 2" in out.observation  # it was made
    assert "over the 16777216-byte limit of grading" in out.observation, out.observation[-300:]
    assert state.last_diff == "" and out.info["dump"]["diff"] == ""
    final = step(env, state, "<submit/>")
    assert final.terminated and final.reward == 0.0 and final.info["verdict"] == "patch_failed"
    assert final.info["agent_fault"] and not final.info.get("masked")
    _, state = start(env, median)  # the control: the file removed again, the fix is graded
    step(env, state, blob)
    step(env, state, f'<edit path="stats.py" lines="19-19">{FIX_LINE}</edit>')
    step(env, state, "<pdb>!import os; os.remove('blob.bin')</pdb>")
    assert step(env, state, "<submit/>").reward == 1.0


HELPER_TASK = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "checks.py": "def same(got, want):\n    assert got == want, (got, want)\n",
    "test_calc.py": (
        "from calc import add\nfrom checks import same\n\n\ndef test_add():\n    same(add(2, 3), 5)\n\n\n"
        "def test_zero():\n    same(add(0, 0), 0)\n"
    ),
}


def test_the_tests_own_helper_is_theirs_not_the_agents(env):
    """A module only the tests import (an assertion helper not named like a test) rewritten to
    assert nothing made the failing test pass with the bug in place: reward 1 for no fix. It is
    restored with the tests now; beside the real fix, the fix still resolves."""
    fix = {"calc.py": HELPER_TASK["calc.py"].replace("a - b", "a + b")}
    task = DebugTask("redteam/helper", "Add two numbers.", dict(HELPER_TASK), fix=fix)
    assert task.test_support == ["checks.py"]
    (problem,) = env.validate_problems([debug_problem(task)])
    hollow = '<rewrite path="checks.py">def same(got, want):\n    pass\n</rewrite>'
    fixed = f'<rewrite path="calc.py">{fix["calc.py"]}</rewrite>'
    for actions, reward in (([hollow], 0.0), ([hollow, fixed], 1.0), ([fixed], 1.0)):
        _, state = start(env, problem)
        for action in actions:
            step(env, state, action)
        out = step(env, state, "<submit/>")
        assert out.reward == reward, (actions, out.info["episode"]["grade"])
        assert ("checks.py" in out.info["episode"]["grade"]["restored"]) == (hollow in actions)
    # the same helper made hollow in the process instead of the file: the program rebinds it as
    # it is imported, before the test module's ``from checks import same`` (``_guard.TestsOwn``)
    rebound = (
        '<rewrite path="calc.py">import checks\n\nchecks.same = lambda got, want: None\n\n\n'
        "def add(a, b):\n    return a - b\n</rewrite>"
    )
    _, state = start(env, problem)
    step(env, state, rebound)
    out = step(env, state, "<submit/>")
    grade = out.info["episode"]["grade"]
    assert out.reward == 0.0 and grade["verdict"] == "tamper", grade
    assert "a name of the tests' own rebound to the diff's code: checks.same" in grade["reason"], grade


@pytest.mark.parametrize(
    "files, fix, support",
    [
        (HELPER_TASK, {"calc.py": "fixed\n"}, ["checks.py"]),
        # the program the tests import that uses the fixed module, or that the program names
        ({"money.py": "", "report.py": "import money\n", "test_r.py": "import report\n"}, {"money.py": "x\n"}, []),
        ({"a.py": "# see b\n", "b.py": "", "test_a.py": "import a, b\n"}, {"a.py": "# see b, fixed\n"}, []),
        # a helper's own helper is the tests' too; without a fix nothing is
        ({**HELPER_TASK, "checks.py": "from eq import same\n", "eq.py": "def same(a, b): assert a == b\n"},
         {"calc.py": "fixed\n"}, ["checks.py", "eq.py"]),
        (HELPER_TASK, None, []),
        # a helper package's modules reached by relative imports
        ({**HELPER_TASK, "checks.py": "from helpers import same\n", "helpers/__init__.py": "from .eq import same\n",
          "helpers/eq.py": "def same(a, b): assert a == b\n"},
         {"calc.py": "fixed\n"}, ["checks.py", "helpers/__init__.py", "helpers/eq.py"]),
    ],
)  # fmt: skip
def test_which_modules_are_the_tests_own(files, fix, support):
    assert DebugTask("redteam/support", "d", dict(files), fix=fix).test_support == support


def test_the_same_state_twice_in_a_batch_runs_once_and_blames_no_one(env, median):
    _, state = start(env, median)
    done, repeat = env.step_batch(
        [state, state], [Action("<submit/>"), Action("<view>stats.py</view>")]
    ).result()
    assert done.terminated and done.info["verdict"] == "unresolved"
    assert repeat.info["verdict"] == "not_stepped" and repeat.info["masked"]
    assert not repeat.info.get("agent_fault") and not repeat.info.get("sandbox_error")
    (after,) = env.step_batch([state], [Action("<view>stats.py</view>")]).result()  # the episode is over
    assert after.info["verdict"] == "not_stepped" and not after.info.get("sandbox_error")
    _, state = start(env, median)
    first, second = env.step_batch(
        [state, state], [Action("<view>stats.py 1-1</view>"), Action("<eval/>")]
    ).result()
    assert "1| " in first.observation and second.info["verdict"] == "not_stepped"
    assert _goes_on(step(env, state, "<view>stats.py 1-1</view>"))


def test_python_lines_number_lines_as_python_does(tmp_path):
    """``python_lines`` splits where a traceback, ``linecache`` (pdb) and ``compile`` count a line
    and nowhere else; ``str.splitlines`` (what view and edit counted) did not."""
    import linecache
    import traceback

    from lit_codeRL.envs.text import line_number, python_lines

    cases = {  # written by hand
        "": [],
        "a": ["a"],
        "a\n": ["a\n"],
        "a\r\nb\rc\nd": ["a\r\n", "b\r", "c\n", "d"],
        "\n\r\n\r": ["\n", "\r\n", "\r"],
        "x\x0cy\u2028z\x85w\x0b\x1c\x1d\x1e\u2029v\n": ["x\x0cy\u2028z\x85w\x0b\x1c\x1d\x1e\u2029v\n"],
    }
    assert {text: python_lines(text, keepends=True) for text in cases} == cases
    assert python_lines("a\r\nb\rc\nd\x0c\n") == ["a", "b", "c", "d\x0c"]
    text = "a\r\nb\rc\x0cd\ne"
    assert [line_number(text, at) for at in range(len(text) + 1)] == [1, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4]
    rng = random.Random(0)  # the counts against the lines themselves, on random text
    for _ in range(500):
        text = "".join(rng.choice("ab\r\n\x0c\u2028") for _ in range(rng.randint(0, 12)))
        assert [line_number(text, at) for at in range(len(text))] == [
            len(python_lines(text[: at + 1])) for at in range(len(text))
        ], text
    source = BANNER + "x = 1\r" + "raise ValueError('here')\r\n"
    assert python_lines(source)[2] == "raise ValueError('here')"  # line 3, as Python counts
    assert source.splitlines()[2] != "raise ValueError('here')"  # what view numbered before
    with pytest.raises(ValueError) as raised:
        exec(compile(source, "banner.py", "exec"), {})
    assert traceback.extract_tb(raised.value.__traceback__)[-1].lineno == 3
    path = tmp_path / "banner.py"
    path.write_bytes(source.encode())
    assert [line.rstrip("\n") for line in linecache.getlines(str(path))] == python_lines(source)


def test_view_edit_pdb_and_tracebacks_agree_on_line_numbers(env):
    """A file whose line 1 holds a form feed, U+2028, NEL and the other characters that
    ``str.splitlines`` breaks at, inside a string: the bug is Python's line 20. view shows it as
    line 20, pdb stops there on ``b stats.py:20``, a traceback from it names line 20, and an edit
    of lines 20-20 changes it and nothing else (before, view and edit counted line 1 as 9 lines)."""
    assert python_source_line(BANNER_TASK.files["stats.py"], 20) == BUG_LINE
    _, state = start(env, debug_problem(BANNER_TASK))
    out = step(env, state, "<view>stats.py 20-20</view>")
    assert out.observation == f"stats.py:\n20| {BUG_LINE}".rstrip("\n"), out.observation
    out = step(env, state, "<view>stats.py 1-2</view>")  # line 1 one line, its characters escaped
    assert r'1| BANNER = "form\x0cfeed, line\u2028separator, next\x85line, \x0b\x1c\x1d\x1e\u2029end"' in (
        out.observation
    )
    assert "\n2| " in out.observation and "3| " not in out.observation
    out = step(env, state, "<pdb>b stats.py:20</pdb>")
    assert "Breakpoint 1 at" in out.observation
    out = step(env, state, "<pdb>c</pdb>")
    assert "stats.py(20)median()" in out.observation and "-> " + BUG_LINE.strip() in out.observation
    # an edit of line 20 lands on Python's line 20: the traceback the tests show names it
    out = step(env, state, '<edit path="stats.py" lines="20-20">    raise ValueError("line twenty")\n</edit>')
    assert '20|     raise ValueError("line twenty")' in out.observation
    out = step(env, state, "<eval/>")
    assert (
        "stats.py:20: in median" in out.observation and 'raise ValueError("line twenty")' in out.observation
    )
    out = step(env, state, f'<edit path="stats.py" lines="20-20">{FIX_LINE}</edit>')
    diff = out.info["dump"]["diff"]
    assert [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")] == [
        "-" + BUG_LINE.rstrip("\n"),
        "+" + FIX_LINE.rstrip("\n"),
    ]
    out = step(env, state, "<submit/>")
    assert out.terminated and out.reward == 1.0


def python_source_line(source: str, n: int) -> str:
    """Line ``n`` of ``source`` as Python reads a file (universal newlines), its line end kept."""
    import io

    return io.StringIO(source, newline=None).readlines()[n - 1]
