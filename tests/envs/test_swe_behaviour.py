"""What an SWE episode's final diff did against the reference patch (``envs/swe/behaviour.py``),
on diffs ``git`` itself writes, with the counts worked out by hand."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lit_codeRL.envs.swe.behaviour import DiffBehaviour, behaviour_counts, diff_behaviour, file_changes

BASE = {
    "pkg/calc.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    total = a\n    total -= b\n    return total\n",
    "tests/test_calc.py": "from pkg.calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}


def git_diff(
    tmp_path: Path, changes: dict[str, str | None], executable: tuple[str, ...] = (), binary: bool = False
) -> str:
    """``git diff`` of BASE with ``changes`` (None: the file deleted) applied and the files
    ``executable`` made executable; ``binary``: with ``--binary``, as the grader's diffs are."""
    repo = tmp_path / f"repo{len(list(tmp_path.iterdir()))}"

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
        ).stdout

    for path, text in BASE.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    for path, text in changes.items():
        if text is None:
            (repo / path).unlink()
        else:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(text)
    for path in executable:
        (repo / path).chmod(0o755)
    git("add", "-A")
    return git("diff", "--cached", *(["--binary"] if binary else []))


def edited(path: str, old: str, new: str) -> dict[str, str]:
    assert old in BASE[path]
    return {path: BASE[path].replace(old, new, 1)}


@pytest.fixture
def gold(tmp_path: Path) -> str:
    # the reference patch changes sub's return (line 8 of pkg/calc.py)
    return git_diff(tmp_path, edited("pkg/calc.py", "    return total\n", "    return total + 0\n"))


def test_file_changes_numbers_the_base_lines_a_hunk_touches(tmp_path):
    changes = file_changes(
        git_diff(tmp_path, edited("pkg/calc.py", "    return a + b\n", "    return a - b\n"))
    )
    assert set(changes) == {"pkg/calc.py"} and changes["pkg/calc.py"].touched == {2}
    assert changes["pkg/calc.py"].hunks == [("    return a + b\n", "    return a - b\n")]
    # an inserted line touches the two lines beside it (after line 7: lines 7 and 8)
    inserted = edited("pkg/calc.py", "    total -= b\n", "    total -= b\n    total += 0\n")
    assert file_changes(git_diff(tmp_path, inserted))["pkg/calc.py"].touched == {7, 8}
    # a deleted file, a new one and a second file: each is named by its own path
    both = {**edited("pkg/calc.py", "def sub", "def minus"), "tests/test_calc.py": None, "new.py": "x = 1\n"}
    changes = file_changes(git_diff(tmp_path, both))
    assert set(changes) == {"pkg/calc.py", "tests/test_calc.py", "new.py"}
    assert changes["pkg/calc.py"].touched == {5} and changes["tests/test_calc.py"].touched == {1, 2, 3, 4, 5}
    assert changes["new.py"].touched == {0, 1}  # inserted into an empty file, before its line 1


def test_a_diff_line_holding_a_form_feed_or_u2028_is_one_line(tmp_path):
    """``git`` ends a diff's lines at ``\\n`` only; ``str.splitlines`` also ends one at a form feed,
    NEL, U+2028..., and read the piece after it that starts with a space, ``-`` or ``+`` as a line
    of its own (here: context lines, which moved every base line number below them)."""
    new = "def add(a, b):  # \x0c -\u2028 +\x85 x\n    return a - b\n"
    changes = file_changes(
        git_diff(tmp_path, edited("pkg/calc.py", "def add(a, b):\n    return a + b\n", new))
    )
    assert changes["pkg/calc.py"].touched == {1, 2}
    assert changes["pkg/calc.py"].hunks == [("def add(a, b):\n    return a + b\n", new)]


