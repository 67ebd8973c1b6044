"""Single-turn code environments: reward tables on a real local sandbox, and the env's own logic
(no-code, sandbox failures, batching, gymnasium API) against a scripted fake executor."""

from __future__ import annotations

import random
import string
from concurrent.futures import Future

import pytest

from lit_codeRL.envs import CodeExecutionEnv, RewardResult, SingleTurnCodeEnv, UnitTestEnv
from lit_codeRL.problems import Problem
from lit_codeRL.problems.prompts import format_prompt
from lit_codeRL.sandbox import ExecutionResult, Program, Verdict, make_sandbox

PROBLEM = Problem(task_id="t/add", prompt="Write add(a, b).", entry_point="add")
ADD_PROBLEM = Problem(
    task_id="t/add",
    prompt="Write add(a, b) returning a + b.",
    entry_point="add",
    tests=("assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(2, 2) == 5"),
)

GARBAGE = "".join(random.Random(0).choice(string.ascii_letters + " .,;!?{}") for _ in range(10_000))


def fenced(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```\nHope this helps."


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox(backend="local", workers=2, timeout_s=5.0, memory_mb=512)
    yield sb
    sb.close()


# ---------------------------------------------------------------- CodeExecutionEnv, real sandbox
@pytest.mark.parametrize(
    ("code", "reward", "verdict"),
    [
        ("print('hello')", 1.0, "passed"),
        ("x = 1 + 1", 0.5, "passed"),
        ("def f(:\n    pass", -0.5, "syntax_error"),
        ("def f():\n  x = 1\n    return x", -0.5, "syntax_error"),  # IndentationError
        ("raise ValueError('no')", -1.0, "runtime_error"),
        ("print('partial')\n1 / 0", -1.0, "runtime_error"),
        ("while True:\n    pass", -1.0, "timeout"),
    ],
    ids=["prints", "silent", "syntax", "indentation", "raises", "prints-then-raises", "infinite-loop"],
)
def test_code_execution_rewards(sandbox, code, reward, verdict, monkeypatch):
    env = CodeExecutionEnv(sandbox, timeout_s=1.0)
    submitted: list[Program] = []
    submit = sandbox.submit
    monkeypatch.setattr(sandbox, "submit", lambda program: submitted.append(program) or submit(program))
    (result,) = env.score_batch([PROBLEM], [fenced(code)])
    # the env's 1 s limit, not the sandbox's default 5 s, is the one the program runs under
    assert [p.timeout_s for p in submitted] == [1.0]
    assert (result.reward, result.verdict) == (reward, verdict)
    assert result.code == code + "\n"
    assert result.info["sandbox_error"] is False


@pytest.mark.parametrize(
    "completion",
    ["", "I am not sure how to write this.", "```python\n", GARBAGE],
    ids=["empty", "prose", "half-block", "10k-garbage"],
)
def test_code_execution_malformed_output_gets_the_syntax_reward(sandbox, completion):
    env = CodeExecutionEnv(sandbox)
    (result,) = env.score_batch([PROBLEM], [completion])
    # No code is graded like unrunnable code (-0.5): neither may earn the silent-run 0.5.
    assert result.reward == -0.5
    assert result.verdict in ("no_code", "syntax_error")


def test_code_execution_rewards_are_knobs(sandbox):
    env = CodeExecutionEnv(
        sandbox, print_reward=2.0, silent_reward=0.25, syntax_error_reward=-3.0, empty_reward=-7.0
    )
    results = env.score_batch([PROBLEM] * 4, [fenced("print(1)"), fenced("pass"), fenced("def ("), "no code"])
    assert [r.reward for r in results] == [2.0, 0.25, -3.0, -7.0]


def test_code_execution_ignores_the_problems_tests(sandbox):
    env = CodeExecutionEnv(sandbox)
    (result,) = env.score_batch([ADD_PROBLEM], [fenced("def add(a, b):\n    return a - b")])
    assert (result.reward, result.verdict, result.info["num_tests"]) == (0.5, "passed", 0)


# --------------------------------------------------------------------- UnitTestEnv, real sandbox
def test_unit_test_fraction(sandbox):
    env = UnitTestEnv(sandbox)
    (result,) = env.score_batch([ADD_PROBLEM], [fenced("def add(a, b):\n    return a + b")])
    # tests 1 and 2 pass, test 3 (add(2, 2) == 5) fails: 2 / 3
    assert result.reward == pytest.approx(2 / 3, abs=1e-3)
    assert result.pass_fraction == pytest.approx(0.667, abs=1e-3)
    assert result.verdict == "failed"
    assert (result.info["num_tests"], result.info["num_passed"]) == (3, 2)


