"""Held-out checks for debugging rows written by hand (the shipped programs, a user's own rows).

A row with a reference ``fix`` and no ``hidden_files`` shows all its tests, so hard-coded answers
to them pass with the bug in place. :func:`row_checks` gives it the checks a synthesized task
gets (:mod:`.repo_held_out`): the files with the fix applied are the clean repository, the row's
own files the bug. ``scripts/add_held_out_checks.py`` writes them into a rows file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lit_codeRL.problems.debug_repo import _fix_diff
from lit_codeRL.problems.debug_task import DebugTask
from lit_codeRL.problems.swe import git_environment
from lit_codeRL.problems.synth.repo_held_out import RepoHeldOut, held_out_counts, repository_held_out
from lit_codeRL.problems.synth.repository import clean_task


def row_checks(task: DebugTask, grader: Any, count: int = 5, seed: int = 0) -> RepoHeldOut | None:
    """``task``'s held-out checks (``None``: it has no fix, has checks already, or no changed call
    of its tests shows its bug)."""
    if task.fix is None or task.hidden_files or count <= 0 or not set(task.fix) <= set(task.files):
        return None  # a fix that adds a file: the bug is its absence, no diff of files says it
    clean = {**task.files, **task.fix}
    with tempfile.TemporaryDirectory(prefix="lcrl-row-checks-") as tmp:
        swe = clean_task(
            task.task_id, clean, Path(tmp), test_deps=task.test_deps, test_support=tuple(task.test_support)
        )
        repo = Path(swe.repo_source)
        bug = _fix_diff(
            clean, {path: task.files[path] for path in task.fix}, repo, git_environment(Path(tmp) / "home")
        )
        try:
            (checks,) = repository_held_out(
                grader, swe, clean, task.test_modules, [bug], count, seed, workers=1
            )
        finally:
            shutil.rmtree(grader.repos.path_for(swe), ignore_errors=True)
    return checks


def with_checks(row: Mapping[str, Any], checks: RepoHeldOut) -> dict[str, Any]:
    """``row`` carrying ``checks``: its ``hidden_files``, and their node ids after its own in a
    ``FAIL_TO_PASS``/``PASS_TO_PASS`` it names (a row that names none has them measured)."""
    out = dict(row)
    out["hidden_files"] = [{"path": p, "content": c} for p, c in sorted(checks.files.items())]
    if row.get("FAIL_TO_PASS"):
        out["FAIL_TO_PASS"] = [*row["FAIL_TO_PASS"], *checks.failing]
        out["PASS_TO_PASS"] = [*row.get("PASS_TO_PASS", ()), *checks.passing]
    out["extra_info"] = {**(row.get("extra_info") or {}), **held_out_counts(checks)}
    return out
