"""The debugging task record (:class:`DebugTask`), its conversion to an SWE task whose base commit
holds the starting files, and the ``Problem`` record that carries it through the registry."""

from __future__ import annotations

import ast
import base64
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from lit_codeRL import pyparse
from lit_codeRL.errors import ConfigError, listed
from lit_codeRL.grading import SWEGrader
from lit_codeRL.grading._scan import is_test_path as _grader_is_test_path
from lit_codeRL.problems.debug_repo import (
    _build_repo,
    _fix_diff,
    _locked,
    _read_record,
    _run_tests,
    _write_atomic,
)
from lit_codeRL.problems.files import name_chars
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import (
    SPLIT_ALIASES,
    RepoCache,
    SWETask,
    git_environment,
    row_test_deps,
    run_git,
)
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

# the package's logger, as for validation: users filter and tests capture these warnings by it
log = logging.getLogger("lit_codeRL.problems.debug")
CACHE_ENV = "LIT_CODERL_DEBUG_CACHE"
"""Environment variable naming where task repositories and their node ids are cached."""
DEFAULT_CACHE = Path("~") / ".cache" / "lit-coderl" / "debug-tasks"
DEFAULT_TEST_COMMAND = "python -m pytest -sq"
"""The entry point's command; the task's test modules are appended."""
FAILING = ("failed", "error", "absent")
"""Statuses at the base that make a test FAIL_TO_PASS (a test that does not even collect fails)."""
_FORMAT = 2
"""Bump when the repository layout or how node ids are measured changes: old cache entries then
stop matching instead of being trusted."""


class DebugTaskInvalid(ConfigError):
    """A task that cannot be trained on: nothing fails at its base, or no test could be found."""


