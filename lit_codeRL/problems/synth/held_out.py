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
Python literal of at most :data:`MAX_REPR` characters (its floats and complex numbers finite, and
never in a set or a dict's key: they are compared with a tolerance, :data:`CLOSE_FUNCTION`). For each bug the checks chosen are
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
import itertools
import json
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from lit_codeRL import pyparse
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.grading import split_value_test
from lit_codeRL.sandbox.types import Program, Verdict

HELD_OUT_TESTS = "test_held_out.py"
"""The module of held-out checks: a test path (restored and graded), absent from the workspace."""
CALL_TIMEOUT_S = 0.5
"""Per call, inside the program that runs them all (an interval timer raises in the call)."""
ALARM_REPEAT_S = 0.05
"""After a call's time is up, its alarm fires again this often until the call ends. The alarm
raises an exception no ``except Exception`` catches (a ``TimeoutError`` was caught by a recorded
assert's check, and unittest's quadratic diff of two long lists that differ ran on for minutes:
the answers of a whole run lost); a call that catches it anyway (a bare ``except:``) meets the
next one, and an answer given after the first is a timeout whatever it was."""
PROGRAM_TIMEOUT_S = 20.0
MAX_REPR = 400
"""Longest argument list or answer written into a check (longer ones are dropped)."""
VARIANTS_PER_CALL = 8
"""Changed argument lists tried per visible call."""
SEARCH_PER_CALL = 40
"""Farther ones drawn per visible call for a bug that no nearby one tells apart (:func:`search_variants`)."""
SEARCH_PROGRAM_TIMEOUT_S = 60.0
"""A search program answers a few hundred calls (:data:`PROGRAM_TIMEOUT_S` a few dozen)."""
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
    marks: tuple[str, ...] = ()
    """The test function's own pytest marks (``pytest.mark.skipif(...)``, ``pytest.mark.slow``),
    each a decorator's source written on the check: where the test is skipped, so is the check."""

    fixtures: str = ""
    """The body of the class the check is a method of, when the test is a method of a pytest class
    with fixture methods (``function_checks.class_fixtures``): pytest finds them through the
    class. Empty: the check is a plain function."""

    def decorators(self) -> list[str]:
        """The lines that go above the check's ``def``."""
        return [f"@{mark}" for mark in self.marks]

    def test_lines(self, name: str, body: str, holder: str) -> list[str]:
        """The test ``name`` whose body is the line ``body``: a function, or a method of a class
        ``holder`` of :attr:`fixtures` (collected whatever the repository's ``python_classes``
        says: ``__test__ = True``)."""
        if not self.fixtures:
            return [*self.decorators(), f"def {name}({', '.join(self.params)}):", f"    {body}"]
        signature = f"    def {name}({', '.join(('self', *self.params))}):"
        head = [f"class {holder}:", "    __test__ = True", "", self.fixtures, ""]
        return [*head, *(f"    {line}" for line in self.decorators()), signature, f"        {body}"]

    def node(self, name: str, holder: str) -> str:
        """The node id of :meth:`test_lines`'s test within its module."""
        return f"{holder}::{name}" if self.fixtures else name

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


def _lcrl_await(coroutine):
    import asyncio as _lcrl_asyncio

    _lcrl_loop = _lcrl_asyncio.new_event_loop()
    try:
        return _lcrl_loop.run_until_complete(coroutine)
    finally:
        try:
            _lcrl_left = _lcrl_asyncio.all_tasks(_lcrl_loop)
            for _lcrl_task in _lcrl_left:
                _lcrl_task.cancel()
            if _lcrl_left:
                _lcrl_loop.run_until_complete(_lcrl_asyncio.gather(*_lcrl_left, return_exceptions=True))
            _lcrl_loop.run_until_complete(_lcrl_loop.shutdown_asyncgens())
        finally:
            _lcrl_end_suspended([coroutine], [_lcrl_loop])
            _lcrl_loop.close()


def _lcrl_end_suspended(coroutines, loops):
    import asyncio as _lcrl_asyncio

    # a coroutine still suspended is closed now, while a call's timer can still end it: closed
    # when collected, its ``with ThreadPoolExecutor()`` waited for a thread that never ends, with
    # no timer left (a whole run of answers lost to its time limit)
    for _lcrl_c in [*coroutines, *(t.get_coro() for loop in loops for t in _lcrl_asyncio.all_tasks(loop))]:
        try:
            _lcrl_c.close()
        except BaseException:
            pass
"""
"""``_lcrl_keep(value)``: what a recorded assert keeps of a value when it is evaluated (a fresh
literal of it, or its repr when it has none): a list the test changes later is kept as it was.
Only built-in types are kept, so the check's ``==`` is theirs: an object equal to anything (a
``repr`` or ``ast.literal_eval`` replaced to give one) never stands in for an answer.
``_lcrl_check(failed, thunk)``: a recorded assert's test (``thunk()``), a failure (or an error
evaluating it) noted in ``failed`` rather than raised. ``_lcrl_await(coroutine)``: an async
test's recorded body run to its end in an event loop of its own, its tasks left over cancelled
(as ``asyncio.run`` does, but the thread's current loop left as it was: a plugin's loop of the
session is not closed under the tests after it). ``_lcrl_end_suspended(coroutines, loops)``: those and the
loops' tasks' coroutines closed, an error closing one (the call's timer) dropped."""


def solution_functions(source: str) -> frozenset[str]:
    """Names of the solution's top-level functions: the calls whose arguments are changed."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset()
    return frozenset(n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))


def _compared(test: str, functions: frozenset[str] = frozenset()) -> str | None:
    """The expression an assert checks: the non-literal side of ``==``; else, when neither side
    is a literal, the side that calls a solution function (``tuple_size(t) == sys.getsizeof(t)``:
    the reference answers it); else the assert's own test when it is a call (``assert
    is_even(4)``), ``not`` stripped."""
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
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
        calling = [side for side in (node.left, node.comparators[0]) if _calls(side, functions)]
        return ast.unparse(calling[0]) if len(calling) == 1 else None
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node = node.operand
    return ast.unparse(node) if isinstance(node, ast.Call) else None


def _calls(node: ast.AST, functions: frozenset[str]) -> bool:
    return any(_solution_call(n, functions) for n in ast.walk(node))


def _solution_call(node: ast.AST, functions: frozenset[str]) -> TypeGuard[ast.Call]:
    """Is ``node`` a call of one of the solution's ``functions`` by name?"""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions


