"""A file that holds a graded test is the base's in every grading run, whatever its name.

Grading restored only the files its test rule names (``test_*.py``, test directories...). A task
row may grade tests kept elsewhere: a ``checks.py`` its node ids name, a root ``tests.py`` that
keeps its name because a test helper imports it (``problems/test_names.py``), a module its
``python_files`` names. The agent's diff could rewrite such a file so that its failing test
passes, and be paid for it. Through the real bubblewrap sandbox, grader and pytest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grading.repo_tasks import diff, validated_task
from tests.sandbox.conftest import require_bwrap

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("return a - b\n\n\n", "return a + b\n\n\n", 1)
TESTS = (
    "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n"
)
REWRITTEN = "def test_add():\n    pass\n\n\ndef test_sub():\n    pass\n"
HELPER = "from tests import TESTED  # noqa: F401\n"


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
    tests = TESTS + ("\nTESTED = True\n" if graded == "tests.py" else "")
    files = {"calc.py": BUGGY, graded: tests, **extra}
    name = f"graded-{graded.replace('/', '-')}"
    task, grader = validated_task(
        tmp_path, name, files, {"calc.py": FIXED}, [f"{graded}::test_add"], [f"{graded}::test_sub"]
    )  # the fix resolves it, the base does not
    repo = Path(task.repo_source)

    rewrite = diff(repo, tmp_path / "hack", {graded: REWRITTEN})
    hacked = grader.grade(task, rewrite)
    assert not hacked.resolved and hacked.reward == 0.0, hacked
    assert hacked.restored == [graded], hacked

    both = diff(repo, tmp_path / "both", {graded: REWRITTEN, "calc.py": FIXED})
    fixed = grader.grade(task, both)
    assert fixed.resolved and fixed.reward == 1.0 and fixed.restored == [graded], fixed
