"""The verdict ladder of the sandbox server (``_server._verdict``), rung by rung, without forking:
parsed child records, exit status, timeout flag and output cap in, result fields out."""

from __future__ import annotations

import errno
import signal

import pytest

from lit_codeRL.sandbox._server import _verdict

OK = ("ok", "", "")
EFBIG = f"[Errno {errno.EFBIG}] File too large"


def records(program=OK, tests=None, end=True, tampered=False) -> dict:
    """What ``_parse_records`` returns: the program record, one ``(passed, type, message)`` per test."""
    return {"program": program, "tests": tests or {}, "values": {}, "end": end, "tampered": tampered}


def verdict(rec: dict, n_tests: int = 0, timed_out=False, term_sig=None, hit_output_cap=False) -> dict:
    return _verdict(
        rec, n_tests, timed_out=timed_out, term_sig=term_sig, timeout_s=2.0, hit_output_cap=hit_output_cap
    )


PASS, FAIL = (True, "", ""), (False, "AssertionError", "")


def test_every_test_passed_and_ended_is_passed():
    res = verdict(records(tests={0: PASS, 1: PASS}), 2)
    assert res == {
        "verdict": "passed",
        "test_passed": [True, True],
        "failed_test": None,
        "exception_type": None,
        "exception_message": None,
        "signal": None,
    }


def test_first_failing_test_names_itself_and_its_exception():
    res = verdict(records(tests={0: PASS, 1: FAIL, 2: (False, "ValueError", "bad")}), 3)
    assert (res["verdict"], res["failed_test"], res["exception_type"]) == ("failed", 1, "AssertionError")
    assert res["test_passed"] == [True, False, False]


@pytest.mark.parametrize(
    ("test_record", "expected"),
    [((False, "MemoryError", ""), "memory_limit"), ((False, "OSError", EFBIG), "output_limit")],
)
def test_resource_limits_inside_a_test(test_record, expected):
    res = verdict(records(tests={0: PASS, 1: test_record}), 2)
    assert (res["verdict"], res["failed_test"]) == (expected, 1)


def test_tampering_fails_every_test_before_anything_else():
    res = verdict(records(tests={0: PASS}, tampered=True), 1, timed_out=True)
    assert (res["verdict"], res["exception_type"]) == ("failed", "ProtocolViolation")
    assert res["test_passed"] == [False] and res["failed_test"] == 0


def test_timeout_and_cpu_limit_are_timeouts():
    res = verdict(records(tests={0: PASS}, end=False), 1, timed_out=True, term_sig=signal.SIGKILL)
    assert (res["verdict"], res["exception_message"]) == ("timeout", "exceeded 2 s")
    assert res["signal"] is None  # the kill was ours, not the program's
    res = verdict(records(program=None, end=False), 1, term_sig=signal.SIGXCPU)
    assert res["verdict"] == "timeout" and res["signal"] == "SIGXCPU"
    # a CPU-limit signal after the end record does not undo a finished run
    assert verdict(records(), 0, term_sig=signal.SIGXCPU)["verdict"] == "passed"


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        (("syntax", "SyntaxError", "invalid syntax"), "syntax_error"),
        (("badtest", "SyntaxError", "x"), "sandbox_error"),
        (("error", "ZeroDivisionError", "division by zero"), "runtime_error"),
        (("error", "MemoryError", ""), "memory_limit"),
        (("error", "OSError", EFBIG), "output_limit"),
    ],
)
def test_program_record_decides_before_the_tests(program, expected):
    res = verdict(records(program=program), 2)
    assert res["verdict"] == expected and res["exception_type"] == program[1]
    assert res["failed_test"] == 0 and res["test_passed"] == [False, False]


def test_no_program_record():
    assert verdict(records(program=None, end=False), 1, hit_output_cap=True)["verdict"] == "output_limit"
    res = verdict(records(program=None, end=False), 1, term_sig=signal.SIGXFSZ)
    assert res["verdict"] == "output_limit"
    res = verdict(records(program=None, end=False), 1, term_sig=signal.SIGSEGV)
    assert (res["verdict"], res["exception_type"], res["signal"]) == ("runtime_error", "Signal", "SIGSEGV")
    res = verdict(records(program=None, end=False), 1)
    assert (res["verdict"], res["exception_type"]) == ("runtime_error", "EarlyExit")


def test_missing_test_record_or_end_record():
    res = verdict(records(tests={0: PASS}, end=False), 2)
    assert (res["verdict"], res["exception_type"], res["failed_test"]) == ("failed", "EarlyExit", 1)
    assert res["exception_message"].startswith("test 1: exited before reporting")
    res = verdict(records(tests={0: PASS}, end=False), 2, hit_output_cap=True)
    assert res["verdict"] == "output_limit"
    res = verdict(records(tests={0: PASS}, end=False), 1, term_sig=signal.SIGKILL)
    assert (res["verdict"], res["exception_message"]) == ("failed", "no end record: killed by signal SIGKILL")


def test_output_cap_after_a_clean_run():
    assert verdict(records(tests={0: PASS}), 1, hit_output_cap=True)["verdict"] == "output_limit"