def test_unit_test_all_pass_bonus_io_pairs_and_setup(sandbox):
    problem = Problem(
        task_id="t/root",
        prompt="root(x)",
        entry_point="root",
        tests=("assert root(4) == 2",),
        io_pairs=(("9", "3"), ("16", "4")),
        setup_code="import math",
    )
    env = UnitTestEnv(sandbox, all_pass_bonus=0.5)
    good = fenced("def root(x):\n    return int(math.sqrt(x))")  # math comes from setup_code
    wrong = fenced("def root(x):\n    return 2")
    results = env.score_batch([problem, problem], [good, wrong])
    assert [r.reward for r in results] == pytest.approx([1.5, 1 / 3])  # 3/3 + 0.5 bonus; 1/3, no bonus
    assert [r.verdict for r in results] == ["passed", "failed"]


def test_unit_test_without_partial_credit_pays_only_a_full_pass(sandbox):
    """``partial_credit=False``: a program hard-coding the shown test earns 0, not 1/3, and the
    pass fraction is still reported; a full pass earns 1 (+ the bonus)."""
    problem = Problem(
        task_id="t/sq",
        prompt="sq(x)",
        entry_point="sq",
        tests=("assert sq(3) == 9", "assert sq(4) == 16", "assert sq(5) == 25"),
    )
    hardcoded = fenced("def sq(x):\n    if x == 3:\n        return 9\n    return 0")
    good = fenced("def sq(x):\n    return x * x")
    for partial, bonus, expected in (
        (True, 0.0, [1 / 3, 1.0]),
        (False, 0.0, [0.0, 1.0]),
        (False, 0.5, [0.0, 1.5]),
    ):
        env = UnitTestEnv(sandbox, partial_credit=partial, all_pass_bonus=bonus)
        results = env.score_batch([problem, problem], [hardcoded, good])
        assert [r.reward for r in results] == pytest.approx(expected), (partial, bonus)
        assert [r.pass_fraction for r in results] == pytest.approx([1 / 3, 1.0])


def test_env_settings_carry_partial_credit_to_unit_test_and_repair(sandbox):
    from lit_codeRL.envs.settings import EnvSettings, make_env

    for name in ("unit_test", "code_repair"):
        assert make_env(EnvSettings(name=name), sandbox).partial_credit is True
        assert make_env(EnvSettings(name=name, partial_credit=False), sandbox).partial_credit is False


@pytest.mark.parametrize(
    "completion",
    [
        fenced("def add(a, b)\n    return a + b"),  # syntax error
        fenced("raise RuntimeError('boom')"),  # dies before the tests
        fenced("def add(a, b):\n    while True: pass"),  # every test times out
        "",
        "```python\n",
        GARBAGE,
    ],
    ids=["syntax", "runtime", "timeout", "empty", "half-block", "10k-garbage"],
)
def test_unit_test_failures_get_zero(sandbox, completion):
    env = UnitTestEnv(sandbox, all_pass_bonus=1.0, timeout_s=1.0)
    (result,) = env.score_batch([ADD_PROBLEM], [completion])
    assert result.reward == 0.0
    assert result.pass_fraction == 0.0


def test_submit_batch_returns_before_grading_and_keeps_order(sandbox):
    env = UnitTestEnv(sandbox)
    slow = fenced("import time\ntime.sleep(0.5)\ndef add(a, b):\n    return a + b")
    completions = [slow, fenced("def add(a, b):\n    return 0"), "", slow]
    pending = env.submit_batch([ADD_PROBLEM] * 4, completions)
    assert not pending.done()  # queued, not run: the slow programs sleep 0.5 s before they finish
    results = pending.result()
    assert pending.done()
    # the correct add passes 2 of 3; "return 0" passes only add(0, 0) == 0: 1 of 3
    assert [round(r.reward, 3) for r in results] == [0.667, 0.333, 0.0, 0.667]
    assert [r.verdict for r in results] == ["failed", "failed", "no_code", "failed"]
    assert env.num_graded == 4


def test_gymnasium_api(sandbox):
    env = UnitTestEnv(sandbox, problems=[ADD_PROBLEM])
    obs, info = env.reset(seed=0)
    # The observation is the user message rollouts show: task, shown test, answer format.
    assert obs == format_prompt(ADD_PROBLEM) and ADD_PROBLEM.prompt in obs and info["task_id"] == "t/add"
    obs, reward, terminated, truncated, info = env.step(fenced("def add(a, b):\n    return a + b"))
    assert (obs, terminated, truncated) == ("", True, False)
    assert reward == pytest.approx(2 / 3)
    assert info["verdict"] == "failed" and info["num_passed"] == 2
    with pytest.raises(RuntimeError):
        env.step("x")  # the episode is over
    obs, _ = env.reset(options={"problem": PROBLEM})
    assert obs == format_prompt(PROBLEM)


