"""Single-file debugging tasks made from MBPP at run time: a reference solution with one injected
bug, its asserts as pytest tests (``problems.source: debug:mbpp:<MBPP file or dir>``).

MBPP (CC BY 4.0) is read from the user's copy and the buggy variants are generated on the machine,
never shipped. Each task is MBPP problem N's reference solution in ``solution.py`` with one
mutation (:mod:`.mutations`) and ``test_solution.py`` holding one test function per assert. The
split is MBPP's own (train 601-974, test 11-510, validation 511-600), so held-out tasks come from
functions never trained on.

Candidates are screened in the program sandbox (``sandbox/pool.py``: one fork per program,
milliseconds each): the clean solution must pass every assert, a kept mutant must fail at least
one and finish within :data:`SCREEN_TIMEOUT_S`. The screen's per-assert outcome is the same
check the test functions make; the debugging env then measures FAIL_TO_PASS/PASS_TO_PASS with
pytest in a workspace and validates each task (the fix resolves it, the base does not) before
training on it, as for every debugging task. The statement shows the failing call, what it should
give and what it gives (computed by running it in the sandbox), never the diff. The choice of
bugs is cached per MBPP file and settings, so every run of a config trains on the same tasks.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lit_codeRL import pyparse
from lit_codeRL.problems.mbpp import HUB_ID, SPLITS, load_mbpp
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.synth.cache_dir import cache_root
from lit_codeRL.problems.synth.candidates import Candidate, candidates_by_function
from lit_codeRL.problems.synth.held_out import HELD_OUT_TESTS, HeldOutJob, HeldOutModule, held_out_modules
from lit_codeRL.problems.synth.mutations import MUTATION_KINDS
from lit_codeRL.problems.synth.statements import assertion_statement, leaked_lines, value_statement
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from lit_codeRL.sandbox.grading import split_value_test
from lit_codeRL.sandbox.types import Program, Verdict

SOLUTION = "solution.py"
TESTS = "test_solution.py"
SCREEN_TIMEOUT_S = 2.0
"""A mutant whose asserts take longer (an off-by-one that never ends a loop) is dropped."""
GENERATOR_VERSION = 7
"""Part of the cache key: bump when what is generated for the same settings changes (4: floats
at any depth of a held-out answer kept, compared within a tolerance; 6: complex numbers too; 7:
a call that catches its timeout is answered timeout)."""


@dataclass(frozen=True)
class MBPPBugSettings:
    """How buggy variants of MBPP solutions are made."""

    per_problem: int = 1
    """Bugs kept per MBPP problem."""
    tries: int = 6
    """Candidates screened per problem at most (in a seeded order)."""
    kinds: tuple[str, ...] = MUTATION_KINDS
    """Mutation kinds to draw from."""
    seed: int = 0
    """Seeds the order in which each problem's candidates are tried."""
    held_out: int = 5
    """Held-out checks a task gets at most (``held_out.py``): the visible asserts' calls with
    changed arguments, answered by the reference, graded but never in the workspace, so that
    hard-coded answers to the visible asserts fail. 0: none."""


