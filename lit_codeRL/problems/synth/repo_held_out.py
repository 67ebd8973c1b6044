"""Held-out checks for tasks synthesized from a repository: the test modules' calls with their
literal arguments changed, answered by the clean repository, graded but never in the workspace.

The hack they close is the one :mod:`.held_out` closes for MBPP: a task's tests are in its
workspace, so ``if args == (2, 3): return 5`` in the bugged function for each call the tests make
passes them with the bug in place. Here the calls are read from the repository's own test modules
(pytest's ``assert f(...) == 3``, ``assert f(...)``, unittest's ``self.assertEqual(f(...), 3)``,
``assertTrue``/``assertFalse``): a call of a name the module imports at its top, with at least one
literal argument, in an expression whose every name is so imported or a builtin (a local, a
fixture, a lambda cannot be rebuilt elsewhere). The literal arguments are mutated as MBPP's are.

The answers come from pytest runs in the grader's own sandbox workspace, so the held-out calls are
made exactly where the tests make theirs (the same directory, ``conftest.py``, import path, the
toolchain): one module of candidate calls beside each test module, added as the run's
``test_patch``, each candidate a test that evaluates its call under an interval timer and fails
with the answer in its message. The clean repository runs them twice in opposite orders; each
kept bug once, each run after the first within the grader's limit for a graded task (the first
standing in for the reference). :func:`.held_out.choose` picks per bug the calls it answers
otherwise first, and a bug gets checks only when at least one of them fails at its base (a check
it passes guards nothing a hard-coded answer could break). The checks are written beside their test module as
``test_held_out_<name>.py``, with its imports. Tests whose calls have no literal argument (input
built in locals or fixtures, a call through an object, an error expected) are sites as whole
functions (:mod:`.function_checks`); their module's header is then all of it but its tests.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import random
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from lit_codeRL import pyparse
from lit_codeRL.problems.debug_repo import _fix_diff
from lit_codeRL.problems.swe import SWETask, git_environment
from lit_codeRL.problems.synth import run_cache
from lit_codeRL.problems.synth.function_checks import (
    asserted,
    class_fixtures,
    compared_sides,
    function_variants,
    is_literal,
    module_support,
    rebuildable,
    root_name,
    test_functions,
    test_methods,
)
from lit_codeRL.problems.synth.held_out import (
    ANSWER_FUNCTION,
    CASE_FUNCTION,
    KEEP_FUNCTION,
    MAX_REPR,
    RUN_NAME,
    VARIANTS_PER_CALL,
    Variant,
    choose,
    expected_values,
    mutate,
    test_module_text,
)
from lit_codeRL.problems.synth.validate import SuiteRun, run_suite

log = logging.getLogger(__name__)

HELD_OUT_PREFIX = "test_held_out_"
"""``tests/test_parser.py``'s checks are graded as ``tests/test_held_out_parser.py``."""
CANDIDATE_PREFIX = "test_lcrl_candidates_"
MAX_CANDIDATES = 1500
"""Changed calls answered per repository at most (a seeded sample): each is a test of every run."""
_MARK = "@lcrl-answer@"
_FORMAT = 3
"""Bump when what a cached answer means changes."""
MAX_RECORDS_REPR = 2000
"""Longest answer of a whole test function's records (a plain call's: :data:`.held_out.MAX_REPR`)."""
_UNITTEST = {"assertEqual": 2, "assertEquals": 2, "assertTrue": 1, "assertFalse": 1}
"""unittest's assertions whose first arguments are compared (how many are read)."""


@dataclass(frozen=True)
class RepoVariant:
    """A changed call and the test module it was read from."""

    variant: Variant
    module: str


@dataclass(frozen=True)
class RepoHeldOut:
    """One bug's held-out checks."""

    files: dict[str, str]
    """Path -> the checks' test module (beside the test module they were read from)."""
    failing: tuple[str, ...]
    """Node ids of the checks the bug fails (its FAIL_TO_PASS)."""
    passing: tuple[str, ...]
    """Node ids of those it passes (PASS_TO_PASS)."""


def held_out_counts(checks: RepoHeldOut | None) -> dict[str, int]:
    """A task's ``extra_info`` counts of its checks (zeros when it has none)."""
    failing, passing = (checks.failing, checks.passing) if checks else ((), ())
    return {"held_out_checks": len(failing) + len(passing), "held_out_failing": len(failing)}


