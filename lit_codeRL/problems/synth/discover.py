"""Which test modules a repository's own pytest configuration collects.

The grader runs the test files it is given (``-o addopts=``, explicit paths: the repository's
``addopts`` could load plugins). A repository says in its configuration which files are its tests:
``testpaths``, ``norecursedirs``, ``python_files``, ``--ignore`` in ``addopts``, ``collect_ignore``
in a ``conftest.py``. A file that matches ``test_*.py`` but is none of them (``asttokens`` keeps
Python 2 fixtures named ``*_test.py`` under an ``--ignore``\\d ``tests/testdata``) would otherwise
be run as a test module. So synthesis asks pytest itself, in a sandbox workspace on the clean
repository: ``pytest --collect-only`` from the root, with the repository's configuration, and keeps
the modules it collected from or failed to collect (the latter are then left out by the clean
runs, with the reason). When pytest cannot parse the ``addopts`` here (``--cov`` without
``pytest-cov``), collection runs again with only those of them that choose what is collected
(``--ignore``, ``--ignore-glob``, ``--deselect``, ``-m``, ``-k``: grading keeps the last three
too, ``grading/_runner.py: repository_selection``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug_task import _is_test_path
from lit_codeRL.problems.swe import SWETask
from lit_codeRL.problems.synth import run_cache
from lit_codeRL.sandbox.workspace import WorkspaceError, open_workspace

log = logging.getLogger(__name__)
_MOUNT = "/opt/lcrl-discover"
_SCRATCH_BYTES = 8 << 20
_TIMEOUT_S = 300.0

# Runs in the sandbox with the toolchain's Python: the modules pytest collects items from, and
# those it fails to collect, relative to the repository root; the exit code of each attempt.
_SCRIPT = r"""
import json, os, sys

import pytest

out_path = sys.argv[1]
root = os.getcwd()
sys.path.append(root)


class Collected:
    def __init__(self):
        self.modules, self.failed, self.reached, self.addopts = set(), set(), set(), []

    def _rel(self, path):
        rel = os.path.relpath(str(path), root)
        return None if rel.startswith("..") else rel.replace(os.sep, "/")

    def pytest_collectreport(self, report):  # a module, or a directory whose conftest fails
        if report.failed:
            self.failed.add(report.nodeid.split("::", 1)[0])
        elif report.nodeid.endswith(".py") and "::" not in report.nodeid:  # a module, with items or not
            self.reached.add(report.nodeid)

    def pytest_load_initial_conftests(self, early_config):  # before an unknown option fails
        self.addopts = list(early_config.getini("addopts"))

    def pytest_collection_finish(self, session):
        for item in session.items:
            rel = self._rel(getattr(item, "path", ""))
            if rel and rel.endswith(".py"):
                self.modules.add(rel)


def selecting(addopts):  # the options of addopts that choose what is collected
    kept, take = [], False
    for arg in addopts:
        if take or arg.startswith(("--ignore=", "--ignore-glob=", "--deselect=", "-m", "-k")) and len(arg) > 2:
            kept.append(arg)
        take = arg in ("--ignore", "--ignore-glob", "--deselect", "-m", "-k")
        if take:
            kept.append(arg)
    return kept


base = ["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", root, "--import-mode=append"]
found = Collected()
attempts = [int(pytest.main([*base, "--maxfail=0"], plugins=[found]))]
if attempts[0] == 4:  # a usage error: an addopts option of a plugin this Python lacks (--cov)
    kept = selecting(found.addopts)
    found = Collected()
    attempts.append(int(pytest.main([*base, "-o", "addopts=", *kept, "--maxfail=0"], plugins=[found])))
with open(out_path, "w") as f:
    data = {"modules": sorted(found.modules), "failed": sorted(found.failed), "reached": sorted(found.reached)}
    json.dump({"exit": attempts, **data}, f)
"""
_USABLE_EXITS = (0, 2, 5)
"""pytest's exit codes after which its collection is complete: ok, collection errors, no test."""


@dataclass(frozen=True)
class Collection:
    """What pytest's collection reached: the modules it collected from or failed to collect, and
    the paths of other nodes that failed (a directory whose ``conftest.py`` does not import), and
    the modules it collected without error and found no test in (helpers named like tests)."""

    modules: frozenset[str]
    failed: frozenset[str]
    empty: frozenset[str] = frozenset()

    def holds(self, module: str) -> bool:
        """Did collection reach ``module`` (itself, or a directory above it that failed)?"""
        return module in self.modules or any(
            path in ("", ".") or module.startswith(path.rstrip("/") + "/") for path in self.failed
        )


def collected_modules(
    grader: SWEGrader, task: SWETask, files: Mapping[str, str | bytes], use_cache: bool = True
) -> Collection | None:
    """What pytest collects on ``task``'s clean repository with the repository's own
    configuration; ``None`` when pytest did not get through collection (a ``conftest.py`` at the
    root that does not load: the clean runs then say why) or the sandbox failed."""
    digest = hashlib.sha256(_SCRIPT.encode()).hexdigest()[:16]
    path = (
        run_cache.tree_dir(files, [], grader.workspace.toolchain) / f"discovered-{digest}.json"
        if use_cache
        else None
    )
    data = run_cache.load(path)
    if data is None:
        data = _collect(grader, task)
        if data is None:
            return None
        run_cache.store(path, data)
    if not set(data.get("exit", [None])[-1:]) <= set(_USABLE_EXITS):
        return None
    failed = frozenset(map(str, data.get("failed", [])))
    modules = frozenset(map(str, data.get("modules", []))) | failed
    return Collection(modules, failed, frozenset(map(str, data.get("reached", []))) - modules)


def _collect(grader: SWEGrader, task: SWETask) -> dict | None:
    try:
        with open_workspace(grader.workspace, grader.repos.get(task), scratch={_MOUNT: _SCRATCH_BYTES}) as ws:
            ws.write_file(f"{_MOUNT}/discover.py", _SCRIPT, confine=False)
            run = ws.run(
                f"python {_MOUNT}/discover.py {_MOUNT}/out.json",
                timeout=min(_TIMEOUT_S, grader.timeout_s),  # a conftest.py that never ends
                max_output=2000,
            )
            if run.exit_code != 0:
                log.warning(
                    "synth: %s: collecting the tests failed: %s", task.repo, run.output[-300:].strip()
                )
                return None
            data = json.loads(ws.read_file(f"{_MOUNT}/out.json", _SCRATCH_BYTES, confine=False))
    except (WorkspaceError, OSError, ValueError) as err:
        log.warning("synth: %s: collecting the tests failed: %s", task.repo, err)
        return None
    return data if isinstance(data, dict) else None


def configured_modules(found: Sequence[str], collected: Collection | None) -> tuple[list[str], list[str]]:
    """``found`` (the test modules by name) split into those the configuration collects and those
    it does not, the first with every other module it collects tests from where grading protects
    it (a test directory's: lark's ``python_files = "__main__.py"`` collects its whole suite
    through ``tests/__main__.py``); all of ``found`` when collection told nothing. A module
    collected elsewhere (jsonpatch's root ``property_tests.py``) is left out: an agent could edit
    it, and grading would run the edit."""
    if collected is None:
        return list(found), []
    other = [
        m
        for m in sorted(collected.modules - collected.failed - set(found))
        if m.endswith(".py") and PurePosixPath(m).name != "conftest.py" and _is_test_path(m)
    ]
    kept = [m for m in found if collected.holds(m)]
    return sorted([*kept, *other]), [m for m in found if not collected.holds(m)]
