"""A KodCode row holds a correct solution, not a bug: :func:`kodcode_stub` writes the
``solution.py`` a debugging task starts from, one that imports cleanly and solves nothing."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any

from lit_codeRL import pyparse


def kodcode_stub(solution: str, test: str, test_info: Sequence[Mapping[str, Any]] | None) -> str:
    """A ``solution.py`` that imports cleanly and solves nothing.

    Each ``test_info`` entry gives a function: its ``function_declaration`` (or name and
    ``parameter_list``), its ``docstring`` and a body that raises ``NotImplementedError``. Names
    the test imports from ``solution`` that test_info does not cover (every name, when it is
    missing) become skeletons of the solution's own definitions (classes keep their methods'
    signatures), or functions taking anything. The solution's imports are kept (declarations use
    their types) and annotations are never evaluated (``from __future__ import annotations``)."""
    solution_tree = _parse(solution)
    parts: list[str] = []
    defined: set[str] = set()
    for item in test_info or ():
        name = str(item.get("function_name") or "").strip()
        if not name.isidentifier() or name in defined:
            continue
        declaration = _declaration(name, item)
        doc = item.get("docstring")
        body = (f"    {_docstring(doc)}\n" if isinstance(doc, str) and doc.strip() else "") + (
            "    raise NotImplementedError\n"
        )
        parts.append(f"{declaration}\n{body}")
        defined.add(name)
    for name in _imported_from_solution(test):
        if name not in defined:
            parts.append(_skeleton(name, solution_tree))
            defined.add(name)
    imports = "".join(
        f"{ast.get_source_segment(solution, node) or ast.unparse(node)}\n"
        for node in (solution_tree.body if solution_tree else [])
        if isinstance(node, ast.Import | ast.ImportFrom) and not _is_future(node)
    )
    header = "from __future__ import annotations\n" + (f"\n{imports}" if imports else "")
    return header + "\n\n" + "\n\n".join(parts)


def _declaration(name: str, item: Mapping[str, Any]) -> str:
    """``def name(...):`` from test_info, checked to parse (a bad one falls back to ``*args``)."""
    candidates = []
    declaration = item.get("function_declaration")
    if isinstance(declaration, str) and declaration.strip():
        text = declaration.strip()
        candidates.append(text if text.endswith(":") else f"{text}:")
    params = item.get("parameter_list")
    if isinstance(params, str) and params.strip():
        params = params.strip()
        candidates.append(f"def {name}{params if params.startswith('(') else f'({params})'}:")
    candidates.append(f"def {name}(*args, **kwargs):")
    for candidate in candidates:
        tree = _parse(f"{candidate}\n    pass\n")
        if (
            tree
            and len(tree.body) == 1
            and isinstance(tree.body[0], ast.FunctionDef)
            and tree.body[0].name == name
        ):
            return candidate
    return candidates[-1]


def _skeleton(name: str, tree: ast.Module | None) -> str:
    """The solution's definition of ``name`` with every body replaced by ``raise NotImplementedError``
    (constants keep their value); a function taking anything when the solution has none."""
    for node in tree.body if tree else []:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return ast.unparse(_hollow(node)) + "\n"
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return ast.unparse(node) + "\n"
    return f"def {name}(*args, **kwargs):\n    raise NotImplementedError\n"


def _hollow(node: ast.AST) -> ast.AST:
    """A copy of a class or function whose functions (methods included) only raise
    ``NotImplementedError`` (``__init__`` does nothing); signatures, decorators and docstrings stay."""
    node = _copy(node)
    for child in ast.walk(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(child, clean=False)
            body: list[ast.stmt] = [ast.Expr(ast.Constant(doc))] if doc else []
            if child.name == "__init__":
                body.append(ast.Pass())  # the object can be made; its methods say what is missing
            else:
                body.append(ast.Raise(exc=ast.Name("NotImplementedError", ast.Load()), cause=None))
            child.body = body
    return ast.fix_missing_locations(node)


def _copy(node: ast.AST) -> ast.AST:
    copied = _parse(ast.unparse(node))
    return copied.body[0] if copied else node


def _imported_from_solution(test: str) -> list[str]:
    """Names the test imports with ``from solution import ...`` (in order; ``*`` is skipped)."""
    tree = _parse(test)
    names: list[str] = []
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.ImportFrom) and node.module == "solution" and node.level == 0:
            names += [alias.name for alias in node.names if alias.name != "*" and alias.name not in names]
    return names


def _docstring(text: str) -> str:
    """``text`` as a triple-quoted literal, indented for a function body."""
    escaped = text.strip("\n").replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    if escaped.endswith('"'):
        escaped = escaped[:-1] + '\\"'
    lines = escaped.splitlines() or [""]
    lines = [lines[0], *((f"    {line}" if line.strip() else "") for line in lines[1:])]
    return '"""' + "\n".join(lines) + '"""'


def _parse(source: str) -> ast.Module | None:
    try:
        return pyparse.parse(source)
    except (SyntaxError, ValueError):
        return None


def _is_future(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"
