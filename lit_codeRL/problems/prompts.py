"""How a problem is shown to a chat policy (MBPP protocol: the task text and its first test)."""

from __future__ import annotations

from lit_codeRL.problems.record import Problem


def format_prompt(problem: Problem, num_shown_tests: int = 1) -> str:
    """The user message: task statement, then ``num_shown_tests`` of its tests (or the starter code).

    A source whose tests are hidden (``metadata["show_tests"] is False``, HumanEval's
    asserts come from its hidden ``check``) shows its starter code instead, to be completed.
    """
    if problem.metadata.get("show_tests") is False:
        num_shown_tests = 0
    parts = [problem.prompt.strip()]
    shown = problem.test_statements()[:num_shown_tests] if num_shown_tests > 0 else []
    if shown:
        parts.append("Your code should pass these tests:\n" + "\n".join(shown))
    elif problem.starter_code and problem.starter_code.strip() == problem.prompt.strip():
        # The prompt is the code to complete (HumanEval): fence it so the answer's shape is clear.
        parts = [f"Complete this Python function:\n```python\n{problem.starter_code.rstrip()}\n```"]
    elif problem.starter_code and problem.starter_code not in problem.prompt:
        parts.append("Complete this function:\n" + problem.starter_code)
    parts.append("Write the Python function in a ```python code block.")
    return "\n\n".join(parts)


def chat_messages(problem: Problem, system_prompt: str | None = None, num_shown_tests: int = 1) -> list[dict]:
    """``[{"role", "content"}, ...]``: an optional system message, then :func:`format_prompt`."""
    return chat_messages_from_text(format_prompt(problem, num_shown_tests), system_prompt)


def chat_messages_from_text(user_message: str, system_prompt: str | None = None) -> list[dict]:
    """An optional system message, then ``user_message``: the first prompt of every episode."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": user_message})
    return messages
