"""Debugging tasks: a buggy Python program and its pytest tests, graded like SWE tasks.

A :class:`DebugTask` is the starting files (the program with its bug and the tests that show it),
a description of what the program should do, and usually a reference fix. The debugging gym lets
an agent run the tests under pdb and edit the program; the reward is *not* computed where the
agent worked. Instead :meth:`DebugTask.to_swe_task` turns the task into an
:class:`~lit_codeRL.problems.swe.SWETask` whose base commit holds the starting files, so the SWE
grader (``grading/repo.py``) grades the episode's ``git diff`` in a fresh workspace: the diff
is applied, every test file it touched is restored from the base (the grader's own
``is_test_path`` rule decides which files are tests here too), and a trusted runner reports the
outcomes through junit XML and an HMAC-signed record, never through stdout. Agents that edit the
tests, add a ``conftest.py`` or print "3 passed" score 0, as the SWE reward-hack suite checks.

Sources (:func:`load_debug_tasks`):

* ``embedded`` / ``debug``: the tasks shipped in ``data/debug/tasks.jsonl`` (self-written, built
  by ``scripts/make_debug_tasks.py`` from ``data/debug/src``).
* A ``.jsonl``/``.json``/``.parquet`` file, or a directory of them, whose rows are either
  debugging rows as in the SWE-PDB design (``files: [{path, content}]``, ``task_name`` or ``id``,
  optional ``entry_point``, ``description``, ``fix``, nested ``extra_info``), or KodCode rows
  (``question``, ``solution``, ``test``): a KodCode row holds a correct solution, not a bug, so it
  becomes a task whose ``solution.py`` is a stub that raises ``NotImplementedError`` and whose fix
  is the solution. KodCode's data is CC BY-NC 4.0: it is read from the user's files, never shipped.
  A test file outside the grader's test-path rule (SWE-PDB rows use ``test.py``) is renamed
  ``test_<name>`` and the entry point follows, or an agent's edit of it would survive grading.

The FAIL_TO_PASS and PASS_TO_PASS node ids a grade needs are not in the files: they are measured
once per machine by running the tests at the base in a sandbox workspace through the grader's
trusted runner (tests that fail there are FAIL_TO_PASS, tests that pass are PASS_TO_PASS), and
cached beside the task's git directory, keyed by a hash of its files.
"""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.grading import SWEGrader, judge, patch_bytes
from lit_codeRL.grading._scan import is_test_path as _grader_is_test_path
from lit_codeRL.problems.files import embedded_data_dir, read_table_rows
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import SPLIT_ALIASES, RepoCache, SWETask, git_environment, run_git
from lit_codeRL.sandbox.workspace import WorkspaceConfig, WorkspaceError

log = logging.getLogger(__name__)

EMBEDDED_FILE = Path("debug") / "tasks.jsonl"
"""The shipped tasks, relative to the data directory (``data/`` in a checkout)."""
EMBEDDED_NAMES = ("embedded", "debug")
CACHE_ENV = "LIT_CODERL_DEBUG_CACHE"
"""Environment variable naming where task repositories and their node ids are cached."""
DEFAULT_CACHE = Path("~") / ".cache" / "lit-coderl" / "debug-tasks"
DEFAULT_TEST_COMMAND = "python -m pytest -sq"
"""The entry point's command; the task's test modules are appended."""
KODCODE_SOLUTION = "solution.py"
KODCODE_TEST = "test_solution.py"
FAILING = ("failed", "error", "absent")
"""Statuses at the base that make a test FAIL_TO_PASS (a test that does not even collect fails)."""
# The base commit must not depend on when or where a task is built: fixed identity (from
# git_environment) and a fixed date make its id a function of the files alone.
_GIT_DATE = "2000-01-01T00:00:00+0000"
_FORMAT = 1
"""Bump when the repository layout or how node ids are measured changes: old cache entries then
stop matching instead of being trusted."""
_DEBUG_ROW_FIELDS = (
    "task_name",
    "id",
    "files",
    "fix",
    "entry_point",
    "entrypoint",
    "description",
    "question",
)
_KODCODE_FIELDS = ("question", "solution", "test", "test_code", "test_info")


class DebugTaskInvalid(ConfigError):
    """A task that cannot be trained on: nothing fails at its base, or no test could be found."""


