"""Git's own machinery in the diff: what grading asks git, and git answers otherwise than the
bytes pytest and Python run.

The runner learns what the diff changed from ``git diff HEAD``, restores a test file with ``git
checkout``, and reads the base's files with ``git show HEAD:path``. Each of these graded
``resolved`` with the bug in place (or left no verdict):

* a ``.gitattributes`` of the diff's, with nothing else: ``tests/b/helpers.py
  working-tree-encoding=UTF-7`` made git see the helper as changed (UTF-7 reads ``+ `` as
  nothing), and its restore wrote it as UTF-7 writes ``return a + b``: ``return a +- b``, the
  buggy answer;
* the helper's bytes changed to ``return a +- b`` beside such a ``.gitattributes`` (in the root or
  in ``tests/b/``; the agent's own ``.git/info/attributes`` puts the bytes in the diff as they
  are): UTF-7 reads them back as the base's, so ``git diff`` named nothing and nothing was restored;
* the same with the base's own attributes (``*.py ident``): ``ID = "$Id: "; expected = ...; _ =
  " $"`` is ``$Id$`` to git, and rebinds the helper for Python;
* a file named ``HEAD:pyproject.toml``: ``git show HEAD:pyproject.toml`` was ambiguous and failed,
  the base's configuration read as absent, its ``pythonpath`` (``lib``) no root of the import
  path: a ``lib/helpers.py`` forged there was imported in place of the tests' own; also a pytest
  section removed from ``pyproject.toml`` went unnamed;
* a file named ``HEAD``: ``git diff HEAD`` was ambiguous, the runner raised, ``no_results``
  instead of a verdict (beside a tamper reason: no ``tamper``).

Now ``.gitattributes`` is restored as the base has it before git is asked anything, every path the
diff writes is changed whatever git says of it (``git apply --numstat``), and revisions are read
as revisions (``git cat-file``, ``HEAD --``). Two readings of the pytest configuration differed
from pytest's too, with no diff at all: a ``setup.cfg`` with ``\\r`` line ends was one line to
``configparser`` (its ``--deselect`` unseen: the reference patch graded ``unresolved``), and a
configuration file that is a link was skipped; and ``run_git``, which makes the debugging gym's
and synthesis's reference fixes, read git's output with universal newlines and strict UTF-8 (a
fix of a ``\r\n`` module was a patch that did not apply, of a Latin-1 module an exception).

Tried and graded as they should before any change (kept where cheap): a ``.gitignore`` hiding a
forged helper (``tamper``: grading lists files git ignores), a gitlink in place of the helper, the
helper rewritten as a binary patch, a ``.git/config`` path (``patch_failed``), the fix as a binary
patch and beside odd file names (``resolved``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lit_codeRL.grading import SWEGrade, _runner
from tests.grading.repo_tasks import GIT, bwrap_grader, diff, make_repo, make_task, validated_task
from tests.grading.test_test_module_shadowing import (
    F2P,
    FILES,
    FIXED,
    FORGED_HELPERS,
    HELPERS,
    P2P,
    TEST_A,
)
from tests.sandbox.conftest import require_bwrap

UTF7_HELPERS = HELPERS.replace("a + b", "a +- b")  # UTF-7 reads "+-" as "+": the base's text
RAW = "* -working-tree-encoding -ident -text\n"  # the agent's .git/info/attributes: bytes as they are
ATTRIBUTES = {  # what the diff writes, calc.py left buggy
    "a .gitattributes alone: the restore wrote the helper in UTF-7": (
        {".gitattributes": "tests/b/helpers.py working-tree-encoding=UTF-7\n"},
        ".gitattributes",
    ),
    "the helper in UTF-7's other spelling beside a .gitattributes": (
        {
            ".gitattributes": "tests/b/helpers.py working-tree-encoding=UTF-7\n",
            "tests/b/helpers.py": UTF7_HELPERS,
        },
        ".gitattributes",
    ),
    "the same beside tests/b/.gitattributes": (
        {
            "tests/b/.gitattributes": "helpers.py working-tree-encoding=UTF-7\n",
            "tests/b/helpers.py": UTF7_HELPERS,
        },
        "tests/b/.gitattributes",
    ),
}
IDENT_HELPERS = HELPERS + '\n\nID = "$Id$"\n'
BASE_PYTHONPATH = '[project]\nname = "calc"\n\n[tool.pytest.ini_options]\npythonpath = ["lib"]\n'
GITLINK = (  # the helper replaced by a submodule entry (git apply makes an empty directory)
    "diff --git a/tests/b/helpers.py b/tests/b/helpers.py\ndeleted file mode 100644\n"
    "--- a/tests/b/helpers.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-def expected(a, b):\n-    return a + b\n"
    "diff --git a/tests/b/helpers.py b/tests/b/helpers.py\nnew file mode 160000\n"
    f"--- /dev/null\n+++ b/tests/b/helpers.py\n@@ -0,0 +1 @@\n+Subproject commit {'1' * 40}\n"
)


@pytest.fixture(scope="module")
def ident_task(tmp_path_factory):
    """The helper task whose base converts ``$Id$`` in every module (``*.py ident``)."""
    require_bwrap()
    files = {**FILES, "tests/b/helpers.py": IDENT_HELPERS, ".gitattributes": "*.py ident\n"}
    return validated_task(tmp_path_factory.mktemp("ident"), "ident", files, {"calc.py": FIXED}, F2P, P2P)


@pytest.fixture(scope="module")
def basepath_task(tmp_path_factory):
    """The helper task whose base's pytest configuration puts ``lib`` first on ``sys.path``."""
    require_bwrap()
    files = {**FILES, "pyproject.toml": BASE_PYTHONPATH, "lib/.keep": ""}
    return validated_task(
        tmp_path_factory.mktemp("basepath"), "basepath", files, {"calc.py": FIXED}, F2P, P2P
    )


