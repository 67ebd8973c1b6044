"""Held-out checks for MBPP debugging tasks: the visible asserts' calls with their arguments
changed, each answered by the reference solution, graded but never shown to the agent.

A debugging task's tests are in its workspace, so a policy can pass them without fixing anything:
``if (a, b) == (2, 3): return 5`` for each assert it reads (hard-coded answers to the visible
tests). The class is closed the way EvalPlus extends HumanEval and MBPP: more inputs, made by
type-aware mutation of the visible ones (a number moved by a little, a character or an element
dropped, doubled or swapped, one element of a container changed the same way), their expected
values computed by the ground truth. Here the ground truth is the reference solution the bug was
injected into, so the fix a task asks for (the reference again) agrees on every input, while code
that answers only the visible calls runs the bug on the others.

An input is kept when the reference answers it the same in two runs in opposite orders (no state
carried between calls, no randomness), within :data:`CALL_TIMEOUT_S`, with a value that is a
Python literal of at most :data:`MAX_REPR` characters (its floats finite, and never in a set or
a dict's key: they are compared with a tolerance, :data:`CLOSE_FUNCTION`). For each bug the checks chosen are
first those on which the buggy program answers otherwise (they fail at the base, so a hard-coded
answer to the visible calls fails them), then some on which it agrees; an input on which the bug
does not finish is dropped (the test would hang at the base). The checks go into
:data:`HELD_OUT_TESTS`, a test module the grader adds after the agent's diff (``DebugTask.
hidden_files``; the SWE row's ``test_patch``): the debugging env measures their FAIL_TO_PASS and
PASS_TO_PASS with the visible tests, and the mirror run arms them like any other.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lit_codeRL import pyparse
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.grading import split_value_test
from lit_codeRL.sandbox.types import Program, Verdict

HELD_OUT_TESTS = "test_held_out.py"
"""The module of held-out checks: a test path (restored and graded), absent from the workspace."""
CALL_TIMEOUT_S = 0.5
"""Per call, inside the program that runs them all (an interval timer raises in the call)."""
PROGRAM_TIMEOUT_S = 20.0
MAX_REPR = 400
"""Longest argument list or answer written into a check (longer ones are dropped)."""
VARIANTS_PER_CALL = 8
"""Changed argument lists tried per visible call."""
_MARK = "@lcrl-held-out@ "


@dataclass(frozen=True)
class Variant:
    """One held-out call: the visible assert's compared expression with changed arguments."""

    expression: str
    """Source of the expression (``sorted(f([3, 1], 2))``), evaluated in the solution's namespace."""
    site: int
    """Which visible assert it came from (round-robin over them keeps the checks varied)."""
    support: str = ""
    """A function the expression calls by :data:`RUN_NAME` (a whole test function with changed
    literals, its asserts recording their values: ``function_checks.py``), written beside the check
    under a name of its own; empty for a plain call."""
    params: tuple[str, ...] = ()
    """The fixtures the check takes (``tmp_path``): the test function's own parameters."""

    def named(self, name: str) -> tuple[str, str]:
        """The expression and its support with the support function called ``name``."""
        return self.expression.replace(RUN_NAME, name), self.support.replace(RUN_NAME, name)


