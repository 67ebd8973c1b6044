"""A synthesized task and the two row formats it is written in.

* **SWE-bench rows** (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
  ``FAIL_TO_PASS``, ``PASS_TO_PASS``, ``problem_statement``, plus ``repo_source`` and ``split``),
  read by ``problems.source: swe:<file>`` and ``lit-coderl regrade``. Each task's base is a
  *root* commit holding the buggy tree, under ``refs/heads/task/<id>`` of one git bundle per
  output: the workspace's only history is the bugged tree (a bug committed on top of the clean
  commit would let ``git show HEAD`` print the fix). The gold ``patch`` is ``git diff`` from that
  commit to the clean files, so it applies exactly.
* **Debugging rows** (``task_name``, ``files: [{path, content}]``, ``fix``, ``description``,
  ``split``, ``extra_info``), read by ``problems.source: debug:<file>``.
"""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_codeRL.problems.debug_repo import _write_files
from lit_codeRL.problems.debug_task import DEFAULT_TEST_COMMAND, _is_test_module, _is_test_path
from lit_codeRL.problems.files import name_chars
from lit_codeRL.problems.swe import git_environment, run_git

_GIT_DATE = "2000-01-01T00:00:00+0000"
"""Fixed dates make a task's base commit id a function of its files alone."""


@dataclass
class SynthTask:
    """One validated, synthesized task."""

    task_id: str
    files: dict[str, str | bytes]
    """Every file at the base (the bug present; tests included; ``bytes``: not UTF-8 text)."""
    fix: dict[str, str]
    """The clean content of the files the bug changed."""
    statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    split: str = "train"
    """``train`` or ``eval``."""
    info: dict[str, Any] = field(default_factory=dict)
    """``bug_kind``, ``function``, ``line``, the source..."""
    uncollectable: tuple[str, ...] = ()
    """Test modules that do not collect on the clean repository (a test dependency the sandbox
    lacks): left out of the debugging row, whose grading runs every test module (pytest runs no
    test at all when one does not collect); the SWE row keeps them and runs its tests' files."""
    test_deps: tuple[str, ...] = ()
    """Distributions the tests import besides pytest (``--test-deps``): both rows carry them as
    ``test_deps``, and every session of the task gets them in its toolchain."""
    test_modules: tuple[str, ...] = ()
    """The test modules the task's tests were measured on, when not every file named like a test
    is one (the repository's configuration does not collect some): the debugging row's entry
    point names them, and its grading runs those. Empty: every ``test_*.py``/``*_test.py``."""
    hidden_files: dict[str, str] = field(default_factory=dict)
    """Test modules graded but never in the workspace (MBPP tasks' held-out checks): the
    debugging row's ``hidden_files``, the SWE row's ``test_patch``."""


def _entry_point(task: SynthTask) -> dict[str, str]:
    every = sorted(
        p for p in task.files if p not in task.uncollectable and _is_test_path(p) and _is_test_module(p)
    )
    if not task.test_modules or sorted(task.test_modules) == every:
        return {}
    return {"entry_point": f"{DEFAULT_TEST_COMMAND} {shlex.join(sorted(task.test_modules))}"}


def debug_row(task: SynthTask) -> dict[str, Any]:
    """The task as a debugging row."""
    return {
        "task_name": task.task_id,
        "description": task.statement,
        "files": [_file_entry(p, c) for p, c in sorted(task.files.items()) if p not in task.uncollectable],
        "fix": [{"path": p, "content": c} for p, c in sorted(task.fix.items())],
        **(
            {"hidden_files": [{"path": p, "content": c} for p, c in sorted(task.hidden_files.items())]}
            if task.hidden_files
            else {}
        ),
        "split": task.split,
        # graded on the tests measured on the clean repository, as its SWE row: not on one this
        # machine breaks (a locale, another version of a dependency), which no fix makes pass
        "FAIL_TO_PASS": list(task.fail_to_pass),
        "PASS_TO_PASS": list(task.pass_to_pass),
        "extra_info": task.info,
        **_entry_point(task),
        **_test_deps(task),
    }


def _test_deps(task: SynthTask) -> dict[str, list[str]]:
    return {"test_deps": list(task.test_deps)} if task.test_deps else {}


