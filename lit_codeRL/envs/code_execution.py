"""``CodeExecutionEnv``: reward for code that runs, more for code that runs and shows its result.

The reward of the project's original design, graded on the extracted program alone (the
problem's tests are not run; the problem only supplies the prompt):

==============================================  =======
outcome                                         reward
==============================================  =======
runs cleanly and prints something               +1.0
runs cleanly, prints nothing                    +0.5
syntax / indentation error, or no code at all   -0.5
runtime error, timeout, memory or output limit  -1.0
==============================================  =======

Every value is a constructor knob. It rewards executability, not correctness: a policy learns
to write code that runs (and prints), the first skill a base model lacks; ``UnitTestEnv`` is the
correctness reward.
"""

from __future__ import annotations

from lit_codeRL.envs.base import Executor, RewardResult, SingleTurnCodeEnv, result_info
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict


class CodeExecutionEnv(SingleTurnCodeEnv):
    """Executability reward (see the module docstring for the table).

    Args:
        sandbox: Where programs run (``submit(program) -> Future[ExecutionResult]``).
        print_reward: Runs without error and writes non-blank stdout.
        silent_reward: Runs without error, stdout blank.
        syntax_error_reward: Does not compile (SyntaxError, IndentationError, TabError).
        runtime_error_reward: Raises, times out, or hits the memory or output limit.
        kwargs: ``empty_reward`` (no code, or only comments; defaults to ``syntax_error_reward``),
            ``error_reward``, ``timeout_s`` and the rest of :class:`SingleTurnCodeEnv`.
    """

    def __init__(
        self,
        sandbox: Executor,
        print_reward: float = 1.0,
        silent_reward: float = 0.5,
        syntax_error_reward: float = -0.5,
        runtime_error_reward: float = -1.0,
        **kwargs,
    ) -> None:
        super().__init__(sandbox, syntax_error_reward=syntax_error_reward, **kwargs)
        self.print_reward = print_reward
        self.silent_reward = silent_reward
        self.runtime_error_reward = runtime_error_reward

    def build_program(self, problem: Problem, code: str) -> Program:
        return Program(code=code, timeout_s=self.timeout_s)

    def reward_from_result(self, problem: Problem, code: str, result: ExecutionResult) -> RewardResult:
        verdict = Verdict(result.verdict)
        if verdict == Verdict.PASSED:
            reward = self.print_reward if result.stdout.strip() else self.silent_reward
        elif verdict == Verdict.SYNTAX_ERROR:
            reward = self.syntax_error_reward
        else:
            # RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT; FAILED cannot happen without
            # tests and would mean the program did not run cleanly.
            reward = self.runtime_error_reward
        return RewardResult(reward, verdict.value, result.pass_fraction, code, result_info(result))
