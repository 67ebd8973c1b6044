"""``UnitTestEnv``: reward = fraction of the problem's tests the extracted program passes.

Each test statement (``problem.test_statements()``: its asserts plus one per io pair) is graded
on its own by the sandbox, so partial solutions get partial credit; ``all_pass_bonus`` adds a
step at full correctness (set it > 0 to make "all tests" worth more than "most tests").
``partial_credit=False`` makes the reward 1 only when every test passes (the pass@1 criterion).
Partial credit is hackable where a prompt shows one of the tests: on MBPP (one of three shown) a
135M policy learned to answer with ``if n == <shown input>: return <shown output>`` chains, worth
1/3 each, and its held-out greedy pass rate fell from 10 to 2 of 90 in 40 GRPO steps
(docs/mbpp_recipe.md).
"""

from __future__ import annotations

from lit_codeRL.envs.base import Executor, RewardResult, SingleTurnCodeEnv, result_info
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict


class UnitTestEnv(SingleTurnCodeEnv):
    """Correctness reward from the problem's unit tests.

    Args:
        sandbox: Where programs run (``submit(program) -> Future[ExecutionResult]``).
        all_pass_bonus: Added to the reward when every test passes.
        partial_credit: Reward the fraction of tests passed (True) or 1 only when all pass (False).
        syntax_error_reward: Reward of code that does not compile (its tests cannot run).
        kwargs: ``empty_reward`` (no code; defaults to ``syntax_error_reward``), ``error_reward``,
            ``timeout_s`` (program plus all tests) and the rest of :class:`SingleTurnCodeEnv`.

    A runtime error or timeout is not special-cased: tests that did not run count as failed, so
    the reward is the fraction that passed before it (usually 0).
    """

    def __init__(
        self,
        sandbox: Executor,
        all_pass_bonus: float = 0.0,
        syntax_error_reward: float = 0.0,
        partial_credit: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(sandbox, syntax_error_reward=syntax_error_reward, **kwargs)
        self.all_pass_bonus = all_pass_bonus
        self.partial_credit = partial_credit

    def build_program(self, problem: Problem, code: str) -> Program:
        tests = tuple(problem.test_statements())
        if not tests:
            # Without tests the sandbox passes anything that runs: a reward of 1 for free.
            raise ValueError(f"problem {problem.task_id!r} has no tests; UnitTestEnv cannot grade it")
        return Program(code=code, tests=tests, setup_code=problem.setup_code, timeout_s=self.timeout_s)

    def reward_from_result(self, problem: Problem, code: str, result: ExecutionResult) -> RewardResult:
        verdict = Verdict(result.verdict)
        info = result_info(result)
        if verdict == Verdict.SYNTAX_ERROR:
            return RewardResult(self.syntax_error_reward, verdict.value, 0.0, code, info)
        fraction = result.pass_fraction
        passed = verdict == Verdict.PASSED
        reward = (fraction if self.partial_credit else float(passed)) + (
            self.all_pass_bonus if passed else 0.0
        )
        return RewardResult(reward, verdict.value, fraction, code, info)
