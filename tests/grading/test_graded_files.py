"""A file that holds a graded test is the base's in every grading run, whatever its name.

Grading restored only the files its test rule names (``test_*.py``, test directories...). A task
row may grade tests kept elsewhere: a ``checks.py`` its node ids name, a root ``tests.py`` that
keeps its name because a test helper imports it (``problems/test_names.py``), a module its
``python_files`` names. The agent's diff could rewrite such a file so that its failing test
passes, and be paid for it. Through the real bubblewrap sandbox, grader and pytest.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.swe import RepoCache, SWETask
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("return a - b\n\n\n", "return a + b\n\n\n", 1)
TESTS = (
    "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n"
)
REWRITTEN = "def test_add():\n    pass\n\n\ndef test_sub():\n    pass\n"
HELPER = "from tests import TESTED  # noqa: F401\n"


def _diff(repo: Path, scratch: Path, files: dict[str, str]) -> str:
    """The diff from ``repo``'s base commit to it with ``files`` written over it."""
    subprocess.run(["git", "clone", "-q", str(repo), str(scratch)], check=True)
    for path, content in files.items():
        (scratch / path).write_text(content)
    subprocess.run(["git", "add", "-A"], cwd=scratch, check=True)
    return subprocess.run(
        ["git", "diff", "--cached", "--binary"], cwd=scratch, capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize(
    "graded, extra",
    [
        ("checks.py", {}),
        # a tests.py a test helper imports keeps its name (it is imported: not renamed)
        ("tests.py", {"test_helper.py": HELPER}),
        ("pkg/props.py", {"pkg/__init__.py": ""}),
    ],
)
def test_a_graded_file_the_diff_rewrites_is_restored(
    tmp_path: Path, graded: str, extra: dict[str, str]
) -> None:
    require_bwrap()
    repo = tmp_path / "repo"
    tests = TESTS + ("\nTESTED = True\n" if graded == "tests.py" else "")
    files = {"calc.py": BUGGY, graded: tests, **extra}
    for path, content in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(content)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=repo, check=True)
    base = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    fix = _diff(repo, tmp_path / "fix", {"calc.py": FIXED})
    task = SWETask(
        instance_id=f"graded-{graded.replace('/', '-')}",
        repo="local/calc",
        base_commit=base,
        problem_statement="add subtracts",
        patch=fix,
        test_patch="",
        fail_to_pass=(f"{graded}::test_add",),
        pass_to_pass=(f"{graded}::test_sub",),
        repo_source=str(repo),
    )
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    assert grader.validate(task) is None  # the fix resolves it, the base does not

    rewrite = _diff(repo, tmp_path / "hack", {graded: REWRITTEN})
    hacked = grader.grade(task, rewrite)
    assert not hacked.resolved and hacked.reward == 0.0, hacked
    assert hacked.restored == [graded], hacked

    both = _diff(repo, tmp_path / "both", {graded: REWRITTEN, "calc.py": FIXED})
    fixed = grader.grade(task, both)
    assert fixed.resolved and fixed.reward == 1.0 and fixed.restored == [graded], fixed
