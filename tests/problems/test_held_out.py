"""Held-out checks of MBPP debugging tasks (``problems/synth/held_out.py``): the visible calls with
changed arguments, answered by the reference, checked against hand-computed values."""

from __future__ import annotations

import ast
import random
import subprocess
import sys

import pytest

from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.synth.held_out import (
    HELD_OUT_TESTS,
    RUN_NAME,
    HeldOutJob,
    Variant,
    choose,
    expected_values,
    held_out_modules,
    mutate,
    search_variants,
    variants,
)
from lit_codeRL.problems.synth.held_out import (
    test_module_text as module_text,
)
from tests.envs.conftest import answering
from tests.sandbox.conftest import require_bwrap

REFERENCE = "def scale(xs, k):\n    return [x * k for x in xs]\n\n\ndef is_even(n):\n    return n % 2 == 0\n"
PROBLEM = Problem(
    "7",
    "scale a list",
    tests=(
        "assert scale([1, 2, 3], 2) == [2, 4, 6]",
        "assert sorted(scale((4, 1), k=3)) == [3, 12]",
        "assert not is_even(3)",
        "assert scale(list(range(3)), 2) == [0, 2, 4]",  # an argument that is no literal: not changed
    ),
    reference_solution=REFERENCE,
)


@pytest.mark.parametrize(
    "value",
    [
        0,
        1,
        5,
        -4,
        2.5,
        True,
        "abc",
        "",
        [1, 2, 3],
        (1, "a"),
        [[1, 2], [3]],
        {1, 2},
        {"a": 1, "b": [2]},
        None,
        [],
        set(),  # a literal too (``ast.literal_eval("set()")``): boltons' tests have one
        {},
    ],
)
def test_a_mutation_keeps_the_type_and_a_non_negative_number_stays_so(value):
    rng = random.Random(0)
    for _ in range(50):
        out = mutate(value, rng)
        assert type(out) is type(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            assert out >= 0 and out != value
        if value in (None, [], set(), {}):
            assert out == value  # nothing to change
        elif isinstance(value, bool | str | list | tuple) and value:
            assert out != value


def test_variants_change_the_visible_calls_only_and_are_seeded():
    found = variants(PROBLEM)
    assert found == variants(PROBLEM) and found != variants(PROBLEM, seed=1)
    sources = [v.expression for v in found]
    assert len(set(sources)) == len(sources)
    assert not {"scale([1, 2, 3], 2)", "sorted(scale((4, 1), k=3))", "is_even(3)"} & set(sources)
    assert {v.site for v in found} == {0, 1, 2, 3}
    assert all(
        v.expression.startswith("sorted(scale(") and "k=" in v.expression for v in found if v.site == 1
    )
    assert all(v.expression.startswith("is_even(") for v in found if v.site == 2)
    # the fourth assert's first argument is a call: its literal changes, the calls stay
    assert all(v.expression.startswith("scale(list(range(") for v in found if v.site == 3)


OTHER = """\
import sys
from collections import Counter, namedtuple

Pair = namedtuple("Pair", "a b")


def longest(pairs, n):
    return max(p.b - p.a for p in pairs[:n])


def keep(items, kind):
    return [x for x in items if not isinstance(x, kind)]


def size(t):
    return sys.getsizeof(t)


def letters(text):
    return Counter(text)


def ends(pair):
    return Pair(pair[0], pair[-1])
"""
ARGUMENTS = Problem(
    "8",
    "arguments that are no literal, an expected value that is none, answers that are no literal",
    tests=(
        "assert longest([Pair(5, 24), Pair(15, 25)], 2) == 19",
        "assert keep((4, 5, 7.7), int) == [7.7]",
        "assert size((1, 2)) == sys.getsizeof((1, 2))",
        "assert letters('abca') == {'a': 2, 'b': 1, 'c': 1}",
        "assert ends([1, 2, 3]) == (1, 3)",
        "assert letters(text_of_setup) == {'x': 1}",  # no literal anywhere in the call: no site
    ),
    reference_solution=OTHER,
    setup_code="text_of_setup = 'x'",
)


def test_literals_inside_calls_and_beside_names_change_and_the_rest_is_kept():
    """A call whose arguments are not all literals (a named tuple built in the test, a type, an
    expression) changes the literals inside them; a test comparing with a computed value is a site
    too, its solution call the compared side."""
    found = variants(ARGUMENTS)
    by_site = {site: [v.expression for v in found if v.site == site] for site in range(6)}
    assert all(by_site[site] for site in range(5)) and not by_site[5]
    assert all(e.startswith("longest([Pair(") and e.count("Pair(") == 2 for e in by_site[0]), by_site[0]
    assert all(e.startswith("keep(") and e.endswith(", int)") for e in by_site[1]), by_site[1]
    assert all(e.startswith("size(") and "getsizeof" not in e for e in by_site[2]), by_site[2]


def test_answers_of_container_subclasses_are_their_containers_literals():
    from lit_codeRL.problems.synth.held_out import ANSWER_FUNCTION

    namespace: dict = {}
    exec(ANSWER_FUNCTION + "\n" + OTHER, namespace)
    answer = namespace["_lcrl_answer"]
    assert answer(lambda: namespace["letters"]("abca")) == ["ok", "{'a': 2, 'b': 1, 'c': 1}"]
    assert answer(lambda: [namespace["ends"]([1, 2])]) == ["ok", "[(1, 2)]"]
    cycle: list = []
    cycle.append(cycle)
    assert answer(lambda: cycle) == ["ok", "[[...]]"]  # no literal: its call is dropped

    class Never(dict):  # a subclass whose == says no to its own dict: its repr, never a literal
        def __eq__(self, other):
            return False

        __hash__ = None

        def __repr__(self):
            return "Never()"

    assert answer(lambda: Never(a=1)) == ["ok", "Never()"]


SWALLOWS = """\
import time
import unittest


def caught():
    try:
        while True:
            pass
    except Exception:
        return "caught"


def caught_bare():
    for _ in range(3):
        try:
            while True:
                pass
        except:  # noqa: E722
            pass
    return "caught thrice"


def long_diff(failed):
    # unittest's diff of two lists that differ everywhere (more-itertools' gray_product tests)
    # is quadratic: 8 s for these, minutes for gray_product's, inside a recorded assert's check
    # that caught the alarm's exception
    case = unittest.TestCase()
    first, second = [f"a{i}" for i in range(300)], [f"b{i}" for i in range(300)]
    _lcrl_check(failed, lambda: case.assertEqual(first, second) is None)
    return failed


def after():
    time.sleep(0.3)  # longer than the repeat: the timer is off once its call is answered
    return "slept"
"""


def test_a_call_that_catches_its_timeout_is_answered_timeout_within_its_time():
    """The alarm raised ``TimeoutError``: a call that caught it (``except Exception``, a recorded
    assert's check around unittest's slow diff) ran on unbounded and answered whatever it
    returned; a held-out run of more-itertools' 1,500 calls hung to the grader's limit in one
    order, which left every bug of it without checks. It is now an exception ``except
    Exception`` does not catch, fired again until the call ends."""
    import time

    from lit_codeRL.problems.synth.held_out import ANSWER_FUNCTION, KEEP_FUNCTION

    namespace: dict = {}
    exec(ANSWER_FUNCTION + KEEP_FUNCTION + SWALLOWS, namespace)
    answer = namespace["_lcrl_answer"]
    for thunk in (namespace["caught"], namespace["caught_bare"], lambda: namespace["long_diff"]([])):
        start = time.monotonic()
        assert answer(thunk) == ["timeout", ""]
        assert time.monotonic() - start < 3.0
    assert answer(namespace["after"]) == ["ok", "'slept'"]
    assert answer(lambda: 1 / 0) == ["raise", "ZeroDivisionError"]
    # a check that fails in time is still a failed check, not a timeout
    assert answer(lambda: namespace["_lcrl_check"]([], lambda: 1 / 0)) == ["ok", "None"]


RARE = """\
def is_square(n):
    return n >= 0 and int(n ** 0.5) ** 2 == n


def right_angled(a, b, c):
    return a * a + b * b == c * c


def is_weekend(day):
    return day == "Saturday" or day == "Sunday"
"""
RARE_PROBLEM = Problem(
    "9",
    "answers that change on rare inputs only",
    tests=(
        "assert is_square(49) == True",
        "assert is_square(50) == False",
        "assert right_angled(3, 4, 5) == True",
        "assert right_angled(6, 7, 9) == False",
        "assert is_weekend('Saturday') == True",
        "assert is_weekend('Friday') == False",
    ),
    reference_solution=RARE,
)


def test_search_variants_take_small_values_other_orders_and_the_codes_own_literals():
    found = [v.expression for v in search_variants(RARE_PROBLEM, 0, set())]
    assert {f"is_square({n})" for n in range(32)} <= set(found)  # every small value, once
    assert "right_angled(5, 4, 3)" in found and "right_angled(0, 0, 0)" in found
    assert "is_weekend('Sunday')" in found  # a literal the reference compares with
    assert len(found) == len(set(found)) and not {"is_square(49)", "is_weekend('Saturday')"} & set(found)
    assert found == [v.expression for v in search_variants(RARE_PROBLEM, 0, set())]
    near = {v.expression for v in variants(RARE_PROBLEM)}
    assert not near & {v.expression for v in search_variants(RARE_PROBLEM, 0, near)}


def test_expected_values_keep_what_both_runs_answered_alike_as_a_literal():
    candidates = [Variant(f"f({i})", 0) for i in range(7)]
    first = {0: ("ok", "[1, 2]"), 1: ("ok", "3"), 2: ("raise", "KeyError"), 3: ("ok", "<object at 0x1>"),
             4: ("ok", "[0.5]"), 5: ("ok", "nan"), 6: ("ok", "0.25")}  # fmt: skip
    second = {**first, 1: ("ok", "4")}  # state carried between calls: another answer in another order
    assert expected_values(candidates, first, second) == {0: [1, 2], 4: [0.5], 6: 0.25}


def test_floats_are_kept_at_any_depth_a_tolerance_can_compare_them():
    answers = ["{'mean': 2.5, 'n': [1.5, (2, 0.1)]}", "[1.0, inf]", "{0.5: 1}", "{0.5}", "[1j]", "(nan,)",
               "{'a': {1.5}}", "{1, 2}", "{2j}", "((5.0, 0.9), (-2+2.4492935982947064e-16j))"]  # fmt: skip
    first = {i: ("ok", text) for i, text in enumerate(answers)}
    kept = expected_values([Variant(f"f({i})", 0) for i in range(len(answers))], first, dict(first))
    # a set holds no float: kept; a complex number is compared as floats are (MBPP 590), not in a set
    assert kept == {
        0: {"mean": 2.5, "n": [1.5, (2, 0.1)]},
        4: [1j],
        7: {1, 2},
        9: ((5.0, 0.9), (-2 + 2.4492935982947064e-16j)),
    }


def test_choose_puts_the_checks_the_bug_fails_first_and_keeps_one_it_passes():
    candidates = [Variant(f"f({i})", i % 2) for i in range(6)]
    expected = {0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 0.5}
    buggy = {0: ("ok", "9"), 1: ("ok", "2"), 2: ("raise", "IndexError"), 3: ("timeout", ""),
             4: ("ok", "5"), 5: ("ok", "0.5000000000001")}  # fmt: skip
    chosen, failing = choose(candidates, expected, buggy, 3)
    assert chosen == [0, 2, 4] and failing == 2  # 3 never finished: left out; 5 agrees within 1e-9
    assert choose(candidates, expected, {k: ("ok", "9") for k in expected}, 2) == ([0, 1], 2)


def test_the_module_compares_floats_with_a_tolerance_and_the_rest_exactly(tmp_path):
    expected = {0: 0.1, 1: ["a"], 2: {"mean": [0.3, 2]}, 3: (1.5, "x"), 4: 0.2}
    variants = [Variant("f(1)", 0), Variant("g('a')", 0), Variant("h(2)", 0), Variant("k()", 0)]
    # a whole test's variant: its support function brings the recording helpers into the module
    variants.append(Variant(f"{RUN_NAME}()", 1, support=f"def {RUN_NAME}():\n    return f(2)\n"))
    text = module_text("from solution import *\n", variants, expected, [0, 1, 2, 3, 4])
    assert "assert _lcrl_close(f(1), 0.1)" in text and "assert _lcrl_close(h(2), {'mean': [0.3, 2]})" in text
    assert "assert g('a') == ['a']" in text and text.count("def test_held_out_") == 5
    assert "assert _lcrl_close(_lcrl_f5(), 0.2)" in text and "def _lcrl_plain(" in text
    # run: the floats computed otherwise pass within the tolerance; a type or a value off fails
    (tmp_path / HELD_OUT_TESTS).write_text(text)
    for solution, failing in (
        (
            "f = lambda x: 0.1 * x\ng = lambda s: [s]\nh = lambda n: {'mean': [0.1 + 0.2, n]}\nk = lambda: (1.5, 'x')",
            0,
        ),
        (
            "f = lambda x: 0.1001\ng = lambda s: (s,)\nh = lambda n: {'mean': (0.3, n)}\nk = lambda: [1.5, 'x']",
            5,
        ),
        (
            "f = lambda x: True\ng = lambda s: ['a']\nh = lambda n: {'mean': [0.3, n], 'x': 1}\nk = lambda: (1.5,)",
            4,
        ),
    ):
        (tmp_path / "solution.py").write_text(solution + "\n")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", HELD_OUT_TESTS],
            cwd=tmp_path, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert f"{failing} failed" in done.stdout if failing else done.returncode == 0, done.stdout


def test_the_helpers_written_into_one_check_module_define_no_name_twice():
    """The helper texts a held-out or candidate module may hold together: a name two of them
    define is the later one's in the module, and the earlier one's callers call the wrong function
    (the float comparison once replaced by a coroutine closer: every float check failed on the
    reference patch)."""
    from lit_codeRL.problems.synth.held_out import (
        ANSWER_FUNCTION,
        CASE_FUNCTION,
        CLOSE_FUNCTION,
        KEEP_FUNCTION,
    )
    from lit_codeRL.problems.synth.repo_held_out import _ANSWER

    defined: list[str] = []
    for text in (
        CLOSE_FUNCTION,
        KEEP_FUNCTION,
        CASE_FUNCTION,
        ANSWER_FUNCTION,
        _ANSWER.replace(ANSWER_FUNCTION, ""),
    ):
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                defined.append(node.name)
            elif isinstance(node, ast.Assign):
                defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
    twice = {name for name in defined if defined.count(name) > 1}
    assert not twice and len(defined) > 8, twice


def test_held_out_modules_pass_with_the_reference_and_fail_the_bug_where_they_say(tmp_path):
    require_bwrap()
    from lit_codeRL.sandbox import SandboxConfig, make_sandbox

    bugs = (REFERENCE.replace("x * k", "x + k"), REFERENCE.replace("% 2 == 0", "% 2 == 1"), REFERENCE)
    with make_sandbox(SandboxConfig(timeout_s=30)) as sandbox:
        (modules,) = held_out_modules(
            sandbox, [HeldOutJob(PROBLEM, REFERENCE, "from solution import *\n", bugs)], 4
        )
    assert modules[0] is not None and modules[1] is not None and modules[0].checks == 4
    assert modules[0].failing >= 1 and modules[1].failing >= 1 and modules[2].failing == 0
    for module, code in zip(modules, bugs, strict=True):
        for source, failing in ((REFERENCE, 0), (code, module.failing)):
            done = run_checks(tmp_path, source, module.text)
            assert (f"{failing} failed" in done.stdout) if failing else done.returncode == 0, done.stdout
            # the ones the bug fails come first
            assert [f"test_held_out_{i}" for i in range(1, failing + 1)] == sorted(
                line.split("::")[1].split(" ")[0]
                for line in done.stdout.splitlines()
                if line.startswith("FAILED")
            )


def test_bugs_that_differ_on_rare_inputs_only_get_a_check_they_fail(tmp_path):
    """Each bug answers every nearby call as the reference does (checked here), so before the
    search every check it got passed at the bug and hard-coded answers to the visible asserts
    resolved its task. The search finds an input for each: a small value (0), another order of
    the visible arguments, a literal of the reference's own."""
    require_bwrap()
    from lit_codeRL.sandbox import SandboxConfig, make_sandbox

    bugs = (
        RARE.replace("n >= 0", "n > 0"),  # differs at 0 only
        RARE.replace("== c * c", "== c * c and a < b"),  # differs where a > b only
        RARE.replace('"Sunday"', '"Sundays"'),  # differs on 'Sunday' only
    )
    for bug in bugs:
        reference, buggy = {}, {}
        exec(RARE, reference)
        exec(bug, buggy)
        near = variants(RARE_PROBLEM)
        assert near and all(eval(v.expression, reference) == eval(v.expression, buggy) for v in near)
    with make_sandbox(SandboxConfig(timeout_s=30)) as sandbox:
        (modules,) = held_out_modules(
            sandbox, [HeldOutJob(RARE_PROBLEM, RARE, "from solution import *\n", bugs)], 5
        )
    visible = {"is_square": {"(49,)": True, "(50,)": False}, "right_angled": {"(3, 4, 5)": True, "(6, 7, 9)": False},
               "is_weekend": {"('Saturday',)": True, "('Friday',)": False}}  # fmt: skip
    for module, bug in zip(modules, bugs, strict=True):
        assert module is not None and module.failing >= 1, module
        for source, failing in ((RARE, 0), (bug, module.failing), (answering(bug, visible), module.failing)):
            done = run_checks(tmp_path, source, module.text)
            assert (f"{failing} failed" in done.stdout) if failing else done.returncode == 0, done.stdout


def run_checks(where, solution: str, checks: str) -> subprocess.CompletedProcess:
    """pytest on the held-out module ``checks`` beside ``solution.py``."""
    (where / "solution.py").write_text(solution)
    (where / HELD_OUT_TESTS).write_text(checks)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", HELD_OUT_TESTS],
        cwd=where, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
