"""A repository whose tests freeze the clock with ``freezegun``, through real freezegun, the real
debugging gym and the real grader.

``freeze_time`` puts its fakes in the standard library's ``datetime`` and ``time`` and in every
loaded module that holds a real one (pytest's ``_pytest.timing`` among them), and puts the
originals back when it stops: writes to the toolchain's modules as a test ran, each named.
``humanize`` 4.17.0's clean suite graded ``tamper`` ("toolchain changed: _pytest.timing (written
to as the test ran)"), so no repository whose tests use freezegun gave a task. The tests' own
``freeze_time`` is now bracketed and its writes taken in where they are freezegun's own
(``_guard.FrozenTime``); anything else written in its window (the code under test runs there: the
scan of every module reads a module's ``__getattr__``) is named.
"""

from __future__ import annotations

import pytest

from tests.envs.conftest import debug_episode, fix_resolves_with_checks, synthesized_rows

CLOCK = '''"""Dates and durations."""

import datetime as dt
import time


def stamp():
    return dt.datetime.now().strftime("%Y-%m-%d")


def elapsed(start):
    return int(time.time() - start)


def age(born, today=None):
    today = today or dt.date.today()
    years = today.year - born.year
    if (today.month, today.day) < (born.month, born.day):
        years -= 1
    return years
'''
TEST_CLOCK = """import datetime as dt
import time

from freezegun import freeze_time

from shop.clock import age, elapsed, stamp

with freeze_time("2020-02-02"):
    START = time.time()


@freeze_time("2020-02-02")
def test_stamp():
    assert stamp() == "2020-02-02"


def test_elapsed():
    with freeze_time("2020-02-02 00:01:40"):
        assert elapsed(START) == 100


def test_elapsed_ticking():
    with freeze_time("2020-02-02 00:00:10") as frozen:
        frozen.tick(5)
        assert elapsed(START) == 15


@freeze_time("2024-06-01")
def test_age():
    assert age(dt.date(1990, 7, 1)) == 33


@freeze_time("2024-06-01")
def test_age_on_the_birthday():
    with freeze_time("2024-07-01"):
        assert age(dt.date(1990, 7, 1)) == 34


def test_age_given_today():
    assert age(dt.date(2000, 1, 1), dt.date(2010, 1, 1)) == 10
    assert age(dt.date(2000, 5, 2), dt.date(2010, 5, 1)) == 9
"""
FILES = {
    "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\n\n[tool.pytest.ini_options]\n'
    'testpaths = ["tests"]\nfilterwarnings = ["error"]\n',
    "shop/__init__.py": "",
    "shop/clock.py": CLOCK,
    "tests/test_clock.py": TEST_CLOCK,
}
# The fix, and a module ``__dir__``: freezegun's scan of every module calls it as a freeze starts,
# inside the tests' own window, where it swaps ``json.loads`` (a function tests check with) for an
# answer of its own, and puts it back at the next freeze's start: every write in a window, none
# lasting, which a bracket that took in whatever the window wrote passed
IN_THE_WINDOW = """
import json as _json

_held = []


def __dir__():
    if _held:
        _json.loads = _held.pop()
    else:
        _held.append(_json.loads)
        _json.loads = lambda text, **kwargs: 5
    return list(globals())
"""


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesized_rows(tmp_path_factory, "frozen-time", FILES, 2, "--test-deps", "freezegun")


def test_a_suite_that_freezes_time_gives_tasks_whose_fix_resolves(synthesized, bwrap_gym):
    swe, debug, report = synthesized
    (source,) = report["sources"]
    assert source["clean_tests"] == 6 and not source["flaky_tests"], source
    assert {row["function"].split("::")[-1] for row in swe} <= {"stamp", "elapsed", "age"}
    for row in swe:
        assert row["test_deps"] == ["freezegun"]
        task = debug[row["instance_id"]]
        if row["held_out_checks"]:  # the plain tests' (a test freezegun decorates is no site)
            fix_resolves_with_checks(bwrap_gym, task, "test_held_out_")
        else:
            ((path, fixed),) = task.fix.items()
            out, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="{path}">{fixed}</rewrite>'])
            assert out.reward == 1.0 and out.info["episode"]["grade"]["verdict"] == "resolved"


def test_a_write_of_the_code_under_test_in_freezeguns_window_is_named(synthesized, bwrap_gym):
    swe, debug, _ = synthesized
    task = debug[swe[0]["instance_id"]]
    ((path, fixed),) = task.fix.items()
    out, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="{path}">{fixed + IN_THE_WINDOW}</rewrite>'])
    grade = out.info["episode"]["grade"]
    assert out.reward == 0.0 and grade["verdict"] == "tamper", grade
    assert "json (written to as the test ran)" in grade["reason"], grade["reason"]