def module_header(tree: ast.Module) -> tuple[str, frozenset[str], frozenset[str]]:
    """A test module's top-level imports (and the ``sys.path`` changes among them), as source;
    the names they bind; and those of them that are not the standard library's or pytest's (the
    calls whose arguments are changed: the code under test is not ``os.path.join``)."""
    kept: list[ast.stmt] = []
    names: set[str] = set()
    external: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            bound = {alias.asname or alias.name.split(".")[0]: alias.name for alias in node.names}
            external |= {name for name, module in bound.items() if _external(module)}
        elif isinstance(node, ast.ImportFrom):
            if any(alias.name == "*" for alias in node.names):
                continue  # what it binds is not known here
            bound = {alias.asname or alias.name: alias.name for alias in node.names}
            if node.level == 0 and _external(node.module or ""):
                external |= set(bound)
        elif not _changes_sys_path(node):
            continue
        else:
            bound = {}
        names |= set(bound)
        kept.append(node)
    return "\n".join(ast.unparse(node) for node in kept), frozenset(names), frozenset(names - external)


def _external(module: str) -> bool:
    root = module.split(".")[0]
    return root in sys.stdlib_module_names or root in ("pytest", "_pytest", "__future__")


def _changes_sys_path(node: ast.stmt) -> bool:
    """``sys.path.insert(...)``/``append``: a test module that finds its code this way needs it."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    return isinstance(func, ast.Attribute) and ast.unparse(func.value) == "sys.path"


def _compared(node: ast.AST) -> list[ast.expr]:
    """The expressions an assertion compares (``assert``, unittest's ``assertEqual``...)."""
    if isinstance(node, ast.Assert):
        # each side's value is checked (``f(3) > 2``: ``f(4) == 7``), else what is asserted
        return compared_sides(node.test) or [asserted(node.test)]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _UNITTEST
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ):
        return list(node.args[: _UNITTEST[node.func.attr]])
    return []


def _site(expression: ast.expr, imported: frozenset[str], code: frozenset[str]) -> ast.Call | None:
    """The call of ``expression`` whose literal arguments are changed: the first of a name of
    ``code`` with one; ``None`` when the expression uses a name ``imported`` does not bind (it
    cannot be rebuilt outside its test)."""
    if not rebuildable(expression, imported):
        return None
    for node in ast.walk(expression):
        if (
            isinstance(node, ast.Call)
            and root_name(node.func) in code
            and all(k.arg is not None for k in node.keywords)
            and any(is_literal(a) for a in [*node.args, *(k.value for k in node.keywords)])
        ):
            return node
    return None