def private_names(source: str) -> list[str]:
    """The top-level names ``source`` defines that start with one underscore: ``import *`` leaves
    them out, though a test of the program run with its asserts (MBPP 798's ``_sum``) calls them."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError):
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name)]
    return sorted({n for n in names if n.startswith("_") and not n.startswith("__")})


def test_header(problem: Problem) -> str:
    """What a test module of the task starts with: every name of the solution, then the setup code."""
    lines = ["from solution import *  # noqa: F403"]
    private = private_names(solution_source(problem))
    if private:
        lines.append(f"from solution import {', '.join(private)}")
    lines.append("")
    if problem.setup_code.strip():
        lines += [problem.setup_code.strip(), ""]
    return "\n".join(lines)


def test_module(problem: Problem) -> str:
    """``test_solution.py``: :func:`test_header`, then one test function per assert."""
    lines = [test_header(problem)]
    for index, test in enumerate(problem.tests, 1):
        body = "\n".join(f"    {line}" for line in test.strip().splitlines())
        lines += ["", f"def test_{index}():", body, ""]
    return "\n".join(lines)


def solution_source(problem: Problem) -> str:
    code = (problem.reference_solution or "").replace("\r\n", "\n").replace("\r", "\n")
    return code.strip("\n") + "\n"


def _screen_program(problem: Problem, code: str) -> Program:
    return Program(code=code, tests=problem.tests, setup_code=problem.setup_code, timeout_s=SCREEN_TIMEOUT_S)


def _failing(result: Any, count: int) -> list[int] | None:
    """Indices of failing asserts, or ``None`` when the run is no clean verdict on them."""
    if result.verdict not in (Verdict.PASSED, Verdict.FAILED) or len(result.test_passed) != count:
        return None
    return [i for i, ok in enumerate(result.test_passed) if not ok]


def _actual(sandbox: Any, problem: Problem, code: str, expression: str) -> str:
    """What ``expression`` gives with ``code``: ``it returns `repr``` or ``it raises `Error: ...```."""
    program = Program(
        code=code,
        setup_code=f"{problem.setup_code}\nprint(repr({expression}))",
        timeout_s=SCREEN_TIMEOUT_S,
    )
    result = sandbox.run(program)
    if result.verdict is Verdict.PASSED:
        return f"it returns `{result.stdout.strip()[-300:]}`"
    if result.exception_type:
        message = (result.exception_message or "").strip().splitlines()
        return f"it raises `{result.exception_type}{': ' + message[0][:200] if message else ''}`"
    return f"it ends with {result.verdict.value}"


def _statement(sandbox: Any, problem: Problem, candidate: Candidate, failing: int) -> str:
    test = problem.tests[failing].strip()
    node = f"{TESTS}::test_{failing + 1}"
    split = split_value_test(test)
    if split is not None:
        expression, expected = split
        # split_value_test wraps the expression in parentheses on lines of their own
        call = " ".join(expression.split()).removeprefix("(").removesuffix(")").strip()
        actual = _actual(sandbox, problem, candidate.content, expression)
        return value_statement(problem.prompt, SOLUTION, call, repr(expected), actual, node)
    return assertion_statement(problem.prompt, SOLUTION, test, "an AssertionError or an exception", node)


def bug_rows(
    problems: Sequence[Problem], settings: MBPPBugSettings, split_of: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Debugging-task rows (``files``/``fix``/``description``) of the screened bugs of
    ``problems``, and counts: problems, candidates screened, kept, reasons for rejection."""
    stats: dict[str, Any] = {"problems": len(problems), "screened": 0, "kept": 0, "rejected": {}}
    rejected: dict[str, int] = stats["rejected"]
    usable = [p for p in problems if p.reference_solution and p.tests]
    groups: dict[str, list[Candidate]] = {}
    for p in usable:
        merged: list[Candidate] = []
        for group in candidates_by_function(
            {SOLUTION: solution_source(p)}, settings.kinds, settings.seed
        ).values():
            merged += group
        # interleave functions' candidates in a seeded order: a problem with a helper function
        # should not spend all its tries on one of them
        digest = hashlib.sha256(f"{settings.seed}\0{p.task_id}".encode()).digest()
        random.Random(int.from_bytes(digest[:8], "big")).shuffle(merged)
        groups[p.task_id] = merged[: settings.tries]
    rows: list[dict[str, Any]] = []
    config = SandboxConfig(timeout_s=SCREEN_TIMEOUT_S)
    with make_sandbox(config) as sandbox:
        clean = sandbox.run_batch([_screen_program(p, solution_source(p)) for p in usable])
        for problem, result in zip(usable, clean, strict=True):
            if _failing(result, len(problem.tests)) != []:
                rejected["clean solution fails"] = rejected.get("clean solution fails", 0) + 1
                groups.pop(problem.task_id)
        by_id = {p.task_id: p for p in usable}
        kept: dict[str, list[tuple[Candidate, list[int]]]] = {task_id: [] for task_id in groups}
        step = 3  # screen in rounds: most problems keep a bug among their first few candidates
        for start in range(0, settings.tries, step):
            batch = [
                (task_id, c)
                for task_id, group in groups.items()
                if len(kept[task_id]) < settings.per_problem
                for c in group[start : start + step]
            ]
            if not batch:
                break
            results = sandbox.run_batch([_screen_program(by_id[t], c.content) for t, c in batch])
            stats["screened"] += len(batch)
            for (task_id, candidate), result in zip(batch, results, strict=True):
                failing = _failing(result, len(by_id[task_id].tests))
                if failing is None:
                    reason = "timeout" if result.verdict is Verdict.TIMEOUT else f"run {result.verdict.value}"
                elif not failing:
                    reason = "no test fails"
                elif len(kept[task_id]) >= settings.per_problem:
                    continue
                else:
                    kept[task_id].append((candidate, failing))
                    continue
                rejected[reason] = rejected.get(reason, 0) + 1
        jobs = [
            HeldOutJob(
                by_id[t], solution_source(by_id[t]), test_header(by_id[t]), tuple(c.content for c, _ in bugs)
            )
            for t, bugs in kept.items()
        ]
        hidden = held_out_modules(sandbox, jobs, settings.held_out, settings.seed)
        for (task_id, bugs), modules in zip(kept.items(), hidden, strict=True):
            problem = by_id[task_id]
            for (candidate, failing), module in zip(bugs, modules, strict=True):
                statement = _statement(sandbox, problem, candidate, failing[0])
                if leaked_lines(statement, candidate.diff):
                    rejected["statement leaks the change"] = rejected.get("statement leaks the change", 0) + 1
                    continue
                rows.append(
                    _row(problem, candidate, failing, statement, (split_of or {}).get(task_id), module)
                )
    stats["kept"] = len(rows)
    checks = [row["extra_info"].get("held_out_checks", 0) for row in rows]
    stats["held_out"] = {
        "tasks_with_checks": sum(1 for n in checks if n),
        "tasks_with_a_failing_check": sum(1 for row in rows if row["extra_info"].get("held_out_failing", 0)),
        "checks": sum(checks),
    }
    stats["kinds"] = dict(sorted(Counter(row["extra_info"]["bug_kind"] for row in rows).items()))
    return rows, stats


