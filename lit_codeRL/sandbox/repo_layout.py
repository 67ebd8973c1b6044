"""What a repository's own packaging says about it once installed, read from its root files
(``pyproject.toml``, ``setup.cfg``, a literal in ``setup.py``), never run: where its code is
imported from (``src`` of a src layout, or the root package directory it declares) and its name
and version. One reader for a checkout on disk (a workspace's base) and for the ``{path:
content}`` map synthesis holds, so the sessions' ``PYTHONPATH``, the metadata synthesis writes
back and the import names of its modules agree on one layout."""

from __future__ import annotations

import ast
import configparser
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from lit_codeRL import pyparse

try:
    import tomllib
except ImportError:  # Python 3.10: a pyproject.toml is read as declaring nothing
    tomllib = None

PACKAGING_FILES = ("pyproject.toml", "setup.cfg", "setup.py")
"""A project's own packaging files: a ``src`` directory is its code only beside one of them."""
MAX_PACKAGING_BYTES = 1 << 20
"""A packaging file larger than this is not read."""


@dataclass(frozen=True)
class Packaging:
    """A repository's root packaging files, parsed once; absent or unreadable ones are empty."""

    present: bool = False
    """Is any of :data:`PACKAGING_FILES` at the root (read or not)?"""
    pyproject: dict = field(default_factory=dict)
    setup_cfg: configparser.ConfigParser = field(
        default_factory=lambda: configparser.ConfigParser(interpolation=None)
    )
    setup_py: ast.Module | None = None

    @classmethod
    def parse(cls, present: bool, text: Callable[[str], str]) -> Packaging:
        """From ``text(name)``: a root file's text, empty when it is absent or not to be read."""
        pyproject: object = {}
        if tomllib is not None:
            try:
                pyproject = tomllib.loads(text("pyproject.toml"))
            except (tomllib.TOMLDecodeError, RecursionError):
                pass
        setup_cfg = configparser.ConfigParser(interpolation=None)
        try:
            setup_cfg.read_string(text("setup.cfg"))
        except configparser.Error:
            setup_cfg = configparser.ConfigParser(interpolation=None)
        try:
            setup_py = pyparse.parse(text("setup.py"))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            setup_py = None
        return cls(present, pyproject if isinstance(pyproject, dict) else {}, setup_cfg, setup_py)

    @classmethod
    def of_checkout(cls, root: Path) -> Packaging:
        """From a checkout on disk: links are not read, nor files over 1 MiB."""

        def text(name: str) -> str:
            path = root / name
            try:
                if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_PACKAGING_BYTES:
                    return ""
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                return ""

        return cls.parse(any((root / name).is_file() for name in PACKAGING_FILES), text)

    @classmethod
    def of_files(cls, files: Mapping[str, str | bytes]) -> Packaging:
        """From a ``{path: content}`` map (bytes: not UTF-8, not read)."""

        def text(name: str) -> str:
            content = files.get(name)
            return content if isinstance(content, str) and len(content) <= MAX_PACKAGING_BYTES else ""

        return cls.parse(any(name in files for name in PACKAGING_FILES), text)

    def package_dir(self) -> str | None:
        """The directory the root package is mapped to (setuptools' ``package_dir`` ``""`` entry:
        ``[tool.setuptools.package-dir]``, ``[options] package_dir``, a ``setup.py`` literal),
        when it is a plain relative directory path (``lib``, ``python/src``); else ``None``."""
        found: object = None
        try:
            found = self.pyproject["tool"]["setuptools"]["package-dir"][""]
        except (LookupError, TypeError):
            pass
        if found is None:
            found = self._setup_cfg_package_dir()
        if found is None:
            found = self._setup_py_package_dir()
        if not isinstance(found, str):
            return None
        parts = PurePosixPath(found.strip().strip("/")).parts
        if not parts or any(p in ("", ".", "..") for p in parts) or found.startswith("/"):
            return None
        return "/".join(parts)

    def name_and_version(self) -> tuple[str | None, str | None]:
        """The project's declared name and version (``[project]`` of ``pyproject.toml``, else
        ``[metadata]`` of ``setup.cfg``); a version computed at build time (``dynamic``, ``attr:``)
        is ``None``."""
        project = self.pyproject.get("project")
        if isinstance(project, dict) and isinstance(project.get("name"), str):
            version = project.get("version")
            return project["name"], version if isinstance(version, str) else None
        if self.setup_cfg.has_option("metadata", "name"):
            version = self.setup_cfg.get("metadata", "version", fallback="") or None
            # "attr: pkg.__version__" is read from the code at build time: not declared here
            declared = None if version and version.startswith("attr:") else version
            return self.setup_cfg.get("metadata", "name"), declared
        return None, None

    def _setup_cfg_package_dir(self) -> str | None:
        """The ``=dir`` line of ``[options] package_dir``, if any."""
        for line in self.setup_cfg.get("options", "package_dir", fallback="").splitlines():
            key, equals, value = line.partition("=")
            if equals and not key.strip():
                return value.strip()
        return None

    def _setup_py_package_dir(self) -> object:
        """The ``""`` entry of a ``package_dir={...}`` dict literal in ``setup.py``, if any."""
        nodes = ast.walk(self.setup_py) if self.setup_py is not None else ()
        for found in (n.value for n in nodes if isinstance(n, ast.keyword) and n.arg == "package_dir"):
            if isinstance(found, ast.Dict):
                for key, value in zip(found.keys, found.values, strict=False):
                    if isinstance(key, ast.Constant) and key.value == "" and isinstance(value, ast.Constant):
                        return value.value
        return None


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

    def modules_in(name: str) -> set[str] | None:
        src = root / name
        if src.is_symlink() or not src.is_dir() or (src / "__init__.py").exists():
            return None
        if not src.resolve().is_relative_to(root.resolve()):  # through a link further up
            return None
        try:
            entries = list(src.iterdir())
        except OSError:
            return None
        return {
            e.name.split(".", 1)[0]
            for e in entries
            if (e.is_file() and e.suffix == ".py") or (e.is_dir() and (e / "__init__.py").is_file())
        }

    found = _import_root(Packaging.of_checkout(root), modules_in)
    return [found] if found else []