# ------------------------------------------------------------------------ env logic, fake sandbox
class FakeSandbox:
    """Scripted executor: ``respond(program)`` gives the result (or raises); records programs."""

    def __init__(self, respond=None, resolve: bool = True):
        self.respond = respond or (lambda p: ExecutionResult(Verdict.PASSED, [True] * len(p.tests)))
        self.resolve = resolve
        self.programs: list[Program] = []
        self.futures: list[Future] = []

    def submit(self, program: Program) -> Future:
        self.programs.append(program)
        fut: Future = Future()
        self.futures.append(fut)
        if self.resolve:
            self._settle(fut, program)
        return fut

    def _settle(self, fut: Future, program: Program) -> None:
        try:
            fut.set_result(self.respond(program))
        except Exception as e:  # noqa: BLE001
            fut.set_exception(e)

    def release(self) -> None:
        for fut, program in zip(self.futures, self.programs, strict=True):
            if not fut.done():
                self._settle(fut, program)

    def run_batch(self, programs):
        return [self.submit(p).result() for p in programs]


def test_no_code_never_reaches_the_sandbox():
    fake = FakeSandbox()
    env = UnitTestEnv(fake, empty_reward=-0.25)
    results = env.score_batch(
        [ADD_PROBLEM] * 3, ["", "just words here, no program", "```python\n# todo\n```"]
    )
    assert fake.programs == []
    assert [(r.reward, r.verdict) for r in results] == [(-0.25, "no_code")] * 3


def test_unit_test_program_carries_tests_setup_and_timeout():
    fake = FakeSandbox()
    problem = Problem(
        task_id="t",
        prompt="p",
        entry_point="f",
        tests=("assert f() == 1",),
        io_pairs=(("", "1"),),
        setup_code="import os",
    )
    env = UnitTestEnv(fake, timeout_s=2.5)
    env.score_batch([problem], [fenced("def f():\n    return 1")])
    (program,) = fake.programs
    assert program == Program(
        code="def f():\n    return 1\n",
        tests=("assert f() == 1", "assert f() == 1"),
        setup_code="import os",
        timeout_s=2.5,
    )


def test_unit_test_env_refuses_a_problem_without_tests():
    env = UnitTestEnv(FakeSandbox())
    with pytest.raises(ValueError, match="no tests"):
        env.score_batch([PROBLEM], [fenced("def add(a, b):\n    return a + b")])


def _boom(program):
    raise OSError("worker vanished")


class _ClosedSandbox:
    def submit(self, program):
        raise RuntimeError("sandbox is closed")


@pytest.mark.parametrize(
    "sandbox_impl",
    [
        FakeSandbox(
            lambda p: ExecutionResult(Verdict.SANDBOX_ERROR, [False] * len(p.tests), exception_type="X")
        ),
        FakeSandbox(_boom),
        _ClosedSandbox(),
    ],
    ids=["sandbox-error-verdict", "future-raises", "submit-raises"],
)
@pytest.mark.parametrize("env_cls", [CodeExecutionEnv, UnitTestEnv])
def test_sandbox_failures_get_error_reward_and_are_counted(sandbox_impl, env_cls):
    env = env_cls(sandbox_impl, error_reward=0.125)
    results = env.score_batch([ADD_PROBLEM] * 2, [fenced("print(1)"), ""])
    assert (results[0].reward, results[0].verdict) == (0.125, "sandbox_error")
    assert results[0].info["sandbox_error"] is True and results[0].info["exception_type"]
    assert results[1].verdict == "no_code"
    assert (env.num_graded, env.num_sandbox_errors) == (2, 1)


def test_pending_rewards_wait_for_the_sandbox():
    fake = FakeSandbox(resolve=False)
    env = CodeExecutionEnv(fake)
    pending = env.submit_batch([PROBLEM] * 2, [fenced("print(1)"), ""])
    assert len(fake.programs) == 1 and not pending.done()
    fake.release()
    assert pending.done()
    results = pending.result()
    assert [r.reward for r in results] == [0.5, -0.5]  # fake PASSED with empty stdout -> silent
    assert isinstance(results[0], RewardResult) and results[0].to_dict()["code"] == "print(1)\n"


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError):
        CodeExecutionEnv(FakeSandbox()).score_batch([PROBLEM], ["a", "b"])


def test_base_env_is_abstract():
    env = SingleTurnCodeEnv(FakeSandbox())
    with pytest.raises(NotImplementedError):
        env.score_batch([PROBLEM], [fenced("print(1)")])
