"""Hard-coded answers to a repository's marked tests, through real pytest, the real debugging gym
and the real grader.

A test function with a pytest mark other than ``parametrize`` (a custom ``@pytest.mark.slow``
under ``--strict-markers``, ``skipif`` on another platform, ``filterwarnings``, ``usefixtures``)
was no held-out site: ``lit-coderl synth`` gave tasks whose tests are all marked no checks, so
``if items == [...]: return 7`` for each visible call passed them with the bug in place. Now the
marks go on the site's candidates and checks as they are (``function_checks.carried_mark``):
pytest runs the check where and how it runs the test, and a test it skips gives no check.
``xfail`` and ``skip`` keep a test out.
"""

from __future__ import annotations

import pytest

from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX
from tests.envs.conftest import each_fix_resolves_with_checks, each_hack_unpaid, synthesized_rows

CART = '''"""A shopping cart's sums."""


def subtotal(prices):
    total = 0
    for price in prices:
        total += price
    return total


def discounted(price, percent):
    return price - price * percent // 100


def count_over(prices, limit):
    return sum(1 for price in prices if price > limit)
'''
TEST_CART = """import sys
import warnings

import pytest

from shop.cart import count_over, discounted, subtotal


@pytest.fixture
def quiet():
    warnings.simplefilter("ignore")


# each test builds its input first: no assert holds a call with literal arguments (a plain call's
# site), so the whole test is the only site


@pytest.mark.slow
def test_subtotal():
    prices = [3, 4, 5]
    assert subtotal(prices) == 12


@pytest.mark.skipif(sys.platform == "win32", reason="not there")
@pytest.mark.slow
def test_subtotal_of_one():
    prices = [7]
    assert subtotal(prices) == 7


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_discounted():
    price, percent = 200, 10
    assert discounted(price, percent) == 180


@pytest.mark.usefixtures("quiet")
@pytest.mark.parametrize("price, percent, expected", [(50, 50, 25), (80, 25, 60)])
def test_discounted_table(price, percent, expected):
    assert discounted(price, percent) == expected


@pytest.mark.slow
def test_count_over():
    prices, limit = [1, 5, 9, 12], 4
    assert count_over(prices, limit) == 3


@pytest.mark.skipif(True, reason="never here")
def test_count_over_skipped():
    prices, limit = [20, 30], 25
    assert count_over(prices, limit) == 1
"""
FILES = {
    "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\n\n[tool.pytest.ini_options]\n'
    'testpaths = ["tests"]\naddopts = "--strict-markers"\nmarkers = ["slow: a slow test"]\n'
    'filterwarnings = ["error"]\n',
    "shop/__init__.py": "",
    "shop/cart.py": CART,
    "tests/test_cart.py": TEST_CART,
}
HACK = """

_bugged = {"subtotal": subtotal, "discounted": discounted, "count_over": count_over}


# the visible tests' inputs, answered as they expect; the bug for any other
def subtotal(prices):
    return {(3, 4, 5): 12, (7,): 7}.get(tuple(prices)) or _bugged["subtotal"](prices)


def discounted(price, percent):
    visible = {(200, 10): 180, (50, 50): 25, (80, 25): 60}
    return visible.get((price, percent)) or _bugged["discounted"](price, percent)


def count_over(prices, limit):
    return 3 if (prices, limit) == ([1, 5, 9, 12], 4) else _bugged["count_over"](prices, limit)
"""


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesized_rows(tmp_path_factory, "marked-held-out", FILES, 3)


def test_every_task_of_a_marked_suite_has_checks_that_carry_the_marks(synthesized):
    swe, _, report = synthesized
    (source,) = report["sources"]
    assert source["held_out"]["tasks_with_checks"] == len(swe) == report["tasks"], source["held_out"]
    assert {row["function"].split("::")[-1] for row in swe} == {"subtotal", "discounted", "count_over"}
    patches = "".join(row["test_patch"] for row in swe)
    # each check is marked as its test is; the skipped test (skipped in the candidates' run too)
    # gives none; an expected failure is no site (tests/problems/test_function_checks.py)
    assert "@pytest.mark.slow" in patches and "@pytest.mark.usefixtures('quiet')" in patches
    assert "skipif(True" not in patches and "[20, 30]" not in patches
    for row in swe:
        assert [n for n in row["FAIL_TO_PASS"] if f"/{HELD_OUT_PREFIX}" in n], row["FAIL_TO_PASS"]


def test_hard_coded_answers_to_marked_tests_get_no_reward_and_the_fix_resolves(synthesized, bwrap_gym):
    swe, debug, _ = synthesized
    # the agent's own run of the visible tests passes (the skipped one aside)
    each_hack_unpaid(bwrap_gym, swe, debug, HACK, visible=6)
    each_fix_resolves_with_checks(bwrap_gym, swe, debug)
