"""The pure parts of the SWE env: which tag wins in a turn, and how a grading run is judged."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest

from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.grading import judge, junit_key, parse_junit
from lit_codeRL.problems.swe import SWETask


@pytest.mark.parametrize(
    ("text", "cut_off", "kind", "command", "ignored"),
    [
        ("I will look.\n<execute>ls -la</execute>", False, "execute", "ls -la", False),
        (
            "<execute>\n  cat a.py\n</execute> then <execute>rm a.py</execute>",
            False,
            "execute",
            "cat a.py",
            True,
        ),
        ("done <submit/>", False, "submit", "", False),
        ("<submit /> <execute>ls</execute>", False, "submit", "", True),
        ("<execute>ls</execute><submit>", False, "execute", "ls", True),
        ("<execute>rm -rf bui", True, "cut_off", "", False),
        ("<execute>rm -rf bui", False, "no_action", "", False),
        ("just talking", False, "no_action", "", False),
        ("<execute>   </execute>", False, "empty_command", "", False),
        ("<EXECUTE>ls</EXECUTE>", False, "no_action", "", False),
    ],
)
def test_the_first_complete_tag_wins(text, cut_off, kind, command, ignored):
    parsed = parse_action(text, cut_off)
    assert (parsed.kind, parsed.command, parsed.ignored_text) == (kind, command, ignored)


def test_junit_key_follows_pytest_junit_naming():
    assert junit_key("tests/test_stats.py::test_median") == ("tests.test_stats", "test_median")
    assert junit_key("tests/a/test_b.py::TestC::test_d[1-2]") == ("tests.a.test_b.TestC", "test_d[1-2]")


JUNIT = b"""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_m" name="test_a" time="0.1"/>
<testcase classname="tests.test_m" name="test_b"><failure message="x">boom</failure></testcase>
<testcase classname="tests.test_m" name="test_c"><skipped message="s"/></testcase>
<testcase classname="tests.test_m" name="test_d"><error message="e"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_statuses():
    got = parse_junit(JUNIT)
    assert got == {
        ("tests.test_m", "test_a"): "passed",
        ("tests.test_m", "test_b"): "failed",
        ("tests.test_m", "test_c"): "skipped",
        ("tests.test_m", "test_d"): "error",
    }


def _task(f2p=("tests/test_m.py::test_a",), p2p=("tests/test_m.py::test_p",)) -> SWETask:
    return SWETask(
        instance_id="t-1",
        repo="local/t",
        base_commit="0" * 40,
        problem_statement="x",
        patch="",
        test_patch="",
        fail_to_pass=tuple(f2p),
        pass_to_pass=tuple(p2p),
        repo_source="/nonexistent",
    )


CANARY = "tests/test_5eed.py::test_5eed"


def _junit(statuses: dict[str, str], canary: str | None = "failed") -> bytes:
    tags = {"passed": "", "failed": "<failure/>", "error": "<error/>", "skipped": "<skipped/>"}
    everything = {**statuses, **({CANARY: canary} if canary else {})}
    cases = "".join(
        f'<testcase classname="{junit_key(n)[0]}" name="{junit_key(n)[1]}">{tags[s]}</testcase>'
        for n, s in everything.items()
    )
    return f"<testsuites><testsuite>{cases}</testsuite></testsuites>".encode()


def _report(outcomes: dict[str, str], code: int, junit: bytes | None = None, canary: str = "failed") -> dict:
    return {
        "stage": "tests_finished",
        "returned": code,
        "exitstatus": code,
        "collected": len(outcomes) + 1,
        "outcomes": outcomes,
        "collect_errors": [],
        "canary": {"nodeid": CANARY, "status": canary},
        "junit_sha256": hashlib.sha256(junit).hexdigest() if junit is not None else None,
        "tamper": [],
    }


def _judge(outcomes: dict[str, str], code: int = 1, task=None, **kw):
    """A run whose records agree: the runner's report and junit from the same outcomes (the
    canary failing, so pytest's exit code is 1 unless said otherwise)."""
    junit = _junit(outcomes)
    return judge(task or _task(), code, _report(outcomes, code, junit), junit, **kw)


A, P = "tests/test_m.py::test_a", "tests/test_m.py::test_p"


def test_resolved_needs_every_f2p_and_p2p_passed_in_both_records():
    grade = _judge({A: "passed", P: "passed"})
    assert (grade.verdict, grade.reward, grade.resolved) == ("resolved", 1.0, True)
    grade = _judge({A: "passed", P: "failed"})
    assert (grade.verdict, grade.reward) == ("unresolved", 0.0)


@pytest.mark.parametrize("status", ["skipped", "xfailed", "xpassed", "error", "failed"])
def test_a_skipped_xfailed_or_errored_f2p_test_is_a_failure(status):
    """(junit writes an xfailed test as skipped and an unexpected pass of a non-strict xfail as
    passed: the records agree, and neither is a pass.)"""
    outcomes = {A: status, P: "passed"}
    junit = _junit({A: {"xfailed": "skipped", "xpassed": "passed"}.get(status, status), P: "passed"})
    grade = judge(_task(), 1, _report(outcomes, 1, junit), junit)
    assert grade.reward == 0.0 and grade.fail_to_pass[A] == status