Slot = tuple[ast.AST, str, int | None]
"""Where a literal sits in a call's tree: its parent node, the field and the index in it."""


def is_literal(node: ast.AST) -> bool:
    """Is ``node`` a Python literal (what ``ast.literal_eval`` reads)?"""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False
    return True


def _literal_slots(call: ast.Call) -> list[Slot]:
    """The literals of ``call``'s arguments a variant may change: an argument that is a literal
    whole, else the largest literals inside it (``Pair(5, 24)``'s numbers, ``1.0 / 3``'s, ``range(3)``'s
    bound), the names and the functions called kept as written (``int``, a tree the setup code
    built)."""
    slots: list[Slot] = []

    def visit(parent: ast.AST, field: str, index: int | None) -> None:
        node = getattr(parent, field) if index is None else getattr(parent, field)[index]
        if is_literal(node):
            slots.append((parent, field, index))
            return
        if isinstance(node, ast.JoinedStr):  # an f-string's parts are not expressions of their own
            return
        for name, value in ast.iter_fields(node):
            if isinstance(node, ast.Call) and name == "func":
                continue
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, ast.expr):
                        visit(node, name, i)
            elif isinstance(value, ast.expr):
                visit(node, name, None)

    for i in range(len(call.args)):
        visit(call, "args", i)
    for keyword in call.keywords:
        visit(keyword, "value", None)
    return slots


def _slot_node(slot: Slot) -> ast.AST:
    parent, field, index = slot
    return getattr(parent, field) if index is None else getattr(parent, field)[index]


def _set_slot(slot: Slot, node: ast.AST) -> None:
    parent, field, index = slot
    if index is None:
        setattr(parent, field, node)
    else:
        getattr(parent, field)[index] = node


