"""Task synthesis (``problems/synth``): candidates, the keep rule, statements, MBPP tasks made at
run time, a repository synthesized end to end through ``lit-coderl synth`` and read back as SWE
and debugging tasks that grade both ways in the real sandbox."""

from __future__ import annotations

import difflib
import json
import logging
import random
import re
import subprocess
import sys

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.synth.candidates import candidates_by_function, splice_diff, unified_diff
from lit_codeRL.problems.synth.mutations import splice_into
from lit_codeRL.problems.synth.statements import leaked_lines, repository_statement, value_statement
from lit_codeRL.problems.synth.validate import Baseline, SuiteRun, classify, failure_messages
from tests.sandbox.conftest import require_bwrap

# ---------------------------------------------------------------------------------------------
# pure parts
# ---------------------------------------------------------------------------------------------

CLEAN = Baseline(
    frozenset({"t.py::a", "t.py::b", "t.py::c", "t.py::flaky"}), ("t.py::a", "t.py::b", "t.py::c")
)


def run(**statuses: str) -> SuiteRun:
    base = {"t.py::a": "passed", "t.py::b": "passed", "t.py::c": "passed", "t.py::flaky": "failed"}
    base.update({f"t.py::{k}": v for k, v in statuses.items()})
    return SuiteRun("unresolved", base)


def test_classify_measures_fail_to_pass_and_pass_to_pass_against_the_clean_runs():
    assert classify(CLEAN, run(a="failed"), 10, 1) == (("t.py::a",), ("t.py::b", "t.py::c"))
    # an error counts as failing; a test that failed clean (flaky) is neither F2P nor P2P
    assert classify(CLEAN, run(b="error", flaky="passed"), 10, 1) == (("t.py::b",), ("t.py::a", "t.py::c"))


@pytest.mark.parametrize(
    ("suite", "why"),
    [
        (run(), "no test fails"),
        (run(a="failed", b="failed", c="failed"), "too few tests still pass"),
        (SuiteRun("unresolved", {"t.py::a": "failed"}), "test ids differ"),
        (SuiteRun("unresolved", {}, collect_errors=("t.py",)), "collection error"),
        (SuiteRun("timeout", {}), "timeout"),
        (SuiteRun("tamper", {}), "run tamper"),
    ],
)
def test_classify_rejects(suite, why):
    assert classify(CLEAN, suite, 10, 1) == why


def test_ids_that_differ_from_run_to_run_are_neither_required_nor_graded():
    # the clean runs collected t.py::m[box0] once and t.py::m[box1] once: named by address
    unstable = Baseline(CLEAN.ids, CLEAN.passing, unstable=("t.py::m[box0]", "t.py::m[box1]"))
    with_other = SuiteRun("unresolved", {**run(a="failed").statuses, "t.py::m[box7]": "passed"})
    assert classify(unstable, with_other, 10, 1) == (("t.py::a",), ("t.py::b", "t.py::c"))
    assert classify(CLEAN, with_other, 10, 1) == "test ids differ"  # a stable suite: a new id is a change
    missing = SuiteRun("unresolved", {k: v for k, v in run(a="failed").statuses.items() if k != "t.py::c"})
    assert classify(unstable, missing, 10, 1) == "test ids differ"  # a stable id still must be there


def test_a_candidates_limits_are_the_graders_rule_with_the_clean_suite_as_reference():
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.synth.validate import candidate_limits

    grader = SWEGrader(None, None, timeout_s=300.0, timeout_factor=10.0, min_timeout_s=20.0, min_cpu_s=5.0)
    clean = Baseline(frozenset(), (), wall_s=3.0, cpu_s=0.8)
    assert candidate_limits(grader, clean) == (30.0, 8.0)  # 10 x 3 s; 10 x 0.8 s
    assert candidate_limits(grader, Baseline(frozenset(), (), 1.0, 0.2)) == (20.0, 5.0)  # the floors
    assert candidate_limits(grader, Baseline(frozenset(), (), 40.0, 35.0)) == (300.0, 300.0)  # the cap
    assert candidate_limits(grader, Baseline(frozenset(), (), 3.0, None)) == (30.0, None)  # CPU unknown
    assert candidate_limits(grader, Baseline(frozenset(), ())) == (300.0, None)  # not measured
    grader.timeout_factor = 0
    assert candidate_limits(grader, clean) == (300.0, None)  # the grader's scaling off


def test_classify_caps_fail_to_pass():
    assert classify(CLEAN, run(a="failed", b="failed"), 1, 0) == "too many tests fail"
    assert classify(CLEAN, run(a="failed", b="failed", c="failed"), 10, 0)[0] == (
        "t.py::a",
        "t.py::b",
        "t.py::c",
    )


def test_each_function_keeps_bugs_with_different_failures_until_it_has_enough():
    from lit_codeRL.problems.synth.validate import SAME_FAILURES, validate_functions

    files = {"m.py": "def f(a, b):\n    if a < b:\n        return a + b\n    return a - b * 2\n"}
    groups = candidates_by_function(files)
    (group,) = groups.values()
    assert len(group) >= 5
    # the first two candidates fail test x, the third is rejected, the rest fail test y
    outcomes = (
        [(("t.py::x",), ("t.py::z",), {})] * 2 + ["no test fails"] + [(("t.py::y",), ("t.py::z",), {})] * 9
    )
    by_key = {c.key: outcome for c, outcome in zip(group, outcomes[: len(group)], strict=True)}
    bugs, rejected = validate_functions(groups, lambda c: by_key[c.key], 2, 6, 1)
    assert [b.fail_to_pass for b in bugs] == [("t.py::x",), ("t.py::y",)]
    assert rejected == {SAME_FAILURES: 1, "no test fails": 1}
    bugs, rejected = validate_functions(groups, lambda c: by_key[c.key], 3, 3, 1)  # tries cap
    assert len(bugs) == 1 and sum(rejected.values()) == 2


def test_failure_messages_read_the_message_not_the_traceback():
    junit = b"""<?xml version="1.0"?><testsuites><testsuite>
    <testcase classname="tests.test_m" name="test_x"><failure message="assert 7 == 3&#10; +  where 7 = f(2)">
    def f(x):\n&gt;       return x + 5   # the buggy line</failure></testcase>
    <testcase classname="tests.test_m" name="test_ok"/></testsuite></testsuites>"""
    out = failure_messages(junit, ["tests/test_m.py::test_x", "tests/test_m.py::test_ok"])
    assert out == {"tests/test_m.py::test_x": "assert 7 == 3\n +  where 7 = f(2)"}
    assert failure_messages(b"<not xml", ["a.py::b"]) == {}


LONG_FAILURES = """\
import pytest


def listed(n):
    secret = "the buggy line"
    return list(range(n))


def test_assert():
    assert listed(300) == list(range(301))


def test_fail():
    pytest.fail("@answer@" + "x" * 700, pytrace=False)


def test_raise():
    listed(1)
    raise ValueError("v" * 700 + "\\nsecond line")


def test_short():
    assert listed(2) == [0]
"""


def test_failure_messages_are_whole_where_pytest_cut_them_and_never_quote_the_code(tmp_path):
    """pytest 9.1 on cuts a junit ``message`` to 500 characters with a note on a last line
    (``[truncated; full report in element text]``): 64 of more-itertools' 1,500 held-out answers
    (``pytest.fail(..., pytrace=False)``) did not read back, and a statement's values ended in
    that note. The message is whole again, from the element's text where it is the message or
    from its ``E`` lines, never from the code the text quotes. Real pytest, real junit."""
    (tmp_path / "test_long.py").write_text(LONG_FAILURES)
    junit = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "verbosity_assertions=2",
         "--junitxml", str(junit), "-o", "junit_family=xunit2", "test_long.py"],
        cwd=tmp_path, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    names = ["test_assert", "test_fail", "test_raise", "test_short"]
    out = failure_messages(junit.read_bytes(), [f"test_long.py::{name}" for name in names])
    assert out["test_long.py::test_fail"] == "Failed: @answer@" + "x" * 700
    assert out["test_long.py::test_raise"] == "ValueError: " + "v" * 700 + "\nsecond line"
    whole = out["test_long.py::test_assert"]
    assert whole.startswith("assert [0, 1, 2") and "299," in whole and "300" in whole.splitlines()[-2], whole
    assert out["test_long.py::test_short"].startswith("assert [0, 1] == [0]")
    assert not any("secret" in message or "full report" in message for message in out.values()), out


def test_whole_message_keeps_what_pytest_kept_when_nothing_goes_on_from_it():
    from lit_codeRL.problems.synth.validate import whole_message

    note = "\n[+3 more lines; full report in element text]"
    # a text whose E lines are not the message's continuation (another format): what was kept
    assert (
        whole_message("assert 1 == 2\n  first" + note, "def t():\n>   x\nE   other")
        == "assert 1 == 2\n  first"
    )
    # a location line of a file named E...: not an E line
    text = "E   ValueError: abc\nE   def\n\nExample.py:3: ValueError"
    assert whole_message("ValueError: abc" + note, text) == "ValueError: abc\ndef"
    assert whole_message("assert 1 == 2", "anything") == "assert 1 == 2"  # not cut: as it is


def test_collection_errors_are_named_with_pytests_error_line_and_grouped_by_it():
    from lit_codeRL.problems.synth.validate import collect_reasons, why_not_collected

    junit = (
        b'<testsuites><testsuite><testcase classname="" name="tests.test_a">'
        b'<error message="collection failure">Traceback:\ntests/test_a.py:1: in &lt;module&gt;\n'
        b"    import six\nE   ModuleNotFoundError: No module named 'six'</error></testcase>"
        b'<testcase classname="tests.test_b" name="TestB"><error message="collection failure">'
        b"E   In TestB:\nE   TypeError: bad</error></testcase>"
        # no E line (titlecase's nose-style yield tests): pytest's own words
        b'<testcase classname="" name="tests.test_c"><error message="collection failure">'
        b"&apos;yield&apos; keyword is allowed in fixtures, but not in tests (test_io)</error></testcase>"
        b'<testcase classname="" name="tests.test_f"><error message="collection failure"/></testcase>'
        b'<testcase classname="tests.test_d" name="test_ok"/></testsuite></testsuites>'
    )
    nodes = [
        "tests/test_a.py",
        "tests/test_b.py::TestB",
        "tests/test_c.py",
        "tests/test_e.py",
        "tests/test_f.py",
    ]
    reasons = collect_reasons(junit, nodes)
    assert reasons == {
        "tests/test_a.py": "ModuleNotFoundError: No module named 'six'",
        "tests/test_b.py::TestB": "TypeError: bad",
        "tests/test_c.py": "'yield' keyword is allowed in fixtures, but not in tests (test_io)",
        "tests/test_f.py": "collection failure",
    }
    six = {f"t/{n}.py": "ModuleNotFoundError: No module named 'six'" for n in "pqrs"}
    assert why_not_collected([*six, "t/x.py", "t/y.py"], {**six, "t/x.py": "SyntaxError: bad"}) == (
        "ModuleNotFoundError: No module named 'six' (t/p.py, t/q.py, t/r.py, and 1 more); "
        "SyntaxError: bad (t/x.py); t/y.py"
    )
    assert collect_reasons(b"<not xml", nodes) == {} and collect_reasons(None, nodes) == {}


def test_statements_name_the_test_and_values_and_the_leak_check_catches_the_changed_line():
    diff = unified_diff("m.py", "def f(x):\n    return x + 1\n", "def f(x):\n    return x - 1\n")
    text = repository_statement(["tests/test_m.py::test_f"], {"tests/test_m.py::test_f": "assert 1 == 3"}, 4)
    assert "tests/test_m.py::test_f" in text and "assert 1 == 3" in text and "other 4 test(s) pass" in text
    assert leaked_lines(text, diff) == []
    leaky = repository_statement(["t.py::f"], {"t.py::f": "in f: return x - 1"}, 0)
    assert leaked_lines(leaky, diff) == ["return x - 1"]
    value = value_statement(
        "Add one.", "solution.py", "f(2)", "3", "it returns `1`", "test_solution.py::test_1"
    )
    assert "`f(2)` should give `3`, but it returns `1`" in value
    # parameter ids may hold `::`: the tests are named whole
    ids = ["tests/t.py::test_a[x]", "tests/t.py::C::test_q[https://[::1]:80/]"]
    named = repository_statement(ids, {}, 0)
    assert "Also failing: `test_q[https://[::1]:80/]`." in named and "`test_a[x]` exercises" in named


def test_unified_diff_applies_with_git_apply_even_without_a_final_newline(tmp_path):
    old, new = "def f():\n    return 1", "def f():\n    return 2"
    (tmp_path / "m.py").write_text(old)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "apply", "-"],
        input=unified_diff("m.py", old, new),
        text=True,
        check=True,
    )
    assert (tmp_path / "m.py").read_text() == new


def _difflib_whole_file(path: str, old: str, new: str) -> str:
    """What unified_diff gave before it left out the files' common lines: difflib over the whole files."""
    out = []
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
    )
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return f"diff --git a/{path} b/{path}\n" + "".join(out)