def test_an_absent_f2p_test_is_a_failure():
    grade = _judge({P: "passed"})
    assert grade.reward == 0.0 and grade.fail_to_pass[A] == "absent"


def test_partial_credit_only_when_p2p_all_pass():
    task = _task(f2p=(A, "tests/test_m.py::test_b"))
    outcomes = {A: "passed", "tests/test_m.py::test_b": "failed", P: "passed"}
    assert _judge(outcomes, task=task, partial_credit=True).reward == 0.5
    outcomes[P] = "failed"
    assert _judge(outcomes, task=task, partial_credit=True).reward == 0.0


def test_records_that_disagree_are_rejected():
    passed = {A: "passed", P: "passed"}
    # junit claims a pass the runner saw fail (a rewritten XML, hashed by the runner)
    junit = _junit(passed)
    grade = judge(_task(), 1, _report({A: "failed", P: "passed"}, 1, junit), junit)
    assert grade.verdict == "rejected" and grade.reward == 0.0
    # the exit code the sandbox observed is not the run's
    grade = judge(_task(), 0, _report(passed, 1, junit), junit)
    assert grade.verdict == "rejected"
    # no junit at all
    assert judge(_task(), 1, _report(passed, 1), None).verdict == "rejected"
    # junit changed after the runner hashed it
    assert judge(_task(), 1, _report(passed, 1, junit), _junit({A: "passed", P: "passed"}, None)).verdict == (
        "rejected"
    )


def test_tests_that_never_started_are_a_failure_not_a_rejected_record():
    """pytest stopping before its session (a conftest that no longer imports: exit code 4, no
    ``sessionfinish``) is ``unresolved`` with every test absent; the exit code the sandbox saw
    must still be the recorded one, and a record with outcomes still needs its exit status."""
    junit = _junit({})
    started = {**_report({}, 4, junit), "exitstatus": None, "canary": {"nodeid": CANARY, "status": "absent"}}
    grade = judge(_task(), 4, started, junit)
    assert (grade.verdict, grade.reward, grade.resolved) == ("unresolved", 0.0, False)
    assert "did not start" in grade.reason and grade.fail_to_pass == {A: "absent"}
    assert judge(_task(), 0, started, junit).verdict == "rejected"  # the sandbox saw another code
    assert judge(_task(), 4, {**started, "returned": 0}, junit).verdict == "rejected"
    ran = {**_report({A: "failed", P: "passed"}, 1, junit), "exitstatus": None}
    assert judge(_task(), 1, ran, junit).verdict == "rejected"  # tests ran: the status is owed


@pytest.mark.parametrize(
    "data",
    [
        b"<testsuites>",  # truncated
        b'<?xml version="1.0" encoding="x-lcrl-nope"?><testsuites/>',  # unknown encoding: LookupError
        b'<?xml version="1.0" encoding="utf-16"?><testsuites/>',  # declared and real encoding differ
        b"\xff\xfe\x00<\x00t",  # garbage bytes
        b"<a>" * 100000,  # deep nesting
    ],
)
def test_junit_that_does_not_parse_is_rejected_never_raised(data):
    passed = {A: "passed", P: "passed"}
    grade = judge(_task(), 1, _report(passed, 1, data), data)
    assert grade.verdict == "rejected" and grade.reward == 0.0 and "junit" in grade.reason


def test_the_canary_and_the_exit_code_catch_a_patched_reporter():
    passed = {A: "passed", P: "passed"}
    # every outcome forced to "passed": the canary passes too
    junit = _junit(passed, canary="passed")
    grade = judge(_task(), 0, _report(passed, 0, junit, canary="passed"), junit, tamper_reward=-1.0)
    assert (grade.verdict, grade.reward) == ("tamper", -1.0) and "canary" in grade.tamper[0]
    # the canary failed, but the exit code says everything passed
    junit = _junit(passed)
    grade = judge(_task(), 0, _report(passed, 0, junit), junit)
    assert grade.verdict == "tamper" and "exit code 0" in grade.reason
    # a canary that was not collected proves nothing either way: the other checks decide
    junit = _junit(passed, canary=None)
    grade = judge(_task(), 1, _report(passed, 1, junit, canary="absent"), junit)
    assert grade.verdict == "rejected"  # exit code 1 with nothing failing
    # several canaries (one per test file, one a TestCase): any of them passing is tampering
    junit = _junit(passed)
    report = {**_report(passed, 1, junit), "canaries": [{"nodeid": CANARY, "status": "failed"}]}
    report["canaries"].append({"nodeid": "tests/test_m.py::TestX::test_y", "status": "passed"})
    grade = judge(_task(), 1, report, junit)
    assert grade.verdict == "tamper" and "canary" in grade.reason