def _row(
    problem: Problem,
    candidate: Candidate,
    failing: list[int],
    statement: str,
    split: str | None,
    held_out: HeldOutModule | None = None,
) -> dict[str, Any]:
    number = problem.metadata.get("mbpp_task_id", problem.task_id)
    task_id = f"mbpp-debug/{number}-{candidate.site.kind}-{candidate.key[:6]}"
    mbpp_split = split or _mbpp_split(problem)
    return {
        "task_name": task_id,
        "description": statement,
        "files": [
            {"path": SOLUTION, "content": candidate.content},
            {"path": TESTS, "content": test_module(problem)},
        ],
        "fix": [{"path": SOLUTION, "content": solution_source(problem)}],
        **({"hidden_files": [{"path": HELD_OUT_TESTS, "content": held_out.text}]} if held_out else {}),
        "split": "train" if mbpp_split == "train" else "eval",
        "extra_info": {
            "bug_kind": candidate.site.kind,
            "mbpp_task_id": number,
            "mbpp_split": mbpp_split,
            "function": candidate.function,
            "line": candidate.site.line,
            "failing_tests": [f"{TESTS}::test_{i + 1}" for i in failing],
            "held_out_checks": held_out.checks if held_out else 0,
            "held_out_failing": held_out.failing if held_out else 0,
        },
    }


def _mbpp_split(problem: Problem) -> str:
    return mbpp_split_of(problem.metadata.get("mbpp_task_id"))


def mbpp_split_of(number: object) -> str:
    """MBPP's split of task ``number`` (``problems/mbpp.py: SPLITS``; ``train`` when unknown)."""
    if not isinstance(number, int):
        return "train"
    return next(
        (name for name, (low, high) in SPLITS.items() if name != "all" and low <= number <= high), "train"
    )


def parse_source(source: str) -> str:
    """The MBPP location of ``mbpp`` / ``mbpp:<file, directory or hub id>``."""
    _, _, where = source.partition(":")
    return where or HUB_ID


def mbpp_bug_rows(
    source: str, split: str, settings: MBPPBugSettings | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of ``split`` of MBPP at ``source`` (``mbpp:<path>``), from the cache when this
    MBPP file and these settings were screened on this machine before."""
    settings = settings or MBPPBugSettings()
    where = parse_source(source)
    problems = load_mbpp(where, split)
    digest = hashlib.sha256(
        json.dumps(
            [
                GENERATOR_VERSION,
                [(p.task_id, p.reference_solution, list(p.tests), p.setup_code) for p in problems],
                settings.per_problem,
                settings.tries,
                list(settings.kinds),
                settings.seed,
                settings.held_out,
            ]
        ).encode()
    ).hexdigest()[:16]
    cache = cache_root() / f"mbpp-debug-{digest}.json"
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        return data["rows"], data["stats"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    rows, stats = bug_rows(problems, settings)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"rows": rows, "stats": stats}), encoding="utf-8")
    os.replace(tmp, cache)
    return rows, stats