def _literal_call(expression: str, functions: frozenset[str]) -> tuple[ast.Expression, list[Slot]] | None:
    """The expression's tree and the literal slots of its first call of a solution function whose
    arguments are all literals, else of its first one with a literal somewhere in its arguments
    (``f(*xs)`` and ``f(**kw)`` are never one)."""
    try:
        tree = pyparse.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    some: tuple[ast.Expression, list[Slot]] | None = None
    for node in ast.walk(tree):
        if not _solution_call(node, functions):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        slots = _literal_slots(node)
        if all(is_literal(a) for a in [*node.args, *(k.value for k in node.keywords)]):
            return tree, slots
        if slots and some is None:
            some = tree, slots
    return some


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
        if not value:  # ``set()`` is a literal too (boltons' tests: this raised, ending synthesis)
            return value
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


def _sites(problem: Problem) -> list[tuple[ast.Expression, list[Slot]]]:
    """Per visible assert that compares a call of a solution function with literals in its
    arguments: the compared expression's tree and those literals' slots."""
    functions = solution_functions(problem.reference_solution or "")
    sites = []
    for test in problem.tests:
        expression = _compared(test, functions)
        parsed = _literal_call(expression, functions) if expression else None
        if parsed is not None:
            sites.append(parsed)
    return sites


