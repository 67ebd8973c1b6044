"""Hard-coded answers to tests that are methods of a pytest class taking its fixture methods,
through real pytest, the real debugging gym and the real grader.

A pytest class with fixture methods (``@pytest.fixture def signer(self)``: itsdangerous, marshmallow,
aiocache) had no held-out site: a check is a plain function, which cannot take a fixture only the
class defines, so ``lit-coderl synth`` gave such a suite's tasks no checks and ``if prices ==
[3, 4, 5, 1]: return 13`` for each visible input passed them with the bug in place. Now a check of
such a method is a method of a class of those fixtures (``function_checks.class_fixtures``: the
class's and its module bases', the subclass's first, with what they read through ``self``).
"""

from __future__ import annotations

import pytest

from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX
from tests.envs.conftest import each_fix_resolves_with_checks, each_hack_unpaid, synthesized_rows
from tests.envs.test_marked_held_out_checks import FILES as MARKED_FILES
from tests.envs.test_marked_held_out_checks import HACK as MARKED_HACK

TEST_CART = """import pytest

from shop.cart import count_over, discounted, subtotal


class CartFixtures:
    rate = 10

    @pytest.fixture
    def prices(self):
        return [3, 4, 5]

    @pytest.fixture
    def percent(self):
        return self.rate


# each test takes its input from the class's fixtures: no assert holds a call with literal
# arguments (a plain call's site), so the whole method is the only site


class TestCart(CartFixtures):
    def test_subtotal(self, prices):
        extra = [1]
        assert subtotal(prices + extra) == 13

    def test_discounted(self, percent):
        price = 200
        assert discounted(price, percent) == 180

    def test_count_over(self, prices):
        limit = 4
        assert count_over(prices, limit) == 1


class TestBigCart(CartFixtures):
    @pytest.fixture
    def prices(self):
        return [100, 200, 300]

    def test_count_over_big(self, prices):
        limit = 150
        assert count_over(prices, limit) == 2
"""
# the marked suite's repository with these tests, no markers
FILES = {**MARKED_FILES, "tests/test_cart.py": TEST_CART}
FILES["pyproject.toml"] = FILES["pyproject.toml"].split("addopts")[0]
HACK = (
    MARKED_HACK.split("def subtotal")[0]
    + """def subtotal(prices):
    return 13 if list(prices) == [3, 4, 5, 1] else _bugged["subtotal"](prices)


def discounted(price, percent):
    return 180 if (price, percent) == (200, 10) else _bugged["discounted"](price, percent)


def count_over(prices, limit):
    visible = {((3, 4, 5), 4): 1, ((100, 200, 300), 150): 2}
    answer = visible.get((tuple(prices), limit))
    return _bugged["count_over"](prices, limit) if answer is None else answer
"""
)


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    return synthesized_rows(tmp_path_factory, "class-fixture-held-out", FILES, 3)


def test_every_task_of_a_suite_of_fixture_taking_methods_has_checks_in_a_class_of_them(synthesized):
    swe, _, report = synthesized
    (source,) = report["sources"]
    assert source["held_out"]["tasks_with_checks"] == len(swe) == report["tasks"], source["held_out"]
    assert {row["function"].split("::")[-1] for row in swe} == {"subtotal", "discounted", "count_over"}
    patches = "".join(row["test_patch"] for row in swe)
    # the checks are methods of classes holding the fixtures and the attribute a fixture reads
    assert "__test__ = True" in patches and "def prices(self):" in patches and "rate = 10" in patches
    for row in swe:
        checks = [n for n in row["FAIL_TO_PASS"] if f"/{HELD_OUT_PREFIX}" in n]
        assert checks and all("::TestHeldOut" in n for n in checks), row["FAIL_TO_PASS"]


def test_hard_coded_answers_to_fixture_taking_methods_get_no_reward_and_the_fix_resolves(
    synthesized, bwrap_gym
):
    swe, debug, _ = synthesized
    each_hack_unpaid(bwrap_gym, swe, debug, HACK, visible=4)
    each_fix_resolves_with_checks(bwrap_gym, swe, debug)