@dataclass
class DebugTask:
    """A buggy program and its tests (see the module docstring)."""

    task_id: str
    """Unique id, e.g. ``"debug/cart"`` or ``"kodcode/Leetcode_123_I"``."""
    description: str
    """What the program should do, shown to the agent (never where the bug is)."""
    files: dict[str, str | bytes]
    """Relative path -> content at the start: the buggy program and its tests (``bytes``: a file
    that is not UTF-8 text, such as a binary fixture the tests read; written as it is)."""
    fix: dict[str, str] | None = None
    """The reference fix: new contents of the non-test files it changes (``None``: none known)."""
    entry_point: str = ""
    """The test command (``python -m pytest -sq <test modules>`` when empty)."""
    difficulty: str | None = None
    """``easy``/``medium``/``hard`` where the source says."""
    split: str = "train"
    """``train`` or ``eval`` (aliases such as ``test`` mean ``eval``)."""
    test_deps: tuple[str, ...] = ()
    """Distributions the tests import besides the workspace's toolchain (the row's ``test_deps``):
    every session of the task gets them in its toolchain."""
    fail_to_pass: tuple[str, ...] = ()
    """The node ids the task is graded on, when its row names them (``FAIL_TO_PASS``; a
    synthesized row's, measured on the clean repository): those failing at the base are its
    FAIL_TO_PASS. Empty: every test failing at the base."""
    pass_to_pass: tuple[str, ...] = ()
    """With ``fail_to_pass``: the row's ``PASS_TO_PASS``, those passing at the base graded too.
    Other tests run but are not graded (one this machine breaks, such as a test that needs a
    locale or another version of a dependency, would make the task unsolvable)."""
    metadata: dict = field(default_factory=dict)
    """The row's other fields (``bug_kind``, KodCode's ``question_id``/``subset``/``style``...)."""
    hidden_files: dict[str, str] = field(default_factory=dict)
    """Test modules graded but never in the workspace (the row's ``hidden_files``): the grader
    adds them after the agent's diff, as an SWE task's ``test_patch`` (MBPP tasks' held-out
    calls, ``problems/synth/held_out.py``: code that answers only the visible asserts fails
    them). Their tests count for FAIL_TO_PASS and PASS_TO_PASS like the visible ones."""

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id.strip():
            raise ConfigError(f"debug task id must be a non-empty string, got {self.task_id!r}")
        where = f"debug task {self.task_id}"
        self.files = _checked_files(self.files, "files", where)
        if not self.files:
            raise ConfigError(f"{where}: no files")
        if self.fix is not None:
            self.fix = _checked_files(self.fix, "fix", where)
            binary = [
                p for p, c in self.fix.items() if isinstance(c, bytes) or isinstance(self.files.get(p), bytes)
            ]
            if binary:
                raise ConfigError(f"{where}: the fix must change text files only, not {binary}")
            tests = [path for path in self.fix if _is_test_path(path)]
            if tests:
                raise ConfigError(
                    f"{where}: the fix changes test file(s) {', '.join(tests)}; grading restores every "
                    "test file from the base, so a fix must change the program only"
                )
        hidden = _checked_files(self.hidden_files, "hidden_files", where)
        for path, content in hidden.items():
            if not isinstance(content, str) or not (_is_test_path(path) and _is_test_module(path)):
                raise ConfigError(f"{where}: hidden file {path!r} must be a test module (test_*.py) of text")
            if path in self.files:
                raise ConfigError(f"{where}: hidden file {path!r} is also among the task's files")
        self.hidden_files = {path: str(content) for path, content in hidden.items()}
        if not self.test_modules:
            raise ConfigError(
                f"{where}: no test module among its files (test_*.py or *_test.py): {sorted(self.files)}"
            )
        if not self.entry_point:
            self.entry_point = f"{DEFAULT_TEST_COMMAND} {' '.join(map(shlex.quote, self.test_modules))}"
        self.split = _canonical_split(self.split) or "train"
        self.test_deps = row_test_deps(self.test_deps, where)
        self.fail_to_pass, self.pass_to_pass = tuple(self.fail_to_pass), tuple(self.pass_to_pass)
        if self.pass_to_pass and not self.fail_to_pass:
            raise ConfigError(f"{where}: PASS_TO_PASS without FAIL_TO_PASS (name both, or neither)")

    @property
    def test_files(self) -> list[str]:
        """Files the grader treats as tests (restored from the base before grading), sorted."""
        return sorted(path for path in self.files if _is_test_path(path))

    @property
    def source_files(self) -> list[str]:
        """Every other file: what the agent may change, sorted."""
        return sorted(path for path in self.files if not _is_test_path(path))

    @property
    def test_support(self) -> list[str]:
        """Modules of the tests that are not named like tests (``checks.py`` holding an assertion
        helper): each a ``.py`` file a test module (or another of them) imports, that is not the
        program the fix changes nor uses it (``report.py`` importing the fixed ``money.py`` is
        the program), and that no other file names. Grading restores them with the tests:
        rewritten to assert nothing, such a helper made the failing tests pass with the bug in
        place. Without a fix nothing tells a helper from the program under test: none."""
        if not self.fix:
            return []
        py = {p: c for p, c in self.files.items() if p.endswith(".py") and isinstance(c, str)}
        imports = {p: _imported_files(p, c, py) for p, c in py.items()}
        program = {p for p in self.fix if p in py}
        grew = True
        while grew:  # the fixed files and every file that imports one, however indirectly
            more = {p for p, names in imports.items() if p not in program and program.intersection(names)}
            program |= more
            grew = bool(more)
        found: list[str] = []
        todo = [p for p in self.test_files if p in py]
        while todo:
            for path in imports[todo.pop()]:
                if path not in found and path not in program and not _is_test_path(path):
                    found.append(path)
                    todo.append(path)
        # a module another file of the program names may be the program's: left to the agent
        others = [
            c for p, c in self.files.items() if isinstance(c, str) and p not in found and not _is_test_path(p)
        ]
        return sorted(
            p for p in found if not any(re.search(rf"\b{re.escape(_stem(p))}\b", c) for c in others)
        )

    @property
    def test_modules(self) -> list[str]:
        """The test files pytest runs: those the entry point names, when it names any (a repository
        whose configuration does not collect some files named like tests, such as fixtures under
        ``tests/data``, or collects its suite through a module named otherwise, lark's
        ``tests/__main__.py``), else every ``test_*.py``/``*_test.py`` (never ``conftest.py``)."""
        modules = [path for path in self.test_files if _is_test_module(path)]
        try:
            named = set(shlex.split(self.entry_point))
        except ValueError:  # unbalanced quotes: the command names no file we can trust to read
            named = set()
        chosen = [
            path
            for path in self.test_files
            if path in named and path.endswith(".py") and PurePosixPath(path).name != "conftest.py"
        ]
        return chosen or modules

    def content_key(self) -> str:
        """A hash of everything the task's repository and node ids depend on."""
        files = {p: {"base64": _b64(c)} if isinstance(c, bytes) else c for p, c in self.files.items()}
        data: dict[str, Any] = {"format": _FORMAT, "id": self.task_id, "files": files, "fix": self.fix}
        every = [path for path in self.test_files if _is_test_module(path)]
        if self.test_modules != every:  # only then: the keys of tasks that run every module stay
            data["modules"] = self.test_modules
        if self.test_deps:  # what the tests may import decides which of them collect at the base
            data["test_deps"] = list(self.test_deps)
        if self.fail_to_pass:
            data["graded"] = [list(self.fail_to_pass), list(self.pass_to_pass)]
        if self.hidden_files:
            data["hidden"] = self.hidden_files
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_swe_task(self, root: str | Path | None = None, grader: SWEGrader | None = None) -> SWETask:
        """The task as an SWE task whose base commit holds the starting files.

        The first call on a machine writes the files into a git directory under ``root`` (one
        commit with a fixed identity and date, so the base commit id depends on the files alone),
        diffs the reference fix against it and runs the tests at the base in a sandbox workspace
        through ``grader``'s trusted runner to find FAIL_TO_PASS (failing there) and PASS_TO_PASS
        (passing) node ids; the result is cached beside the directory and later calls only read it
        (a cached record whose directory is gone gets the directory back, no test run).

        Args:
            root: Cache directory (default ``$LIT_CODERL_DEBUG_CACHE`` or
                ``~/.cache/lit-coderl/debug-tasks``).
            grader: Runs the tests (its workspace settings and repository cache); default a grader
                with default workspace settings whose prepared copies live under ``root/prepared``.

        Raises:
            DebugTaskInvalid: every test passes at the base (nothing to debug), or none was found.
            RuntimeError: the sandbox failed (nothing is cached; the next call tries again).
        """
        root = cache_root(root)
        name = f"{_slug(self.task_id)}-{self.content_key()}"
        repo, record_file = root / name, root / f"{name}.json"
        record = _read_record(record_file)
        if record is None:
            root.mkdir(parents=True, exist_ok=True)
            with _locked(root / f".{name}.lock"):
                record = _read_record(record_file)
                if record is None:
                    record = self._measure(repo, grader or default_grader(root))
                    _write_atomic(record_file, json.dumps(record, indent=1, sort_keys=True))
        if record.get("invalid"):
            raise DebugTaskInvalid(f"{self.task_id}: {record['invalid']}")
        if not (repo / ".git").is_dir():
            record = self._rebuild(repo, record_file, record, grader or default_grader(root))
        return self._swe_task(
            repo,
            record["base_commit"],
            record["patch"],
            tuple(record["fail_to_pass"]),
            tuple(record["pass_to_pass"]),
            record.get("test_patch", ""),
        )

    def _rebuild(
        self, repo: Path, record_file: Path, record: dict[str, Any], grader: SWEGrader
    ) -> dict[str, Any]:
        """The repository of a record without one (a cache that travelled without its git
        directories: ``scripts/gpu_stage.sh`` ships the records and validation markers alone). The
        commit has a fixed identity and date, so it is the recorded base commit; were it not, the
        task is measured again."""
        with _locked(repo.parent / f".{repo.name}.lock"):
            if not (repo / ".git").is_dir():
                _build_repo(self.files, repo)
            env_home = tempfile.mkdtemp(prefix="lcrl-git-home-")
            try:
                head = run_git(["-C", str(repo), "rev-parse", "HEAD"], git_environment(env_home)).strip()
            finally:
                shutil.rmtree(env_home, ignore_errors=True)
            if head == record.get("base_commit"):
                return record
            record = self._measure(repo, grader)
            _write_atomic(record_file, json.dumps(record, indent=1, sort_keys=True))
        if record.get("invalid"):
            raise DebugTaskInvalid(f"{self.task_id}: {record['invalid']}")
        return record

    def _swe_task(
        self,
        repo: Path,
        base: str,
        patch: str,
        fail_to_pass: tuple[str, ...],
        pass_to_pass: tuple[str, ...],
        test_patch: str = "",
    ) -> SWETask:
        return SWETask(
            instance_id=self.task_id,
            repo=self.task_id,
            base_commit=base,
            problem_statement=self.description,
            patch=patch,
            test_patch=test_patch,
            fail_to_pass=fail_to_pass,
            pass_to_pass=pass_to_pass,
            repo_source=str(repo),
            difficulty=self.difficulty,
            split=self.split,
            test_deps=self.test_deps,
            test_support=tuple(self.test_support),
            metadata={"debug_task_id": self.task_id, "entry_point": self.entry_point},
        )

    def _measure(self, repo: Path, grader: SWEGrader) -> dict[str, Any]:
        """Build the repository if needed, diff the fix, and sort the tests by their base outcome."""
        if not (repo / ".git").is_dir():
            _build_repo(self.files, repo)
        env_home = tempfile.mkdtemp(prefix="lcrl-git-home-")
        try:
            env = git_environment(env_home)
            base = run_git(["-C", str(repo), "rev-parse", "HEAD"], env).strip()
            patch = _fix_diff(self.files, self.fix, repo, env) if self.fix is not None else ""
            # the hidden modules as new files over the base: the grader applies this after the diff
            hidden = _fix_diff(self.files, self.hidden_files, repo, env) if self.hidden_files else ""
        finally:
            shutil.rmtree(env_home, ignore_errors=True)
        probe = self._swe_task(repo, base, patch, (), (), hidden)
        record: dict[str, Any] = {"task_id": self.task_id, "base_commit": base, "patch": patch}
        if hidden:
            record["test_patch"] = hidden
        modules = [*self.test_modules, *sorted(self.hidden_files)]
        at_base = _run_tests(grader, probe, "", modules)
        if at_base.verdict == "timeout":
            # Not cached: a machine busy with other work may be to blame, not the task.
            raise DebugTaskInvalid(f"{self.task_id}: the tests at the base did not finish in time")
        if at_base.verdict not in ("resolved", "unresolved"):
            # The program itself ended the run (os._exit at import...): not a task to train on.
            record["invalid"] = f"running the tests at the base gave {at_base.verdict}: {at_base.reason}"
            return record
        statuses = at_base.fail_to_pass
        ids = list(statuses)
        if at_base.collect_errors and patch:
            # A test file that does not import at the base (the bug breaks the import) has no
            # node ids there; with the fix it collects, and every test of it fails at the base.
            with_fix = _run_tests(grader, probe, patch, modules)
            ids += [node for node in with_fix.fail_to_pass if node not in statuses]
        record["fail_to_pass"] = [node for node in ids if statuses.get(node, "absent") in FAILING]
        record["pass_to_pass"] = [node for node in ids if statuses.get(node) == "passed"]
        if self.fail_to_pass:  # the row names what it is graded on: those of them measured so here
            named = (*self.fail_to_pass, *self.pass_to_pass)
            record["fail_to_pass"] = [n for n in self.fail_to_pass if statuses.get(n, "absent") in FAILING]
            record["pass_to_pass"] = [n for n in self.pass_to_pass if statuses.get(n) == "passed"]
            kept = set(record["fail_to_pass"] + record["pass_to_pass"])
            if off := [node for node in named if node not in kept]:
                log.warning(
                    "debug task %s: %d test(s) its row names measure otherwise at the base here, "
                    "not graded: %s",
                    self.task_id, len(off), listed(off, 5),
                )  # fmt: skip
        record["collect_errors"] = at_base.collect_errors
        if not ids:
            record["invalid"] = (
                f"no test was collected at the base (collection errors: {at_base.collect_errors})"
            )
        elif not record["fail_to_pass"] and self.fail_to_pass:
            record["invalid"] = (
                f"none of the {len(self.fail_to_pass)} FAIL_TO_PASS tests its row names fails at the base"
            )
        elif not record["fail_to_pass"]:
            record["invalid"] = f"all {len(ids)} tests pass at the base: there is nothing to debug"
        return record


