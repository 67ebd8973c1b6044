"""The grading child's checks read nothing the code under test can replace by a builtin's name.

The checks of the pytest child (``_guard``'s record of the toolchain and the standard library,
``_compare``'s comparisons, ``_mirror``'s change of the expected values, ``_runner``'s reporter and
audit hook) run after the code under test has run in the same process. A builtin looked up at run
time (``isinstance``, ``type``, ``len``) is whatever ``builtins`` holds by then, and the record
that would name a replaced one compares through the same names: each module binds the builtins
it calls when it is imported, before any line of the repository runs. This test reads the
modules' source: a builtin called by name in a function and not bound at import fails it.
(``tests/grading/test_trusted_record.py``'s "the record's own comparison replaced" case shows
what an unbound helper cost: ``operator.is_`` made to say "the same" of anything blinded every
check after it.)
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

GRADING = Path(__file__).resolve().parents[2] / "lit_codeRL" / "grading"
CHILD_MODULES = ("_guard.py", "_compare.py", "_mirror.py", "_runner.py")
BUILTIN_NAMES = {n for n in dir(builtins) if not n.startswith("_")}
EXCEPTIONS = {
    n
    for n in BUILTIN_NAMES
    if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
}
"""Left to the builtins: a replaced exception class only makes an ``except`` miss, and a check that
raises is named (``the check failed``), never passed."""


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """Nodes inside annotations (never evaluated: ``from __future__ import annotations``)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None and arg.annotation is not None:
                    found |= {id(n) for n in ast.walk(arg.annotation)}
            if node.returns is not None:
                found |= {id(n) for n in ast.walk(node.returns)}
        elif isinstance(node, ast.AnnAssign):
            found |= {id(n) for n in ast.walk(node.annotation)}
    return found


def _bound_at_import(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
    return names


def unbound_builtins(source: str) -> dict[str, int]:
    """Builtins a function of ``source`` reads by name without the module binding them at import
    (name: first line)."""
    tree = ast.parse(source)
    skip, bound = _annotation_nodes(tree), _bound_at_import(tree)
    found: dict[str, int] = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Name)
                and isinstance(node.ctx, ast.Load)
                and id(node) not in skip
                and node.id in BUILTIN_NAMES - EXCEPTIONS - bound
            ):
                found.setdefault(node.id, node.lineno)
    return found


@pytest.mark.parametrize("module", CHILD_MODULES)
def test_the_childs_checks_bind_every_builtin_they_call(module: str) -> None:
    assert unbound_builtins((GRADING / module).read_text()) == {}


def test_the_rule_finds_a_builtin_read_at_run_time() -> None:
    source = (
        "from builtins import len\n\n\ndef f(x: list[int]) -> int:\n"
        "    return len(x) + sum(x) + (lambda y: min(y))(x)\n"
    )
    assert unbound_builtins(source) == {"sum": 5, "min": 5}