def test_tamper_reasons_decide_before_the_tests():
    passed = {A: "passed", P: "passed"}
    junit = _junit(passed)
    report = {**_report(passed, 1, junit), "tamper": ["shadows pytest: pytest.py"]}
    grade = judge(_task(), 1, report, junit, tamper_reward=-0.5)
    assert (grade.verdict, grade.reward, grade.resolved) == ("tamper", -0.5, False)
    assert grade.tamper == ["shadows pytest: pytest.py"]
    # found by the scan even when the run then stopped early
    grade = judge(_task(), 0, {"stage": "tests_started", "tamper": ["metadata: x.pth"]}, None)
    assert grade.verdict == "tamper"


def test_a_report_of_an_unexpected_shape_is_rejected():
    for report in ({"stage": "tests_finished", "outcomes": "nope"}, {"stage": "tests_finished", "canary": 3}):
        assert judge(_task(), 1, report, b"<testsuites/>").verdict == "rejected"


def test_missing_record_timeout_and_patch_failures_score_zero():
    assert judge(_task(), 0, None, None).verdict == "no_results"
    assert judge(_task(), None, None, None).verdict == "timeout"
    assert judge(_task(), 0, {"stage": "agent_patch_failed"}, None).verdict == "patch_failed"
    assert judge(_task(), 0, {"stage": "tests_started"}, None).verdict == "no_results"
    junit = _junit({})
    collection_error = {**_report({}, 2, junit), "collect_errors": ["tests/test_m.py"]}
    assert judge(_task(), 2, collection_error, junit).reward == 0.0


def test_a_run_a_cpu_limit_stopped_is_a_timeout_unless_it_tampered():
    """The runner records pytest's child killed by SIGXCPU (``returned`` -24, whatever it had
    reported passing by then); the runner itself stopped leaves no record and exits 152. Both are
    ``timeout`` with reward 0; a tamper reason still decides first."""
    import signal

    from lit_codeRL.grading.repo import CPU_LIMIT_REASON
    from lit_codeRL.sandbox.workspace import CPU_LIMIT_EXIT

    passed = {A: "passed", P: "passed"}
    junit = _junit(passed)
    stopped = {**_report(passed, -signal.SIGXCPU, junit), "exitstatus": None}
    grade = judge(_task(), 256 - signal.SIGXCPU, stopped, junit)
    assert (grade.verdict, grade.reward, grade.resolved, grade.reason) == (
        "timeout",
        0.0,
        False,
        CPU_LIMIT_REASON,
    )
    assert judge(_task(), CPU_LIMIT_EXIT, None, None).verdict == "timeout"
    assert judge(_task(), CPU_LIMIT_EXIT - 1, None, None).verdict == "no_results"
    grade = judge(
        _task(), 256 - signal.SIGXCPU, {**stopped, "tamper": ["internals: x.py: name _pytest"]}, junit
    )
    assert grade.verdict == "tamper"


def test_tool_bundles_load_and_describe_themselves(tmp_path):
    from lit_codeRL.envs.swe.tools import load_tools
    from lit_codeRL.errors import ConfigError

    (search,) = load_tools(["search"])
    assert search.has_install and search.mount == "/opt/tools/search"
    text = search.help_text()
    assert text.startswith("- search: ") and "search --files" in text and "  # " in text
    (tmp_path / "broken" / "bin").mkdir(parents=True)
    (tmp_path / "broken" / "config.yaml").write_text("description: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_tools(["broken"], tmp_path)
    with pytest.raises(ConfigError, match="no .*missing/bin"):
        load_tools(["missing"], tmp_path)


def test_junit_key_matches_pytests_own_junit_for_ids_holding_separators(tmp_path):
    """Parameter ids may hold ``::``, ``/``, ``.py`` and brackets (boltons' URL tests:
    ``test_query_params[https://[::1]:80/?hi=bye]``): every node id pytest reports must map to the
    case its junit XML writes, or a clean suite is rejected as records that disagree."""
    tests = tmp_path / "tests" / "sub"
    tests.mkdir(parents=True)
    (tests / "test_ids.py").write_text(
        "import pytest\n\n\n"
        "IDS = ['https://[::101.45.75.219]:80/?hi=bye', 'a::b', 'x/y.py::z', 'p[q]r', 'dots.in.id', ' sp ace',"
        " 'caf\\u00e9', 'tab\\there', 'amp&<lt>\"q']\n\n\n"
        "@pytest.mark.parametrize('v', IDS, ids=IDS)\n"
        "def test_plain(v):\n    assert v\n\n\n"
        "class TestBox:\n"
        "    @pytest.mark.parametrize('v', IDS, ids=IDS)\n"
        "    def test_in_class(self, v):\n        assert v\n\n\n"
        "def test_no_params():\n    pass\n"
    )
    junit = tmp_path / "junit.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit2",
         "--junitxml", str(junit), "-rA", "tests"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    nodeids = [line.split(" ", 1)[1] for line in run.stdout.splitlines() if line.startswith("PASSED ")]
    assert len(nodeids) == 19, run.stdout
    cases = parse_junit(junit.read_bytes())
    assert {junit_key(n) for n in nodeids} == set(cases)