def variants(problem: Problem, seed: int = 0) -> list[Variant]:
    """Changed calls of every visible assert that compares a call of a solution function with
    literals in its arguments, :data:`VARIANTS_PER_CALL` tries each (one literal changed, or two),
    none a visible call, none repeated."""
    digest = hashlib.sha256(f"{seed}\0{problem.task_id}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))

    def nudged(values: list) -> Iterator[list]:
        for _ in range(VARIANTS_PER_CALL):
            changed = list(values)
            for _ in range(1 if rng.random() < 0.7 else 2):
                at = rng.randrange(len(changed)) if changed else None
                if at is not None:
                    changed[at] = mutate(changed[at], rng)
            yield changed

    return _changed_calls(_sites(problem), nudged, set())


def search_variants(problem: Problem, seed: int, known: set[str]) -> list[Variant]:
    """More changed calls, farther from the visible ones, none in ``known``: for a bug that answers
    every call of :func:`variants` as the reference does. Such a bug differs only on inputs rare
    near the visible calls (a perfect square, a sum equal to the third argument, an empty
    container, another of the names the code compares with), and a hard-coded answer to the
    visible calls would pass every check it passes. A site with two to four literals first takes
    them in every other order; one whose literals are one to three ints, every small tuple (the
    small-scope hypothesis: ``(0..31)``, ``(0..7)²``, ``(0..4)³``); then :data:`SEARCH_PER_CALL`
    draws of :func:`far`, which also takes values from the reference's own literals and the
    visible calls' (a fuzzer's dictionary)."""
    digest = hashlib.sha256(f"{seed}\0{problem.task_id}\0search".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    sites = _sites(problem)
    pool = _literals(problem.reference_solution or "") + [
        ast.literal_eval(_slot_node(slot)) for _, slots in sites for slot in slots
    ]

    def farther(values: list) -> Iterator[list]:
        if 2 <= len(values) <= 4:  # the same values in another order
            yield from (list(t) for t in itertools.permutations(values))
        if 1 <= len(values) <= 3 and all(type(v) is int for v in values):
            yield from (list(t) for t in itertools.product(range(_GRID[len(values)]), repeat=len(values)))
        for _ in range(SEARCH_PER_CALL):
            out = list(values)
            picked = [i for i in range(len(out)) if rng.random() < 0.5] or [rng.randrange(len(out))]
            for i in picked:
                out[i] = far(out[i], rng, pool)
            yield out

    return _changed_calls(sites, farther, set(known))


_GRID = {1: 32, 2: 8, 3: 5}
"""Each int of a site's one, two or three runs over ``range(n)`` in :func:`search_variants`."""


def _literals(source: str) -> list[Any]:
    """The constants of ``source`` (numbers, strings, bytes; ``True``/``False``/``None`` left out)."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and type(node.value) in (int, float, str, bytes)
            and node.value not in out
        ):
            out.append(node.value)
    return out[:200]


def far(value: Any, rng: random.Random, pool: Sequence[Any] = ()) -> Any:
    """``value`` changed more than :func:`mutate` changes it, its type kept: a value of its type
    from ``pool``, a number drawn from the small ones or from a range twice its size, a container
    emptied, or several mutations in a row."""
    if isinstance(value, bool):
        return rng.random() < 0.5
    same = [v for v in pool if type(v) is type(value) and v != value]
    if same and rng.random() < 0.25:
        return rng.choice(same)
    if isinstance(value, int) and rng.random() < 0.6:
        low = 0 if value >= 0 else -2 * abs(value) - 10
        return rng.randint(low, 20) if rng.random() < 0.5 else rng.randint(low, 2 * abs(value) + 10)
    if isinstance(value, float) and rng.random() < 0.6:
        low = 0.0 if value >= 0 else -2 * abs(value) - 10
        return round(rng.uniform(low, 2 * abs(value) + 10), 2)
    if (
        isinstance(value, str | bytes | list | tuple | set | frozenset | dict)
        and value
        and rng.random() < 0.15
    ):
        return type(value)()
    for _ in range(rng.randint(1, 4)):
        value = mutate(value, rng)
    return value


def _changed_calls(
    sites: list[tuple[ast.Expression, list[Slot]]], changes: Callable[[list], Iterator[list]], seen: set[str]
) -> list[Variant]:
    """Each site's literals given the values ``changes(values)`` proposes, each written back as a
    literal; none in ``seen``, a visible call or repeated, none over :data:`MAX_REPR`."""
    seen |= {ast.unparse(tree) for tree, _ in sites}
    found: list[Variant] = []
    for index, (tree, slots) in enumerate(sites):
        values = [ast.literal_eval(_slot_node(slot)) for slot in slots]
        for changed in changes(values):
            if not changed or changed == values:
                continue
            try:
                nodes = [pyparse.parse(repr(v), mode="eval").body for v in changed]
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # inf, nan: no literal
                continue
            source = _with_slots(tree, slots, nodes)
            if source in seen or len(source) > MAX_REPR:
                continue
            seen.add(source)
            found.append(Variant(source, index))
    return found


def _with_slots(tree: ast.Expression, slots: list[Slot], nodes: list[ast.AST]) -> str:
    """The expression's source with each slot holding the node given for it."""
    before = [_slot_node(slot) for slot in slots]
    for slot, node in zip(slots, nodes, strict=True):
        _set_slot(slot, node)
    try:
        return ast.unparse(tree)
    finally:
        for slot, node in zip(slots, before, strict=True):
            _set_slot(slot, node)


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
        if isinstance(_lcrl_c, _lcrl_unittest.IsolatedAsyncioTestCase):
            return _lcrl_isolated(_lcrl_c, name, args)
        _lcrl_c.setUp()
        try:
            return getattr(_lcrl_c, name)(*args)
        finally:
            _lcrl_c.tearDown()
            _lcrl_c.doCleanups()
    finally:
        cls.tearDownClass()
        cls.doClassCleanups()


def _lcrl_isolated(case, name, args):
    import asyncio as _lcrl_asyncio
    import inspect as _lcrl_inspect
    import unittest as _lcrl_unittest

    _lcrl_m, _lcrl_box, _lcrl_loops = getattr(case, name), [], []

    async def _lcrl_call():
        _lcrl_loops.append(_lcrl_asyncio.get_running_loop())
        try:
            _lcrl_v = _lcrl_m(*args)
            _lcrl_box.append((True, (await _lcrl_v) if _lcrl_inspect.isawaitable(_lcrl_v) else _lcrl_v))
        except Exception as _lcrl_e:
            _lcrl_box.append((False, _lcrl_e))

    setattr(case, name, _lcrl_call)
    try:
        case.run(_lcrl_unittest.TestResult())
    finally:  # as ``_lcrl_await``: nothing left suspended to wait, when collected, with no timer
        _lcrl_end_suspended([], _lcrl_loops)
    if not _lcrl_box:
        raise RuntimeError("the test's set-up failed")
    if not _lcrl_box[0][0]:
        raise _lcrl_box[0][1]
    return _lcrl_box[0][1]
"""
"""``_lcrl_case(cls, name, *fixtures)``: a test class's method run as its runner runs it (the
unittest or pytest hooks around it); what a method site's variant calls. An
``IsolatedAsyncioTestCase``'s is run by the case itself (``run``: ``setUp``, ``asyncSetUp``, the
method, ``asyncTearDown``, ``tearDown``, the cleanups, in its own runner's loop), the method's
value or error caught on the way (``_lcrl_isolated``): what its set-up made in that loop is used
in it."""


ANSWER_FUNCTION = f"""
import json as _lcrl_json, signal as _lcrl_signal


class _LcrlTimeout(BaseException):
    pass


_lcrl_late = [False]


def _lcrl_alarm(*_):
    _lcrl_late[0] = True
    raise _LcrlTimeout


def _lcrl_builtin(value, path=()):
    _lcrl_t = next((t for t in (dict, list, tuple, set, frozenset) if isinstance(value, t)), None)
    if _lcrl_t is None or id(value) in path or len(path) > 20:  # a cycle: its repr is no literal
        return value
    path = (*path, id(value))
    if _lcrl_t is dict:
        _lcrl_items = [(k, _lcrl_builtin(v, path)) for k, v in value.items()]
        if type(value) is dict and all(v is value[k] for k, v in _lcrl_items):
            return value
        return dict(_lcrl_items)
    _lcrl_items = [_lcrl_builtin(v, path) for v in value]
    if type(value) is _lcrl_t and all(a is b for a, b in zip(_lcrl_items, value)):
        return value
    return _lcrl_t(_lcrl_items)


def _lcrl_answer(thunk, limit={MAX_REPR}):
    _lcrl_signal.signal(_lcrl_signal.SIGALRM, _lcrl_alarm)
    _lcrl_late[0] = False
    try:
        # fired again every {ALARM_REPEAT_S} s until cleared: a call that catches one goes on no further
        _lcrl_signal.setitimer(_lcrl_signal.ITIMER_REAL, {CALL_TIMEOUT_S}, {ALARM_REPEAT_S})
        try:
            _lcrl_v = thunk()
            _lcrl_b = _lcrl_builtin(_lcrl_v)
            _lcrl_r = repr(_lcrl_b if _lcrl_b is _lcrl_v or (_lcrl_v == _lcrl_b) is True else _lcrl_v)
        finally:
            _lcrl_signal.setitimer(_lcrl_signal.ITIMER_REAL, 0)
        if _lcrl_late[0]:
            return ["timeout", ""]
        return ["ok", _lcrl_r] if len(_lcrl_r) <= limit else ["big", ""]
    except BaseException as _lcrl_e:
        return ["timeout", ""] if _lcrl_late[0] else ["raise", type(_lcrl_e).__name__]
"""
"""``_lcrl_answer(thunk, limit)``: ``["ok", repr]``, ``["raise", type]``, ``["big", ""]`` (a repr
over ``limit`` characters) or ``["timeout", ""]`` of one call, under its own interval timer (the MBPP programs' and the repository runs' alike).
A subclass of a built-in container (``Counter``, ``defaultdict``, ``OrderedDict``, a named tuple) is
answered as that container, at any depth, when it equals it (``Counter(a=1) == {'a': 1}``; a
class whose ``==`` says otherwise keeps its repr, which is no literal): the visible asserts compare
it with the container's literal."""


def answers_program(
    code: str, setup_code: str, expressions: Sequence[tuple[int, str]], timeout_s: float = PROGRAM_TIMEOUT_S
) -> Program:
    """A program that evaluates each ``(index, expression)`` in ``code``'s namespace with
    :data:`ANSWER_FUNCTION` and prints one marked JSON line per expression: ``[i, status, text]``."""
    driver = f"""{ANSWER_FUNCTION}
for _lcrl_i, _lcrl_src in {list(expressions)!r}:
    print({_MARK!r} + _lcrl_json.dumps([_lcrl_i, *_lcrl_answer(lambda: eval(_lcrl_src))]), flush=True)
"""
    return Program(code=code, setup_code=f"{setup_code}\n{driver}", timeout_s=timeout_s)


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
    """Can a check compare with ``value`` by :data:`CLOSE_FUNCTION` (its floats and complex numbers
    finite, none where equality is exact: a set's element, a dict's key)?"""
    if isinstance(value, complex):
        return math.isfinite(value.real) and math.isfinite(value.imag)
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
    if isinstance(expected, complex):
        return (
            isinstance(actual, (int, float, complex))
            and not isinstance(actual, bool)
            and abs(actual - expected) <= max(1e-9 * max(abs(actual), abs(expected)), 1e-9)
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
"""``_lcrl_close(actual, expected)``: equality, floats and complex numbers (at any depth of
lists, tuples and dicts' values) within 1e-9 (``cmath.isclose``'s rule, written out: an ``abs``
of a difference, so a check module imports nothing for it): a check's comparison, and the
host's (:func:`close`)."""
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
        name, holder = f"test_held_out_{number}", f"TestHeldOut{number}"
        lines += ["", *candidate.test_lines(name, f"assert {check}", holder), ""]
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
    one a bug, in ``sandbox`` (``run_batch``); then, for the problems with a bug that no check
    fails, the same again over :func:`search_variants` (a hard-coded answer to the visible calls
    would pass every check such a bug passes)."""
    if count <= 0:
        return [[None] * len(job.bugs) for job in jobs]
    found = [variants(job.problem, seed) for job in jobs]
    expected, buggy = _answered(sandbox, jobs, found, range(len(jobs)), PROGRAM_TIMEOUT_S)
    chosen = {key: choose(found[key[0]], expected[key[0]], answers, count) for key, answers in buggy.items()}
    blind = sorted({k for (k, _), (_, failing) in chosen.items() if not failing})
    blind += [k for k, job in enumerate(jobs) if k not in expected and job.bugs]
    if blind:
        far_found = {
            k: search_variants(jobs[k].problem, seed, {v.expression for v in found[k]}) for k in blind
        }
        more = [far_found.get(k, []) for k in range(len(jobs))]
        far_expected, far_buggy = _answered(sandbox, jobs, more, sorted(far_found), SEARCH_PROGRAM_TIMEOUT_S)
        for k in far_expected:  # the far calls numbered after the near ones
            offset = len(found[k])
            found[k] = found[k] + more[k]
            expected.setdefault(k, {}).update({offset + i: v for i, v in far_expected[k].items()})
            for b in range(len(jobs[k].bugs)):
                if chosen.get((k, b), ([], 0))[1]:
                    continue  # this bug already fails a near check: its module stays as it was
                answers = dict(buggy.get((k, b), {}))
                answers.update({offset + i: a for i, a in far_buggy.get((k, b), {}).items()})
                chosen[(k, b)] = choose(found[k], expected[k], answers, count)
    modules: list[list[HeldOutModule | None]] = [[None] * len(job.bugs) for job in jobs]
    for (k, b), (indices, failing) in chosen.items():
        if indices:
            text = test_module_text(jobs[k].header, found[k], expected[k], indices)
            modules[k][b] = HeldOutModule(text, len(indices), failing)
    return modules


def _answered(
    sandbox: Any,
    jobs: Sequence[HeldOutJob],
    found: Sequence[Sequence[Variant]],
    which: Iterable[int],
    timeout_s: float,
) -> tuple[dict[int, dict[int, Any]], dict[tuple[int, int], dict[int, tuple[str, str]]]]:
    """For the jobs ``which`` with calls in ``found``: job -> the reference's answers it gave alike
    in two orders (:func:`expected_values`), and (job, bug) -> the bug's answers to those calls."""
    todo = [k for k in which if found[k] and jobs[k].bugs]
    programs = []
    for k in todo:
        pairs = list(enumerate(v.expression for v in found[k]))
        programs += [
            answers_program(jobs[k].reference, jobs[k].problem.setup_code, pairs, timeout_s),
            answers_program(jobs[k].reference, jobs[k].problem.setup_code, pairs[::-1], timeout_s),
        ]
    results = sandbox.run_batch(programs) if programs else []
    expected: dict[int, dict[int, Any]] = {}
    for n, k in enumerate(todo):
        values = expected_values(found[k], read_answers(results[2 * n]), read_answers(results[2 * n + 1]))
        if values:
            expected[k] = values
    buggy_programs, owners = [], []
    for k in expected:
        pairs = [(i, found[k][i].expression) for i in expected[k]]
        for b, code in enumerate(jobs[k].bugs):
            buggy_programs.append(answers_program(code, jobs[k].problem.setup_code, pairs, timeout_s))
            owners.append((k, b))
    buggy = sandbox.run_batch(buggy_programs) if buggy_programs else []
    return expected, {owner: read_answers(result) for owner, result in zip(owners, buggy, strict=True)}