def import_root_of(files: Mapping[str, str | bytes]) -> str | None:
    """:func:`import_roots` of the checkout a ``{path: content}`` map would be written as."""

    def modules_in(name: str) -> set[str] | None:
        prefix = f"{name}/"
        if f"{prefix}__init__.py" in files:
            return None
        names = set()
        for path in files:
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            if len(parts) == 1 and parts[0].endswith(".py"):
                names.add(parts[0].split(".", 1)[0])
            elif len(parts) == 2 and parts[1] == "__init__.py":
                names.add(parts[0])
        return names

    return _import_root(Packaging.of_files(files), modules_in)


def import_prefixes(files: Mapping[str, str | bytes]) -> tuple[str, ...]:
    """The directory prefixes below which a module of ``files`` may also be imported by the
    dotted path under them: the import root (:func:`import_root_of`), and ``src/`` whatever the
    packaging says. Counting ``src/`` always errs on the safe side for what asks: a ``tests.py``
    the code may import keeps its name, a name an installed copy may shadow refuses the source."""
    return tuple(f"{root}/" for root in dict.fromkeys(("src", import_root_of(files))) if root)


def _import_root(packaging: Packaging, modules_in: Callable[[str], set[str] | None]) -> str | None:
    """The rule of :func:`import_roots`, given the packaging and the top-level modules a
    directory holds (``None``: it is no plain directory, or a package itself)."""
    if not packaging.present:
        return None
    name = packaging.package_dir() or "src"
    names = modules_in(name)
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    return name if names and not names & stdlib else None