def _grade(task_and_grader: tuple, scratch: Path, files: dict[str, str], **kw: str) -> SWEGrade:
    """``files`` (and ``diff``'s ``kw``) as a diff, graded on a fixture's task."""
    task, grader = task_and_grader
    return grader.grade(task, diff(Path(task.repo_source), scratch, files, **kw))


@pytest.mark.parametrize("case", sorted(ATTRIBUTES))
def test_bwrap_attributes_that_rewrite_a_test_helper_grade_unresolved(helper_task, tmp_path, case) -> None:
    files, attributes = ATTRIBUTES[case]
    grade = _grade(helper_task, tmp_path / "hack", files, own_attributes=RAW)
    assert grade.verdict == "unresolved" and grade.reward == 0.0, grade
    assert attributes in grade.restored, grade


def test_bwrap_a_change_the_bases_own_attributes_hide_grades_unresolved(ident_task, tmp_path) -> None:
    hack = IDENT_HELPERS.replace('"$Id$"', '"$Id: "; expected = lambda a, b: a - b; _ = " $"')
    grade = _grade(ident_task, tmp_path / "hack", {"tests/b/helpers.py": hack}, own_attributes=RAW)
    assert grade.verdict == "unresolved" and "tests/b/helpers.py" in grade.restored, grade


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({"lib/helpers.py": FORGED_HELPERS}, "shadows the tests' helpers: lib/helpers.py"),
        (
            {"pyproject.toml": '[project]\nname = "calc"\n'},
            "metadata: pyproject.toml: its pytest configuration changed",
        ),
    ],
    ids=["a helper forged in the base's pythonpath", "the pytest section removed"],
)
def test_bwrap_a_file_named_like_a_revision_hides_nothing(basepath_task, tmp_path, files, reason) -> None:
    grade = _grade(basepath_task, tmp_path / "hack", {**files, "HEAD:pyproject.toml": "x\n"})
    assert grade.verdict == "tamper" and reason in grade.tamper, grade


@pytest.mark.parametrize("with_fix", [False, True], ids=["beside a forged helper", "beside the fix"])
def test_bwrap_a_file_named_HEAD_is_graded(helper_task, tmp_path, with_fix) -> None:
    files = {"calc.py": FIXED} if with_fix else {"helpers.py": FORGED_HELPERS}
    grade = _grade(helper_task, tmp_path / "odd", {**files, "HEAD": "x\n"})
    assert grade.verdict == ("resolved" if with_fix else "tamper"), grade


def test_bwrap_git_level_changes_of_an_honest_fix_grade_resolved(helper_task, tmp_path) -> None:
    """The fix beside a ``.gitattributes`` of its own (which grading puts back) and file names
    git and the runner must read as names; the fix as a binary patch."""
    odd = {"-x.py": "A = 1\n", "a b\nc.txt": "x", "--help": "x", "HEAD~1": "x", "q'\".txt": "x"}
    attributes = {".gitattributes": "* text eol=crlf ident\n*.png binary -diff export-ignore\n"}
    grade = _grade(helper_task, tmp_path / "fix", {"calc.py": FIXED, **attributes, **odd})
    assert grade.verdict == "resolved" and not grade.tamper and ".gitattributes" in grade.restored, grade
    grade = _grade(helper_task, tmp_path / "binary", {"calc.py": FIXED}, own_attributes="calc.py binary\n")
    assert grade.verdict == "resolved", grade


def test_bwrap_git_level_tricks_caught_before(helper_task, tmp_path) -> None:
    task, grader = helper_task
    repo = Path(task.repo_source)
    ignored = diff(repo, tmp_path / "a", {"helpers.py": FORGED_HELPERS}) + diff(
        repo, tmp_path / "b", {".gitignore": "helpers.py\n"}
    )
    grade = grader.grade(task, ignored)
    assert grade.verdict == "tamper" and "shadows the tests' helpers: helpers.py" in grade.tamper, grade
    assert grader.grade(task, GITLINK).verdict == "unresolved"
    binary = diff(
        repo, tmp_path / "c", {"tests/b/helpers.py": FORGED_HELPERS}, own_attributes="*.py binary\n"
    )
    assert "GIT binary patch" in binary and grader.grade(task, binary).verdict == "unresolved"
    config = diff(repo, tmp_path / "d", {"calc.py": FIXED}).replace("calc.py", ".git/config")
    assert grader.grade(task, config).verdict == "patch_failed"