def _file_entry(path: str, content: str | bytes) -> dict[str, str]:
    if isinstance(content, bytes):
        return {"path": path, "content_base64": base64.b64encode(content).decode("ascii")}
    return {"path": path, "content": content}


def slug(text: str) -> str:
    """``text`` as a bundle's or a git ref's name (:func:`name_chars`, at most 100 of them)."""
    return name_chars(text).strip("_")[:100] or "task"


def swe_rows(tasks: Sequence[SynthTask], out_dir: Path, repo: str) -> list[dict[str, Any]]:
    """Write ``out_dir/repos/<repo>.bundle`` holding every task's base commit and return the
    SWE-bench rows (``repo_source`` relative to ``out_dir``)."""
    out_dir = Path(out_dir)
    (out_dir / "repos").mkdir(parents=True, exist_ok=True)
    bundle = out_dir / "repos" / f"{slug(repo)}.bundle"
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lcrl-synth-") as tmp:
        home, git_dir = Path(tmp) / "home", Path(tmp) / "repo.git"
        home.mkdir()
        env = git_environment(home, {"GIT_AUTHOR_DATE": _GIT_DATE, "GIT_COMMITTER_DATE": _GIT_DATE})
        run_git(["init", "--quiet", "--bare", str(git_dir)], env)
        refs = []
        for task in tasks:
            base = _commit(git_dir, env, task.files, f"{repo}: snapshot", Path(tmp))
            fixed = _commit(git_dir, env, {**task.files, **task.fix}, "fixed", Path(tmp))
            patch = _diff(git_dir, env, base, fixed)
            test_patch = ""
            if task.hidden_files:  # SWE-bench's hidden tests: new files over the base, added at grading
                tested = _commit(git_dir, env, {**task.files, **task.hidden_files}, "held out", Path(tmp))
                test_patch = _diff(git_dir, env, base, tested)
            ref = f"refs/heads/task/{slug(task.task_id)}"
            run_git(["--git-dir", str(git_dir), "update-ref", ref, base], env)
            refs.append(ref)
            rows.append(
                {
                    "instance_id": task.task_id,
                    "repo": repo,
                    "base_commit": base,
                    "patch": patch,
                    "test_patch": test_patch,
                    "FAIL_TO_PASS": list(task.fail_to_pass),
                    "PASS_TO_PASS": list(task.pass_to_pass),
                    "problem_statement": task.statement,
                    "repo_source": f"repos/{bundle.name}",
                    "split": task.split,
                    "created_by": "lit-coderl synth",
                    **_test_deps(task),
                    **{k: v for k, v in task.info.items() if k not in ("split",)},
                }
            )
        if refs:
            tmp_bundle = Path(tmp) / bundle.name
            run_git(
                ["--git-dir", str(git_dir), "bundle", "create", "--quiet", str(tmp_bundle), "--stdin"],
                env,
                input="".join(f"{ref}\n" for ref in refs),
            )
            shutil.move(str(tmp_bundle), bundle)
    return rows


def _diff(git_dir: Path, env: Mapping[str, str], old: str, new: str) -> str:
    """``git diff --binary`` from commit ``old`` to commit ``new``."""
    return run_git(
        ["--git-dir", str(git_dir), "diff", "--binary", "--no-color", "--no-ext-diff", old, new], env
    )


def _commit(
    git_dir: Path, env: Mapping[str, str], files: Mapping[str, str | bytes], message: str, tmp: Path
) -> str:
    """A root commit holding ``files`` (written through a scratch index and work tree)."""
    work = Path(tempfile.mkdtemp(prefix="work-", dir=tmp))
    _write_files(work, files)
    git_env = {**env, "GIT_INDEX_FILE": str(work.with_suffix(".index"))}
    git = ["--git-dir", str(git_dir), "--work-tree", str(work)]
    run_git([*git, "add", "--all", "--force", "."], git_env, cwd=work)
    tree = run_git([*git, "write-tree"], git_env).strip()
    shutil.rmtree(work)
    work.with_suffix(".index").unlink(missing_ok=True)
    return run_git(["--git-dir", str(git_dir), "commit-tree", tree, "-m", message], env).strip()


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
