"""Test modules under names grading does not protect (``tests.py``, ``test.py``), and the names
they get instead.

Grading restores only the files its rule calls tests (``grading/_scan.py: is_test_path``:
``test_*.py``, ``*_test.py``, test directories) from the base before it runs them; a test module
outside that rule could be rewritten by the agent to pass. Projects keep tests in a ``tests.py``
at the root (texttable, jsonpatch), in ``src/`` (roman), inside the package (titlecase), and
SWE-PDB rows in a ``test.py``: such a file is renamed ``test_<name>`` in its directory, which
grading protects and pytest collects by default. A module of that name that the project's own
code imports is part of the program, whatever it defines (``jinja2/tests.py`` holds Jinja's
``test_odd``..., imported by ``jinja2/defaults.py``), and keeps its name.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import PurePosixPath

from lit_codeRL import pyparse
from lit_codeRL.sandbox.repo_layout import import_prefixes

UNPROTECTED_TEST_NAMES = ("tests.py", "test.py")


def protected_name(path: str) -> str:
    """``pkg/tests.py`` -> ``pkg/test_tests.py``."""
    pure = PurePosixPath(path)
    return str(pure.with_name(f"test_{pure.name}"))


def holds_tests(content: str | bytes) -> bool:
    """Does this module define a test (a ``test*`` function, a ``Test*`` class, a ``TestCase``) or
    assert at its top level, as a test script does? A module named ``test.py`` that defines none
    (``setuptools/command/test.py``) is something else, which other modules import by that name."""
    if not isinstance(content, str):
        return False
    try:
        tree = pyparse.parse(content)
    except (SyntaxError, ValueError):
        return False
    if any(isinstance(node, ast.Assert) for node in tree.body):
        return True
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            return True
        if isinstance(node, ast.ClassDef) and (
            node.name.startswith("Test") or any(ast.unparse(b).endswith("TestCase") for b in node.bases)
        ):
            return True
    return False


def misnamed_test_modules(files: Mapping[str, str | bytes]) -> list[str]:
    """The ``tests.py``/``test.py`` files of ``files`` that hold tests (:func:`holds_tests`) and
    that no other module imports: the ones to rename."""
    found = [
        path
        for path, content in files.items()
        if PurePosixPath(path).name in UNPROTECTED_TEST_NAMES and holds_tests(content)
    ]
    if not found:
        return []
    roots = import_prefixes(files)
    imported = _imported_modules(files, roots)
    return [path for path in found if not _module_names(path, roots) & imported]


def _module_names(path: str, roots: tuple[str, ...]) -> set[str]:
    """The dotted names ``path`` is imported by: from the root, and from each of ``roots``
    (``src/``, the package directory the packaging declares: ``repo_layout.import_prefixes``)."""
    names = {path[: -len(".py")].replace("/", ".")}
    names.update(path[len(r) : -len(".py")].replace("/", ".") for r in roots if path.startswith(r))
    return names


def _imported_modules(files: Mapping[str, str | bytes], roots: tuple[str, ...]) -> set[str]:
    """Every dotted module name the Python files of ``files`` import (relative imports resolved,
    ``from pkg import name`` counted as ``pkg.name`` too), the importing module's own name left
    out (a ``tests.py`` that imports itself by name is not imported by the project)."""
    out: set[str] = set()
    for path, content in files.items():
        if not path.endswith(".py") or not isinstance(content, str):
            continue
        try:
            tree = pyparse.parse(content)
        except (SyntaxError, ValueError):
            continue
        own = _module_names(path, roots)
        package = [p.split(".")[:-1] for p in own]
        found: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                for parent in package if node.level else [[]]:
                    base = parent[: len(parent) - node.level + 1] if node.level else []
                    module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
                    found.add(module)
                    found.update(f"{module}.{alias.name}".strip(".") for alias in node.names)
        out |= found - own
    return out