def test_bwrap_a_setup_cfg_with_cr_line_ends_keeps_its_selection(tmp_path) -> None:
    """The base's ``setup.cfg`` ends its lines with ``\\r``; its ``--deselect`` leaves out a test
    that, run first, fails the ``PASS_TO_PASS`` one. Grading read no ``[tool:pytest]`` in it
    (``configparser`` splits lines at ``\\n`` only; pytest's iniconfig as ``str.splitlines``),
    ran the test, and the reference patch graded ``unresolved``."""
    require_bwrap()
    leaky = TEST_A.replace(
        "from calc import sub\n",
        "from calc import sub\n\nLEFT = []\n\n\ndef test_leaves_state():\n    LEFT.append(1)\n",
    )
    leaky = leaky.replace("sub(5, 3) == 2", "sub(5, 3) == 2 and not LEFT")
    setup = "[metadata]\rname = calc\r\r[tool:pytest]\raddopts = --deselect tests/a/test_a.py::test_leaves_state\r"
    files = {**FILES, "tests/a/test_a.py": leaky, "setup.cfg": setup}
    task = make_task(tmp_path, "cr", files, {"calc.py": FIXED}, F2P, P2P)
    grade = bwrap_grader(tmp_path).grade(task, task.patch)
    assert grade.verdict == "resolved", grade


def test_a_configuration_reads_as_pytest_reads_it(tmp_path, monkeypatch) -> None:
    """``\\r`` line ends, and a configuration file that is a link (pytest follows it)."""
    monkeypatch.chdir(tmp_path)
    assert _runner.pytest_config("setup.cfg", b"[metadata]\rname = x\r[tool:pytest]\rpythonpath = lib\r") == {
        "pythonpath": "lib"
    }
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "pytest.ini").write_text('[pytest]\naddopts = -m "not slow" -p xdist\n')
    (tmp_path / "pytest.ini").symlink_to("config/pytest.ini")
    assert _runner.repository_selection(["tests/test_a.py"]) == ["-m", "not slow"]


def test_the_paths_a_diff_writes_are_changed_whatever_git_says(tmp_path, monkeypatch) -> None:
    """``git diff HEAD`` compares through the base's ``ident``: a rewritten ``$Id: ... $`` is the
    base's to it; ``changed_paths`` names every path ``git apply`` writes."""
    repo, _ = make_repo(tmp_path / "repo", {"m.py": 'ID = "$Id$"\n', ".gitattributes": "*.py ident\n"})
    patch = diff(
        repo,
        tmp_path / "scratch",
        {"m.py": 'ID = "$Id: "; X = 1; _ = " $"\n', "new.txt": "n"},
        own_attributes=RAW,
    )
    (tmp_path / "agent.patch").write_text(patch)
    monkeypatch.chdir(repo)
    subprocess.run([*GIT, "apply", str(tmp_path / "agent.patch")], check=True)
    shown = subprocess.run(
        [*GIT, "diff", "--name-only", "HEAD", "--"], capture_output=True, text=True, check=True
    )
    assert shown.stdout == ""  # what the runner asked alone
    assert _runner.changed_paths(str(tmp_path / "agent.patch")) == (["m.py", "new.txt"], ["new.txt"])


def test_a_reference_fix_is_the_exact_patch(tmp_path) -> None:
    """``run_git`` (the debugging gym's and synthesis's reference fixes) read git's output with
    universal newlines and strict UTF-8: a fix of a module with ``\\r\\n`` line ends did not apply,
    one of a Latin-1 module raised."""
    from lit_codeRL.grading.repo import patch_bytes  # noqa: PLC0415
    from lit_codeRL.problems.swe import git_environment, run_git  # noqa: PLC0415

    repo, base = make_repo(tmp_path / "repo", {"calc.py": "x = 1\r\n"})
    (repo / "calc.py").write_bytes(b"x = 2\r\n")
    (repo / "names.py").write_bytes(b"N = 'caf\xe9'\n")
    env = git_environment(tmp_path)
    run_git(["-C", str(repo), "add", "-A"], env)
    patch = run_git(["-C", str(repo), "diff", "--cached", "--binary", base], env)
    run_git(["-C", str(repo), "reset", "-q", "--hard", base], env)
    (tmp_path / "fix.patch").write_bytes(patch_bytes(patch))
    run_git(["-C", str(repo), "apply", str(tmp_path / "fix.patch")], env)
    assert (repo / "calc.py").read_bytes() == b"x = 2\r\n"
    assert (repo / "names.py").read_bytes() == b"N = 'caf\xe9'\n"