def repo_variants(
    files: Mapping[str, str | bytes], modules: Sequence[str], seed: int = 0
) -> tuple[list[RepoVariant], dict[str, str]]:
    """Changed calls of every test module of ``modules`` (:data:`VARIANTS_PER_CALL` tries per
    site, none a call the module makes, at most :data:`MAX_CANDIDATES`), and each module's header."""
    found: list[RepoVariant] = []
    headers: dict[str, str] = {}
    site_number = 0
    for module in sorted(modules):
        source = files.get(module)
        if not isinstance(source, str):
            continue
        try:
            tree = pyparse.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        header, imported, code = module_header(tree)
        sites: list[tuple[ast.Expression, ast.Call]] = []
        seen: set[str] = set()
        for node in ast.walk(tree):
            for side in _compared(node):
                call = _site(side, imported, code)
                if call is not None and not is_literal(side):
                    wrapped = ast.Expression(side)
                    if (text := ast.unparse(wrapped)) not in seen:
                        seen.add(text)
                        sites.append((wrapped, call))
        functions = [(None, f) for f in test_functions(tree)] + test_methods(tree)
        if not sites and not functions:
            continue
        # a whole test's variant needs what its module defines besides its tests (fixtures,
        # helpers, constants); a module of plain calls only its imports
        headers[module] = module_support(tree) if functions else header
        digest = hashlib.sha256(f"{seed}\0{module}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        for wrapped, call in sites:
            for expression in _changed(wrapped, call, rng, seen):
                found.append(RepoVariant(Variant(expression, site_number), module))
            site_number += 1
        for owner, function in functions:
            params = tuple(a.arg for a in function.args.args[0 if owner is None else 1 :])
            call = f"{RUN_NAME}({', '.join(params)})"
            marks = tuple(ast.unparse(d) for d in function.decorator_list)  # ``carried_mark``s only
            fixtures = "" if owner is None else class_fixtures(owner, tree)
            for support in function_variants(function, rng, seen, owner):
                variant = Variant(call, site_number, support, params, marks, fixtures)
                found.append(RepoVariant(variant, module))
            site_number += 1
    if len(found) > MAX_CANDIDATES:
        rng = random.Random(seed)
        found = [found[i] for i in sorted(rng.sample(range(len(found)), MAX_CANDIDATES))]
    return found, headers


def _changed(tree: ast.Expression, call: ast.Call, rng: random.Random, seen: set[str]) -> list[str]:
    """Sources of ``tree`` with one or two of ``call``'s literal arguments mutated."""
    slots = [(False, i) for i, a in enumerate(call.args) if is_literal(a)]
    slots += [(True, i) for i, k in enumerate(call.keywords) if is_literal(k.value)]
    out = []
    for _ in range(VARIANTS_PER_CALL):
        chosen = {rng.choice(slots) for _ in range(1 if rng.random() < 0.7 else 2)}
        before = list(call.args), [k.value for k in call.keywords]
        try:
            for keyword, at in chosen:
                node = call.keywords[at].value if keyword else call.args[at]
                value = mutate(ast.literal_eval(node), rng)
                new = pyparse.parse(repr(value), mode="eval").body
                if keyword:
                    call.keywords[at].value = new
                else:
                    call.args[at] = new
            source = ast.unparse(tree)
        except (SyntaxError, ValueError, RecursionError, MemoryError):  # inf, nan: no literal
            continue
        finally:
            call.args = before[0]
            for keyword_node, value_node in zip(call.keywords, before[1], strict=True):
                keyword_node.value = value_node
        if source not in seen and len(source) <= MAX_REPR:
            seen.add(source)
            out.append(source)
    return out


def held_out_path(module: str) -> str:
    """Where the checks read from ``module`` are graded: beside it, as ``test_held_out_<name>.py``
    (``x_test.py``'s as ``test_held_out_x_test.py``: never the name of a ``test_x.py``'s beside
    it in another directory, which pytest's default import mode would take for the same module)."""
    pure = PurePosixPath(module)
    name = pure.stem.removeprefix("test_") or "tests"
    return str(pure.with_name(f"{HELD_OUT_PREFIX}{name}.py"))


def candidate_modules(
    variants: Sequence[RepoVariant], headers: Mapping[str, str], indices: Sequence[int]
) -> dict[str, str]:
    """The modules that answer the calls ``indices`` (in that order), one beside each test module:
    test ``test_c<i>`` fails with ``[status, repr]`` in its message (see :func:`read_answers`)."""
    by_module: dict[str, list[str]] = {}
    for i in indices:
        v = variants[i].variant
        expression, support = v.named(f"_lcrl_f{i}")
        limit = MAX_RECORDS_REPR if support else MAX_REPR
        test = v.test_lines(f"test_c{i}", f"_lcrl_report(lambda: ({expression}), {limit})", f"TestC{i}")
        by_module.setdefault(variants[i].module, []).append(f"{support}\n\n\n" + "\n".join(test) + "\n")
    out = {}
    for module, tests in by_module.items():
        pure = PurePosixPath(module)
        path = str(pure.with_name(f"{CANDIDATE_PREFIX}{pure.stem}.py"))
        helpers = f"{_ANSWER}\n{KEEP_FUNCTION}\n{CASE_FUNCTION}"
        out[path] = f"{_guarded(headers[module])}\n{helpers}\n\n" + "\n\n".join(tests)
    return out


def _guarded(header: str) -> str:
    """``header`` run under ``try``: pytest runs no test at all when one module does not import,
    so a header that fails (a module-level fixture it needed) must cost only its own module's
    answers, each then ``["header", why]`` (never a check)."""
    future = [line for line in header.splitlines() if line.startswith("from __future__ ")]
    body = [line for line in header.splitlines() if not line.startswith("from __future__ ")]
    indented = "\n".join(f"    {line}" for line in [*body, "_lcrl_header = None"])
    return "\n".join(
        [
            *future,
            f"try:\n{indented}\nexcept BaseException as _lcrl_e:\n    _lcrl_header = type(_lcrl_e).__name__",
        ]
    )


_ANSWER = f"""{ANSWER_FUNCTION}

def _lcrl_report(thunk, limit):
    import pytest as _lcrl_pytest

    _lcrl_out = ["header", _lcrl_header] if _lcrl_header else _lcrl_answer(thunk, limit)
    _lcrl_pytest.fail({_MARK!r} + _lcrl_json.dumps(_lcrl_out), pytrace=False)
"""
"""Each candidate fails with its answer as a bare message: a traceback would be formatted for each
(pytest parses the failing module's source again for every entry: a module of 1,000 candidates
answered in 177 s with tracebacks, 9 s without)."""


def read_answers(run: SuiteRun) -> dict[int, tuple[str, str]]:
    """Candidate index -> ``(status, text)`` from a run's failure messages (a candidate whose
    module did not collect, or whose message does not read back, has none)."""
    answers: dict[int, tuple[str, str]] = {}
    for node, message in run.messages.items():
        name = node.rsplit("::", 1)[-1]
        at = message.find(_MARK)
        if not name.startswith("test_c") or not name[6:].isdigit() or at < 0:
            continue
        try:
            status, text = json.loads(message[at + len(_MARK) :].split("\n", 1)[0])
        except (ValueError, TypeError):
            continue
        if isinstance(status, str) and isinstance(text, str):
            answers[int(name[6:])] = (status, text)
    return answers


def repository_held_out(
    grader: Any,
    task: SWETask,
    files: Mapping[str, str | bytes],
    modules: Sequence[str],
    diffs: Sequence[str],
    count: int,
    seed: int = 0,
    workers: int = 2,
    cache: Path | None = None,
) -> list[RepoHeldOut | None]:
    """For each bug (its ``diffs`` against ``task``'s clean base, a repository built from
    ``files``), its held-out checks, at most ``count`` (``None``: none that it fails). Answers
    are read from ``cache`` (a :func:`run_cache.tree_dir`) when it holds them."""
    if count <= 0 or not diffs:
        return [None] * len(diffs)
    variants, headers = repo_variants(files, modules, seed)
    if not variants:
        return [None] * len(diffs)

    def answers(
        indices: Sequence[int], diff: str, limit: float | None
    ) -> tuple[dict[int, tuple[str, str]], float]:
        return _answers(
            grader, task, files, candidate_modules(variants, headers, indices), diff, cache, limit
        )

    order = list(range(len(variants)))
    plain = [v.variant for v in variants]
    first, wall = answers(order, "", None)
    # the grader's rule for a graded task, the first clean run standing in for the reference: a
    # bug whose calls all crawl costs a bounded run, not the grader's whole timeout each
    limit = grader.limits(wall, None)[0]
    expected = expected_values(plain, first, answers(order[::-1], "", limit)[0])
    if not expected:
        return [None] * len(diffs)

    def one(diff: str) -> RepoHeldOut | None:
        chosen, failing = choose(plain, expected, answers(sorted(expected), diff, limit)[0], count)
        return _checks(variants, headers, expected, chosen, failing, files) if failing else None

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(one, diffs))


