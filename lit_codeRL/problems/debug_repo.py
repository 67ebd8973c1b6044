"""A debugging task's git repository on disk and the runs that measure it: the one-commit base
(fixed identity and date, so its id depends on the files alone), the reference fix as a diff
against it, the tests run at the base the way a grade runs them, and the cache files (record,
lock) kept beside the repository."""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_codeRL.grading import SWEGrader, judge, patch_bytes
from lit_codeRL.problems.swe import SWETask, git_environment, run_git
from lit_codeRL.sandbox.workspace_types import WorkspaceError

# The base commit must not depend on when or where a task is built: fixed identity (from
# git_environment) and a fixed date make its id a function of the files alone.
_GIT_DATE = "2000-01-01T00:00:00+0000"


def _build_repo(files: Mapping[str, str | bytes], dest: Path) -> None:
    """A git directory at ``dest`` with one commit holding ``files`` (atomic: built
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
        _write_files(work, files)
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


def _fix_diff(
    files: Mapping[str, str | bytes], fix: Mapping[str, str], repo: Path, env: Mapping[str, str]
) -> str:
    """The reference fix (``fix`` over ``files``) as a ``git diff --binary`` against the base, made in a scratch work tree
    with a scratch index and a scratch object store so the repository itself is never touched: ``git add``
    writes the fix's blobs into the scratch store, which reads the repository's objects as alternates (the
    cached repository is shared by every process that builds or opens the task)."""
    with tempfile.TemporaryDirectory(prefix="lcrl-debug-fix-") as tmp:
        work = Path(tmp) / "work"
        _write_files(work, {**files, **fix})
        (Path(tmp) / "objects").mkdir()
        git_env = {
            **env,
            "GIT_INDEX_FILE": str(Path(tmp) / "index"),
            "GIT_OBJECT_DIRECTORY": str(Path(tmp) / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str((repo / ".git" / "objects").resolve()),
        }
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
    junit: bytes | None = None
    """The run's junit XML (its failure messages write synthesized tasks' statements)."""
    wall_s: float = 0.0
    """Seconds the run took, the sandbox's start included."""
    cpu_s: float | None = None
    """CPU time of the run's processes (``None``: not known)."""
    output: str = ""
    """The end of what the run printed (pytest's own errors: a conftest that does not load): for
    a person reading why a repository cannot be used, never for a grade."""


def _run_tests(
    grader: SWEGrader,
    task: SWETask,
    diff: str,
    modules: Sequence[str],
    timeout_s: float | None = None,
    cpu_s: float | None = None,
    full_assertions: bool = False,
) -> _Run:
    """Run every test of ``modules`` after ``diff`` the way a grade does, within ``timeout_s``
    (``None``: the grader's) and ``cpu_s`` CPU seconds per process (``None``: no such limit);
    ``full_assertions``: whole values in the failure messages (``SWEGrader.run``).

    The same run as :meth:`SWEGrader.grade`: a fresh workspace from the pristine repository, the
    trusted runner, outcomes read from its signed record and junit XML after the sandbox closed,
    cross-checked by :func:`judge` with every recorded test as FAIL_TO_PASS (so every status comes
    back, and the two channels must agree on each). Nothing is read from stdout.

    Raises:
        RuntimeError: the sandbox failed (ours, not the task's).
    """
    start = time.monotonic()
    try:
        run = grader.run(
            task, patch_bytes(diff) if diff else b"", list(modules), timeout_s, cpu_s, full_assertions
        )
    except WorkspaceError as e:  # the sandbox failing is ours, not the task's
        raise RuntimeError(f"{task.instance_id}: running the tests failed: {e}") from e
    report, exit_code = run.report, run.exit_code
    every = tuple((report or {}).get("outcomes", {}))
    grade = judge(
        dataclasses.replace(task, fail_to_pass=every, pass_to_pass=()), exit_code, report, run.junit
    )
    errors = [str(e) for e in (report or {}).get("collect_errors", [])]
    return _Run(
        grade.verdict,
        grade.reason,
        grade.fail_to_pass,
        errors,
        run.junit,
        time.monotonic() - start,
        run.cpu_s,
        run.output,
    )


def _write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Text as UTF-8; bytes (a repository's binary fixtures, a source in another encoding) as they are."""
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


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