def _hunks_apply_where_they_say(old: str, new: str, diff: str) -> int:
    """Each hunk's old and new lines sit exactly at the lines its header names (``git apply``
    would search for them elsewhere); the number of hunks."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    body = diff.split("\n@@ ")[1:]
    for hunk in body:
        header, *lines = hunk.splitlines(keepends=True)
        old_start, new_start = (int(part.split(",")[0][1:]) for part in header.split(" @@")[0].split())
        was: list[str] = []
        now: list[str] = []
        sides: tuple[list[str], ...] = ()
        for line in lines:
            if line.startswith("\\"):  # "\ No newline at end of file": the line before has none
                for side in sides:
                    side[-1] = side[-1].rstrip("\n")
                continue
            sides = {" ": (was, now), "-": (was,), "+": (now,)}[line[:1]]
            for side in sides:
                side.append(line[1:])
        assert a[old_start - 1 : old_start - 1 + len(was)] == was, header
        assert b[new_start - 1 : new_start - 1 + len(now)] == now, header
    return len(body)


def test_unified_diff_of_one_change_is_difflibs_whole_file_diff_and_applies(tmp_path):
    """Below 200 lines (where difflib starts to treat frequent lines as junk) the diff is the one
    difflib gives over the whole files, hunk line numbers and all, as MBPP's and the shipped
    repositories' bugs were made: at the top, at the end without a final newline, among equal lines
    (which `continue` a removal takes). In a longer file it is one hunk at the lines it names, with
    3 lines of context each side, and applies."""
    top = "".join(f"h{i}\n" for i in range(10))
    exact = [
        ("def f(x):\n    return 1\n", "def f(x):\n    return 2\n"),
        ("a\nb\nc\nd\ne\nf\ng\nh\n", "a\nb\nc\nd\ne\nf\ng\nH"),
        (top + "continue\nif p:\n    q\ncontinue\n" + "y\n" * 9, top + "continue\n" + "y\n" * 9),
    ]
    for old, new in exact:
        assert unified_diff("m.py", old, new) == _difflib_whole_file("m.py", old, new)
    body = "".join(
        f"def f{i}(x):\n    if x:\n        continue_ = x\n    return x + {i}\n\n\n" for i in range(60)
    )
    ambiguous = "continue\nif p:\n    q\ncontinue\n"
    long = [  # (old, new, the change is inside: 3 lines of context each side)
        (body, body.replace("return x + 7\n", "return x - 7\n"), True),  # line 46
        (body, body.replace("def f30(x):\n    if x:\n        continue_ = x\n", "def f30(x):\n"), True),
        (body + ambiguous + "y\n" * 9, body + "continue\n" + "y\n" * 9, True),  # among equal lines
        (body, body[:-2] + "pass", False),  # the last line, no final newline
        (body, "\n" + body, False),
    ]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for old, new, inside in long:
        diff = unified_diff("m.py", old, new)
        assert _hunks_apply_where_they_say(old, new, diff) == 1, diff
        assert diff.count("\n ") == 6 or not inside, diff
        (tmp_path / "m.py").write_text(old)
        subprocess.run(["git", "-C", str(tmp_path), "apply", "-"], input=diff, text=True, check=True)
        assert (tmp_path / "m.py").read_text() == new
    assert "@@ -43,7 +43,7 @@" in unified_diff("m.py", body, long[0][1])


def test_the_diff_of_a_splice_is_the_diff_of_the_spliced_file():
    """splice_diff (the candidates' diff, made without the new file) is unified_diff's text for
    every splice: any place, deletions, insertions, at either end, changes that give equal lines
    back, files with and without a final newline, CRLF and form feeds, short and long."""
    rng = random.Random(0)
    body = "".join(f"def f{i}(x):\n    if x:\n        y = x\n    return x + {i}\n\n\n" for i in range(60))
    files = [body, body.rstrip("\n"), body[:300], "a\r\nb\r\n\x0cc\n" * 90, "x\n" * 250, "", "one line"]
    pieces = ["", "\n", "z", "y = x\n", "\n\n", "    return x + 1\n", "\x0c", "q\r\n"]
    checked = 0
    for old in files:
        for _ in range(150):
            start = rng.randint(0, len(old))
            end = min(len(old), start + rng.choice([0, 0, 1, 3, 12, 40, 200]))
            text = rng.choice([old[start:end], *pieces]) + rng.choice(pieces)
            if rng.random() < 0.3:  # the same text back around a change: runs of equal lines
                text = old[start:end].replace("x", "w", 1)
            splice = (start, end, text)
            want = unified_diff("m.py", old, splice_into(old, splice))
            assert splice_diff("m.py", old, splice) == want, (old[:40], splice)
            checked += 1
    assert checked == 150 * len(files)


def test_a_source_file_that_does_not_compile_is_named_in_a_warning(caplog):
    files = {"pkg/py2.py": "def f(x):\n    print x + 1\n", "pkg/ok.py": "def g(y):\n    return y + 1\n"}
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth.candidates"):
        groups = candidates_by_function(files)
    assert set(groups) == {"pkg/ok.py::g"}
    assert "do not compile" in caplog.text and "pkg/py2.py" in caplog.text and "pkg/ok.py" not in caplog.text


def test_candidates_are_grouped_by_function_deduplicated_and_skip_tests():
    files = {
        "pkg/m.py": "def f(a, b):\n    if a < b:\n        return a + b\n    return a - b\n\n\n"
        "def g(x):\n    return x * 2\n",
        "tests/test_m.py": "def test_f():\n    assert 1 < 2\n",
    }
    groups = candidates_by_function(files)
    assert set(groups) == {"pkg/m.py::f", "pkg/m.py::g"}
    keys = [c.key for g in groups.values() for c in g]
    assert len(keys) == len(set(keys))
    for group in groups.values():
        for c in group:
            assert c.content != files["pkg/m.py"] and c.diff.startswith("diff --git a/pkg/m.py b/pkg/m.py")
            compile(c.content, "m.py", "exec")
    # the order is a seeded shuffle: stable across calls, different for another seed
    assert [c.key for c in candidates_by_function(files)["pkg/m.py::f"]] == [
        c.key for c in groups["pkg/m.py::f"]
    ]


# ---------------------------------------------------------------------------------------------
# MBPP tasks made at run time
# ---------------------------------------------------------------------------------------------


def test_the_mbpp_test_module_imports_the_solutions_underscore_names_too(tmp_path):
    """``from solution import *`` skips ``_sum`` (MBPP 798), which the asserts call: without the
    explicit import the gold solution fails its own tests in the workspace."""
    import sys

    from lit_codeRL.problems.record import Problem
    from lit_codeRL.problems.synth.mbpp import private_names, solution_source, test_module

    code = (
        "_BASE = 0\n__version__ = '1'\nclass _Acc:\n    pass\n\ndef _sum(arr):\n    return _BASE + sum(arr)\n"
    )
    assert private_names(code) == ["_Acc", "_BASE", "_sum"]
    assert private_names("def f(:\n") == [] and private_names("def total(a):\n    return a\n") == []
    problem = Problem("798", "sum an array", tests=("assert _sum([1, 2, 3]) == 6",), reference_solution=code)
    (tmp_path / "solution.py").write_text(solution_source(problem))
    (tmp_path / "test_solution.py").write_text(test_module(problem))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout


def test_mbpp_debugging_tasks_are_split_by_mbpp_and_each_bug_fails_a_test(mbpp_dir, tmp_path, monkeypatch):
    require_bwrap()
    from lit_codeRL.problems.debug import load_debug_tasks
    from lit_codeRL.problems.mbpp import load_mbpp
    from lit_codeRL.problems.synth.mbpp import MBPPBugSettings, bug_rows
    from lit_codeRL.sandbox import Program, make_sandbox

    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    problems = load_mbpp(str(mbpp_dir), "train")[:12]
    rows, stats = bug_rows(problems, MBPPBugSettings(tries=6))
    assert stats["problems"] == 12 and stats["kept"] == len(rows) >= 8
    by_number = {p.metadata["mbpp_task_id"]: p for p in problems}
    programs = []
    for row in rows:
        files = {f["path"]: f["content"] for f in row["files"]}
        fix = {f["path"]: f["content"] for f in row["fix"]}
        problem = by_number[row["extra_info"]["mbpp_task_id"]]
        assert files["solution.py"] != fix["solution.py"] and "def test_1():" in files["test_solution.py"]
        assert row["split"] == "train" and problem.prompt.strip() in row["description"]
        assert "should give" in row["description"] or "the check" in row["description"]
        assert not leaked_lines(
            row["description"], unified_diff("solution.py", fix["solution.py"], files["solution.py"])
        )
        programs.append(Program(files["solution.py"], problem.tests, problem.setup_code))
    with make_sandbox(workers=2) as sandbox:
        results = sandbox.run_batch(programs)
    for row, result in zip(rows, results, strict=True):
        failing = [f"test_solution.py::test_{i + 1}" for i, ok in enumerate(result.test_passed) if not ok]
        assert failing == row["extra_info"]["failing_tests"]
    # the loader: MBPP's own splits (a copy holding six problems of each), cached, ids unique
    lines = (mbpp_dir / "mbpp.jsonl").read_text().splitlines()
    wanted = {*range(11, 17), *range(601, 607)}
    subset = tmp_path / "mbpp.jsonl"
    subset.write_text("\n".join(line for line in lines if json.loads(line)["task_id"] in wanted) + "\n")
    train = load_debug_tasks(f"mbpp:{subset}", "train")
    held_out = load_debug_tasks(f"mbpp:{subset}", "test")
    assert len(train) >= 4 and len(held_out) >= 4
    assert all(601 <= t.metadata["mbpp_task_id"] <= 606 for t in train)
    assert all(11 <= t.metadata["mbpp_task_id"] <= 16 for t in held_out)
    assert {t.split for t in held_out} == {"eval"} and not {t.task_id for t in train} & {
        t.task_id for t in held_out
    }
    assert list((tmp_path / "cache").glob("mbpp-debug-*.json"))
    # more bugs a problem from the source string: the one-bug tasks among them, ids unique
    more = load_debug_tasks(f"mbpp:{subset}?per_problem=3&tries=9", "train")
    assert len(more) > len(train) and len({t.task_id for t in more}) == len(more)
    assert {t.task_id for t in train} <= {t.task_id for t in more}
    assert max(sum(t.metadata["mbpp_task_id"] == n for t in more) for n in range(601, 607)) == 3
    for bad in ("per_problem=0", "per_problem=3&tries=2", "bugs=3", "per_problem=x"):
        with pytest.raises(ConfigError, match=r"per_problem|tries"):
            load_debug_tasks(f"mbpp:{subset}?{bad}", "train")
    # `lit-coderl synth mbpp:` writes a split's bugs as SWE rows: the same bugs, task for task,
    # as that split's debugging tasks (one screening of all of MBPP, shared with them)
    from lit_codeRL.problems.swe import load_swe_tasks
    from lit_codeRL.problems.synth.cli import main as synth_main

    for split, debug_tasks in (("test", held_out), ("train", train)):
        report = synth_main(
            [f"mbpp:{subset}", "--mbpp-split", split, "--no-check", "--out", str(tmp_path / split)]
        )
        rows = load_swe_tasks(str(tmp_path / split / "swe" / "tasks.jsonl"), "all")
        assert [r.instance_id for r in rows] == [t.task_id for t in debug_tasks]
        assert report["sources"][0]["kept_in_split"] == len(rows) and report["sources"][0]["split"] == split
        assert {r.split for r in rows} == {"eval" if split == "test" else "train"}


# ---------------------------------------------------------------------------------------------
# a repository, end to end
# ---------------------------------------------------------------------------------------------

LIB = '''"""Small helpers."""


def clamp(x, low, high):
    """x limited to [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def window_sums(values, size):
    """Sums of each run of `size` consecutive values."""
    out = []
    for i in range(len(values) - size + 1):
        out.append(sum(values[i : i + size]))
    return out


def initials(name):
    parts = [p for p in name.split() if p]
    return "".join(p[0].upper() for p in parts)
'''

TESTS = """from shelf.lib import clamp, initials, window_sums


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(12, 0, 10) == 10


def test_window_sums():
    assert window_sums([1, 2, 3, 4], 2) == [3, 5, 7]


def test_window_whole():
    assert window_sums([1, 2, 3], 3) == [6]


def test_initials():
    assert initials("ada  lovelace") == "AL"
"""


@pytest.fixture(autouse=True)
def _debug_cache(tmp_path, monkeypatch):
    """synth's final check validates debugging rows in a debugging run's cache: this test's own."""
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-run-cache"))


def test_synth_command_writes_swe_and_debugging_tasks_that_grade_both_ways(tmp_path, monkeypatch, caplog):
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.debug import default_grader, load_debug_tasks, validate_debug_tasks
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks, prepare_repo
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = tmp_path / "shelf"
    (repo / "shelf").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "shelf" / "__init__.py").write_text("")
    (repo / "shelf" / "lib.py").write_text(LIB)
    (repo / "tests" / "test_lib.py").write_text(TESTS)
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0.5", "--tries", "8"])
    report = json.loads((out / "report.json").read_text())
    (source,) = report["sources"]
    assert source["functions"] == 3 and source["clean_tests"] == 6
    assert 1 <= source["kept"] <= 3 and report["tasks"] == source["kept"] - len(report["dropped_by_check"])
    assert sum(source["rejected"].values()) + source["kept"] <= source["validated"] + source["kept"]
    assert sum(source["kinds"].values()) == source["kept"]

    tasks = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    assert len(tasks) == report["tasks"] >= 1
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    for task in tasks:
        assert task.fail_to_pass and task.pass_to_pass
        # held-out checks (``repo_held_out.py``) beside the test module, graded after the visible tests
        hidden = [node for node in task.fail_to_pass if node.startswith("tests/test_held_out_lib.py::")]
        assert task.fail_to_pass[0].startswith("tests/test_lib.py::")
        assert (hidden and "b/tests/test_held_out_lib.py" in task.test_patch) or not (
            hidden or task.test_patch
        )
        assert set(task.fail_to_pass).isdisjoint(task.pass_to_pass)
        assert "tests/test_lib.py::" in task.problem_statement and "diff" not in task.problem_statement
        assert grader.grade(task, task.patch).resolved
        assert not grader.grade(task, "", run_empty=True).resolved
        # the bugged tree is the workspace's only history: one root commit, no fix anywhere
        copy = prepare_repo(task, tmp_path / f"copy-{task.base_commit[:8]}")
        log = subprocess.run(
            ["git", "-C", str(copy), "log", "--format=%H %P"], capture_output=True, text=True
        )
        assert log.stdout.split() == [task.base_commit]
        assert "lib.py" in task.patch and (copy / "shelf" / "lib.py").read_text() != LIB

    debug = load_debug_tasks(str(out / "debug" / "tasks.jsonl"))
    assert {t.task_id for t in debug} == {t.instance_id for t in tasks}
    kept = validate_debug_tasks(debug, grader, root=tmp_path / "debug-cache")
    assert [t.task_id for t in kept] == [t.task_id for t in debug]
    # the final check validated the debugging rows where a debugging run looks: it runs nothing
    assert report["debug_tasks"] == len(debug) and not report["debug_dropped_by_check"]
    with caplog.at_level(logging.INFO, logger="lit_codeRL.problems.debug"):
        assert len(validate_debug_tasks(debug, default_grader())) == len(debug)
    assert f"validated {len(debug)} debug tasks: {len(debug)} on this machine before" in caplog.text

    # a debugging row that does not validate is dropped by the final check, its SWE row kept
    import lit_codeRL.problems.synth.cli as synth_cli

    def unfixed(task):  # the reference fix left buggy: it resolves nothing
        row = unfixed.__wrapped__(task)
        return {**row, "fix": [{"path": p, "content": task.files[p]} for p in task.fix]}

    unfixed.__wrapped__ = synth_cli.debug_row
    monkeypatch.setattr(synth_cli, "debug_row", unfixed)
    main(["synth", str(repo), "--out", str(tmp_path / "unfixed"), "--eval-fraction", "0.5", "--tries", "8"])
    monkeypatch.setattr(synth_cli, "debug_row", unfixed.__wrapped__)
    unfixed_report = json.loads((tmp_path / "unfixed" / "report.json").read_text())
    assert unfixed_report["tasks"] == report["tasks"] and unfixed_report["debug_tasks"] == 0
    assert set(unfixed_report["debug_dropped_by_check"]) == {t.instance_id for t in tasks}
    assert all(
        why.startswith("the reference patch does not resolve it")
        for why in unfixed_report["debug_dropped_by_check"].values()
    ), unfixed_report
    assert not (tmp_path / "unfixed" / "debug" / "tasks.jsonl").read_text()

    # --max-functions: a seeded sample of the functions is tried (the suite runs are cached now)
    main(
        [
            "synth",
            str(repo),
            "--out",
            str(tmp_path / "one"),
            "--tries",
            "8",
            "--max-functions",
            "1",
            "--no-check",
        ]
    )
    (one,) = json.loads((tmp_path / "one" / "report.json").read_text())["sources"]
    assert (one["functions"], one["functions_tried"]) == (3, 1)
    rows = [json.loads(line) for line in (tmp_path / "one" / "swe" / "tasks.jsonl").read_text().splitlines()]
    assert len({row["function"] for row in rows}) == len(rows) == one["kept"] >= 1
    with pytest.raises(SystemExit):
        main(["synth", str(repo), "--out", str(tmp_path / "none"), "--max-functions", "0"])


def test_a_function_sample_is_seeded_stable_and_not_the_held_out_split():
    from lit_codeRL.problems.synth.repository import _eval_function, _sample_functions

    groups = {f"m.py::f{i}": [] for i in range(40)}
    assert _sample_functions(groups, None, 0) is groups and _sample_functions(groups, 40, 0) is groups
    ten = _sample_functions(groups, 10, 0)
    assert len(ten) == 10 and list(ten) == [name for name in groups if name in ten]  # the order kept
    assert _sample_functions(dict(groups), 10, 0) == ten and set(_sample_functions(groups, 10, 1)) != set(ten)
    more = _sample_functions({**groups, "m.py::extra": []}, 10, 0)
    assert len(set(more) & set(ten)) >= 9  # one function more changes the sample by one at most
    held = [name for name in ten if _eval_function(name, 0.3, 0)]
    assert 0 < len(held) < 10  # a hash of its own: not the held-out functions first


def test_synth_refuses_a_repository_without_a_passing_suite(tmp_path, capsys):
    from lit_codeRL.cli import main

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "m.py").write_text("def f():\n    return 1\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", str(tmp_path / "r"), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "no test module" in capsys.readouterr().err
    (tmp_path / "corrupt.bundle").write_bytes(bytes(range(256)) * 2)
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", str(tmp_path / "corrupt.bundle"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "cannot read" in err and err.count("\n") == 1, err


COUNTER = """def count_down(n):
    steps = 0
    while n > 0:
        n -= 1
        steps += 1
    return steps
"""

COUNTER_TESTS = """from pathlib import Path

from shelf.counter import count_down
from shelf.legacy import greet


def test_count_down():
    assert count_down(5) == 5


def test_count_zero():
    assert count_down(0) == 0


def test_fixture_bytes():
    assert (Path(__file__).parent / "data" / "blob.bin").read_bytes() == bytes(range(256))


def test_legacy_encoding():
    assert greet() == "bonjour caf\\u00e9"
"""


def test_synth_carries_files_that_are_not_utf8_and_stops_a_bug_that_never_ends(tmp_path, monkeypatch):
    """A repository's binary fixture and a Latin-1 source (PEP 263) reach every task as they are,
    in the SWE bundle and in the debugging rows (``content_base64``), and both grade both ways.
    Dropping ``n -= 1`` makes the loop run forever: the candidate's run stops at the limits the
    clean suite's times set (not the grader's 300 s), and it is rejected as a timeout. The runs
    are cached: synthesizing the repository again runs no test and gives the same tasks."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.debug import load_debug_tasks, validate_debug_tasks
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks, prepare_repo
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = tmp_path / "shelf"
    (repo / "shelf").mkdir(parents=True)
    (repo / "tests" / "data").mkdir(parents=True)
    (repo / "shelf" / "__init__.py").write_text("")
    (repo / "shelf" / "counter.py").write_text(COUNTER)
    legacy = '# -*- coding: latin-1 -*-\ndef greet():\n    return "bonjour caf\xe9"\n'
    (repo / "shelf" / "legacy.py").write_bytes(legacy.encode("latin-1"))
    (repo / "tests" / "data" / "blob.bin").write_bytes(bytes(range(256)))
    (repo / "tests" / "test_counter.py").write_text(COUNTER_TESTS)
    out = tmp_path / "out"
    kinds = ["--kinds", "drop_statement", "--per-function", "3", "--tries", "3", "--eval-fraction", "0"]
    main(["synth", str(repo), "--out", str(out), *kinds])
    report = json.loads((out / "report.json").read_text())
    (source,) = report["sources"]
    # dropping `steps = 0` fails both counting tests, dropping `steps += 1` only the first
    assert (source["clean_tests"], source["kept"], source["rejected"]) == (4, 2, {"timeout": 1})
    assert source["wall_s"] < 100, "the endless loop ran to the grader's own time limit"
    assert (source["validated"], source["kept_fraction"]) == (3, round(2 / 3, 3))
    # a source that gives nothing is reported and skipped; the others still count
    main(
        [
            "synth",
            str(tmp_path / "missing"),
            str(repo),
            "--out",
            str(tmp_path / "again"),
            "--no-check",
            *kinds,
        ]
    )
    again = json.loads((tmp_path / "again" / "report.json").read_text())
    assert list(again["failed_sources"]) == [str(tmp_path / "missing")]
    assert again["sources"][0]["rejected"] == {"timeout": 1}
    assert again["sources"][0]["wall_s"] < source["wall_s"] / 4, "the second synthesis ran the tests again"
    first_ids, again_ids = ([json.loads(r)["instance_id"] for r in (d / "swe" / "tasks.jsonl").open()]
                            for d in (out, tmp_path / "again"))  # fmt: skip
    assert again_ids == first_ids

    tasks = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    assert len(tasks) == report["tasks"] == 2 and not report["dropped_by_check"]
    copy = prepare_repo(tasks[0], tmp_path / "copy")
    assert (copy / "tests" / "data" / "blob.bin").read_bytes() == bytes(range(256))
    assert (copy / "shelf" / "legacy.py").read_bytes() == legacy.encode("latin-1")
    debug = load_debug_tasks(str(out / "debug" / "tasks.jsonl"))
    assert debug[0].files["tests/data/blob.bin"] == bytes(range(256))
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    kept = validate_debug_tasks(debug, grader, root=tmp_path / "debug-cache")
    assert sorted(t.task_id for t in kept) == sorted(t.instance_id for t in tasks)
    for task in kept:
        assert "test_fixture_bytes" in " ".join(task.to_swe_task(tmp_path / "debug-cache").pass_to_pass)


TALLY = """def total(xs):
    s = 0
    for x in xs:
        s += x
    return s


def mean(xs):
    if not xs:
        return 0.0
    return total(xs) / len(xs)


def count(xs, at_least=0):
    return sum(1 for x in xs if x >= at_least)
"""

TALLY_TESTS = """import unittest

import pytest

from tally import count, mean, total


def test_count():
    assert count([1, 5, 7], 5) == 2


class TestTotals(unittest.TestCase):
    def test_total(self):
        for xs, want in (([1, 2, 3], 6), ([], 0), ([5], 5)):
            with self.subTest(xs=xs):
                self.assertEqual(total(xs), want)

    def test_mean_with_optional_backend(self):
        for backend in ("builtin", "absent"):
            with self.subTest(backend=backend):
                if backend == "absent":
                    self.skipTest("backend absent")
                self.assertEqual(mean([2, 4]), 3)


if int(pytest.__version__.split(".")[0]) >= 9:  # pytest's own subtests fixture
    def test_mean(subtests):
        for xs, want in (([2, 4], 3.0), ([], 0.0)):
            with subtests.test(xs=xs):
                assert mean(xs) == want
else:
    def test_mean():
        assert mean([2, 4]) == 3.0
"""


def test_synth_grades_src_layouts_and_subtests_and_says_why_no_test_passes(tmp_path, monkeypatch, caplog):
    """A src-layout project (its tests import it as installed) whose tests use subtests, one of
    them skipped: its suite collects and its tasks grade both ways as SWE rows and debugging rows.
    A test with a skipped subtest counts as skipped in both records (junit keeps the skip), so it
    is in neither FAIL_TO_PASS nor PASS_TO_PASS, and no run is rejected. A test module that does
    not collect (a missing test dependency) is left out and named in the report. A repository
    whose every test errors says how, with the first message."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.debug import load_debug_tasks, validate_debug_tasks
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks, prepare_repo
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = tmp_path / "tally"
    for path, text in {
        "pyproject.toml": "[project]\nname = 'tally'\nversion = '1.0'\n",
        "src/tally/__init__.py": "from tally.core import count, mean, total\n",
        "src/tally/core.py": TALLY,
        "tests/test_core.py": TALLY_TESTS,
        "tests/conftest.py": "import tally  # noqa: F401 - imported before any test, as many repositories do\n",
        # a test dependency the sandbox lacks (hypothesis, freezegun): this module is left out
        "tests/test_properties.py": "import a_test_dependency_not_installed\n\n\ndef test_p():\n    pass\n",
        # a class that does not collect (markdown's): its whole module is left out
        "tests/test_classes.py": "import pytest\n\n\nclass TestC:\n"
        "    @pytest.mark.parametrize('not_an_argument', [1])\n    def test_x(self):\n        pass\n",
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    broken = tmp_path / "needs_build"
    (broken / "tests").mkdir(parents=True)
    (broken / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (broken / "tests" / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef built():\n"
        "    assert False, 'the C extension is not built'\n"
    )
    (broken / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
        "def test_add_zero():\n    assert add(0, 2) == 2\n"
    )
    plugin = tmp_path / "needs_plugin"
    (plugin / "tests").mkdir(parents=True)
    (plugin / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (plugin / "tests" / "conftest.py").write_text("import a_pytest_plugin_not_installed\n")
    (plugin / "tests" / "test_calc.py").write_text("def test_add():\n    assert True\n")
    out = tmp_path / "out"
    kinds = ["--kinds", "wrong_constant", "--per-function", "2", "--tries", "2", "--eval-fraction", "0"]
    main(["synth", str(broken), str(plugin), str(repo), "--out", str(out), *kinds])
    report = json.loads((out / "report.json").read_text())
    why = report["failed_sources"][str(broken)]
    assert "no test passes on the clean repository: 2 error;" in why and "C extension is not built" in why
    why = report["failed_sources"][str(plugin)]  # the conftest does not load: pytest's own words
    assert "the clean test suite: the tests did not start (pytest exit code 4" in why, why
    assert "No module named 'a_pytest_plugin_not_installed'" in why, why
    (source,) = report["sources"]
    assert source["clean_tests"] == 4 and source["kept"] >= 2 and not report["dropped_by_check"]
    assert source["excluded_test_modules"] == ["tests/test_classes.py", "tests/test_properties.py"]
    assert "rejected" not in " ".join(source["rejected"]), source["rejected"]  # no tamper verdict
    skipped = "tests/test_core.py::TestTotals::test_mean_with_optional_backend"
    tasks = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    assert len(tasks) == source["kept"]
    for task in tasks:
        assert skipped not in task.fail_to_pass + task.pass_to_pass
    # a failing subtest fails its test: `s = 1` in total() fails test_total through its subtests
    assert any("tests/test_core.py::TestTotals::test_total" in t.fail_to_pass for t in tasks)
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    # an edit that breaks what the conftest imports: pytest stops before its session (exit code
    # 4), no test ran, and that is a failure like any other, not a record to distrust
    base = (prepare_repo(tasks[0], tmp_path / "base") / "src" / "tally" / "core.py").read_text()
    broken_import = unified_diff("src/tally/core.py", base, base.replace("def total(xs):", "def total(xs:"))
    grade = grader.grade(tasks[0], broken_import)
    assert (grade.verdict, grade.reward) == ("unresolved", 0.0) and "did not start" in grade.reason, grade
    assert set(grade.fail_to_pass.values()) == {"absent"}
    debug = load_debug_tasks(str(out / "debug" / "tasks.jsonl"))
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.debug"):
        kept = validate_debug_tasks(debug, grader, root=tmp_path / "debug-cache")
    # a debugging task's tests are sorted by their outcome at the base, where a bug in total()
    # fails the skipping test's first subtest: the fix leaves it skipped, not passed, and that task
    # is dropped, saying so; the others validate
    dropped = {t.task_id for t in debug} - {t.task_id for t in kept}
    assert kept and len(dropped) <= 1
    for task_id in dropped:
        assert f"{skipped}: skipped" in caplog.text and task_id in caplog.text


CALC = "def add(a, b):\n    return a + b\n"
DOUBLE = "\n\ndef double(x):\n    return x * 2\n"


def _agent_command(out, row: dict, repo_cache, command: str) -> str:
    """The output of ``command`` run by the agent in an SWE episode of ``row`` (synthesized in
    ``out``)."""
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings

    env = ContainerEnv(
        str(out / "swe" / "tasks.jsonl"), "all", settings=SWESettings(repo_cache=str(repo_cache))
    )
    with env:
        env.reset(row["instance_id"])
        return env.step(f"<execute>{command}</execute>")[3]["output"]


def _write_tree(root, files: dict[str, str]):
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_synth_runs_the_tests_the_repository_configures_and_says_what_a_module_lacks(
    tmp_path, monkeypatch, caplog
):
    """The repository says which files are its tests (``testpaths``, an ``--ignore`` in
    ``addopts`` beside an option of a plugin the sandbox lacks): files named like tests outside
    them are not run, and stay in the rows as the data they are (a test here reads one). Its tests
    live in its own ``test`` package, the standard library's name: they import and grade. A test
    module that needs a package the sandbox lacks is left out, with the package named."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.debug import load_debug_tasks

    reads_fixture = (
        "\n\n@pytest.mark.xfail(reason='not meant to pass yet')\ndef test_an_unexpected_pass():\n"
        "    assert clamp(1, 0, 10) == 1\n"
        "\n\ndef test_fixture_is_python_2():\n"
        "    from pathlib import Path\n\n"
        "    assert Path(__file__).parents[1].joinpath('fixtures', 'legacy_test.py').read_text().startswith('print')\n"
    )
    repo = _write_tree(
        tmp_path / "shelf",
        {
            "pyproject.toml": "[project]\nname = 'shelf'\nversion = '1.0'\n\n[tool.pytest.ini_options]\n"
            "testpaths = ['test']\naddopts = '--cov=shelf --ignore=test/fixtures -ra'\n",
            "shelf/__init__.py": "",
            "shelf/lib.py": LIB,
            "test/__init__.py": "",
            "test/unit/__init__.py": "",
            "test/unit/helpers.py": "LOW, HIGH = 0, 10\n",
            "test/unit/test_lib.py": "import pytest\n\nfrom test.unit.helpers import HIGH, LOW  # noqa: F401\n"
            + TESTS
            + reads_fixture,
            "test/unit/test_extra.py": "import a_test_dependency_xyz  # noqa: F401\n\n\ndef test_x():\n    pass\n",
            # named like tests, not tests: a Python 2 fixture the suite reads, a release script
            "test/fixtures/legacy_test.py": 'print "python 2"\n',
            "scripts/test_release.py": "import a_release_tool_xyz  # noqa: F401\n\n\ndef test_release():\n    pass\n",
        },
    )
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth"):
        main(
            [
                "synth",
                str(repo),
                "--out",
                str(out),
                "--kinds",
                "compare_op,off_by_one",
                "--eval-fraction",
                "0",
            ]
        )
    report = json.loads((out / "report.json").read_text())
    (source,) = report["sources"]
    assert source["not_configured_test_files"] == ["scripts/test_release.py", "test/fixtures/legacy_test.py"]
    assert source["excluded_test_modules"] == ["test/unit/test_extra.py"]
    assert (
        "ModuleNotFoundError: No module named 'a_test_dependency_xyz' (test/unit/test_extra.py)"
        in caplog.text
    )
    # the unexpected pass of a non-strict xfail is neither FAIL_TO_PASS nor PASS_TO_PASS: not a
    # disagreement of the two records ("the runner recorded failed, junit says passed", sqlparse)
    assert source["clean_tests"] == 8 and source["kept"] >= 1 and not report["dropped_by_check"], report
    xpass = "test/unit/test_lib.py::test_an_unexpected_pass"
    for row in (json.loads(line) for line in (out / "swe" / "tasks.jsonl").read_text().splitlines()):
        assert xpass not in row["FAIL_TO_PASS"] + row["PASS_TO_PASS"]
    rows = [json.loads(line) for line in (out / "debug" / "tasks.jsonl").read_text().splitlines()]
    assert rows and all(row["entry_point"] == "python -m pytest -sq test/unit/test_lib.py" for row in rows)
    assert all("test/fixtures/legacy_test.py" in {f["path"] for f in row["files"]} for row in rows)
    assert {t.test_modules[0] for t in load_debug_tasks(str(out / "debug" / "tasks.jsonl"))} == {
        "test/unit/test_lib.py"
    }

    # a repository whose only test module lacks a package: the one-line error names the package
    lonely = _write_tree(
        tmp_path / "lonely",
        {
            "calc.py": CALC,
            "tests/test_calc.py": "import docstring_parser\n\nfrom calc import add\n\n\n"
            "def test_add():\n    assert add(1, 2) == 3\n\n\n"
            "def test_parser():\n    assert docstring_parser.parse('Hi.').short_description == 'Hi.'\n",
        },
    )
    # one whose pytest fails inside (warnings are errors, and its conftest marks tests with a
    # plugin's marker the sandbox lacks): pytest's INTERNALERROR line, not a bare "no test"
    internal = _write_tree(
        tmp_path / "internal",
        {
            "calc.py": CALC,
            "pytest.ini": "[pytest]\nfilterwarnings =\n    error\n",
            "tests/conftest.py": "import pytest\n\n\ndef pytest_collection_modifyitems(items):\n"
            "    for item in items:\n        item.add_marker(pytest.mark.no_cover_xyz)\n",
            "tests/test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        },
    )
    # tests inside the package, whose conftest.py imports what the sandbox lacks (glom's): a
    # directory that does not collect, not "no test module"
    nested = _write_tree(
        tmp_path / "nested",
        {
            "pkg/__init__.py": "",
            "pkg/core.py": CALC,
            "pkg/test/__init__.py": "",
            "pkg/test/conftest.py": "import a_fixture_library_xyz  # noqa: F401\n",
            "pkg/test/test_core.py": "from pkg.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        },
    )
    with pytest.raises(SystemExit):
        main(["synth", str(lonely), str(internal), str(nested), "--out", str(tmp_path / "failed-out")])
    failed = json.loads((tmp_path / "failed-out" / "report.json").read_text())["failed_sources"]
    assert failed[str(lonely)].endswith(
        "lonely: the clean test suite does not collect: ModuleNotFoundError: No module named "
        "'docstring_parser' (tests/test_calc.py) (the sandbox imports pytest and the --test-deps "
        "distributions only: install what is missing here and name it in --test-deps)"
    ), failed
    assert "no test collected from tests/test_calc.py: INTERNALERROR> " in failed[str(internal)], failed
    assert "Unknown pytest.mark.no_cover_xyz" in failed[str(internal)], failed
    assert "No module named 'a_fixture_library_xyz'" in failed[str(nested)], failed
    from lit_codeRL.sandbox.workspace_toolchain import with_test_deps

    assert with_test_deps(" docstring-parser,pytest ") == ("pytest", "docstring-parser")
    with pytest.raises(ConfigError, match="--test-deps: not-a-distribution-xyz not installed"):
        with_test_deps("not-a-distribution-xyz")


def test_rows_made_with_test_deps_carry_them_into_every_session(tmp_path, monkeypatch):
    """``--test-deps`` makes the tests import a distribution besides pytest; the rows carry it
    (``test_deps``), so a run with the default toolchain validates them (the synthesis's final
    check is such a run), and the agent's own session imports it too: an SWE episode's command,
    a debugging episode's first test run. A row naming a distribution not installed here stops
    the run in one line before any grading. A test that fails on the clean repository is graded
    in neither row: the debugging row names the tests it is graded on, as the SWE row does (it
    was dropped: its base measurement took that test for FAIL_TO_PASS, which no fix makes pass)."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
    from lit_codeRL.envs.protocol import Action
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.problems.debug import debug_problem, load_debug_tasks
    from lit_codeRL.problems.swe import load_swe_tasks, to_problem

    repo = _write_tree(
        tmp_path / "calc",
        {
            "calc.py": CALC,
            "tests/test_calc.py": "import docstring_parser\n\nfrom calc import add\n\n\n"
            "def test_add():\n    assert add(1, 2) == 3\n\n\n"
            "def test_parser():\n    assert docstring_parser.parse('Hi.').short_description == 'Hi.'\n\n\n"
            # a test this machine breaks (natsort's need a locale that is not here): it fails on
            # the clean repository too, so it is graded in neither row
            "def test_in_a_locale_not_here():\n    import locale\n\n"
            "    locale.setlocale(locale.LC_ALL, 'xx_NOT_HERE.UTF-8')\n",
        },
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--test-deps", "docstring-parser", "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["failed_sources"], report
    swe_file, debug_file = out / "swe" / "tasks.jsonl", out / "debug" / "tasks.jsonl"
    assert report["debug_tasks"] == report["tasks"] and not report["debug_dropped_by_check"], report
    for file in (swe_file, debug_file):
        rows = [json.loads(line) for line in file.read_text().splitlines()]
        assert rows and all(row["test_deps"] == ["docstring-parser"] for row in rows), rows
    swe_rows = {row["instance_id"]: row for row in map(json.loads, swe_file.read_text().splitlines())}
    for row in map(json.loads, debug_file.read_text().splitlines()):
        graded = row["FAIL_TO_PASS"] + row["PASS_TO_PASS"]
        assert (
            graded == swe_rows[row["task_name"]]["FAIL_TO_PASS"] + swe_rows[row["task_name"]]["PASS_TO_PASS"]
        )
        assert "tests/test_calc.py::test_parser" in graded
        assert not any("locale" in node for node in graded)

    # the default toolchain (pytest) plus each row's own: validated, and the agent's session has it
    swe = ContainerEnv(
        str(swe_file),
        "all",
        settings=SWESettings(repo_cache=str(tmp_path / "swe-repos"), command_timeout_s=20),
    )
    with swe:
        assert swe.settings.workspace.toolchain == ("pytest",)
        problems = [to_problem(t) for t in swe.tasks()]
        assert len(swe.validate_problems(problems)) == len(problems)
        swe.reset(problems[0].task_id)
        _, _, _, extra = swe.step("<execute>python -c 'import docstring_parser; print(42 * 2)'</execute>")
        assert "84" in extra["output"], extra["output"]
    debug = DebugEnv(DebugSettings(repo_cache=str(tmp_path / "debug-repos"), command_timeout_s=20))
    try:
        problems = [debug_problem(t) for t in load_debug_tasks(str(debug_file))]
        assert len(debug.validate_problems(problems)) == len(problems)
        (first,) = debug.reset_batch(problems[:1])
        assert "test_parser PASSED" in first.observation or "1 passed" in first.observation, first.observation
        assert "docstring_parser" not in first.observation
        for text in (f'<rewrite path="calc.py">{CALC}</rewrite>', "<submit/>"):
            (result,) = debug.step_batch([first.state], [Action(text, "stop")]).result()
        assert result.terminated and result.reward == 1.0, result
    finally:
        debug.close()

    # a row naming what is not installed here: one line, before any grading run
    for file, key in ((swe_file, "instance_id"), (debug_file, "task_name")):
        rows = [json.loads(line) for line in file.read_text().splitlines()]
        rows[0]["test_deps"] = ["docstring-parser", "not-a-distribution-xyz"]
        file.write_text("".join(json.dumps(row) + "\n" for row in rows))
        first_id = rows[0][key]
    env = ContainerEnv(str(swe_file), "all", settings=SWESettings(repo_cache=str(tmp_path / "swe-repos")))
    with env, pytest.raises(ConfigError) as err:
        env.validate_problems([to_problem(t) for t in env.tasks()])
    message = str(err.value)
    assert "\n" not in message and "import not-a-distribution-xyz in their tests" in message, message
    assert message.endswith("pip install not-a-distribution-xyz"), message
    debug = DebugEnv(DebugSettings(repo_cache=str(tmp_path / "debug-repos")))
    with pytest.raises(ConfigError, match=f"1 task\\(s\\) \\({first_id}\\) import not-a-distribution-xyz"):
        debug.validate_problems([debug_problem(t) for t in load_debug_tasks(str(debug_file))])
    debug.close()
    # names that are not a distribution's are refused at load, with the row
    rows = [json.loads(line) for line in swe_file.read_text().splitlines()]
    rows[0]["test_deps"] = ["docstring-parser>=0.1"]
    swe_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(
        ConfigError, match="row 0 .*: field test_deps: 'docstring-parser>=0.1' is not a distribution"
    ):
        load_swe_tasks(str(swe_file), "all")


def test_a_parametrization_over_a_set_has_the_same_node_ids_in_every_grading_run(tmp_path, monkeypatch):
    """``isodate`` parametrizes over a set of tuples of strings: with a random hash seed per
    process its node ids (``test_format[4-1985-expected22-%Y]``) changed from run to run, so its
    clean suite "collects different tests from run to run" and no task could be graded by node
    id. The pytest child runs with a fixed seed (and the agent's commands with the same one),
    while the processes the tests start still get the sandbox's PYTHONPATH. Ids that differ all
    the same (objects hashed by address: ``None`` in a set before Python 3.12, which isodate's
    tuples hold too) are left out of the tasks, not the repository."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    # a tuple's id is its index in the set's order: ``test_word[alpha-box5]``
    words = (
        "{"
        + ", ".join(f"({w!r}, (1,))" for w in "alpha beta gamma delta epsilon zeta eta theta".split())
        + "}"
    )
    repo = _write_tree(
        tmp_path / "words",
        {
            "calc.py": CALC,
            "tests/test_calc.py": "import subprocess\nimport sys\n\nimport pytest\n\nfrom calc import add\n\n\n"
            "def test_add():\n    assert add(1, 2) == 3\n\n\n"
            f"@pytest.mark.parametrize('word, box', {words})\ndef test_word(word, box):\n    assert word.isalpha()\n\n\n"
            # hashed by address (as None is before Python 3.12): ids no seed makes the same
            "MARK = object()\n\n\n"
            f"@pytest.mark.parametrize('word, mark', {{(w, MARK) for w, _ in {words}}})\n"
            "def test_marked(word, mark):\n    assert mark is MARK\n\n\n"
            "def test_a_process_it_starts_imports_the_toolchain():\n"
            "    assert subprocess.run([sys.executable, '-c', 'import pytest']).returncode == 0\n",
        },
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["failed_sources"] and not report["dropped_by_check"], report
    assert report["debug_tasks"] == report["tasks"] and not report["debug_dropped_by_check"], report
    row = json.loads((out / "swe" / "tasks.jsonl").read_text().splitlines()[0])
    assert len([node for node in row["PASS_TO_PASS"] if "test_word[" in node]) == 8, row["PASS_TO_PASS"]
    # those named after an address: every one of them left out of both lists, even one that the
    # two clean runs happened to name alike
    assert not [node for node in row["PASS_TO_PASS"] + row["FAIL_TO_PASS"] if "test_marked[" in node], row
    from lit_codeRL.problems.synth.repository import SynthSettings

    # each clean run names the 8 its own way; those of two runs may happen to be alike
    assert 8 < report["sources"][0]["unstable_test_ids"] <= 8 * SynthSettings.clean_runs, report
    assert "tests/test_calc.py::test_a_process_it_starts_imports_the_toolchain" in row["PASS_TO_PASS"]
    # the agent's own pytest names them as grading does
    output = _agent_command(
        out, row, tmp_path / "r", "python -m pytest -q --collect-only tests | grep test_word"
    )
    shown = {line.strip() for line in output.splitlines() if "test_word[" in line}
    assert shown == {node for node in row["PASS_TO_PASS"] if "test_word[" in node}, output


PROPERTY_TESTS = """import time

import pytest
from hypothesis import given, settings, strategies as st

from calc import add

DRAWN = []


def test_add():
    assert add(1, 2) == 3


@given(st.integers(), st.integers())
def test_add_commutes(a, b):
    assert add(a, b) == add(b, a)


@settings(max_examples=3)
@given(st.integers())
def test_add_zero_slowly(x):
    time.sleep(0.3)
    assert add(x, 0) == x


@settings(max_examples=30)
@given(st.integers(0, 10**9))
def test_draw(x):
    DRAWN.append(x)


# which of these pass is the examples test_draw drew: each passes for 3 seeds in 4
@pytest.mark.parametrize("bit", range(0, 16, 2))
def test_drawn(bit):
    assert (sum(DRAWN) >> bit) & 3
"""


def test_property_tests_grade_alike_in_every_run(tmp_path, monkeypatch):
    """Hypothesis draws new examples in every run and fails a test one of whose examples runs
    past 200 ms: a property test could pass one grading run and fail the next (a hyperlink row's
    ``test_hostname_labels_valid_ascii`` measured otherwise at the base than in its clean runs).
    Grading seeds the examples and sets no deadline, so a repository's property tests are
    measured once and graded alike in every run after."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = _write_tree(tmp_path / "calc", {"calc.py": CALC, "tests/test_calc.py": PROPERTY_TESTS})
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--test-deps", "hypothesis", "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["failed_sources"], report
    assert report["debug_tasks"] == report["tasks"] and not report["debug_dropped_by_check"], report
    tasks = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    for task in tasks:
        graded = [*task.fail_to_pass, *task.pass_to_pass]
        # slower than the default deadline: it failed in every run
        assert "tests/test_calc.py::test_add_zero_slowly" in graded, graded
        # graded when it passed in both clean runs: a quarter of them were
        assert [node for node in graded if "test_drawn[" in node], graded
    grader = SWEGrader(
        WorkspaceConfig(backend="bwrap", toolchain=("pytest", "hypothesis")),
        RepoCache(tmp_path / "prepared"),
        timeout_s=120,
    )
    for task in tasks[:2]:
        runs = [grader.grade(task, task.patch) for _ in range(3)]
        assert all(run.resolved for run in runs), [run.to_dict() for run in runs]
        assert len({json.dumps(run.pass_to_pass, sort_keys=True) for run in runs}) == 1


RANDOM_TESTS = """import random

import pytest

from calc import add

SAMPLE = random.sample(range(1000), 8)  # drawn when the module is imported


def test_add():
    assert add(1, 2) == 3


def test_add_zero():
    assert add(0, 5) == 5


# each passes for 3 seeds in 4: which ones pass is the numbers drawn
@pytest.mark.parametrize("i", range(8))
def test_coin(i):
    assert [random.random() for _ in range(i + 1)][-1] < 0.75


@pytest.mark.parametrize("i", range(8))
def test_sample(i):
    assert SAMPLE[i] % 4
"""


def test_tests_that_draw_unseeded_random_numbers_grade_alike_in_every_run(tmp_path, monkeypatch):
    """A test that draws from ``random`` unseeded (in its body, or when its module is imported)
    passes some runs and fails others: a right diff could grade ``unresolved``, and synthesis
    kept such a test when it passed both clean runs. Grading seeds ``random`` before each test and
    each module's collection, as ``pytest-randomly`` does, so such a test is measured once and
    graded alike in every run after."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = _write_tree(tmp_path / "calc", {"calc.py": CALC, "tests/test_calc.py": RANDOM_TESTS})
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["failed_sources"], report
    tasks = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    for task in tasks[:2]:
        graded = [*task.fail_to_pass, *task.pass_to_pass]
        # the same numbers in every clean run: every test that passed is graded (each passes for
        # 3 seeds in 4; passing both of two random runs, 9 in 16)
        assert len([node for node in graded if "test_coin[" in node]) >= 2, graded
        assert len([node for node in graded if "test_sample[" in node]) >= 2, graded
        runs = [grader.grade(task, task.patch) for _ in range(3)]
        assert all(run.resolved for run in runs), [run.to_dict() for run in runs]
        assert len({json.dumps(run.pass_to_pass, sort_keys=True) for run in runs}) == 1


def test_tests_the_repositorys_addopts_leave_out_are_left_out_of_every_run(tmp_path, monkeypatch):
    """click's ``addopts = "-m 'not stress'"`` leaves 31,000 stress tests out of a plain
    ``pytest``; grading ignores ``addopts`` (it could load plugins), so its clean suite ran them and
    ran past the time limit: no task. Grading keeps what ``addopts`` selects with (``-m``,
    ``-k``, ``--deselect``), so the suite runs as the repository runs it, in synthesis and in
    every grading run after. Here what is left out never ends."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache, load_swe_tasks
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    tests = (
        "import time\n\nimport pytest\n\nfrom calc import add, double\n\n\n"
        "def test_add():\n    assert add(1, 2) == 3\n\n\n"
        "def test_add_zero():\n    assert add(0, 2) == 2\n\n\n"
        "def test_double():\n    assert double(4) == 8\n\n\n"
        "@pytest.mark.stress\ndef test_stress():\n    time.sleep(10_000)\n\n\n"
        "def test_on_the_network():\n    time.sleep(10_000)\n\n\n"
        "def test_deselected():\n    time.sleep(10_000)\n"
    )
    config = (
        "[tool.pytest.ini_options]\nmarkers = ['stress: slow']\n"
        "addopts = \"-m 'not stress' -k 'not network' --deselect tests/test_calc.py::test_deselected\"\n"
    )
    repo = _write_tree(
        tmp_path / "calc",
        {"calc.py": CALC + DOUBLE, "tests/test_calc.py": tests, "pyproject.toml": config},
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["failed_sources"], report
    assert report["debug_tasks"] == report["tasks"] and not report["debug_dropped_by_check"], report
    assert report["sources"][0]["clean_tests"] == 3, report
    (task, *_) = load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")
    visible = [n for n in [*task.fail_to_pass, *task.pass_to_pass] if "test_held_out_" not in n]
    assert sorted(visible) == [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_add_zero",
        "tests/test_calc.py::test_double",
    ]
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    graded = grader.grade(task, task.patch)
    assert graded.resolved and graded.wall_s < 60, graded.to_dict()


def test_a_root_tests_py_becomes_a_test_file_grading_protects(tmp_path, monkeypatch, caplog):
    """``jsonpointer``, ``jsonpatch`` and ``texttable`` keep their tests in a root ``tests.py``:
    no task, "has no test module", and were one made, grading would not restore that file before
    it runs it (an agent could rewrite it to pass). Renamed ``test_tests.py``, it is both."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.grading._scan import is_test_path

    tests = (
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
        "def test_add_nothing():\n    assert add(0, 0) == 0\n"
    )
    # its configuration names the file (jsonpatch's): the renamed file is still its test module
    ini = "[pytest]\npython_files = tests.py\n"
    repo = _write_tree(tmp_path / "flat", {"calc.py": CALC, "tests.py": tests, "pytest.ini": ini})
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth"):
        main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    assert "its tests are in tests.py, which grading would not protect" in caplog.text
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["debug_dropped_by_check"]
    assert report["sources"][0]["renamed_test_files"] == {"tests.py": "test_tests.py"}
    row = json.loads((out / "debug" / "tasks.jsonl").read_text().splitlines()[0])
    paths = {f["path"] for f in row["files"]}
    assert paths == {"calc.py", "test_tests.py", "pytest.ini"} and is_test_path("test_tests.py")
    assert "test_tests.py::test_add" in row["FAIL_TO_PASS"]


def test_a_tests_py_anywhere_that_holds_tests_is_renamed_and_graded(tmp_path, monkeypatch):
    """roman keeps its tests in ``src/tests.py``, titlecase in ``titlecase/tests.py``, inside its
    package, and polib in ``tests/tests.py``: "has no test module", as a root ``tests.py`` did.
    Every ``tests.py``/``test.py`` that defines a test is renamed in its directory, a test
    directory included (grading protects it there, but pytest does not collect it by that name);
    a module of that name with no test in it
    (``setuptools/command/test.py``), or one the project's code imports (``jinja2/tests.py``, its
    template tests ``test_odd``...), keeps its name: it is part of the program."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.synth.repository import _name_test_modules

    unittest_case = (
        "import unittest\n\n\nclass Roman(unittest.TestCase):\n    def check(self):\n        pass\n"
    )
    files, renamed = _name_test_modules(
        {
            "src/tests.py": unittest_case,
            "pkg/command/test.py": "def run(argv):\n    return 0\n",  # a command named test
            "tests/test.py": "def test_x():\n    pass\n",  # under tests/: protected, not collected
            "a/tests.py": "def test_a():\n    pass\n",
            "a/test_tests.py": "",  # the new name is taken
            "b/test.py": "def test_b(:\n",  # does not parse
            "c/tests.py": b"\xff\xfe",
            # Jinja's tests (`is odd`) are part of the program: its own code imports them
            "src/jinja/tests.py": "def test_odd(value):\n    return value % 2 == 1\n\n\nTESTS = {}\n",
            "src/jinja/defaults.py": "from .tests import TESTS as DEFAULT_TESTS\n",
            "lib/tests.py": "def test_odd(value):\n    return value % 2 == 1\n",
            "lib/sub/x.py": "from .. import tests\n",
            "tools/test.py": "def test_helper():\n    pass\n",
            "tools/run.py": "import tools.test\n",
        }
    )
    assert renamed == {"src/tests.py": "src/test_tests.py", "tests/test.py": "tests/test_test.py"}
    assert {"src/test_tests.py", "tests/test_test.py"} <= set(files)
    # imported by its name from the root package directory the packaging declares (lib/)
    _, renamed = _name_test_modules(
        {
            "setup.cfg": "[options]\npackage_dir =\n    =lib\n",
            "lib/kit/__init__.py": "",
            "lib/kit/tests.py": "def test_odd(value):\n    return value % 2 == 1\n",
            "lib/kit/filters.py": "import kit.tests\n",
            "lib/kit/more/tests.py": "def test_more():\n    pass\n",
        }
    )
    assert renamed == {"lib/kit/more/tests.py": "lib/kit/more/test_tests.py"}

    package = {
        "calc/__init__.py": "from calc.test import probe\n\n\ndef add(a, b):\n    return a + b\n",
        "calc/test.py": "def probe():\n    return 'not a test module'\n",
        "calc/tests.py": "from calc import add, probe\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
        "def test_add_nothing():\n    assert add(0, 0) == 0\n\n\n"
        "def test_probe():\n    assert probe()\n",
    }
    repo = _write_tree(tmp_path / "calc", package)
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["debug_dropped_by_check"]
    assert report["sources"][0]["renamed_test_files"] == {"calc/tests.py": "calc/test_tests.py"}
    row = json.loads((out / "swe" / "tasks.jsonl").read_text().splitlines()[0])
    assert "calc/test_tests.py::test_probe" in row["PASS_TO_PASS"], row


LARK_MAIN = """\
import unittest

from .test_calc import TestCalc  # noqa: F401


if __name__ == "__main__":
    unittest.main()
"""


def test_a_suite_the_configuration_collects_through_another_module_is_graded_through_it(
    tmp_path, monkeypatch
):
    """lark's ``python_files = "__main__.py"``: pytest collects its whole suite through
    ``tests/__main__.py``, which imports every test module, and none of its ``test_*.py`` itself:
    "collects none of its test modules", no task. A module the configuration collects tests from
    that grading protects (under a test directory) is a test module, whatever its name: the rows'
    tests are its node ids, and the debugging row's entry point runs it."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.debug import load_debug_tasks

    tests = (
        "import unittest\n\nfrom calc import add, double\n\n\nclass TestCalc(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
        "    def test_double(self):\n        self.assertEqual(double(2), 4)\n\n"
        "    def test_add_zero(self):\n        self.assertEqual(add(0, 5), 5)\n"
    )
    config = "[tool.pytest.ini_options]\ntestpaths = ['tests']\npython_files = '__main__.py'\n"
    repo = _write_tree(
        tmp_path / "lark",
        {
            "calc.py": CALC + DOUBLE,
            "pyproject.toml": config,
            "tests/__init__.py": "",
            "tests/__main__.py": LARK_MAIN,
            "tests/test_calc.py": tests,
        },
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["debug_dropped_by_check"]
    rows = [json.loads(line) for line in (out / "swe" / "tasks.jsonl").read_text().splitlines()]
    for row in rows:
        ids = [*row["FAIL_TO_PASS"], *row["PASS_TO_PASS"]]
        assert ids and all(i.startswith("tests/__main__.py::TestCalc::") for i in ids), row
    debug = [json.loads(line) for line in (out / "debug" / "tasks.jsonl").read_text().splitlines()]
    assert len(debug) == len(rows) and all("tests/__main__.py" in d["entry_point"] for d in debug), debug
    # the debugging gym's <eval/> and pdb run what grading runs
    assert all(
        t.test_modules == ["tests/__main__.py"] for t in load_debug_tasks(str(out / "debug" / "tasks.jsonl"))
    )


@pytest.mark.parametrize(
    "layout, packaging",
    [
        ("src", {"pyproject.toml": "[project]\nname = 'calc-kit'\nversion = '1.2.3'\n"}),
        # markdown2's layout: the root package directory declared (package_dir={"": "lib"})
        (
            "lib",
            {
                "setup.cfg": "[metadata]\nname = calc-kit\nversion = 1.2.3\n[options]\npackage_dir =\n    =lib\n"
            },
        ),
    ],
)
def test_a_package_that_reads_its_installed_version_imports_in_every_session(
    tmp_path, monkeypatch, layout, packaging
):
    """``__version__ = version("calc-kit")`` at import, unguarded: in the sandbox the project is
    not installed, so the package did not import, no test passed and the repository gave no task.
    Synthesis writes the metadata an editable install leaves beside the package
    (``calc_kit.egg-info/PKG-INFO``: the name and the version its packaging declares) in the
    directory its sessions import it from (``src``, or the declared package directory), so it
    imports in grading and in the agent's commands alike."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.synth.metadata import project_metadata

    init = "from importlib.metadata import version\n\n__version__ = version('calc-kit')\n\n\n" + CALC + DOUBLE
    tests = (
        "import calc\n\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n\n\n"
        "def test_double():\n    assert calc.double(2) == 4\n\n\n"
        "def test_version():\n    assert calc.__version__ == '1.2.3'\n"
    )
    repo = _write_tree(
        tmp_path / "kit", {f"{layout}/calc/__init__.py": init, "tests/test_calc.py": tests, **packaging}
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert report["tasks"] >= 1 and not report["dropped_by_check"] and not report["debug_dropped_by_check"]
    assert report["sources"][0]["added_metadata"] == [f"{layout}/calc_kit.egg-info/PKG-INFO"], report
    row = json.loads((out / "swe" / "tasks.jsonl").read_text().splitlines()[0])
    assert "tests/test_calc.py::test_version" in row["PASS_TO_PASS"] + row["FAIL_TO_PASS"], row
    output = _agent_command(out, row, tmp_path / "r", "python -c 'import calc; print(calc.__version__)'")
    assert "1.2.3" in output, output

    # nothing added where nothing reads metadata, where the tree has its own, or no name is declared
    reads = {"m/__init__.py": "import importlib.metadata\n"}
    assert project_metadata({**reads, "setup.cfg": "[metadata]\nname = m.kit\nversion = attr: m.V\n"}) == {
        "m_kit.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: m.kit\nVersion: 0.0.0\n"
    }
    assert project_metadata({**reads, "PKG-INFO": "Metadata-Version: 2.1\nName: m\nVersion: 2.0\n"}) == {
        "m.egg-info/PKG-INFO": "Metadata-Version: 2.1\nName: m\nVersion: 2.0\n"
    }
    pyproject = packaging.get("pyproject.toml", "[project]\nname = 'calc-kit'\n")
    assert project_metadata({"m/__init__.py": "", "pyproject.toml": pyproject}) == {}
    assert project_metadata({**reads, "m.dist-info/METADATA": "", "pyproject.toml": pyproject}) == {}
    assert project_metadata({**reads, "pyproject.toml": "[project]\nname = '../x'\n"}) == {}
    assert project_metadata(reads) == {}


def test_synth_refuses_a_repository_the_sandbox_holds_an_installed_copy_of(tmp_path, monkeypatch):
    """A repository that one of its test dependencies needs (``attrs`` of ``hypothesis``,
    ``dateutil`` of ``freezegun``), or that pytest runs on (``iniconfig``, ``packaging``): the
    sandbox's toolchain holds an installed copy, which grading imports in its place (a diff must
    not replace what grading runs on) and an agent could copy the answer from. Such a source
    gives no task, in one line, where its bugs were all "no test fails" before."""
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    tests = "tests/test_add.py"
    sources = {
        "own": {"docstring_parser/__init__.py": CALC, tests: "from docstring_parser import add\n"},
        "runs_pytest": {"src/iniconfig/__init__.py": CALC, tests: "from iniconfig import add\n"},
        "declared_dir": {
            "setup.py": "setup(package_dir={'': 'lib'})\n",
            "lib/pluggy/__init__.py": CALC,
            tests: "from pluggy import add\n",
        },
        "pytest_dependency": {"packaging/__init__.py": CALC, tests: "from packaging import add\n"},
    }
    paths = [str(_write_tree(tmp_path / name, files)) for name, files in sources.items()]
    with pytest.raises(SystemExit):
        main(["synth", *paths, "--out", str(tmp_path / "out"), "--test-deps", "docstring-parser"])
    failed = json.loads((tmp_path / "out" / "report.json").read_text())["failed_sources"]
    assert failed[paths[0]] == (
        "synth: own: the sandbox's toolchain (pytest, docstring-parser with their dependencies) holds "
        "an installed copy of docstring_parser, which grading imports in place of the repository's "
        "(and an agent could copy the answer from): leave out the test dependency that needs it"
    )
    assert failed[paths[1]] == (
        "synth: runs_pytest: pytest itself imports iniconfig from its own installation before any "
        "test runs, so the tests would exercise that copy, never this repository's code"
    )
    assert "pytest itself imports pluggy" in failed[paths[2]], failed
    assert "holds an installed copy of packaging" in failed[paths[3]], failed


LEDGER = """from dataclasses import dataclass


@dataclass
class Row:
    name: str
    quantity: int
    unit_price: float


def restock(row, n):
    return Row(row.name, row.quantity + n, row.unit_price)
"""


def test_a_statement_shows_whole_values_where_pytest_would_cut_them(tmp_path, monkeypatch):
    """pytest shortens each side of a failed ``==`` to about 30 characters unless run with ``-vv``:
    a statement made from that (``assert Row(name='wi...unit_price=2.5) == Row(name='wi...
    unit_price=2.5)``; semver's ``Version(major...', build=None)``) shows neither value. The
    synthesis runs ask pytest for whole values; grading runs do not (a wrong answer's huge diff
    would cost their time)."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    repo = _write_tree(
        tmp_path / "ledger",
        {
            "ledger.py": LEDGER,
            "tests/test_ledger.py": "from ledger import Row, restock\n\n\n"
            "def test_restock():\n    assert restock(Row('widget', 3, 2.5), 4) == Row('widget', 7, 2.5)\n\n\n"
            "def test_name_kept():\n    assert restock(Row('bolt', 1, 0.5), 0).name == 'bolt'\n",
        },
    )
    out = tmp_path / "out"
    main(["synth", str(repo), "--out", str(out), "--eval-fraction", "0", "--kinds", "arith_op", "--no-check"])
    rows = [json.loads(line) for line in (out / "swe" / "tasks.jsonl").read_text().splitlines()]
    assert rows, json.loads((out / "report.json").read_text())
    for row in rows:
        statement = row["problem_statement"]
        # the visible failing test, then held-out checks: whole test functions with changed
        # literals, whose records keep the repr of a value no literal writes (``Row(...)``)
        assert row["FAIL_TO_PASS"][0] == "tests/test_ledger.py::test_restock", row
        assert all("/test_held_out_ledger.py::" in n for n in row["FAIL_TO_PASS"][1:]), row
        # the actual value whole (3 - 4, 3 * 4, ...) and the expected one
        assert "== Row(name='widget', quantity=7, unit_price=2.5)" in statement, statement
        assert "assert Row(name='widget', quantity=" in statement and "..." not in statement, statement


# ---------------------------------------------------------------------------------------------
# odd repositories: what a user's repository may be
# ---------------------------------------------------------------------------------------------


def _git(repo, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=u", "-c", "user.email=u@x", "-c", "protocol.file.allow=always", "-C",
         str(repo), *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


def _small_repo(root, git: bool = True):
    _write_tree(root, {"pkg/__init__.py": "", "pkg/lib.py": "def one():\n    return 1\n",
                       "tests/test_lib.py": "from pkg.lib import one\n\n\ndef test_one():\n    assert one() == 1\n"})  # fmt: skip
    if git:
        _git(root, "init", "-q", "-b", "main")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", "init")
    return root


def test_a_git_source_is_read_at_head_and_says_what_it_leaves_out(tmp_path, caplog):
    """A bundle without ``HEAD`` is read at its one branch, and one with several names them; a
    repository with no commit says so (not "no test module"); uncommitted changes and submodules
    are left out with a warning (synthesis reads the last commit)."""
    from lit_codeRL.problems.synth.repository import read_repository

    repo = _small_repo(tmp_path / "r")
    _git(repo, "branch", "other")
    _git(repo, "bundle", "create", "-q", str(tmp_path / "one.bundle"), "other")
    name, files = read_repository(tmp_path / "one.bundle")
    assert name == "one" and "tests/test_lib.py" in files
    _git(repo, "branch", "third")  # without HEAD, git would take a branch named as its default
    _git(repo, "bundle", "create", "-q", str(tmp_path / "two.bundle"), "other", "third")
    with pytest.raises(ConfigError, match="no HEAD and 2 branches or tags .other, third."):
        read_repository(tmp_path / "two.bundle")
    empty = tmp_path / "empty"
    _small_repo(empty, git=False)
    _git(empty, "init", "-q")
    with pytest.raises(ConfigError, match="has no commit"):
        read_repository(empty)

    (repo / "pkg" / "lib.py").write_text("def one():\n    return 2\n")
    (repo / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    _git(repo, "submodule", "add", "-q", str(_small_repo(tmp_path / "sub")), "vendor/one")
    _git(repo, "commit", "-qm", "sub", "--", ".gitmodules", "vendor/one")
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth.repository"):
        _, files = read_repository(repo)
    assert files["pkg/lib.py"] == "def one():\n    return 1\n" and "tests/test_new.py" not in files
    assert "2 uncommitted change(s)" in caplog.text and "pkg/lib.py" in caplog.text
    assert "submodule(s) left out" in caplog.text and "vendor/one" in caplog.text


def test_an_output_directory_that_cannot_hold_the_rows_is_a_one_line_error(tmp_path, capsys):
    """``--out`` naming a file, a path under a file, or a non-empty directory that holds no synth
    output (a user's repository) stops before any synthesis, in one line; a previous output is
    written over."""
    from lit_codeRL.cli import main

    repo = _small_repo(tmp_path / "r", git=False)
    (tmp_path / "file").write_text("x")
    for out, said in [
        (tmp_path / "file", "is a file"),
        (tmp_path / "file" / "out", "cannot create"),
        (repo, "not empty"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["synth", str(repo), "--out", str(out), "--no-check"])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and said in err and err.count("\n") == 1, err
    assert sorted(p.name for p in repo.iterdir()) == ["pkg", "tests"]


def test_a_previous_output_is_removed_not_mixed_with_the_new_one(tmp_path):
    """Written over, a previous output's bundles of repositories the new run does not synthesize
    (and its rows, had the new run written none) stayed beside the new rows."""
    from lit_codeRL.problems.synth.cli import _output_dir

    out = tmp_path / "out"
    (out / "swe" / "repos").mkdir(parents=True)
    (out / "swe" / "repos" / "stale.bundle").write_text("old")
    (out / "debug").mkdir()
    (out / "debug" / "tasks.jsonl").write_text("{}")
    (out / "report.json").write_text("{}")
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "data").write_text("mine")
    (out / "swe" / "link").symlink_to(outside)
    assert _output_dir(out) == out and list(out.iterdir()) == []
    assert (outside / "data").read_text() == "mine"  # a link in it is removed, not followed
    (out / "debug").symlink_to(outside)  # an output name that is a link: the link goes
    (out / "report.json").write_text("{}")
    _output_dir(out)
    assert list(out.iterdir()) == [] and (outside / "data").read_text() == "mine"


def test_every_candidate_of_an_odd_source_file_applies_with_git_apply(tmp_path):
    """Sources as real repositories have them: a BOM (Windows editors), CRLF and lone-CR line
    ends, a form feed between functions (Emacs' page breaks), U+2028 inside a string, tabs, and
    file names with spaces, quotes, backslashes, non-ASCII letters or a newline. Every one of
    them gets bugs, and every bug's diff applies with ``git apply`` and gives its mutant."""
    body = "def f(x):\n    if x > 0:\n        return x + 1\n    return x - 1\n"
    sources = {
        "bom.py": "\ufeff" + body,
        "crlf.py": body.replace("\n", "\r\n"),
        "cr.py": "# old Mac\r" + body,
        "feed.py": body + "\x0c\n\ndef g(y):\n    return y * 2\n",
        "sep.py": 'def h(x):\n    s = "a\u2028b"\n    return x + len(s)\n',
        "tabs.py": body.replace("    ", "\t"),
        "with space.py": body,
        'q"uote.py': body,
        "back\\slash.py": body,
        "caf\u00e9.py": body,
        "new\nline.py": body,
    }
    groups = candidates_by_function(sources, ("compare_op", "arith_op", "wrong_return"), 0)
    by_file = {path: [c for group in groups.values() for c in group if c.path == path] for path in sources}
    assert all(by_file.values()), {path: len(found) for path, found in by_file.items()}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for path, found in by_file.items():
        for candidate in found:
            (tmp_path / path).write_bytes(sources[path].encode())
            done = subprocess.run(
                ["git", "-C", str(tmp_path), "apply", "-"], input=candidate.diff.encode(), capture_output=True
            )
            assert done.returncode == 0, (path, done.stderr.decode(), candidate.diff)
            assert (tmp_path / path).read_bytes() == candidate.content.encode(), (path, candidate.diff)


def test_rows_of_sources_with_one_name_or_an_odd_name_each_keep_their_bundle(tmp_path, monkeypatch):
    """Two repositories named alike (``a/pkg`` and ``b/pkg``) wrote one ``repos/pkg.bundle``, the
    second over the first, whose rows then named commits no bundle held; a directory named
    ``my repo`` gave instance ids with a space. Every row's id is unique and a file name's
    characters, and its base commit is read from its own bundle."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.swe import load_swe_tasks, prepare_repo

    tests = "from pkg.lib import clamp\n\n\ndef test_low():\n    assert clamp(-1) == 0\n\n\ndef test_in():\n    assert clamp(3) == 3\n"
    sources = []
    for i, where in enumerate(["a/pkg", "b/pkg", "my repo"]):
        lib = f"def clamp(x):\n    if x < 0:\n        return 0\n    return x  # {i}\n"
        _write_tree(tmp_path / where, {"pkg/__init__.py": "", "pkg/lib.py": lib, "tests/test_lib.py": tests})
        sources.append(str(tmp_path / where))
    out = tmp_path / "out"
    main(["synth", *sources, "--out", str(out), "--no-check", "--kinds", "drop_branch", "--tries", "1"])
    rows = [json.loads(line) for line in (out / "swe" / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and len({row["instance_id"] for row in rows}) == 3, rows
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", row["instance_id"]) for row in rows), rows
    assert len({row["repo_source"] for row in rows}) == 3
    for i, task in enumerate(load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")):
        copy = prepare_repo(task, tmp_path / f"copy{i}")
        assert f"# {i}" in (copy / "pkg" / "lib.py").read_text()


def test_a_test_whose_outcome_differs_between_two_runs_of_a_kept_bug_is_never_graded():
    """A flaky test can pass the three clean runs (one in eight for a coin) and then fail in a
    candidate's one run: it became FAIL_TO_PASS (``os.urandom`` coins: 1 of 1 task kept). Every kept
    bug now runs a second time: a test whose outcome differs between its two runs is left out of
    every bug's lists (as a test failing in a clean run is), and a bug left without a failing test,
    or whose second run did not finish, is dropped."""
    from lit_codeRL.problems.synth.validate import Bug, remeasure

    group = next(iter(candidates_by_function({"m.py": "def f(a, b):\n    return a + b * 2 - 1\n"}).values()))
    c1, c2, c3, c4 = group[:4]
    bugs = [
        Bug(c1, ("t.py::a", "t.py::coin"), ("t.py::b", "t.py::c"), {"t.py::a": "A", "t.py::coin": "C"}),
        Bug(c2, ("t.py::b",), ("t.py::a", "t.py::c", "t.py::coin2"), {"t.py::b": "B"}),
        Bug(c3, ("t.py::coin",), ("t.py::a", "t.py::b"), {}),
        Bug(c4, ("t.py::c",), ("t.py::a", "t.py::b"), {}),
    ]
    ok, ko = "passed", "failed"
    second = {
        c1.key: SuiteRun("unresolved", {"t.py::a": ko, "t.py::coin": ok, "t.py::b": ok, "t.py::c": ok}),
        c2.key: SuiteRun("unresolved", {"t.py::a": ok, "t.py::b": ko, "t.py::c": ok, "t.py::coin2": ko}),
        c3.key: SuiteRun("unresolved", {"t.py::a": ok, "t.py::b": ok, "t.py::coin": ko}),
        c4.key: SuiteRun("timeout", {}),
    }
    kept, flaky, rejected = remeasure(bugs, lambda c: second[c.key], 1, 1)
    assert flaky == ("t.py::coin", "t.py::coin2")
    assert [(b.fail_to_pass, b.pass_to_pass) for b in kept] == [
        (("t.py::a",), ("t.py::b", "t.py::c")),
        (("t.py::b",), ("t.py::a", "t.py::c")),
    ]
    assert kept[0].messages == {"t.py::a": "A"}
    assert rejected == {"flaky: its failing tests passed in a second run": 1, "second run: timeout": 1}


def test_a_clean_suite_that_hangs_stops_at_its_first_run_in_one_line(tmp_path, monkeypatch):
    """A test that never ends on the clean repository: the first clean run reaches the grader's
    time limit and synthesis stops there, in one line that says so; it ran all three runs to the
    limit first (15 minutes at the grader's 300 s)."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    import time

    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache
    from lit_codeRL.problems.synth.repository import synthesize_repository
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = _small_repo(tmp_path / "r", git=False)
    (repo / "tests" / "test_hang.py").write_text("def test_hang():\n    while True:\n        pass\n")
    grader = SWEGrader(WorkspaceConfig(), RepoCache(tmp_path / "prepared"), timeout_s=4)
    began = time.monotonic()
    with pytest.raises(ConfigError, match="did not run: timeout") as err:
        synthesize_repository(repo, grader)
    assert time.monotonic() - began < 10 and "\n" not in str(err.value), str(err.value)
    # a conftest.py that never ends: collection and the first clean run stop at the grader's limit
    (repo / "tests" / "test_hang.py").unlink()
    (repo / "tests" / "conftest.py").write_text("while True:\n    pass\n")
    began = time.monotonic()
    with pytest.raises(ConfigError, match="did not run: timeout"):
        synthesize_repository(repo, grader)
    assert time.monotonic() - began < 15


def test_a_suite_that_changes_its_own_test_files_says_why_it_gives_no_task(tmp_path, monkeypatch):
    """aiofiles' tests rename files under ``tests/resources`` and back through the code under test:
    its clean run is ``tamper`` (grading cannot tell that from the code under test rewriting what
    the tests read). Synthesis stops in one line that says so and what would work; it said only
    the watch's reasons."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache
    from lit_codeRL.problems.synth.repository import synthesize_repository
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = _small_repo(tmp_path / "r", git=False)
    (repo / "pkg" / "files.py").write_text("import os\n\n\ndef move(a, b):\n    os.rename(a, b)\n")
    (repo / "tests" / "data").mkdir()
    (repo / "tests" / "data" / "a.txt").write_text("kept\n")
    (repo / "tests" / "test_files.py").write_text(
        "import os\n\nfrom pkg.files import move\n\nHERE = os.path.join(os.path.dirname(__file__), 'data')\n\n\n"
        "def test_move_and_back():\n    a, b = os.path.join(HERE, 'a.txt'), os.path.join(HERE, 'b.txt')\n"
        "    move(a, b)\n    assert os.path.exists(b)\n    move(b, a)\n"
    )
    grader = SWEGrader(WorkspaceConfig(), RepoCache(tmp_path / "prepared"), timeout_s=60)
    with pytest.raises(ConfigError, match="did not run: tamper") as err:
        synthesize_repository(repo, grader)
    said = str(err.value)
    assert "while the tests ran" in said and "its own tests change files among the tests" in said, said
    assert "\n" not in said


def test_tests_that_fail_on_the_clean_repository_are_left_out_and_counted(tmp_path, monkeypatch, caplog):
    """The design leaves a test that fails or errors in a clean run out of both lists (a user's
    suite often has one); it did so silently. Now they are counted in the report
    (``failing_at_base``) and named in a warning, with the first one's message (an ``async def``
    test no plugin runs: which to name in ``--test-deps``), and the other tests still give tasks. A test
    module that collects no test (helpers named like tests) is named in a warning too."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    repo = _small_repo(tmp_path / "r", git=False)
    (repo / "pkg" / "lib.py").write_text("def one(x):\n    if x:\n        return 1\n    return 0\n")
    (repo / "tests" / "test_lib.py").write_text(
        "from pkg.lib import one\n\n\ndef test_one():\n    assert one(5) == 1\n\n\n"
        "async def test_async():\n    assert one(5) == 1\n\n\n"  # no plugin runs it here
        "def test_zero():\n    assert one(0) == 0\n\n\ndef test_broken():\n    assert one(5) == 2\n\n\n"
        "def test_error(no_such_fixture):\n    pass\n"
    )
    # modules named like tests that collect none (helpers; a class pytest cannot instantiate)
    (repo / "tests" / "test_helpers.py").write_text("def make(x):\n    return x\n")
    (repo / "tests" / "test_klass.py").write_text(
        "class TestK:\n    def __init__(self, x):\n        pass\n\n    def test_k(self):\n        pass\n"
    )
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth.repository"):
        main(["synth", str(repo), "--out", str(out), "--no-check", "--kinds", "drop_branch"])
    (source,) = json.loads((out / "report.json").read_text())["sources"]
    assert (source["clean_tests"], source["failing_at_base"], source["kept"]) == (5, 3, 1), source
    assert "3 test(s) fail or error on the clean repository" in caplog.text
    assert "tests/test_lib.py::test_broken" in caplog.text
    # why, in pytest's words, and what to do when no plugin ran an async test
    said = "tests/test_lib.py::test_async: Failed: async def functions are not natively supported."
    assert said in caplog.text and "pytest-asyncio or anyio, in --test-deps" in caplog.text, caplog.text
    assert (
        "2 test module(s) collect no test, none of theirs graded: tests/test_helpers.py, tests/test_klass.py"
        in (caplog.text)
    ), caplog.text
    assert "not collected by the repository's pytest configuration" not in caplog.text, caplog.text


def test_a_generated_source_file_gets_no_bugs_and_costs_no_time():
    """A generated module (``_pb2.py``, a parser's tables: "DO NOT EDIT", ``@generated``) of 12,000
    functions took over 5 minutes of candidate generation (a diff per site, each over the whole
    file) before any test ran, whatever ``--max-functions`` said, for bugs whose fix belongs to
    the generator. It now gets no bugs; a module that merely mentions generating something does."""
    import time

    from lit_codeRL.problems.synth.candidates import generated_files

    body = "".join(
        f"def f{i}(x):\n    if x > {i}:\n        return x + {i}\n    return x - 1\n\n\n" for i in range(12000)
    )
    files = {
        "pkg/msg_pb2.py": "# -*- coding: utf-8 -*-\n# Generated by the protocol buffer compiler.  DO NOT EDIT!\n"
        + body,
        "pkg/tables.py": '"""@generated by tools/make_tables.py"""\n' + body,
        "pkg/real.py": '"""Numbers generated by a seeded generator."""\n\n\ndef g(x):\n    return x + 1\n',
    }
    began = time.monotonic()
    groups = candidates_by_function(files, ("arith_op",))
    assert time.monotonic() - began < 5
    assert set(groups) == {"pkg/real.py::g"}
    assert generated_files(files) == ["pkg/msg_pb2.py", "pkg/tables.py"]


def test_a_file_name_that_is_not_utf8_and_a_linked_directory_are_left_out_with_a_warning(tmp_path, caplog):
    """A fixture named in Latin-1 (``data_caf\\xe9.txt``) raised UnicodeEncodeError in the run
    cache's key, a traceback; a symbolic link to a directory was dropped without the warning a
    linked file gets. Both are left out with a warning, in a directory and in a git repository."""
    import os

    from lit_codeRL.problems.synth.repository import read_repository

    repo = _small_repo(tmp_path / "r", git=False)
    (repo / os.fsdecode(b"tests/data_caf\xe9.txt")).write_bytes(b"x")
    (repo / "tests" / "linked_pkg").symlink_to("../pkg")
    for git in (False, True):
        if git:
            _git(repo, "init", "-q")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-qm", "init")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth.repository"):
            _, files = read_repository(repo)
        assert sorted(files) == ["pkg/__init__.py", "pkg/lib.py", "tests/test_lib.py"], files
        assert "not UTF-8" in caplog.text and "tests/linked_pkg" in caplog.text, caplog.text
        assert all(path.encode() for path in files)


def test_a_repository_with_no_function_to_mutate_is_a_failed_source(tmp_path, capsys, monkeypatch):
    """Constants and a class without methods: the command exited 0 with 0 tasks and no reason. It
    is now a source that gives no task, with its one-line reason (``failed_sources``; the
    command's error when it is the only source), said after the clean runs (a suite that does
    not pass is the first thing to fix)."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    repo = tmp_path / "consts"
    _write_tree(repo, {"pkg/consts.py": "X = 1\n\n\nclass C:\n    y = 2\n",
                       "tests/test_c.py": "from pkg.consts import X\n\n\ndef test_x():\n    assert X == 1\n"})  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", str(repo), "--out", str(tmp_path / "out"), "--no-check"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "no function to put a bug in" in err and err.count("\n") == 1, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert list(report["failed_sources"]) == [str(repo)]


def test_a_previous_output_inside_a_directory_source_is_not_read_as_its_files(tmp_path, caplog):
    """``lit-coderl synth . --out synth_out`` run twice in a plain directory: the second run read
    the first's rows and bundles as repository files and carried them into every task (and its
    cache keys changed with them). A directory holding a synth output is left out, with a warning."""
    from lit_codeRL.problems.synth.repository import read_repository

    repo = _small_repo(tmp_path / "r", git=False)
    _write_tree(repo / "synth_out", {"report.json": "{}", "swe/tasks.jsonl": "", "debug/tasks.jsonl": ""})
    (repo / "synth_out" / "swe" / "repos").mkdir()
    (repo / "synth_out" / "swe" / "repos" / "r.bundle").write_bytes(b"\0bundle")
    _write_tree(repo / "docs", {"report.json": "{}"})  # a report.json alone is the repository's
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.problems.synth.repository"):
        _, files = read_repository(repo)
    assert sorted(files) == ["docs/report.json", "pkg/__init__.py", "pkg/lib.py", "tests/test_lib.py"]
    assert "synth_out" in caplog.text


def test_a_suite_that_exits_its_process_is_refused_in_words_a_user_reads(tmp_path, monkeypatch):
    """A test or conftest.py that ends the process (``os._exit(0)``, ``sys.exit(0)`` at import)
    was refused as "rejected (exit code 0 but the run recorded 0/None)": the grader's words. The
    line now says what likely happened."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache
    from lit_codeRL.problems.synth.repository import synthesize_repository
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = _small_repo(tmp_path / "r", git=False)
    (repo / "tests" / "test_zexit.py").write_text("import os\n\n\ndef test_exit():\n    os._exit(0)\n")
    grader = SWEGrader(WorkspaceConfig(), RepoCache(tmp_path / "prepared"), timeout_s=60)
    with pytest.raises(ConfigError, match="ended before pytest finished") as err:
        synthesize_repository(repo, grader)
    assert "\n" not in str(err.value) and "os._exit" in str(err.value), str(err.value)


def test_a_src_layout_without_packaging_is_told_where_its_package_is_not_found(tmp_path, monkeypatch):
    """``src/pkg`` without a ``pyproject.toml``, ``setup.cfg`` or ``setup.py``: its tests cannot
    import ``pkg`` (as under a plain ``pytest``), and the error told the user to install ``pkg``
    and name it in ``--test-deps``. It now says the package is in ``src/`` and what puts it on the
    import path."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache
    from lit_codeRL.problems.synth.repository import synthesize_repository
    from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

    repo = tmp_path / "r"
    _write_tree(repo, {"src/pkg/__init__.py": "", "src/pkg/lib.py": "def one():\n    return 1\n",
                       "tests/test_lib.py": "from pkg.lib import one\n\n\ndef test_one():\n    assert one() == 1\n"})  # fmt: skip
    grader = SWEGrader(WorkspaceConfig(), RepoCache(tmp_path / "prepared"), timeout_s=60)
    with pytest.raises(ConfigError, match="No module named 'pkg'") as err:
        synthesize_repository(repo, grader)
    assert "src/pkg is imported from src/ only beside a pyproject.toml" in str(err.value), str(err.value)
    assert "--test-deps" not in str(err.value)


def test_one_broken_shipped_repository_is_its_own_failure_not_its_sources(tmp_path, capsys, monkeypatch):
    """``synth swe`` read every shipped repository before synthesizing any, and one that could not
    be read (a broken base, a ``repo.json`` that does not parse) or synthesized (no test) lost the
    tasks of all of them. Each repository is now its own failure, named ``swe:<dir>``; only a
    source none of whose repositories gave anything is the command's error."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.synth import cli as synth_cli

    data = tmp_path / "data"
    src = data / "swe" / "src"
    lib = "def one():\n    return 1\n\n\ndef add(a, b):\n    return a + b\n"
    tests = "from pkg.lib import add, one\n\n\ndef test_one():\n    assert one() == 1\n\n\n"
    tests += "def test_add():\n    assert add(2, 3) == 5\n"
    _write_tree(src / "good" / "base", {"pkg/__init__.py": "", "pkg/lib.py": lib, "tests/test_lib.py": tests})
    (src / "good" / "repo.json").write_text('{"repo": "org/good"}')
    _small_repo(src / "badmeta" / "base", git=False)
    (src / "badmeta" / "repo.json").write_text("{not json")
    (src / "nobase").mkdir()
    (src / "nobase" / "base").write_bytes(b"\x00not a bundle")  # a file: read as a git bundle
    (src / "nobase" / "repo.json").write_text('{"repo": "org/nobase"}')
    _write_tree(src / "notests" / "base", {"pkg/lib.py": "def one():\n    return 1\n"})
    (src / "notests" / "repo.json").write_text('{"repo": "org/notests"}')
    monkeypatch.setattr(synth_cli, "embedded_data_dir", lambda: data)

    out = tmp_path / "out"
    assert synth_cli.main(["swe", "--out", str(out), "--no-check", "--eval-fraction", "0"])
    report = json.loads((out / "report.json").read_text())
    assert [s["name"] for s in report["sources"]] == ["org/good"], report["sources"]
    assert report["tasks"] >= 1, report
    failed = report["failed_sources"]
    assert sorted(failed) == ["swe:badmeta", "swe:nobase", "swe:notests"], failed
    assert "repo.json" in failed["swe:badmeta"] and "no test module" in failed["swe:notests"], failed
    err = capsys.readouterr().err
    assert all(f"synth: {label}: skipped: " in err for label in failed), err

    # nothing given at all: the first repository's reason is the command's one-line error
    (src / "good" / "base" / "tests" / "test_lib.py").unlink()
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "swe", "--out", str(tmp_path / "none"), "--no-check"])
    assert exit_info.value.code == 2
    assert "repo.json" in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_repository_whose_test_modules_collect_no_test_says_so(tmp_path, capsys, monkeypatch):
    """Only helpers named like tests: the error said its pytest configuration collects none of
    its test modules, which sent the user to testpaths and python_files for nothing."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main

    repo = _write_tree(tmp_path / "helpers", {"pkg/lib.py": "def one():\n    return 1\n",
                                             "tests/test_util.py": "def make(x):\n    return x\n"})  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", str(repo), "--out", str(tmp_path / "out"), "--no-check"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "its test modules collect no test: tests/test_util.py" in err, err


def test_an_unexpected_error_in_one_repository_costs_that_repository_not_the_others(
    tmp_path, capsys, monkeypatch, caplog
):
    """An error of ours that one repository brings out late (its held-out checks, after hours of
    validation) ended the whole command, every other source's tasks with it. It is now that
    repository's failure, in one line, with its traceback in the log; alone it is the command's
    one-line error (exit status 2), never a traceback out of it."""
    require_bwrap()
    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    from lit_codeRL.cli import main
    from lit_codeRL.problems.synth import repository

    tests = "from pkg.lib import clamp\n\n\ndef test_low():\n    assert clamp(-1) == 0\n\n\ndef test_in():\n    assert clamp(3) == 3\n"
    lib = "def clamp(x):\n    if x < 0:\n        return 0\n    return x\n"
    for name in ("first", "second"):
        _write_tree(tmp_path / name, {"pkg/__init__.py": "", "pkg/lib.py": lib, "tests/test_lib.py": tests})
    real = repository.repository_held_out

    def held_out(grader, task, *args, **kwargs):
        if "first" in task.repo:
            raise ValueError("an answer no one expected\nover two lines")
        return real(grader, task, *args, **kwargs)

    monkeypatch.setattr(repository, "repository_held_out", held_out)
    out = tmp_path / "out"
    args = ["--no-check", "--kinds", "drop_branch", "--tries", "1"]
    with caplog.at_level(logging.ERROR):
        main(["synth", str(tmp_path / "first"), str(tmp_path / "second"), "--out", str(out), *args])
    report = json.loads((out / "report.json").read_text())
    assert [s["name"] for s in report["sources"]] == ["second"] and report["tasks"] >= 1, report
    why = report["failed_sources"][str(tmp_path / "first")]
    assert "unexpected error (a bug of lit-coderl, its traceback logged): ValueError: " in why, why
    assert "an answer no one expected over two lines" in why, why
    assert "\n" not in why and "Traceback" in caplog.text and "held_out" in caplog.text
    assert f"synth: {tmp_path / 'first'}: skipped: " in capsys.readouterr().err

    with pytest.raises(SystemExit) as exit_info:
        main(["synth", str(tmp_path / "first"), "--out", str(tmp_path / "alone"), *args])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lit-coderl synth: error: synth: ") and "ValueError" in last, last
