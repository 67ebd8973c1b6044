"""CodeRepairEnv in the real sandbox: telescoping rewards, RLEF feedback, termination."""

from __future__ import annotations

import pytest

from lit_codeRL.envs import Action, CodeRepairEnv
from lit_codeRL.problems import Problem
from lit_codeRL.sandbox import make_sandbox

PROBLEM = Problem(
    task_id="t/sq",
    prompt="Write a function square(x) that returns x squared.",
    entry_point="square",
    tests=("assert square(2) == 4", "assert square(-3) == 9", "assert square(0) == 0"),
)


def fenced(code: str) -> Action:
    return Action(f"```python\n{code}\n```")


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox(workers=2) as sb:
        yield sb


def test_rewards_telescope_to_the_last_attempts_score(sandbox):
    env = CodeRepairEnv(sandbox)
    (start,) = env.reset_batch([PROBLEM])
    assert "assert square(2) == 4" in start.observation and "square(-3)" not in start.observation
    attempts = [
        "def square(x):\n    return 2 * x",
        "def square(x):\n    return abs(x) * 2",
        "def square(x):\n    return x * x",
    ]
    returns, results = 0.0, []
    for code in attempts:
        (res,) = env.step_batch([start.state], [fenced(code)]).result()
        results.append(res)
        returns += res.reward
    # scores 1/3 (only square(2) and square(0)? no: 2*0 == 0 and 2*2 == 4) -> 2/3, then 1/3, then 1
    assert [round(r.reward, 4) for r in results] == [round(2 / 3, 4), 0.0, round(1 / 3, 4)]
    assert returns == pytest.approx(1.0)
    assert [r.terminated for r in results] == [False, False, True]
    assert results[-1].observation == ""


def test_feedback_quotes_only_public_tests(sandbox):
    env = CodeRepairEnv(sandbox, feedback_tests="shown")
    (start,) = env.reset_batch([PROBLEM])
    # fails the shown test: it is quoted with the error
    (res,) = env.step_batch([start.state], [fenced("def square(x):\n    return x + 1")]).result()
    assert "assert square(2) == 4" in res.observation and not res.terminated
    # passes the shown test, fails a hidden one: told so, the hidden test is not revealed
    (start,) = env.reset_batch([PROBLEM])
    (res,) = env.step_batch([start.state], [fenced("def square(x):\n    return 2 * x")]).result()
    assert "hidden" in res.observation and "square(-3)" not in res.observation
    # feedback_tests="all" quotes the failing hidden test
    env_all = CodeRepairEnv(sandbox, feedback_tests="all")
    (start,) = env_all.reset_batch([PROBLEM])
    (res,) = env_all.step_batch([start.state], [fenced("def square(x):\n    return 2 * x")]).result()
    assert "assert square(-3) == 9" in res.observation


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Action("I do not know."), "no Python code"),
        (fenced("def square(x) return x"), "does not compile"),
        (fenced("raise ValueError('boom')"), "ValueError"),
        (fenced("def square(x):\n    while True: pass"), "ran out of time"),
        (Action("```python\ndef square(x):\n    return x", "length"), "cut off"),
    ],
)
def test_defined_feedback_for_malformed_and_cut_off_actions(sandbox, action, expected):
    env = CodeRepairEnv(sandbox, timeout_s=1.0)
    (start,) = env.reset_batch([PROBLEM])
    (res,) = env.step_batch([start.state], [action]).result()
    assert expected in res.observation
    assert res.observation.rstrip().endswith("code block.")


HIDDEN_PROBES = {
    "fails one hidden test": "def square(x):\n    return x * x if x != 0 else 1",
    "fails both hidden tests": "def square(x):\n    return 2 * x",
    "loops in one hidden test": "def square(x):\n    while x == -3:\n        pass\n    return 4",
    "exits in a hidden test": "import os\ndef square(x):\n    if x != 2:\n        os._exit(3)\n    return 4",
    "raises its argument": "def square(x):\n    if x != 2:\n        raise ValueError(f'x={x}')\n    return 4",
    "prints its argument": "def square(x):\n    print('x =', x)\n    return 4",
}


def test_hidden_tests_are_no_oracle(sandbox):
    """Past the public tests the feedback is one fixed sentence: a count of the tests passed, or
    a timeout or an exit named in one, would let a policy ask, turn after turn, whether a hidden
    test calls ``square(-3)`` (``while x == -3: pass``) and fit its code to the answers."""
    env = CodeRepairEnv(sandbox, timeout_s=2.0)
    seen = {}
    for name, code in HIDDEN_PROBES.items():
        (start,) = env.reset_batch([PROBLEM])
        (res,) = env.step_batch([start.state], [fenced(code)]).result()
        assert not res.terminated, name
        seen[name] = res.observation
    assert len(set(seen.values())) == 1, seen
    (observation,) = set(seen.values())
    assert observation.startswith("Your code passes the example tests but fails hidden tests.")
    assert "-3" not in observation and " of 3" not in observation