def debug_problem(task: DebugTask) -> Problem:
    """The task as the project's ``Problem`` record; the debugging env finds it in ``metadata``."""
    return Problem(
        task_id=task.task_id,
        prompt=task.description,
        difficulty=task.difficulty,
        source="debug",
        metadata={"debug_task": task, "split": task.split, "entry_point": task.entry_point},
    )


def debug_task(problem: Problem) -> DebugTask:
    """The :class:`DebugTask` a ``Problem`` from :func:`debug_problem` carries."""
    task = problem.metadata.get("debug_task")
    if not isinstance(task, DebugTask):
        raise ConfigError(f"problem {problem.task_id!r} is not a debugging task (use problems.source: debug)")
    return task


def cache_root(root: str | Path | None = None) -> Path:
    """Where task repositories and their node ids live (``root``, ``$LIT_CODERL_DEBUG_CACHE`` or
    ``~/.cache/lit-coderl/debug-tasks``)."""
    return Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser().resolve()


def default_grader(root: str | Path | None = None) -> SWEGrader:
    """A grader with default workspace settings whose prepared copies live under ``root/prepared``."""
    return SWEGrader(WorkspaceConfig(), RepoCache(cache_root(root) / "prepared"))


def _canonical_split(split: str) -> str | None:
    """``None`` for ``all``; aliases of the held-out split become ``eval``."""
    name = split.strip().lower()
    if name == "all":
        return None
    return SPLIT_ALIASES.get(name, name)


