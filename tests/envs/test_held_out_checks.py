"""Hard-coded answers to the visible asserts, through the real debugging gym and SWE env.

An MBPP-style debugging task shows its tests: ``if args == (123,): return 6`` for each assert a
policy reads passes them all with the bug in place. Before held-out checks
(``problems/synth/held_out.py``) such a diff graded ``resolved`` (reward 1). Now each task carries
calls with changed arguments, answered by the reference and added only at grading; the
hard-coded answers run the bug on them and fail. The reference fix still resolves, the checks are
nowhere in the workspace, and a file the agent writes at their path changes nothing.
"""

from __future__ import annotations

import ast

import pytest

from lit_codeRL.problems.debug import task_from_row
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.synth.held_out import HELD_OUT_TESTS
from lit_codeRL.problems.synth.mbpp import MBPPBugSettings, bug_rows
from lit_codeRL.sandbox.grading import split_value_test
from tests.envs.conftest import answering, debug_episode
from tests.sandbox.conftest import require_bwrap

REFERENCE = """\
def digit_sum(n):
    total = 0
    while n > 0:
        total += n % 10
        n //= 10
    return total


def run_lengths(text):
    out = []
    for ch in text:
        if out and out[-1][0] == ch:
            out[-1] = (ch, out[-1][1] + 1)
        else:
            out.append((ch, 1))
    return out
"""
PROBLEMS = [
    Problem(
        "601",
        "Write a function to find the sum of the digits of a non-negative integer.",
        tests=("assert digit_sum(123) == 6", "assert digit_sum(7) == 7", "assert digit_sum(905) == 14"),
        reference_solution=REFERENCE,
        metadata={"mbpp_task_id": 601},
    ),
    Problem(
        "602",
        "Write a function to run-length encode a string as (character, count) pairs.",
        tests=(
            "assert run_lengths('aab') == [('a', 2), ('b', 1)]",
            "assert run_lengths('xyz') == [('x', 1), ('y', 1), ('z', 1)]",
            "assert run_lengths('qqqq') == [('q', 4)]",
        ),
        reference_solution=REFERENCE,
        metadata={"mbpp_task_id": 602},
    ),
    # answers that change on rare inputs only: most bugs answer every nearby call alike
    Problem(
        "603",
        "Write a function to check whether a day is on a weekend.",
        tests=(
            "assert is_weekend('Saturday') == True",
            "assert is_weekend('Monday') == False",
            "assert is_weekend('Friday') == False",
        ),
        reference_solution='def is_weekend(day):\n    return day == "Saturday" or day == "Sunday"\n',
        metadata={"mbpp_task_id": 603},
    ),
    # an answer whose repr is no literal (a Counter), compared with a dict
    Problem(
        "604",
        "Write a function to count the words of a sentence longer than a given length.",
        tests=(
            "assert long_words('a bb ccc bb', 1) == {'bb': 2, 'ccc': 1}",
            "assert long_words('xyz xyz q', 2) == {'xyz': 2}",
            "assert long_words('hello world hello', 4) == {'hello': 2, 'world': 1}",
        ),
        reference_solution=(
            "from collections import Counter\n\n\ndef long_words(text, n):\n"
            "    return Counter(w for w in text.split() if len(w) > n)\n"
        ),
        metadata={"mbpp_task_id": 604},
    ),
    # complex answers (MBPP 590's kind): compared within a tolerance as floats are; before, a
    # complex answer was no check and such a task had none, so hard-coded answers resolved it
    Problem(
        "605",
        "Write a function to find both roots of a quadratic equation, complex ones too.",
        tests=(
            "assert roots(1, 2, 5) == ((-1+2j), (-1-2j))",
            "assert roots(1, -3, 2) == ((2+0j), (1+0j))",
            "assert roots(2, 0, 8) == (2j, -2j)",
        ),
        reference_solution=(
            "import cmath\n\n\ndef roots(a, b, c):\n    d = cmath.sqrt(b * b - 4 * a * c)\n"
            "    return ((-b + d) / (2 * a), (-b - d) / (2 * a))\n"
        ),
        metadata={"mbpp_task_id": 605},
    ),
]
IDS = ["numbers", "strings and pairs", "rare inputs", "a Counter", "complex numbers"]


def hard_coded(buggy: str, tests: tuple[str, ...]) -> str:
    """``buggy`` with each visible assert's answer returned for its arguments, the bug elsewhere."""
    answers: dict[str, dict] = {}
    for test in tests:
        expression, expected = split_value_test(test)
        call = ast.parse(expression.strip(), mode="eval").body
        args = tuple(ast.literal_eval(a) for a in call.args)
        answers.setdefault(call.func.id, {})[repr(args)] = expected
    return answering(buggy, answers)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    require_bwrap()
    import os

    os.environ.setdefault("LIT_CODERL_SYNTH_CACHE", str(tmp_path_factory.mktemp("synth")))
    rows, stats = bug_rows(PROBLEMS, MBPPBugSettings(tries=6))
    assert stats["kept"] == 5 and stats["held_out"]["tasks_with_a_failing_check"] == 5, stats
    return [(row, task_from_row(row, row["task_name"], row["split"])) for row in rows]


def rewrite(path: str, content: str) -> str:
    return f'<rewrite path="{path}">{content}</rewrite>'