def _answers(
    grader: Any,
    task: SWETask,
    files: Mapping[str, str | bytes],
    modules: Mapping[str, str],
    diff: str,
    cache: Path | None,
    timeout_s: float | None,
) -> tuple[dict[int, tuple[str, str]], float]:
    """One run of the candidate ``modules`` over ``diff`` within ``timeout_s`` (``None``: the
    grader's), read, and its wall time; kept in ``cache`` when it finished (a timeout or a
    sandbox failure is run again next time)."""
    key = json.dumps([_FORMAT, diff, sorted(modules.items()), timeout_s])
    path = cache / f"held-out-{hashlib.sha256(key.encode()).hexdigest()[:32]}.json" if cache else None
    data = run_cache.load(path)
    if data is not None:
        try:
            return {int(k): (str(v[0]), str(v[1])) for k, v in data["answers"].items()}, float(data["wall_s"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            pass
    with tempfile.TemporaryDirectory(prefix="lcrl-held-out-") as home:
        patch = _fix_diff(files, modules, Path(task.repo_source), git_environment(home))
    try:
        run = run_suite(grader, replace(task, test_patch=patch), diff, sorted(modules), timeout_s)
    except RuntimeError as err:  # the sandbox failed: no answers, no checks
        log.warning("synth: held-out checks: %s", err)
        return {}, 0.0
    found = read_answers(run)
    if run.verdict in ("resolved", "unresolved"):
        run_cache.store(path, {"answers": {str(k): list(v) for k, v in found.items()}, "wall_s": run.wall_s})
    return found, run.wall_s


def _checks(
    variants: Sequence[RepoVariant],
    headers: Mapping[str, str],
    expected: Mapping[int, Any],
    chosen: Sequence[int],
    failing: int,
    files: Mapping[str, str | bytes],
) -> RepoHeldOut | None:
    """The chosen checks written beside their test modules (a module whose path is taken by a file
    of the repository is left out)."""
    plain = [v.variant for v in variants]
    by_module: dict[str, list[int]] = {}
    for index in chosen:
        by_module.setdefault(variants[index].module, []).append(index)
    out: dict[str, str] = {}
    fails, passes = [], []
    failing_set = set(chosen[:failing])
    for module, indices in sorted(by_module.items()):
        path = held_out_path(module)
        if path in files:
            continue
        out[path] = test_module_text(headers[module], plain, dict(expected), indices)
        for number, index in enumerate(indices, 1):
            node = plain[index].node(f"test_held_out_{number}", f"TestHeldOut{number}")
            (fails if index in failing_set else passes).append(f"{path}::{node}")
    return RepoHeldOut(out, tuple(fails), tuple(passes)) if fails else None