def _is_test_path(path: str) -> bool:
    """The grader's own rule for which files are tests (``grading/_scan.py``), so that what a
    task calls its tests is exactly what grading restores from the base."""
    return _grader_is_test_path(path)


def _is_test_module(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _stem(path: str) -> str:
    """The module name a file gives: ``pkg/checks.py`` -> ``checks``, ``pkg/__init__.py`` -> ``pkg``."""
    pure = PurePosixPath(path)
    return pure.parent.name if pure.stem == "__init__" else pure.stem


def _imported_files(path: str, source: str, files: Mapping[str, Any]) -> list[str]:
    """The files among ``files`` that the imports of ``source`` (the file ``path``) name: ``import
    a.b``, ``from a import b`` (``a.py``, ``a/__init__.py``, ``a/b.py``...; at the root or in
    ``src/``) and relative ones (``from .asserts import same`` in ``helpers/__init__.py``:
    ``helpers/asserts.py``; missed, a helper package's own modules were left to the agent)."""
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names = []  # (directory searched, dotted name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(None, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # the package of ``path``, then one directory up per further dot
                where = (
                    PurePosixPath(path).parents[node.level - 1] if node.level <= path.count("/") + 1 else None
                )
                if where is None:
                    continue
                prefix = "" if str(where) == "." else f"{where}/"
            else:
                prefix = None
            module = node.module or ""
            heads = [module] if module else []
            names += [(prefix, m) for m in heads + [f"{module}.{a.name}".lstrip(".") for a in node.names]]
    found = []
    for prefix, name in names:
        parts = name.split(".")
        for n in range(1, len(parts) + 1):
            base = "/".join(parts[:n])
            for root in ("", "src/") if prefix is None else (prefix,):
                for candidate in (f"{root}{base}.py", f"{root}{base}/__init__.py"):
                    if candidate in files and candidate not in found:
                        found.append(candidate)
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _checked_files(files: Any, name: str, where: str) -> dict[str, str | bytes]:
    """``files`` with every path a plain relative one inside the repository."""
    if not isinstance(files, Mapping):
        raise ConfigError(f"{where}: {name} must map paths to contents, got {type(files).__name__}")
    checked: dict[str, str | bytes] = {}
    for path, content in files.items():
        if not isinstance(path, str) or not isinstance(content, str | bytes):
            raise ConfigError(f"{where}: {name} must map string paths to string or bytes contents ({path!r})")
        pure = PurePosixPath(path)
        if (
            not path
            or "\\" in path
            or pure.is_absolute()
            or any(part in ("", ".", "..", ".git") for part in path.split("/"))
        ):
            raise ConfigError(
                f"{where}: {name} path {path!r} must be relative, inside the task, not under .git"
            )
        checked[path] = content
    return checked


def _slug(task_id: str) -> str:
    return name_chars(task_id)[:80]