@pytest.mark.parametrize("index", range(len(PROBLEMS)), ids=IDS)
def test_hard_coded_visible_answers_pass_the_visible_tests_and_get_no_reward(bwrap_gym, tasks, index):
    row, task = tasks[index]
    problem = PROBLEMS[index]
    hack = hard_coded(task.files["solution.py"], problem.tests)
    out, observations = debug_episode(
        bwrap_gym, task, [rewrite("solution.py", hack), "<eval/>", "<listdir/>"]
    )
    # the agent's own test run passes (what it optimised), and the checks are not in its workspace
    assert "3 passed" in observations[1] and "failed" not in observations[1], observations[1]
    assert HELD_OUT_TESTS not in observations[2], observations[2]
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(node.startswith(f"{HELD_OUT_TESTS}::") for node in failed), grade


def test_a_file_at_the_checks_path_changes_nothing(bwrap_gym, tasks):
    row, task = tasks[0]
    hack = hard_coded(task.files["solution.py"], PROBLEMS[0].tests)
    own = "def test_held_out_1():\n    pass\n"
    out, _ = debug_episode(bwrap_gym, task, [rewrite("solution.py", hack), rewrite(HELD_OUT_TESTS, own)])
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "unresolved", grade


def test_a_task_made_again_under_its_id_is_graded_with_its_own_checks(bwrap_gym, tasks):
    """Tasks made again (new held-out checks, ``GENERATOR_VERSION``) keep their ids. The gym
    kept one graded task an id and graded the second with the first one's checks."""
    row, task = tasks[0]
    hack = hard_coded(task.files["solution.py"], PROBLEMS[0].tests)
    out, _ = debug_episode(bwrap_gym, task, [rewrite("solution.py", hack)])
    assert out.info["episode"]["grade"]["verdict"] == "unresolved"
    lenient = {
        **row,
        "hidden_files": [{"path": HELD_OUT_TESTS, "content": "def test_held_out_1():\n    pass\n"}],
    }
    again = task_from_row(lenient, row["task_name"], row["split"])
    assert again.task_id == task.task_id
    out, _ = debug_episode(bwrap_gym, again, [rewrite("solution.py", hack)])
    grade = out.info["episode"]["grade"]
    graded = [*grade["fail_to_pass"], *grade.get("pass_to_pass", {})]
    assert grade["verdict"] == "resolved" and f"{HELD_OUT_TESTS}::test_held_out_1" in graded, grade


@pytest.mark.parametrize("index", range(len(PROBLEMS)), ids=IDS)
def test_the_reference_fix_resolves_with_the_checks(bwrap_gym, tasks, index):
    row, task = tasks[index]
    out, _ = debug_episode(bwrap_gym, task, [rewrite("solution.py", task.fix["solution.py"])])
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 1.0 and grade["verdict"] == "resolved", grade
    graded = [*grade["fail_to_pass"], *grade.get("pass_to_pass", {})]
    assert any(node.startswith(f"{HELD_OUT_TESTS}::") for node in graded), grade


def test_swe_rows_of_mbpp_bugs_carry_the_checks_in_their_test_patch(tmp_path, monkeypatch):
    """``lit-coderl synth mbpp:`` writes the same checks as the SWE row's ``test_patch``: the
    grader adds them after the diff, so the hard-coded answers fail there too."""
    require_bwrap()
    import json

    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache, git_environment, load_swe_tasks, run_git
    from lit_codeRL.problems.synth.cli import main as synth_main
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "synth"))
    mbpp = tmp_path / "mbpp.jsonl"
    mbpp.write_text(
        "".join(
            json.dumps(
                {
                    "task_id": p.metadata["mbpp_task_id"],
                    "text": p.prompt,
                    "code": p.reference_solution,
                    "test_list": list(p.tests),
                    "test_setup_code": "",
                    "challenge_test_list": [],
                }
            )
            + "\n"
            for p in PROBLEMS
        )  # fmt: skip
    )
    report = synth_main([f"mbpp:{mbpp}", "--mbpp-split", "train", "--out", str(tmp_path / "out")])
    assert report["sources"][0]["kept_in_split"] == len(PROBLEMS), report
    rows = load_swe_tasks(str(tmp_path / "out" / "swe" / "tasks.jsonl"), "all")
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    for row, problem in zip(rows, PROBLEMS, strict=True):
        assert f"b/{HELD_OUT_TESTS}" in row.test_patch and any(
            node.startswith(f"{HELD_OUT_TESTS}::") for node in row.fail_to_pass
        ), row
        work = tmp_path / f"work-{problem.task_id}"
        env = git_environment(tmp_path / "home")
        run_git(["clone", "--quiet", row.repo_source, str(work)], env)
        run_git(["-C", str(work), "checkout", "--quiet", row.base_commit], env)
        assert not (work / HELD_OUT_TESTS).exists()
        (work / "solution.py").write_text(hard_coded((work / "solution.py").read_text(), problem.tests))
        hack = run_git(["-C", str(work), "diff", "--binary", "HEAD"], env)
        grade = grader.grade(row, hack)
        assert grade.verdict == "unresolved" and grade.reward == 0.0, grade
        assert grader.grade(row, row.patch).verdict == "resolved"