RUN_NAME = "_lcrl_run_"
"""The name a :attr:`Variant.support` function has until it is written (``_lcrl_f<n>``)."""
KEEP_FUNCTION = """
import ast as _lcrl_ast


def _lcrl_plain(value):
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return all(_lcrl_plain(v) for v in value)
    if kind is dict:
        return all(_lcrl_plain(k) and _lcrl_plain(v) for k, v in value.items())
    return kind in (int, float, complex, str, bytes, bool, type(None))


def _lcrl_keep(value):
    _lcrl_r = repr(value)
    if type(_lcrl_r) is not str:
        return ("<repr>", None)
    try:
        _lcrl_v = _lcrl_ast.literal_eval(_lcrl_r)
    except Exception:
        return ("<repr>", _lcrl_r)
    return _lcrl_v if _lcrl_plain(_lcrl_v) else ("<repr>", _lcrl_r)


def _lcrl_check(failed, thunk):
    try:
        _lcrl_holds = bool(thunk())
    except Exception:
        _lcrl_holds = False
    if not _lcrl_holds:
        failed.append(True)
"""
"""``_lcrl_keep(value)``: what a recorded assert keeps of a value when it is evaluated (a fresh
literal of it, or its repr when it has none): a list the test changes later is kept as it was.
Only built-in types are kept, so the check's ``==`` is theirs: an object equal to anything (a
``repr`` or ``ast.literal_eval`` replaced to give one) never stands in for an answer.
``_lcrl_check(failed, thunk)``: a recorded assert's test (``thunk()``), a failure (or an error
evaluating it) noted in ``failed`` rather than raised."""


