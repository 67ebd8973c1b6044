"""The project's own packaging metadata, as an editable install leaves it beside its package.

A project that reads its version through ``importlib.metadata`` (``__version__ =
version("pkg")`` at import, unguarded) cannot be imported in the sandbox, where it is not
installed: every test fails, and the repository gives no task. Synthesis reads ``*.egg-info``
directories out of a source tree (they can declare plugins), so it writes one back with the
name and version alone, ``<name>.egg-info/PKG-INFO``, where ``pip install -e .`` would leave it:
beside the top-level package (the root, or the import root of a src layout or a declared package
directory: ``sandbox/repo_layout.py``), which is on the path of every grading run and of the
agent's commands.
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Mapping

from lit_codeRL.sandbox.repo_layout import Packaging, import_root_of

READS_METADATA = re.compile(r"importlib[._]metadata|pkg_resources")
"""What a module that reads installed metadata says."""


def project_metadata(files: Mapping[str, str | bytes]) -> dict[str, str]:
    """``{path: content}`` of the ``PKG-INFO`` to add to ``files``: empty when no Python file reads
    installed metadata, when the tree has metadata of its own, or when no name is declared
    (``PKG-INFO`` of an sdist, ``[project]`` of ``pyproject.toml``, ``[metadata]`` of
    ``setup.cfg``). A version declared nowhere (``dynamic``) is ``0.0.0``."""
    if any(p.endswith((".egg-info/PKG-INFO", ".dist-info/METADATA")) for p in files):
        return {}
    if not any(
        p.endswith(".py") and isinstance(c, str) and READS_METADATA.search(c) for p, c in files.items()
    ):
        return {}
    name, version = _declared(files)
    if not name or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        return {}
    version = version if version and re.fullmatch(r"[A-Za-z0-9.+!_-]+", version) else "0.0.0"
    root = import_root_of(files)
    where = f"{root}/" if root else ""
    egg = re.sub(r"[-.]+", "_", name)
    return {f"{where}{egg}.egg-info/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"}


def _declared(files: Mapping[str, str | bytes]) -> tuple[str | None, str | None]:
    pkg_info = files.get("PKG-INFO")
    if isinstance(pkg_info, str):
        message = email.parser.Parser().parsestr(pkg_info, headersonly=True)
        if message.get("Name"):
            return message.get("Name"), message.get("Version")
    return Packaging.of_files(files).name_and_version()
