"""Where a repository's own code is imported from when it is installed: ``src`` of a src layout,
or the root package directory its packaging declares (read from the files, never run)."""

from __future__ import annotations

import ast
import configparser
import sys
from pathlib import Path, PurePosixPath

try:
    import tomllib
except ImportError:  # Python 3.10: a pyproject.toml declares no package directory we can read
    tomllib = None

SRC_LAYOUT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py")
"""A project's own packaging files: a ``src`` directory is its code only beside one of them."""


def import_roots(repo: str | Path) -> list[str]:
    """The directories of ``repo`` (a host checkout at the base commit), relative to it, that an
    installed copy of it would import from: ``src`` for a *src layout* (a packaging file at the
    root, a ``src`` directory that is no package itself and holds a package or module), or the
    directory the packaging names as its root package directory instead (``package_dir={"":
    "lib"}``: markdown2), on the same conditions; else none.

    Why: a src-layout project's tests import it as installed (``pip install -e .``, what
    SWE-bench's images do), and no workspace installs anything: its whole suite failed to collect
    (``cachetools``). Decided on the pristine base, never on what an agent made. A name in
    ``src`` that the standard library has (``src/queue.py``) leaves ``src`` out: on ``PYTHONPATH``
    it would come before the standard library, where an installed package never does."""
    root = Path(repo)
    if not any((root / marker).is_file() for marker in SRC_LAYOUT_MARKERS):
        return []
    name = declared_package_dir(root) or "src"
    src = root / name
    if src.is_symlink() or not src.is_dir() or (src / "__init__.py").exists():
        return []
    if not src.resolve().is_relative_to(root.resolve()):  # through a link further up
        return []
    try:
        entries = list(src.iterdir())
    except OSError:
        return []
    names = {
        e.name.split(".", 1)[0]
        for e in entries
        if (e.is_file() and e.suffix == ".py") or (e.is_dir() and (e / "__init__.py").is_file())
    }
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    return [name] if names and not names & stdlib else []


def declared_package_dir(root: Path) -> str | None:
    """The directory ``root``'s packaging maps the root package to (setuptools' ``package_dir``
    ``""`` entry, in ``pyproject.toml``, ``setup.cfg`` or a literal in ``setup.py``), when it is
    a plain relative directory path (``lib``, ``python/src``); else ``None``. Read, never run."""
    found: object = None
    try:
        setuptools = tomllib.loads(_packaging_text(root / "pyproject.toml"))["tool"]["setuptools"]
        found = setuptools["package-dir"][""]
    except (ValueError, LookupError, TypeError, AttributeError):  # also: no tomllib
        pass
    if found is None:
        found = _setup_cfg_package_dir(root / "setup.cfg")
    if found is None:
        found = _setup_py_package_dir(root / "setup.py")
    if not isinstance(found, str):
        return None
    parts = PurePosixPath(found.strip().strip("/")).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or found.startswith("/"):
        return None
    return "/".join(parts)


def _setup_cfg_package_dir(setup_cfg: Path) -> str | None:
    """The ``=dir`` line of ``[options] package_dir`` in ``setup.cfg``, if any."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(_packaging_text(setup_cfg))
        lines = parser.get("options", "package_dir", fallback="").splitlines()
    except configparser.Error:
        return None
    for line in lines:
        key, equals, value = line.partition("=")
        if equals and not key.strip():
            return value.strip()
    return None


def _setup_py_package_dir(setup: Path) -> object:
    """The ``""`` entry of a ``package_dir={...}`` dict literal in ``setup.py``, if any."""
    try:
        tree = ast.parse(_packaging_text(setup))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "package_dir" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=False):
                if isinstance(key, ast.Constant) and key.value == "" and isinstance(value, ast.Constant):
                    return value.value
    return None


def _packaging_text(path: Path) -> str:
    """A packaging file's text; empty when it is absent, a link, over 1 MiB or not UTF-8."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return ""
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
