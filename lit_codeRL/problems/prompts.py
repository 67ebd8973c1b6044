"""How a problem is shown to a chat policy (MBPP protocol: the task text and its first test)."""

from __future__ import annotations

from lit_codeRL.problems.record import Problem


def format_prompt(problem: Problem, num_shown_tests: int = 1) -> str:
    """The user message: task statement, then ``num_shown_tests`` of its tests (or the starter code)."""
    parts = [problem.prompt.strip()]
    shown = problem.test_statements()[:num_shown_tests] if num_shown_tests > 0 else []
    if shown:
        parts.append("Your code should pass these tests:\n" + "\n".join(shown))
    elif problem.starter_code and problem.starter_code not in problem.prompt:
        parts.append("Complete this function:\n" + problem.starter_code)
    parts.append("Write the Python function in a ```python code block.")
    return "\n\n".join(parts)


def chat_messages(problem: Problem, system_prompt: str | None = None, num_shown_tests: int = 1) -> list[dict]:
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": format_prompt(problem, num_shown_tests)})
    return messages
