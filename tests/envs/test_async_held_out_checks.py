"""Hard-coded answers to a repository's async tests, through real pytest-asyncio, the real
debugging gym and the real grader.

A suite of ``async def`` tests (pytest-asyncio's strict mode, its mark on the module, an async
fixture, a test class's coroutine method, an ``IsolatedAsyncioTestCase`` whose ``asyncSetUp``
makes a queue in the case's loop) had no held-out site: every test awaits, and a test that
awaits was no site. ``lit-coderl synth`` gave its tasks no checks (0 of 3 here), so ``if names
== [...]: return 85`` for each visible call passed them with the bug in place. Now an async
test's body is recorded as a sync one's is and run to its end in a loop of its own
(``function_checks._awaited``), or by the ``IsolatedAsyncioTestCase`` itself in its loop
(``held_out.CASE_FUNCTION``): the candidates and the checks are plain tests, the module's loop
mark left off them (pytest-asyncio fails a plain test that carries it, under the repository's
``filterwarnings = error``).
"""

from __future__ import annotations

import pytest

from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX
from tests.envs.conftest import each_fix_resolves_with_checks, each_hack_unpaid, synthesized_rows

FEED = '''"""Prices from a feed that answers asynchronously."""
import asyncio


async def price_of(name):
    """A name's price: ten a letter, five off a name of more than four letters."""
    await asyncio.sleep(0)
    price = len(name) * 10
    if len(name) > 4:
        price -= 5
    return price


async def total(names):
    """The price of every name together."""
    prices = await asyncio.gather(*(price_of(n) for n in names))
    return sum(prices)


async def cheapest(names):
    """The name of the lowest price (the first of equals)."""
    best = None
    for name in names:
        price = await price_of(name)
        if best is None or price < best[0]:
            best = (price, name)
    return best[1]
'''
TEST_FEED = """import asyncio

import pytest
import pytest_asyncio

from shop.feed import cheapest, price_of, total

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def basket():
    await asyncio.sleep(0)
    return ["tea", "jam"]


async def test_total(basket):
    got = await total(basket + ["cocoa"])
    assert got == 105


async def test_total_with_a_long_name():
    names = ["coffee", "tea"]
    assert await total(names) == 85


async def test_price_of_a_long_name():
    price = await price_of("cocoa")
    assert price == 45


class TestCheapest:
    async def test_cheapest(self):
        names = ["cocoa", "tea", "jam"]
        assert await cheapest(names) == "tea"
"""
TEST_FEED_CASE = """import asyncio
import unittest

from shop.feed import total


class TestFeedCase(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.names = asyncio.Queue()  # made in the case's own loop, used in it
        await self.names.put(["jam", "cocoa"])

    async def test_total(self):
        names = await self.names.get()
        self.assertEqual(await total(names + ["tea"]), 105)
"""
FILES = {
    # as many async projects' own: warnings are errors, an option of pytest-timeout (which the
    # sandbox lacks), no asyncio_default_fixture_loop_scope (pytest-asyncio 1.x warns of it as
    # it configures): the sandbox's plugin ignores those two warnings, or no test would start
    "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\n\n[tool.pytest.ini_options]\n'
    'testpaths = ["tests"]\ntimeout = 30\nfilterwarnings = ["error"]\n',
    "shop/__init__.py": "",
    "shop/feed.py": FEED,
    "tests/test_feed.py": TEST_FEED,
    "tests/test_feed_case.py": TEST_FEED_CASE,
}
HACK = """

_bugged = {"price_of": price_of, "total": total, "cheapest": cheapest}


# the visible tests' inputs, answered as they expect; the bug for any other
async def price_of(name):
    return 45 if name == "cocoa" else await _bugged["price_of"](name)


async def total(names):
    visible = {("tea", "jam", "cocoa"): 105, ("jam", "cocoa", "tea"): 105, ("coffee", "tea"): 85}
    return visible.get(tuple(names)) or await _bugged["total"](names)


async def cheapest(names):
    return "tea" if names == ["cocoa", "tea", "jam"] else await _bugged["cheapest"](names)
"""


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesized_rows(tmp_path_factory, "async-held-out", FILES, 3, "--test-deps", "pytest-asyncio")


def test_every_task_of_an_async_suite_has_checks(synthesized):
    swe, _, report = synthesized
    (source,) = report["sources"]
    assert source["held_out"]["tasks_with_checks"] == len(swe) == report["tasks"], source["held_out"]
    assert {row["function"].split("::")[-1] for row in swe} == {"price_of", "total", "cheapest"}
    patches = "".join(row["test_patch"] for row in swe)
    # plain checks that run the recorded coroutine; the async fixture's test and the class's
    # coroutine method among the sites
    assert "_lcrl_await(_lcrl_async(" in patches and "async def test_held_out" not in patches
    assert (
        "(basket):" in patches
        and "_lcrl_case(TestCheapest" in patches
        and "_lcrl_case(TestFeedCase" in patches
    )
    for row in swe:
        failing = [n for n in row["FAIL_TO_PASS"] if f"/{HELD_OUT_PREFIX}" in n]
        assert failing and row["FAIL_TO_PASS"][0].startswith("tests/test_feed.py::"), row["FAIL_TO_PASS"]
        assert row["test_deps"] == ["pytest-asyncio"]


def test_hard_coded_answers_to_async_tests_get_no_reward(synthesized, bwrap_gym):
    swe, debug, _ = synthesized
    # the agent's own run of the tests (pytest-asyncio loaded) passes: what it optimised
    each_hack_unpaid(bwrap_gym, swe, debug, HACK, visible=5)


def test_the_reference_fix_resolves_with_the_async_checks(synthesized, bwrap_gym):
    swe, debug, _ = synthesized
    each_fix_resolves_with_checks(bwrap_gym, swe, debug)