def test_an_episode_is_placed_against_the_fix(tmp_path, gold):
    def behaviour(changes: dict[str, str | None]) -> DiffBehaviour:
        return diff_behaviour(git_diff(tmp_path, changes), gold)

    assert diff_behaviour("", gold) == DiffBehaviour()  # changed nothing
    same = behaviour(edited("pkg/calc.py", "    return total\n", "    return total + 0\n"))
    assert same == DiffBehaviour(changed=True, fix_file=True, fix_lines=True, same_change=True)
    # the right line, another change
    other_fix = behaviour(edited("pkg/calc.py", "    return total\n", "    return -total\n"))
    assert other_fix == DiffBehaviour(changed=True, fix_file=True, fix_lines=True)
    # the line above the fix's (a neighbour, not the fix's line): right file, wrong lines
    above = behaviour(edited("pkg/calc.py", "    total -= b\n", "    total += b\n"))
    assert above == DiffBehaviour(changed=True, fix_file=True)
    # a line inserted just before the fix's line is beside it: on the fix's lines
    beside = behaviour(edited("pkg/calc.py", "    return total\n", "    total = total\n    return total\n"))
    assert beside == DiffBehaviour(changed=True, fix_file=True, fix_lines=True)
    # the test instead of the code
    test_only = behaviour(edited("tests/test_calc.py", "== 3", "== add(1, 2)"))
    assert test_only == DiffBehaviour(changed=True, other_files=True)
    # the fix and a test edit: the fix's change, but not only it
    fix_and_test = behaviour(
        {
            **edited("pkg/calc.py", "    return total\n", "    return total + 0\n"),
            **edited("tests/test_calc.py", "== 3", "== add(1, 2)"),
        }
    )
    assert fix_and_test == DiffBehaviour(changed=True, fix_file=True, fix_lines=True, other_files=True)


def test_a_change_without_a_text_hunk_is_still_a_change(tmp_path, gold):
    """A binary file, a pure rename, a mode change: git writes no ``---``/``+++`` for them."""
    calc = BASE["pkg/calc.py"]
    renamed = git_diff(tmp_path, {"pkg/calc.py": None, "pkg/arith.py": calc})
    assert "rename from pkg/calc.py" in renamed and "+++" not in renamed
    assert diff_behaviour(renamed, gold) == DiffBehaviour(changed=True, fix_file=True)
    mode = git_diff(tmp_path, {}, executable=("pkg/calc.py",))
    assert "new mode 100755" in mode and file_changes(mode)["pkg/calc.py"].touched == set()
    assert diff_behaviour(mode, gold) == DiffBehaviour(changed=True, fix_file=True)
    for binary in (False, True):  # "Binary files ... differ", or a GIT binary patch
        blob = git_diff(tmp_path, {"data/blob.bin": "\x00\x01 not text"}, binary=binary)
        assert "+++" not in blob and set(file_changes(blob)) == {"data/blob.bin"}
        assert diff_behaviour(blob, gold) == DiffBehaviour(changed=True, other_files=True)
    # with a name git quotes, beside a text change of the fix's line
    both = git_diff(
        tmp_path,
        {**edited("pkg/calc.py", "    return total\n", "    return total + 0\n"), "d\tb.bin": "\x00"},
        binary=True,
    )
    assert set(file_changes(both)) == {"pkg/calc.py", "d\\tb.bin"}


def test_hostile_and_broken_diffs_are_counted_not_raised(gold):
    for diff in (
        "not a diff at all\n",
        "+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",  # no --- line before +++
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -zz +1 @@\n-a\n",  # a hunk header it cannot read
        'diff --git a/\udcff b/\udcff\n--- "a/\\377"\n+++ "b/\\377"\n@@ -1 +1 @@\n-\udcfe\n+x\n',
        "@@ -1,2 +1,2 @@\n-a\n+b\n",  # hunks without a file
    ):
        result = diff_behaviour(diff, gold)
        assert isinstance(result, DiffBehaviour) and not result.same_change


def test_behaviour_counts_sum_each_field():
    counts = behaviour_counts(
        [
            DiffBehaviour(),
            DiffBehaviour(changed=True, fix_file=True, fix_lines=True, same_change=True),
            DiffBehaviour(changed=True, other_files=True),
        ]
    )
    assert counts == {
        "episodes": 3, "changed": 2, "fix_file": 1, "fix_lines": 1, "other_files": 1, "same_change": 1,
    }  # fmt: skip