def solution_functions(source: str) -> frozenset[str]:
    """Names of the solution's top-level functions: the calls whose arguments are changed."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def _compared(test: str) -> str | None:
    """The expression an assert checks: the non-literal side of ``==``, else the assert's own
    test when it is a call (``assert is_even(4)``), ``not`` stripped."""
    split = split_value_test(test)
    if split is not None:
        return split[0].strip()  # parenthesized on lines of its own: parsed whole
    try:
        tree = pyparse.parse(test.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    node = tree.body[0].test
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return ast.unparse(node) if isinstance(node, ast.Call) else None


def _literal_call(expression: str, functions: frozenset[str]) -> tuple[ast.Expression, ast.Call] | None:
    """The expression's tree and its first call of a solution function whose arguments are all
    literals (``f(*xs)`` and ``f(**kw)`` are not)."""
    try:
        tree = pyparse.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions):
            continue
        args = [*node.args, *(k.value for k in node.keywords)]
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        try:
            for arg in args:
                ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
        return tree, node
    return None


def mutate(value: Any, rng: random.Random, depth: int = 0) -> Any:
    """``value`` changed a little, its type kept (EvalPlus's type-aware mutation): a number moved
    by 1 to 3 (never below 0 if it was not), a bool negated, a character or an element dropped,
    doubled, swapped with the next or (recursively) changed. ``value`` itself when nothing can be
    changed (``None``, an empty container)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        step = rng.choice((-2, -1, 1, 1, 2, 3))
        moved = abs(value + step) if value >= 0 else value + step
        return moved if moved != value else value + 1  # 1 - 2 kept at or above 0 is 1 again
    if isinstance(value, float):
        return rng.choice((value + 1.0, value - 1.0, value * 1.5, value + 0.5))
    if isinstance(value, str):
        return _mutate_sequence(list(value), rng, depth, letters=True, fresh="".join) if value else "a"
    if isinstance(value, list | tuple):
        return _mutate_sequence(list(value), rng, depth, letters=False, fresh=type(value)) if value else value
    if isinstance(value, set | frozenset):
        items = sorted(value, key=repr)
        if len(items) > 1 and rng.random() < 0.5:
            items.pop(rng.randrange(len(items)))
        elif depth < 3:
            items.append(mutate(rng.choice(items), rng, depth + 1))
        return type(value)(items)
    if isinstance(value, dict):
        if not value:
            return value
        out = dict(value)
        key = rng.choice(sorted(out, key=repr))
        if len(out) > 1 and rng.random() < 0.3:
            del out[key]
        elif depth < 3:
            out[key] = mutate(out[key], rng, depth + 1)
        return out
    return value


def _mutate_sequence(items: list, rng: random.Random, depth: int, letters: bool, fresh: Any) -> Any:
    """One element (character) dropped, doubled, swapped with the next or changed; doubled when
    the others would leave the sequence as it was (equal neighbours, an element nothing changes)."""
    original = fresh(list(items))
    out = _changed_sequence(list(items), rng, depth, letters, fresh)
    if out == original:
        at = rng.randrange(len(items))
        out = fresh(items[: at + 1] + items[at:])
    return out


def _changed_sequence(items: list, rng: random.Random, depth: int, letters: bool, fresh: Any) -> Any:
    at = rng.randrange(len(items))
    ops = ["double", "change"] + (["drop"] if len(items) > 1 else []) + (["swap"] if len(items) > 1 else [])
    op = rng.choice(ops)
    if op == "drop":
        items.pop(at)
    elif op == "double":
        items.insert(at, items[at])
    elif op == "swap":
        at = min(at, len(items) - 2)
        items[at], items[at + 1] = items[at + 1], items[at]
    elif letters:  # another character of the string's own in this one's place
        others = sorted(set(items) - {items[at]})
        items[at] = rng.choice(others) if others else ("b" if items[at] == "a" else "a")
    elif depth < 3:
        items[at] = mutate(items[at], rng, depth + 1)
    return fresh(items)


def variants(problem: Problem, seed: int = 0) -> list[Variant]:
    """Changed calls of every visible assert that compares a solution call with literal
    arguments, :data:`VARIANTS_PER_CALL` tries each, none a visible call, none repeated."""
    functions = solution_functions(problem.reference_solution or "")
    seen: set[str] = set()
    found: list[Variant] = []
    sites = []
    for test in problem.tests:
        expression = _compared(test)
        parsed = _literal_call(expression, functions) if expression else None
        if parsed is not None:
            sites.append(parsed)
            seen.add(ast.unparse(parsed[0]))
    digest = hashlib.sha256(f"{seed}\0{problem.task_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    for index, (tree, call) in enumerate(sites):
        originals = [ast.literal_eval(a) for a in call.args]
        keywords = [ast.literal_eval(k.value) for k in call.keywords]
        values = originals + keywords
        for _ in range(VARIANTS_PER_CALL):
            changed = list(values)
            for _ in range(1 if rng.random() < 0.7 else 2):
                at = rng.randrange(len(changed)) if changed else None
                if at is not None:
                    changed[at] = mutate(changed[at], rng)
            if not changed or changed == values:
                continue
            try:
                nodes = [pyparse.parse(repr(v), mode="eval").body for v in changed]
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # inf, nan: no literal
                continue
            source = _with_arguments(tree, call, nodes[: len(originals)], nodes[len(originals) :])
            if source in seen or len(source) > MAX_REPR:
                continue
            seen.add(source)
            found.append(Variant(source, index))
    return found


def _with_arguments(tree: ast.Expression, call: ast.Call, args: list, values: list) -> str:
    """The expression's source with ``call`` given ``args`` and its keywords ``values``."""
    before = call.args, [k.value for k in call.keywords]
    call.args = args
    for keyword, value in zip(call.keywords, values, strict=True):
        keyword.value = value
    try:
        return ast.unparse(tree)
    finally:
        call.args = before[0]
        for keyword, value in zip(call.keywords, before[1], strict=True):
            keyword.value = value


CASE_FUNCTION = """
def _lcrl_optional(hook, arg):
    if hook is not None:
        _lcrl_n = hook.__code__.co_argcount - (1 if hasattr(hook, "__self__") else 0)
        hook(arg) if _lcrl_n else hook()


def _lcrl_case(cls, name, *args):
    import unittest as _lcrl_unittest

    if not issubclass(cls, _lcrl_unittest.TestCase):
        _lcrl_optional(getattr(cls, "setup_class", None), cls)
        try:
            _lcrl_c = cls()
            _lcrl_m = getattr(_lcrl_c, name)
            _lcrl_optional(getattr(_lcrl_c, "setup_method", None), _lcrl_m)
            try:
                return _lcrl_m(*args)
            finally:
                _lcrl_optional(getattr(_lcrl_c, "teardown_method", None), _lcrl_m)
        finally:
            _lcrl_optional(getattr(cls, "teardown_class", None), cls)
    cls.setUpClass()
    try:
        _lcrl_c = cls(name)
        _lcrl_c.setUp()
        try:
            return getattr(_lcrl_c, name)(*args)
        finally:
            _lcrl_c.tearDown()
            _lcrl_c.doCleanups()
    finally:
        cls.tearDownClass()
        cls.doClassCleanups()
"""
"""``_lcrl_case(cls, name, *fixtures)``: a test class's method run as its runner runs it (the
unittest or pytest hooks around it); what a method site's variant calls."""


ANSWER_FUNCTION = f"""
import json as _lcrl_json, signal as _lcrl_signal


def _lcrl_alarm(*_):
    raise TimeoutError


def _lcrl_answer(thunk, limit={MAX_REPR}):
    _lcrl_signal.signal(_lcrl_signal.SIGALRM, _lcrl_alarm)
    try:
        _lcrl_signal.setitimer(_lcrl_signal.ITIMER_REAL, {CALL_TIMEOUT_S})
        try:
            _lcrl_r = repr(thunk())
        finally:
            _lcrl_signal.setitimer(_lcrl_signal.ITIMER_REAL, 0)
        return ["ok", _lcrl_r] if len(_lcrl_r) <= limit else ["big", ""]
    except TimeoutError:
        return ["timeout", ""]
    except BaseException as _lcrl_e:
        return ["raise", type(_lcrl_e).__name__]
"""
"""``_lcrl_answer(thunk, limit)``: ``["ok", repr]``, ``["raise", type]``, ``["big", ""]`` (a repr
over ``limit`` characters) or ``["timeout", ""]`` of one call, under its own interval timer (the MBPP programs' and the repository runs' alike)."""


def answers_program(code: str, setup_code: str, expressions: Sequence[tuple[int, str]]) -> Program:
    """A program that evaluates each ``(index, expression)`` in ``code``'s namespace with
    :data:`ANSWER_FUNCTION` and prints one marked JSON line per expression: ``[i, status, text]``."""
    driver = f"""{ANSWER_FUNCTION}
for _lcrl_i, _lcrl_src in {list(expressions)!r}:
    print({_MARK!r} + _lcrl_json.dumps([_lcrl_i, *_lcrl_answer(lambda: eval(_lcrl_src))]), flush=True)
"""
    return Program(code=code, setup_code=f"{setup_code}\n{driver}", timeout_s=PROGRAM_TIMEOUT_S)


def read_answers(result: Any) -> dict[int, tuple[str, str]]:
    """The marked lines of a run of :func:`answers_program`: index -> ``(status, text)``."""
    if result.verdict not in (Verdict.PASSED, Verdict.FAILED, Verdict.RUNTIME_ERROR):
        return {}
    answers: dict[int, tuple[str, str]] = {}
    for line in result.stdout.split("\n"):
        if not line.startswith(_MARK):
            continue
        try:
            index, status, text = json.loads(line[len(_MARK) :])
        except (ValueError, TypeError):
            continue
        if isinstance(index, int) and isinstance(status, str) and isinstance(text, str):
            answers[index] = (status, text)
    return answers


def _value(text: str) -> tuple[bool, Any]:
    try:
        value = ast.literal_eval(pyparse.parse(text, mode="eval"))
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False, None
    return True, value


def _floats(value: Any) -> bool:
    if isinstance(value, float | complex):
        return True
    if isinstance(value, list | tuple | set | frozenset):
        return any(_floats(v) for v in value)
    if isinstance(value, dict):
        return any(_floats(k) or _floats(v) for k, v in value.items())
    return False


def _comparable(value: Any) -> bool:
    """Can a check compare with ``value`` by :data:`CLOSE_FUNCTION` (its floats finite, no complex,
    none where equality is exact: a set's element, a dict's key)?"""
    if isinstance(value, complex):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_comparable(v) for v in value)
    if isinstance(value, set | frozenset):
        return not _floats(value)
    if isinstance(value, dict):
        return not any(_floats(k) for k in value) and all(_comparable(v) for v in value.values())
    return True


CLOSE_FUNCTION = """
def _lcrl_close(actual, expected):
    if isinstance(expected, float):
        return (
            isinstance(actual, (int, float))
            and not isinstance(actual, bool)
            and _lcrl_math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(_lcrl_close(a, e) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_lcrl_close(actual[k], v) for k, v in expected.items())
        )
    return actual == expected
"""
"""``_lcrl_close(actual, expected)``: equality, floats (at any depth of lists, tuples and dicts'
values) within 1e-9: a check's comparison, and the host's (:func:`close`)."""
_CLOSE_NAMESPACE: dict[str, Any] = {"_lcrl_math": math}
exec(CLOSE_FUNCTION, _CLOSE_NAMESPACE)  # one text: the checks' comparison is the host's
close = _CLOSE_NAMESPACE["_lcrl_close"]


def expected_values(
    candidates: Sequence[Variant], first: dict[int, tuple[str, str]], second: dict[int, tuple[str, str]]
) -> dict[int, Any]:
    """Index -> the reference's answer, for the calls it answered alike in both runs with a
    literal whose floats a check compares with a tolerance (:func:`_comparable`)."""
    kept: dict[int, Any] = {}
    for index in range(len(candidates)):
        a, b = first.get(index), second.get(index)
        if a is None or b is None or a[0] != "ok" or b[0] != "ok":
            continue
        ok_a, value_a = _value(a[1])
        ok_b, value_b = _value(b[1])
        if not (ok_a and ok_b) or not _comparable(value_a) or not close(value_b, value_a):
            continue
        kept[index] = value_a
    return kept


def _agrees(answer: tuple[str, str] | None, expected: Any) -> bool | None:
    """Does the buggy program's answer equal the expected value (``None``: it did not finish)?"""
    if answer is None or answer[0] == "timeout":
        return None
    if answer[0] != "ok":
        return False
    ok, value = _value(answer[1])
    return bool(close(value, expected)) if ok else False


def choose(
    candidates: Sequence[Variant], expected: dict[int, Any], buggy: dict[int, tuple[str, str]], count: int
) -> tuple[list[int], int]:
    """Up to ``count`` checks for one bug, and how many of them it fails: those the bug answers
    otherwise first (at most all but one of ``count`` when some agree), round-robin over the
    visible asserts, then agreeing ones. A call on which the bug did not finish is left out."""
    differ: list[int] = []
    agree: list[int] = []
    for index in expected:
        verdict = _agrees(buggy.get(index), expected[index])
        if verdict is not None:
            (agree if verdict else differ).append(index)
    chosen = _round_robin(candidates, differ, max(count - 1, 1) if agree else count)
    return chosen + _round_robin(candidates, agree, count - len(chosen)), len(chosen)


def _round_robin(candidates: Sequence[Variant], indices: list[int], count: int) -> list[int]:
    by_site: dict[int, list[int]] = {}
    for index in indices:
        by_site.setdefault(candidates[index].site, []).append(index)
    out: list[int] = []
    while len(out) < count and any(by_site.values()):
        for site in sorted(by_site):
            if by_site[site] and len(out) < count:
                out.append(by_site[site].pop(0))
    return out


def test_module_text(
    header: str, candidates: Sequence[Variant], expected: dict[int, Any], chosen: Sequence[int]
) -> str:
    """The held-out test module: ``header`` (the visible module's imports and setup code), then
    one test function per chosen call (after the function it calls, for a whole test's variant)."""
    floats = any(_floats(expected[index]) for index in chosen)
    lines = [header.rstrip("\n"), *(["import math as _lcrl_math", CLOSE_FUNCTION] if floats else [])]
    lines += [KEEP_FUNCTION] if any(candidates[index].support for index in chosen) else []
    lines += [CASE_FUNCTION] if any("_lcrl_case(" in candidates[index].support for index in chosen) else []
    lines.append("")
    for number, index in enumerate(chosen, 1):
        candidate, value = candidates[index], expected[index]
        expression, support = candidate.named(f"_lcrl_f{number}")
        expression = _operand(expression)
        check = f"_lcrl_close({expression}, {value!r})" if _floats(value) else f"{expression} == {value!r}"
        lines += ["", support] if support else []
        signature = f"def test_held_out_{number}({', '.join(candidate.params)}):"
        lines += ["", signature, f"    assert {check}", ""]
    return "\n".join(lines)


def _operand(expression: str) -> str:
    """``expression`` as the left operand of ``==``: parenthesized unless it binds tighter (``f(2)
    != 2 == True`` would chain the comparisons)."""
    try:
        node = pyparse.parse(expression, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return f"({expression})"
    tight = (
        ast.Call,
        ast.Attribute,
        ast.Subscript,
        ast.Name,
        ast.Constant,
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
    )
    return expression if isinstance(node, tight) else f"({expression})"


@dataclass(frozen=True)
class HeldOutModule:
    """One bug's held-out test module."""

    text: str
    checks: int
    failing: int
    """Checks the bug answers otherwise (FAIL_TO_PASS ones: what a hard-coded answer fails)."""


@dataclass(frozen=True)
class HeldOutJob:
    """One problem's bugs to write held-out checks for."""

    problem: Problem
    reference: str
    """The reference solution's source (the ground truth)."""
    header: str
    """The visible test module's imports and setup code, which the held-out module starts with."""
    bugs: tuple[str, ...]
    """Each bug's buggy source."""


def held_out_modules(
    sandbox: Any, jobs: Sequence[HeldOutJob], count: int, seed: int = 0
) -> list[list[HeldOutModule | None]]:
    """For each job, for each of its bugs, the held-out test module (``None``: no check found),
    at most ``count`` checks each. Runs two programs a problem (the reference, in two orders) and
    one a bug, in ``sandbox`` (``run_batch``)."""
    if count <= 0:
        return [[None] * len(job.bugs) for job in jobs]
    found = [variants(job.problem, seed) for job in jobs]
    todo = [(k, job) for k, job in enumerate(jobs) if found[k] and job.bugs]
    programs = []
    for k, job in todo:
        pairs = list(enumerate(v.expression for v in found[k]))
        programs += [
            answers_program(job.reference, job.problem.setup_code, pairs),
            answers_program(job.reference, job.problem.setup_code, pairs[::-1]),
        ]
    results = sandbox.run_batch(programs) if programs else []
    expected: dict[int, dict[int, Any]] = {}
    for n, (k, _) in enumerate(todo):
        values = expected_values(found[k], read_answers(results[2 * n]), read_answers(results[2 * n + 1]))
        if values:
            expected[k] = values
    buggy_programs, owners = [], []
    for k, job in enumerate(jobs):
        if k not in expected:
            continue
        pairs = [(i, found[k][i].expression) for i in expected[k]]
        for b, code in enumerate(job.bugs):
            buggy_programs.append(answers_program(code, job.problem.setup_code, pairs))
            owners.append((k, b))
    buggy = sandbox.run_batch(buggy_programs) if buggy_programs else []
    modules: list[list[HeldOutModule | None]] = [[None] * len(job.bugs) for job in jobs]
    for (k, b), result in zip(owners, buggy, strict=True):
        chosen, failing = choose(found[k], expected[k], read_answers(result), count)
        if chosen:
            text = test_module_text(jobs[k].header, found[k], expected[k], chosen)
            modules[k][b] = HeldOutModule(text, len(chosen), failing)
    return modules
