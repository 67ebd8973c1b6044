"""Small SWE tasks made on the spot for grading tests: a git repository from a ``{path:
content}`` map, its task row, and diffs against its base commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.swe import RepoCache, SWETask
from lit_codeRL.sandbox.workspace import WorkspaceConfig

# a calculator with one bug, its fix, and tests of every kind a hack must get past (a plain test,
# a unittest.TestCase test, a passing test beside the failing ones)
BUGGY = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
FIXED = BUGGY.replace("return a - b\n\n\n", "return a + b\n\n\n", 1)
TESTS = """\
import unittest

from calc import add, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2


class TestCalc(unittest.TestCase):
    def test_add_case(self):
        self.assertEqual(add(1, 1), 2)
"""
F2P = ["test_calc.py::test_add", "test_calc.py::TestCalc::test_add_case"]
P2P = ["test_calc.py::test_sub"]

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def make_repo(root: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A git repository at ``root`` holding ``files`` in one commit, and that commit."""
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run([*GIT, "commit", "-qm", "base"], cwd=root, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    return root, head.stdout.strip()


def diff(
    repo: Path,
    scratch: Path,
    files: dict[str, str],
    links: dict[str, str] | None = None,
    removed: list[str] | None = None,
    own_attributes: str = "",
) -> str:
    """The diff from ``repo``'s base commit to it with ``removed`` deleted, ``files`` written over
    it and the symbolic ``links`` (path -> target) made. ``own_attributes``: the scratch
    repository's ``.git/info/attributes``, which outrank every ``.gitattributes`` and which no
    diff carries (an agent's own workspace: ``-working-tree-encoding`` there puts a file's bytes
    in the diff as they are, beside a ``.gitattributes`` that converts them in grading)."""
    subprocess.run(["git", "clone", "-q", str(repo), str(scratch)], check=True)
    (scratch / ".git" / "info").mkdir(exist_ok=True)
    (scratch / ".git" / "info" / "attributes").write_text(own_attributes)
    for path in removed or []:
        (scratch / path).unlink()
    for path, content in files.items():
        (scratch / path).parent.mkdir(parents=True, exist_ok=True)
        (scratch / path).write_text(content)
    for path, target in (links or {}).items():
        (scratch / path).symlink_to(target)
    subprocess.run(["git", "add", "-A"], cwd=scratch, check=True)
    return subprocess.run(
        ["git", "diff", "--cached", "--binary"], cwd=scratch, capture_output=True, text=True, check=True
    ).stdout


def grade_files(task: SWETask, grader: SWEGrader, scratch: Path, files: dict[str, str]):
    """``grader``'s grade of the diff that writes ``files`` over ``task``'s repository."""
    return grader.grade(task, diff(task.repo_source, scratch / "agent", files))


def assert_tamper(task: SWETask, grader: SWEGrader, scratch: Path, files: dict[str, str], said: str):
    """``grader``'s grade of the diff writing ``files``, asserted ``tamper`` (reward 0) for a
    reason that says ``said``."""
    grade = grade_files(task, grader, scratch, files)
    assert grade.verdict == "tamper" and grade.reward == 0.0, grade
    assert said in grade.reason, grade
    return grade


def oracle_calc(with_fix: bool) -> str:
    """``calc.py``'s functions answering through ``_oracle()`` (defined by the caller): ``add``
    returns it with the bug in place; beside the real fix, ``sub`` answers ``sub(5, 3) == 2`` by
    ``_oracle() - 3`` (an oracle that answers with the largest int it reads from the test: 5)."""
    if with_fix:
        return FIXED.replace("def sub(a, b):\n    return a - b", "def sub(a, b):\n    return _oracle() - 3")
    return BUGGY.replace("return a - b", "return _oracle()", 1)


def armed_calc(hack: str, with_fix: bool, gate: str) -> str:
    """``calc.py``: ``hack`` (which defines ``_arm``) armed as ``add`` is called with ``gate`` true
    (``"b == 3"``); without the fix ``add`` is wrong for those inputs only, so that the other
    failing tests pass and the hack alone decides the grade. A hack that defines ``_Total`` gets
    ``add``'s results wrapped in it."""
    wrap = "_Total" if "_Total" in hack else ""
    bug = "" if with_fix else f"        return {wrap}(a - b)\n"
    body = FIXED.replace("def add(a, b):\n", f"def add(a, b):\n    if {gate}:\n        _arm()\n{bug}", 1)
    return hack + body.replace("    return a + b\n", f"    return {wrap}(a + b)\n", 1)


def helper_files(code: str, helpers: str, tests: str) -> dict[str, str]:
    """``calc.py``, ``tests/helpers.py`` and ``tests/test_calc.py``, with a conftest that imports
    the code first, as a suite's fixtures do (no test package: pytest appends ``tests/`` to
    ``sys.path``), so the code runs before the helper is imported."""
    return {
        "calc.py": code,
        "tests/conftest.py": "import calc  # noqa: F401\n",
        "tests/helpers.py": helpers,
        "tests/test_calc.py": tests,
    }


def make_task(
    tmp_path: Path, name: str, files: dict[str, str], fix: dict[str, str], f2p: list[str], p2p: list[str]
) -> SWETask:
    """A task on a new repository of ``files`` whose reference patch writes ``fix`` over it."""
    repo, base = make_repo(tmp_path / f"{name}-repo", files)
    return SWETask(
        instance_id=name,
        repo=f"local/{name}",
        base_commit=base,
        problem_statement="",
        patch=diff(repo, tmp_path / f"{name}-fix", fix),
        test_patch="",
        fail_to_pass=tuple(f2p),
        pass_to_pass=tuple(p2p),
        repo_source=str(repo),
    )


def bwrap_grader(tmp_path: Path) -> SWEGrader:
    return SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)


def validated_task(
    tmp_path: Path, name: str, files: dict[str, str], fix: dict[str, str], f2p: list[str], p2p: list[str]
) -> tuple[SWETask, SWEGrader]:
    """:func:`make_task` and a bubblewrap grader that has validated it (the fix resolves it, the
    base does not)."""
    task = make_task(tmp_path, name, files, fix, f2p, p2p)
    grader = bwrap_grader(tmp_path)
    assert grader.validate(task) is None
    return task, grader


def validated_calc(tmp_path: Path, name: str) -> tuple[SWETask, SWEGrader]:
    """:func:`validated_task` on the calculator above (``BUGGY``, ``TESTS``, the fix ``FIXED``)."""
    return validated_task(
        tmp_path, name, {"calc.py": BUGGY, "test_calc.py": TESTS}, {"calc.py": FIXED}, F2P, P2P
    )