# --------------------------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------------------------


@dataclass
class DebugTask:
    """A buggy program and its tests (see the module docstring)."""

    task_id: str
    """Unique id, e.g. ``"debug/cart"`` or ``"kodcode/Leetcode_123_I"``."""
    description: str
    """What the program should do, shown to the agent (never where the bug is)."""
    files: dict[str, str]
    """Relative path -> content at the start: the buggy program and its tests."""
    fix: dict[str, str] | None = None
    """The reference fix: new contents of the non-test files it changes (``None``: none known)."""
    entry_point: str = ""
    """The test command (``python -m pytest -sq <test modules>`` when empty)."""
    difficulty: str | None = None
    """``easy``/``medium``/``hard`` where the source says."""
    split: str = "train"
    """``train`` or ``eval`` (aliases such as ``test`` mean ``eval``)."""
    metadata: dict = field(default_factory=dict)
    """The row's other fields (``bug_kind``, KodCode's ``question_id``/``subset``/``style``...)."""

    def __post_init__(self) -> None:
        if not isinstance(self.task_id, str) or not self.task_id.strip():
            raise ConfigError(f"debug task id must be a non-empty string, got {self.task_id!r}")
        where = f"debug task {self.task_id}"
        self.files = _checked_files(self.files, "files", where)
        if not self.files:
            raise ConfigError(f"{where}: no files")
        if self.fix is not None:
            self.fix = _checked_files(self.fix, "fix", where)
            tests = [path for path in self.fix if _is_test_path(path)]
            if tests:
                raise ConfigError(
                    f"{where}: the fix changes test file(s) {', '.join(tests)}; grading restores every "
                    "test file from the base, so a fix must change the program only"
                )
        if not self.test_modules:
            raise ConfigError(
                f"{where}: no test module among its files (test_*.py or *_test.py): {sorted(self.files)}"
            )
        if not self.entry_point:
            self.entry_point = f"{DEFAULT_TEST_COMMAND} {' '.join(map(shlex.quote, self.test_modules))}"
        self.split = _canonical_split(self.split) or "train"

    @property
    def test_files(self) -> list[str]:
        """Files the grader treats as tests (restored from the base before grading), sorted."""
        return sorted(path for path in self.files if _is_test_path(path))

    @property
    def source_files(self) -> list[str]:
        """Every other file: what the agent may change, sorted."""
        return sorted(path for path in self.files if not _is_test_path(path))

    @property
    def test_modules(self) -> list[str]:
        """The test files pytest runs (``test_*.py``/``*_test.py``; not ``conftest.py`` or helpers)."""
        return [path for path in self.test_files if _is_test_module(path)]

    def content_key(self) -> str:
        """A hash of everything the task's repository and node ids depend on."""
        data = {"format": _FORMAT, "id": self.task_id, "files": self.files, "fix": self.fix}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def to_swe_task(self, root: str | Path | None = None, grader: SWEGrader | None = None) -> SWETask:
        """The task as an SWE task whose base commit holds the starting files.

        The first call on a machine writes the files into a git directory under ``root`` (one
        commit with a fixed identity and date, so the base commit id depends on the files alone),
        diffs the reference fix against it and runs the tests at the base in a sandbox workspace
        through ``grader``'s trusted runner to find FAIL_TO_PASS (failing there) and PASS_TO_PASS
        (passing) node ids; the result is cached beside the directory and later calls only read it.

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
        return self._swe_task(
            repo,
            record["base_commit"],
            record["patch"],
            tuple(record["fail_to_pass"]),
            tuple(record["pass_to_pass"]),
        )

    def _swe_task(
        self, repo: Path, base: str, patch: str, fail_to_pass: tuple[str, ...], pass_to_pass: tuple[str, ...]
    ) -> SWETask:
        return SWETask(
            instance_id=self.task_id,
            repo=self.task_id,
            base_commit=base,
            problem_statement=self.description,
            patch=patch,
            test_patch="",
            fail_to_pass=fail_to_pass,
            pass_to_pass=pass_to_pass,
            repo_source=str(repo),
            difficulty=self.difficulty,
            split=self.split,
            metadata={"debug_task_id": self.task_id, "entry_point": self.entry_point},
        )

    def _measure(self, repo: Path, grader: SWEGrader) -> dict[str, Any]:
        """Build the repository if needed, diff the fix, and sort the tests by their base outcome."""
        if not (repo / ".git").is_dir():
            _build_repo(self, repo)
        env_home = tempfile.mkdtemp(prefix="lcrl-git-home-")
        try:
            env = git_environment(env_home)
            base = run_git(["-C", str(repo), "rev-parse", "HEAD"], env).strip()
            patch = _fix_diff(self, repo, env) if self.fix is not None else ""
        finally:
            shutil.rmtree(env_home, ignore_errors=True)
        probe = self._swe_task(repo, base, patch, (), ())
        record: dict[str, Any] = {"task_id": self.task_id, "base_commit": base, "patch": patch}
        at_base = _run_tests(grader, probe, "", self.test_modules)
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
            with_fix = _run_tests(grader, probe, patch, self.test_modules)
            ids += [node for node in with_fix.fail_to_pass if node not in statuses]
        record["fail_to_pass"] = [node for node in ids if statuses.get(node, "absent") in FAILING]
        record["pass_to_pass"] = [node for node in ids if statuses.get(node) == "passed"]
        record["collect_errors"] = at_base.collect_errors
        if not ids:
            record["invalid"] = (
                f"no test was collected at the base (collection errors: {at_base.collect_errors})"
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


def validate_debug_tasks(
    tasks: Sequence[DebugTask],
    grader: SWEGrader,
    root: str | Path | None = None,
    workers: int = 1,
) -> list[DebugTask]:
    """The tasks worth training on, in order; each other one dropped with a warning saying why.

    A task with a reference fix is kept when the fix resolves it and the untouched base does not
    (:meth:`SWEGrader.validate` on the converted task, cached per machine). A task without one is
    kept when its base fails a test, with a warning that it is unvalidated (no grade can reach 1
    for sure). ``workers`` tasks are checked at a time (each check is sandboxed subprocesses).
    """

    def check(task: DebugTask) -> str | None:
        try:
            swe = task.to_swe_task(root, grader)
        except DebugTaskInvalid as err:
            return str(err).removeprefix(f"{task.task_id}: ")
        if task.fix is None:
            log.warning(
                "debug task %s kept unvalidated: it has no reference fix (its base fails %d test(s))",
                task.task_id,
                len(swe.fail_to_pass),
            )
            return None
        return grader.validate(swe)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        reasons = list(pool.map(check, tasks))
    for task, why in zip(tasks, reasons, strict=True):
        if why:
            log.warning("debug task %s dropped: %s", task.task_id, why)
    dropped = sum(1 for why in reasons if why)
    if dropped:
        log.warning("%d of %d debug tasks dropped by validation", dropped, len(tasks))
    return [task for task, why in zip(tasks, reasons, strict=True) if not why]


# --------------------------------------------------------------------------------------------
# Measuring the base
# --------------------------------------------------------------------------------------------


def _build_repo(task: DebugTask, dest: Path) -> None:
    """A git directory at ``dest`` with one commit holding the starting files (atomic: built
    beside ``dest`` and renamed)."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        work, home = scratch / "repo", scratch / "home"
        home.mkdir()
        env = git_environment(
            home,
            {
                "GIT_AUTHOR_DATE": _GIT_DATE,
                "GIT_COMMITTER_DATE": _GIT_DATE,
            },
        )
        _write_files(work, task.files)
        run_git(["init", "--quiet", str(work)], env)
        run_git(["-C", str(work), "add", "--all", "--force", "."], env)
        run_git(
            ["-C", str(work), "commit", "--quiet", "--no-verify", "-m", "The program and its tests"],
            env,
        )
        shutil.rmtree(home)
        os.rename(work, dest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _fix_diff(task: DebugTask, repo: Path, env: Mapping[str, str]) -> str:
    """The reference fix as a ``git diff --binary`` against the base, made in a scratch work tree
    with a scratch index so the repository itself is never touched."""
    with tempfile.TemporaryDirectory(prefix="lcrl-debug-fix-") as tmp:
        work = Path(tmp) / "work"
        _write_files(work, {**task.files, **(task.fix or {})})
        git_env = {**env, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git = ["--git-dir", str(repo / ".git"), "--work-tree", str(work)]
        run_git([*git, "read-tree", "HEAD"], git_env)
        run_git([*git, "add", "--all", "--force", "."], git_env, cwd=work)
        return run_git([*git, "diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "HEAD"], git_env)


@dataclass
class _Run:
    """What one run of every test module left: the cross-checked verdict, each test's status
    (node id -> ``passed``/``failed``/``error``/``skipped``...) and the files that did not collect."""

    verdict: str
    reason: str
    fail_to_pass: dict[str, str]
    collect_errors: list[str]


def _run_tests(grader: SWEGrader, task: SWETask, diff: str, modules: Sequence[str]) -> _Run:
    """Run every test of ``modules`` after ``diff`` the way a grade does.

    The same run as :meth:`SWEGrader.grade`: a fresh workspace from the pristine repository, the
    trusted runner, outcomes read from its signed record and junit XML after the sandbox closed,
    cross-checked by :func:`judge` with every recorded test as FAIL_TO_PASS (so every status comes
    back, and the two channels must agree on each). Nothing is read from stdout.

    Raises:
        RuntimeError: the sandbox failed (ours, not the task's).
    """
    try:
        run = grader.run(task, patch_bytes(diff) if diff else b"", list(modules))
    except WorkspaceError as e:  # the sandbox failing is ours, not the task's
        raise RuntimeError(f"{task.instance_id}: running the tests failed: {e}") from e
    report, exit_code = run.report, run.exit_code
    every = tuple((report or {}).get("outcomes", {}))
    grade = judge(
        dataclasses.replace(task, fail_to_pass=every, pass_to_pass=()), exit_code, report, run.junit
    )
    errors = [str(e) for e in (report or {}).get("collect_errors", [])]
    return _Run(grade.verdict, grade.reason, grade.fail_to_pass, errors)


# --------------------------------------------------------------------------------------------
# Loading rows
# --------------------------------------------------------------------------------------------


def embedded_tasks_file() -> Path:
    """``data/debug/tasks.jsonl`` in the data directory that :mod:`registry` uses."""
    return embedded_data_dir() / EMBEDDED_FILE


def load_debug_tasks(
    source: str = "embedded", split: str | None = None, limit: int | None = None
) -> list[DebugTask]:
    """Debugging tasks of ``split`` from ``source``, in file order.

    Args:
        source: ``embedded``/``debug`` (the shipped tasks), a ``.jsonl``/``.json``/``.parquet``
            file (parquet needs pyarrow), or a directory of such files (read in name order). Rows
            are debugging rows (``files``) or KodCode rows (``question``, ``solution``, ``test``).
        split: ``train``, ``eval`` (``test``, ``validation``, ``val``, ``dev`` mean ``eval``),
            ``all`` or ``None`` for every row. Rows without a ``split`` field belong to every split.
        limit: Keep the first ``limit`` tasks.

    Raises:
        ConfigError: a missing source, a malformed row (naming the file, the row and the field),
            a repeated task id, or a split no row has.
    """
    wanted = _canonical_split(split) if split is not None else None
    files = _source_files(source)
    tasks: list[DebugTask] = []
    seen: dict[str, str] = {}
    splits: set[str] = set()
    for file in files:
        for index, raw in enumerate(read_table_rows(file, "debug task", ("data", "tasks", "rows"))):
            where = f"{file}: row {index}"
            row = _merged_row(raw, where)
            row_split = row.get("split")
            if row_split is not None:
                if not isinstance(row_split, str) or not row_split.strip():
                    raise ConfigError(f"{where}: field split must be a non-empty string, got {row_split!r}")
                row_split = _canonical_split(row_split)
                splits.add(row_split)
                if wanted is not None and row_split != wanted:
                    continue
            task = task_from_row(row, where, row_split or wanted or "train")
            if task.task_id in seen:
                raise ConfigError(f"{where}: task id {task.task_id!r} repeats {seen[task.task_id]}")
            seen[task.task_id] = where
            tasks.append(task)
            if limit is not None and len(tasks) >= limit:
                return tasks
    if wanted is not None and not tasks and splits and wanted not in splits:
        raise ConfigError(f"{source}: no split {split!r}; its rows have splits {sorted(splits)} (or use all)")
    return tasks


def task_from_row(row: Mapping[str, Any], where: str = "row", split: str = "train") -> DebugTask:
    """One task from a debugging row (``files``) or a KodCode row (``question``/``solution``/``test``).

    ``where`` names the row in errors; ``split`` is used when the row has no ``split`` field."""
    row = _merged_row(row, where)
    try:
        if "files" in row:
            return _from_debug_row(row, where, split)
        if any(name in row for name in _KODCODE_FIELDS):
            return _from_kodcode_row(row, where, split)
    except ConfigError as err:
        message = str(err)
        raise ConfigError(message if message.startswith(where) else f"{where}: {message}") from None
    raise ConfigError(
        f"{where}: neither a debugging row (files: [{{path, content}}], task_name) nor a KodCode row "
        f"(question, solution, test); it has {sorted(row)[:12]}"
    )


def _source_files(source: str) -> list[Path]:
    if source in EMBEDDED_NAMES:
        file = embedded_tasks_file()
        if not file.is_file():
            raise ConfigError(
                f"embedded debug tasks not found: {file} (run from a lit-coderl checkout or install it "
                "with pip install -e .; python scripts/make_debug_tasks.py rebuilds them)"
            )
        return [file]
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json", ".parquet")
        )
        if not files:
            raise ConfigError(f"{path}: no .jsonl, .json or .parquet file of debug tasks in this directory")
        return files
    if not path.is_file():
        raise ConfigError(
            f"debug task source not found: {path.resolve()} (relative paths resolve against {Path.cwd()}); "
            "pass embedded, a .jsonl/.json/.parquet file or a directory of them"
        )
    return [path]


def _merged_row(row: Any, where: str) -> dict[str, Any]:
    """The row with the keys of its nested ``extra_info`` merged in (the row's own keys win)."""
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: not an object ({type(row).__name__})")
    extra = row.get("extra_info")
    if extra is None:
        return dict(row)
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: field extra_info is a string but not a JSON object") from None
    if not isinstance(extra, Mapping):
        raise ConfigError(f"{where}: field extra_info must be an object, got {type(extra).__name__}")
    return {**extra, **{key: value for key, value in row.items() if key != "extra_info"}}


def _from_debug_row(row: Mapping[str, Any], where: str, split: str) -> DebugTask:
    task_id = _first(row, ("task_name", "id"))
    if task_id is None or not str(task_id).strip():
        raise ConfigError(f"{where}: missing field task_name (or id)")
    files = _file_list(row["files"], "files", where)
    fix = _file_list(row["fix"], "fix", where) if row.get("fix") is not None else None
    entry_point = _optional_str(row, ("entry_point", "entrypoint"), where)
    description = _optional_str(row, ("description", "question"), where)
    files, entry_point, renamed = _protect_tests(files, entry_point, where)
    if fix is not None and renamed:
        fix = {renamed.get(path, path): content for path, content in fix.items()}
    if description is None:
        modules = sorted(path for path in files if _is_test_path(path) and _is_test_module(path))
        description = f"Some tests in {', '.join(modules)} fail. Fix the program so that every test passes."
    metadata = {
        key: value for key, value in row.items() if key not in (*_DEBUG_ROW_FIELDS, "difficulty", "split")
    }
    if renamed:
        metadata["renamed_tests"] = renamed
    return DebugTask(
        task_id=str(task_id).strip(),
        description=description,
        files=files,
        fix=fix,
        entry_point=entry_point or "",
        difficulty=_optional_str(row, ("difficulty",), where),
        split=split,
        metadata=metadata,
    )


def _protect_tests(
    files: dict[str, str], entry_point: str | None, where: str
) -> tuple[dict[str, str], str | None, dict[str, str]]:
    """Rename test files the grader would not recognise as tests (``test.py`` in SWE-PDB rows).

    Grading restores only paths its ``is_test_path`` rule matches; a test file outside that rule
    could be edited by the agent and the edit would count. So a Python file the entry point
    names (or, without an entry point, a ``test.py``/``tests.py``) that the rule misses becomes
    ``test_<name>``, and the entry point follows."""
    tokens = shlex.split(entry_point) if entry_point else []
    named = [t for t in tokens if t in files and t.endswith(".py")]
    if not tokens:
        named = [p for p in files if PurePosixPath(p).name in ("test.py", "tests.py")]
    renamed: dict[str, str] = {}
    for path in named:
        if _is_test_path(path) and _is_test_module(path):
            continue
        pure = PurePosixPath(path)
        new = str(pure.with_name(f"test_{pure.name}"))
        if new in files:
            raise ConfigError(f"{where}: test file {path} must be renamed {new} for grading, which exists")
        renamed[path] = new
    if not renamed:
        return files, entry_point, {}
    files = {renamed.get(path, path): content for path, content in files.items()}
    if tokens:
        entry_point = shlex.join(renamed.get(t, t) for t in tokens)
    return files, entry_point, renamed


def _from_kodcode_row(row: Mapping[str, Any], where: str, split: str) -> DebugTask:
    for name in ("question", "solution"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ConfigError(f"{where}: KodCode row missing field {name} (a non-empty string)")
    test = _first(row, ("test", "test_code"))
    if not isinstance(test, str) or not test.strip():
        raise ConfigError(f"{where}: KodCode row missing field test (or test_code), the pytest file")
    info = row.get("test_info")
    if hasattr(info, "tolist"):  # numpy arrays from some parquet readers
        info = info.tolist()
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: field test_info is a string but not a JSON list") from None
    if info is not None and (
        not isinstance(info, list | tuple) or not all(isinstance(item, Mapping) for item in info)
    ):
        raise ConfigError(f"{where}: field test_info must be a list of objects, got {info!r:.120}")
    # Without a question_id the id is a hash of the question: stable wherever the row is read.
    task_id = _first(row, ("question_id", "task_name", "id"))
    task_id = task_id if task_id is not None else hashlib.sha256(row["question"].encode()).hexdigest()[:12]
    stub = kodcode_stub(row["solution"], test, info)
    difficulty = _first(row, ("gpt_difficulty", "difficulty"))
    metadata = {
        key: row[key]
        for key in ("question_id", "subset", "style", "version", "gpt_pass_percentage", "bug_kind")
        if key in row
    }
    metadata["format"] = "kodcode"
    return DebugTask(
        task_id=f"kodcode/{task_id}",
        description=row["question"].strip(),
        files={KODCODE_SOLUTION: stub, KODCODE_TEST: test},
        fix={KODCODE_SOLUTION: row["solution"]},
        entry_point=f"{DEFAULT_TEST_COMMAND} {KODCODE_TEST}",
        difficulty=str(difficulty) if difficulty is not None else None,
        split=split,
        metadata=metadata,
    )


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
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _is_future(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and node.module == "__future__"


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


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


def _first(row: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((row[name] for name in names if row.get(name) is not None), None)


def _optional_str(row: Mapping[str, Any], names: Sequence[str], where: str) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ConfigError(f"{where}: field {name} must be a string, got {type(value).__name__}")
            return value if value.strip() else None
    return None


def _file_list(value: Any, name: str, where: str) -> dict[str, str]:
    """``[{path, content}]`` (or a ``{path: content}`` mapping) as a dict."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, Mapping):
        value = [{"path": path, "content": content} for path, content in value.items()]
    if not isinstance(value, list | tuple):
        raise ConfigError(
            f"{where}: field {name} must be a list of {{path, content}}, got {type(value).__name__}"
        )
    files: dict[str, str] = {}
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("path"), str):
            raise ConfigError(f"{where}: field {name}[{i}] needs a string path")
        if not isinstance(item.get("content"), str):
            raise ConfigError(f"{where}: field {name}[{i}] ({item['path']}) needs a string content")
        if item["path"] in files:
            raise ConfigError(f"{where}: field {name} lists {item['path']} twice")
        files[item["path"]] = item["content"]
    return files


def _checked_files(files: Any, name: str, where: str) -> dict[str, str]:
    """``files`` with every path a plain relative one inside the repository."""
    if not isinstance(files, Mapping):
        raise ConfigError(f"{where}: {name} must map paths to contents, got {type(files).__name__}")
    checked: dict[str, str] = {}
    for path, content in files.items():
        if not isinstance(path, str) or not isinstance(content, str):
            raise ConfigError(f"{where}: {name} must map string paths to string contents ({path!r})")
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


def _write_files(root: Path, files: Mapping[str, str]) -> None:
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def _slug(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", task_id)[:80]


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    """An exclusive lock between threads and processes building the same entry."""
    with open(lock_file, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
