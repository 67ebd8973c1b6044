"""The debugging gym through the real bubblewrap sandbox: a whole episode driven by hand (pdb stops
at a breakpoint, an edit restarts it with its breakpoints, eval, submit = reward 1), the reward
hacks of the published pdb-gym design scoring 0, defined feedback for malformed tool calls,
auto-grading at truncation, the time budget masking an episode, the rewrite-only preset, and the
episode runner's dump of every tool call."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.debug.env import tests_output as strip_durations
from lit_codeRL.envs.debug.tools import PRESETS, parse_tool_call
from lit_codeRL.envs.protocol import Action
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


def test_the_tool_time_budget_masks_the_episode(tmp_path, median):
    require_bwrap()
    env = DebugEnv(
        DebugSettings(
            repo_cache=str(tmp_path), trajectory_timeout_s=1.0, pdb_timeout_s=2.0, show_initial_eval=False
        )
    )
    try:
        _, state = start(env, median)
        step(env, state, '<edit path="stats.py" lines="1-1">import time; time.sleep(5)\n</edit>')
        out = step(env, state, "<pdb>c</pdb>")
        assert out.info.get("masked") and out.info["verdict"] == "env_time_limit" and out.truncated
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
