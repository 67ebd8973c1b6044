"""Which of a repository's own packages the sandbox already holds an installed copy of.

Grading imports a toolchain name (pytest, what it runs on, the ``--test-deps`` distributions and
their dependencies) from the toolchain, never from the repository: a diff must not replace what
grading runs on. So a repository that is one of them (``iniconfig``; ``attrs`` beside
``hypothesis``) would have its tests exercise the installed copy, and an agent could copy the
answer from it: synthesis refuses such a source (``repository.py``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping

from lit_codeRL.grading._scan import TOOLCHAIN_NAMES, top_level_names
from lit_codeRL.grading.repo import RUNNER
from lit_codeRL.sandbox.backends import SandboxUnavailable
from lit_codeRL.sandbox.repo_layout import import_prefixes
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig
from lit_codeRL.sandbox.workspace_toolchain import toolchain_dir

_LOADED_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import _runner
_runner.load_toolchain()
print(json.dumps(sorted({name.split(".", 1)[0] for name in sys.modules})))
"""


@functools.lru_cache(maxsize=4)
def pytest_runs_on(python: str) -> frozenset[str]:
    """The top-level modules ``python`` has imported once pytest is loaded, as the grading
    runner loads it before any repository code (``grading/_runner.py: load_toolchain``, run here):
    pytest and what it runs on (pluggy, iniconfig, pygments), and the standard library it uses."""
    out = subprocess.run(
        [python, "-I", "-c", _LOADED_SCRIPT, str(RUNNER.parent)], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        return frozenset()
    return frozenset(json.loads(out.stdout))


def installed_copies(files: Mapping[str, str | bytes], workspace: WorkspaceConfig) -> dict[str, str]:
    """The repository's top-level packages and modules (at its root, in ``src/``, or in the root
    package directory its packaging declares: ``repo_layout.import_prefixes``) of which the sandbox
    holds an installed copy, each with where it comes from: ``pytest`` (pytest imports it before
    any test: ``iniconfig``, ``pluggy``) or ``toolchain`` (pytest's dependencies, and the
    ``--test-deps`` distributions with theirs: ``attrs`` beside ``hypothesis``). Grading loads
    such a name from the toolchain, never from the repository (a diff must not replace what
    grading runs on), so the tests would exercise that copy; and an agent could copy the answer
    from it."""
    stdlib = frozenset(sys.stdlib_module_names)
    roots = import_prefixes(files)
    provided = set()
    for path in files:
        parts = next((path[len(r) :] for r in roots if path.startswith(r)), path).split("/")
        if len(parts) == 1 and parts[0].endswith(".py"):
            provided.add(parts[0][:-3])
        elif len(parts) == 2 and parts[1] == "__init__.py":
            provided.add(parts[0])
    provided -= stdlib | {"conftest", "setup", "noxfile"}
    found = {name: "toolchain" for name in sorted(provided & _toolchain_names(workspace))}
    found.update({name: "pytest" for name in sorted(provided & pytest_runs_on(workspace.python))})
    return found


def _toolchain_names(workspace: WorkspaceConfig) -> frozenset[str]:
    """What grading's runner protects as the toolchain (``grading/_runner.py: toolchain_names``):
    pytest's names and the top-level entries of the bwrap toolchain built for ``workspace``."""
    names = set(TOOLCHAIN_NAMES)
    try:
        site = toolchain_dir(workspace.python, workspace.toolchain) / "site"
        names |= top_level_names(os.listdir(site)) if site.is_dir() else set()
    except (SandboxUnavailable, OSError):  # no such toolchain here: grading will say so itself
        pass
    return frozenset(names)
