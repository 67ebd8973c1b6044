"""``CodeRepairEnv``: write code, see the sandbox's verdict and a failing test, revise.

The first multi-turn environment. Turn 1 is the single-turn prompt; after each attempt that
does not pass every test the policy gets feedback as the next user message and tries again,
until it passes (``terminated``) or the runner's ``max_turns`` / context limit cuts the episode
(``truncated``).

Feedback follows RLEF (Gehring et al. 2024, "RLEF: Grounding code LLMs in execution feedback"):
it quotes only the *public* tests (those shown in the prompt, ``feedback_tests="shown"``), while
every reward counts all tests. A program that passes the public tests but fails hidden ones is
told so without seeing them, so hidden tests cannot be copied into the code.
``feedback_tests="all"`` quotes whichever test failed first (self-debugging style).

Rewards telescope: the reward of turn ``t`` is ``score_t - score_{t-1}`` with
``score = pass fraction (+ all_pass_bonus when every test passes)`` and ``score_0 = 0``, so an
episode's return is the score of its *last* attempt wherever it stops (solved, turn limit or
context limit), and per-turn rewards say which revision helped (credit for PPO-style learners).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lit_codeRL.envs.base import NO_CODE, Executor, step_info
from lit_codeRL.envs.protocol import Action, EpisodeStart, PendingSteps, StepResult
from lit_codeRL.envs.text import clean_text
from lit_codeRL.envs.unit_test import UnitTestEnv
from lit_codeRL.problems.record import Problem

_MESSAGE_CHARS = 300


@dataclass
class RepairState:
    """Per-episode state: the problem, the turn, and the score of the last attempt."""

    problem: Problem
    turn: int = 0
    last_score: float = 0.0


class CodeRepairEnv(UnitTestEnv):
    """Multi-turn code repair with unit-test rewards (see the module docstring).

    Args:
        sandbox: Where programs run.
        feedback_tests: ``shown`` quotes only the tests shown in the prompt (RLEF); ``all`` quotes
            the first failing test, hidden or not.
        all_pass_bonus: Added to the score when every test passes.
        partial_credit: Score = fraction of tests passed (True) or 1 only when all pass (False).
        num_shown_tests: Tests shown in the prompt (and public for feedback).
        timeout_s: Wall-clock limit per program.
    """

    def __init__(
        self,
        sandbox: Executor,
        feedback_tests: Literal["shown", "all"] = "shown",
        all_pass_bonus: float = 0.0,
        num_shown_tests: int = 1,
        timeout_s: float | None = None,
        partial_credit: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            sandbox,
            all_pass_bonus=all_pass_bonus,
            partial_credit=partial_credit,
            timeout_s=timeout_s,
            num_shown_tests=num_shown_tests,
            **kwargs,
        )
        if feedback_tests not in ("shown", "all"):
            raise ValueError(f"feedback_tests must be 'shown' or 'all', got {feedback_tests!r}")
        self.feedback_tests = feedback_tests

    def reset_batch(self, problems: Sequence[Problem]) -> list[EpisodeStart]:
        return [
            EpisodeStart(
                self.observation(p), RepairState(p), {"task_id": p.task_id, "entry_point": p.entry_point}
            )
            for p in problems
        ]

    def step_batch(self, states: Sequence[RepairState], actions: Sequence[Action]) -> PendingSteps:
        pending = self.submit_batch([s.problem for s in states], [a.text for a in actions])

        def resolve() -> list[StepResult]:
            results = []
            for state, action, graded in zip(states, actions, pending.result(), strict=True):
                info = {**step_info(graded), "turn": state.turn}
                score = graded.reward
                reward = score - state.last_score
                state.turn += 1
                state.last_score = score
                solved = graded.verdict == "passed"
                feedback = "" if solved else self.feedback(state.problem, graded.verdict, info, action)
                results.append(StepResult(feedback, reward, solved, False, info))
            return results

        return PendingSteps(resolve, pending.done)

    def feedback(self, problem: Problem, verdict: str, info: dict[str, Any], action: Action) -> str:
        """The next user message after a failed attempt."""
        lines = []
        if action.cut_off:
            lines.append("Your answer was cut off at the length limit; keep it shorter.")
        message = (info.get("exception_message") or "").strip()[:_MESSAGE_CHARS]
        error = f"{info.get('exception_type')}: {message}" if info.get("exception_type") else message
        tests = problem.test_statements()
        public = (
            min(self.num_shown_tests, len(tests)) if problem.metadata.get("show_tests") is not False else 0
        )
        failed = info.get("failed_test")
        # RLEF: an attempt that fails where only hidden tests run is told that and nothing more.
        # Whatever else depends on the hidden tests (how many passed, a timeout or an exit in one)
        # is an oracle a policy can query turn after turn (`while x == -3: pass`) to learn them.
        hidden = failed is not None and failed >= public and self.feedback_tests == "shown"
        if verdict == NO_CODE:
            lines.append("Your answer contains no Python code.")
        elif verdict == "syntax_error":
            lines.append(f"Your code does not compile: {error}")
        elif hidden:
            shown = "passes the example tests but " if public else ""
            lines.append(f"Your code {shown}fails hidden tests.")
        elif verdict == "timeout":
            lines.append("Your code ran out of time (an infinite loop, or too slow).")
        elif verdict in ("memory_limit", "output_limit"):
            lines.append(f"Your code hit the {verdict.replace('_', ' ')}.")
        elif verdict == "runtime_error":
            lines.append(f"Your code raised an error before the tests ran: {error}")
        elif failed is not None:
            lines.append(f"Your code failed this test:\n{tests[failed]}")
            if error:
                lines.append(f"Error: {error}")
        else:
            lines.append("Your code fails the tests.")
        lines.append("Write the corrected complete function in a ```python code block.")
        # the error message is the program's own text: its control characters are shown, not sent
        return clean_text("\n".join(lines))
