"""What the agent reads: the task prompt and the observation after each command."""

from __future__ import annotations

from lit_codeRL.envs.swe.tools import ToolBundle
from lit_codeRL.envs.text import clean_text
from lit_codeRL.sandbox.workspace import CommandResult, Workspace

TASK_TEMPLATE = """You are a software engineer working in the git repository at {repo}. Resolve the issue below.

Each turn, run exactly one shell command by writing it between <execute> and </execute>, for example:
<execute>ls</execute>
You will see the command's output and the current `git diff` of the repository. Edit files with shell commands (sed -i, cat > file <<'EOF', python). Commands run for at most {timeout:g} s and there is no network.
When the issue is resolved, write <submit/>. Hidden tests decide whether it is; changes to test files are ignored.
{tools}
<issue>
{issue}
</issue>"""


def task_prompt(issue: str, tools: list[ToolBundle], timeout_s: float) -> str:
    tool_text = ""
    if tools:
        tool_text = (
            "\nTools on PATH besides the usual shell commands:\n"
            + "\n".join(t.help_text() for t in tools)
            + "\n"
        )
    return TASK_TEMPLATE.format(repo=Workspace.REPO, timeout=timeout_s, tools=tool_text, issue=issue.strip())


def cut_middle(text: str, limit: int) -> str:
    """``text`` with its middle replaced by a marker when longer than ``limit`` characters."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def command_observation(result: CommandResult, diff: str, max_output: int, max_diff: int) -> str:
    if result.timed_out:
        status = "The command timed out and was killed."
    else:
        status = f"Exit code: {result.exit_code}"
    # cleaned before the cut: the limits count the characters shown (an escape is up to 6 of them)
    output = cut_middle(clean_text(result.output), max_output).rstrip("\n") or "(no output)"
    diff_text = cut_middle(clean_text(diff), max_diff).rstrip("\n") if diff.strip() else "(no changes yet)"
    return f"{status}\nOutput:\n{output}\nCurrent git diff:\n{diff_text}"


FEEDBACK = {
    "no_action": "No command found. Write one command as <execute>COMMAND</execute>, or <submit/> when done.",
    "empty_command": "The <execute></execute> block was empty. Write one command inside it.",
    "cut_off": "Your command was cut off at the length limit and was not run. Write a shorter command.",
}
IGNORED_NOTE = "\n(Only your first command ran; one command per turn.)"
