"""SWE-bench-format tasks: the rows, their repositories, and a copy of each that cannot leak the fix.

A task is one SWE-bench row (``instance_id, repo, base_commit, problem_statement, patch,
test_patch, FAIL_TO_PASS, PASS_TO_PASS``, plus swebench 5's ``image``/``eval_script`` when
present) whose repository is available offline: a git bundle or a git directory
(``repo_source``). Sources: the tasks shipped in ``data/swe/`` (``"embedded"``), a local
``.jsonl``/``.json``/``.parquet`` file, or a ``datasets`` hub id or local dataset directory.

:func:`prepare_repo` builds the working copy an agent may see. It follows swebench's
``git_clone_timesafe`` (swebench 4.1.0, SWE-bench#471, after agents read fixes with
``git log --all`` and ``git show``: SWE-bench#465, mini-swe-agent#787) and goes further: instead
of deleting tags newer than the base by date, it keeps nothing but one branch at the base, and it
checks by ancestry (not by date) that no later commit is left in the object database.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.files import embedded_data_dir, name_chars, read_table_rows
from lit_codeRL.problems.record import Problem

EMBEDDED_FILE = Path("swe") / "tasks.jsonl"
"""The shipped tasks, relative to the data directory (``data/`` in a checkout)."""
EMBEDDED_NAMES = ("embedded", "swe")
SPLIT_ALIASES = {"test": "eval", "validation": "eval", "val": "eval", "dev": "eval"}
"""Split names of the ``split`` column that mean the held-out split (``eval``)."""
REQUIRED_FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "problem_statement",
    "patch",
    "test_patch",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
)
CACHE_ENV = "LIT_CODERL_SWE_CACHE"
"""Environment variable naming the :class:`RepoCache` root (default ``~/.cache/lit-coderl/swe-repos``)."""
DEFAULT_CACHE = Path("~") / ".cache" / "lit-coderl" / "swe-repos"
GIT_NAME = "lit-coderl"
GIT_EMAIL = "lit-coderl@localhost"
BRANCH = "main"
"""The one branch a prepared copy has, checked out at the base commit."""
# Pseudo-refs are plain files under .git that name commits (e.g. ORIG_HEAD after a reset); a
# fresh clone has none of them, but a copy from a directory must not carry any over either.
_PSEUDO_REFS = (
    "ORIG_HEAD",
    "FETCH_HEAD",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "BISECT_HEAD",
    "AUTO_MERGE",
    "REBASE_HEAD",
)


@dataclass(frozen=True)
class SWETask:
    """One SWE-bench-style task with its repository available offline."""

    instance_id: str
    """Unique id, e.g. ``"django__django-11099"`` or ``"lit-coderl__numkit-1"``."""
    repo: str
    """``"owner/name"`` or a local name."""
    base_commit: str
    """The commit the agent starts from (the bug is present)."""
    problem_statement: str
    """The issue text shown to the agent."""
    patch: str
    """The reference (gold) fix as a ``git diff``; touches no test files."""
    test_patch: str
    """Tests added or changed to check the fix; hidden from the agent, applied at grading."""
    fail_to_pass: tuple[str, ...]
    """pytest node ids that fail at base (with ``test_patch``) and pass with the fix."""
    pass_to_pass: tuple[str, ...]
    """pytest node ids that pass both before and after the fix."""
    repo_source: str
    """Absolute path of a git bundle or a git directory holding ``base_commit``."""
    image: str | None = None
    """swebench 5's per-instance container image (for apptainer users)."""
    eval_script: str | None = None
    """swebench 5's evaluation script, kept for reference (grading does not run it)."""
    test_command: str = "python -m pytest"
    """How the repository's tests are run; node ids are appended."""
    difficulty: str | None = None
    """``easy``/``medium``/``hard`` where the source says."""
    split: str = "train"
    """``train`` or ``eval`` for the shipped tasks; the dataset split otherwise."""
    test_deps: tuple[str, ...] = ()
    """Distributions the task's tests import besides the workspace's toolchain (the row's
    ``test_deps``; ``lit-coderl synth --test-deps`` writes it): every session of the task, the
    agent's and the grader's, gets them in its toolchain."""
    test_support: tuple[str, ...] = ()
    """Files of the tests not named like tests (a debugging task's assertion helper, which only
    its tests import): grading restores them from the base with the test files."""
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    """The row's other fields (``version``, ``created_at``, ``hints_text``...)."""


# --------------------------------------------------------------------------------------------
# Loading rows
# --------------------------------------------------------------------------------------------


def embedded_tasks_file() -> Path:
    """``data/swe/tasks.jsonl`` in the data directory that :mod:`registry` uses."""
    return embedded_data_dir() / EMBEDDED_FILE


def load_swe_tasks(
    source: str = "embedded",
    split: str = "train",
    repos_dir: str | Path | None = None,
    limit: int | None = None,
) -> list[SWETask]:
    """SWE tasks of ``split`` from ``source``, in file order.

    Args:
        source: ``embedded`` (the shipped tasks, ``data/swe/tasks.jsonl``); a ``.jsonl``, ``.json``
            (a list, or ``{"data": [...]}``) or ``.parquet`` file; a directory holding
            ``tasks.jsonl``; a ``datasets`` directory (``save_to_disk``, or data files that
            ``load_dataset`` reads); or a hub id such as ``SWE-bench/SWE-bench_Lite`` (network or
            a warm cache; ``HF_DATASETS_OFFLINE=1`` reads only the cache).
        split: For files: rows whose ``split`` column matches (``train``, ``eval``; ``test`` and
            ``validation`` mean ``eval``), ``all`` for every row; rows without a ``split`` column
            belong to every split. For datasets: the dataset's split (``eval`` falls back to
            ``test`` and back), ``all`` for every split; a dataset without splits is one split.
        repos_dir: Where repositories are looked up. A row's relative ``repo_source`` is tried
            there first (as given, then by file name), then beside the data file; a row without
            ``repo_source`` (hub rows) needs ``repos_dir/<owner>__<name>.bundle`` or
            ``repos_dir/<owner>__<name>/`` (a git directory).
        limit: Keep the first ``limit`` tasks of the split.

    Raises:
        ConfigError: a malformed row (naming the row and the field), a repository that cannot be
            found (naming where it looked), or a dataset that cannot be loaded.
    """
    repos = Path(repos_dir).expanduser().resolve() if repos_dir is not None else None
    if source in EMBEDDED_NAMES:
        file = embedded_tasks_file()
        if not file.is_file():
            raise FileNotFoundError(
                f"embedded SWE tasks not found: {file} (run from a lit-coderl checkout or "
                "install it with pip install -e .; scripts/make_swe_tasks.py rebuilds them)"
            )
        rows, origin, base_dir, from_file = _read_rows(file), str(file), file.parent, True
    else:
        path = Path(source).expanduser()
        if path.is_dir() and (path / "tasks.jsonl").is_file():
            path = path / "tasks.jsonl"
        if path.is_file():
            rows, origin, base_dir, from_file = _read_rows(path), str(path), path.resolve().parent, True
        elif path.is_dir() or not _looks_like_path(source):
            rows, origin, from_file = _dataset_rows(source, split), source, False
            base_dir = path.resolve() if path.is_dir() else None
        else:
            raise FileNotFoundError(
                f"SWE task source not found: {path.resolve()} (relative paths resolve against "
                f"{Path.cwd()}); pass embedded, a .jsonl/.json/.parquet file, a dataset directory or a hub id"
            )
    wanted = _canonical_split(split)
    tasks: list[SWETask] = []
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"{origin}: row {index} is not an object ({type(row).__name__})")
        row_split = row.get("split") if from_file else None
        if row_split is not None and wanted is not None and _canonical_split(str(row_split)) != wanted:
            continue
        # A row without a split column belongs to the split that was asked for.
        default_split = str(row_split) if row_split is not None else (split if wanted else "train")
        task = _task_from_row(row, index, origin, base_dir, repos, _canonical_split(default_split) or "train")
        if task.instance_id in seen:
            raise ConfigError(
                f"{origin}: row {index}: instance_id {task.instance_id!r} repeats row {seen[task.instance_id]}"
            )
        seen[task.instance_id] = index
        tasks.append(task)
        if limit is not None and len(tasks) >= limit:
            break
    return tasks


def to_problem(task: SWETask) -> Problem:
    """The task as the project's ``Problem`` record; environments find the task in ``metadata``."""
    return Problem(
        task_id=task.instance_id,
        prompt=task.problem_statement,
        difficulty=task.difficulty,
        source="swe",
        metadata={"swe_task": task, "split": task.split, "repo": task.repo},
    )


def _canonical_split(split: str) -> str | None:
    """``None`` for ``all``; aliases of the held-out split become ``eval``."""
    name = split.strip().lower()
    if name == "all":
        return None
    return SPLIT_ALIASES.get(name, name)


def _looks_like_path(source: str) -> bool:
    return (
        source.startswith((".", "/", "~"))
        or Path(source).suffix in {".jsonl", ".json", ".parquet"}
        or source.count("/") > 1
    )


def _read_rows(path: Path) -> list[Any]:
    """Rows of a ``.jsonl``, ``.json`` (list or ``{"data"|"tasks": [...]}``) or ``.parquet`` file."""
    return read_table_rows(path, "SWE task", ("data", "tasks"))


def _dataset_rows(source: str, split: str) -> list[dict[str, Any]]:
    """Rows of ``split`` from a hub id or a local dataset directory, through ``datasets``."""
    try:
        import datasets
    except ImportError as err:
        raise ConfigError(
            f"loading SWE tasks from {source!r} needs the datasets package: pip install 'lit-coderl[hub]'"
        ) from err
    path = Path(source).expanduser()
    try:
        if path.is_dir() and any((path / n).is_file() for n in ("dataset_dict.json", "state.json")):
            data = datasets.load_from_disk(str(path))
        else:
            data = datasets.load_dataset(str(path) if path.is_dir() else source)
    except Exception as err:  # noqa: BLE001 - offline, unknown id, bad directory: all end alike
        detail = str(err).splitlines()[0][:300] if str(err) else ""
        raise ConfigError(
            f"cannot load SWE tasks from {source!r} ({type(err).__name__}: {detail}); a hub id needs "
            "network or a warm datasets cache, a directory needs save_to_disk output or data files; "
            "a local .jsonl/.json/.parquet file works offline"
        ) from None
    if isinstance(data, datasets.Dataset):
        return [dict(row) for row in data]
    wanted = split.strip().lower()
    if wanted == "all":
        return [dict(row) for name in data for row in data[name]]
    for name in (split, wanted, {"eval": "test", "test": "eval"}.get(wanted)):
        if name is not None and name in data:
            return [dict(row) for row in data[name]]
    raise ConfigError(f"{source}: no split {split!r}; it has {sorted(data)} (or use all)")


def _task_from_row(
    row: Mapping[str, Any],
    index: int,
    origin: str,
    base_dir: Path | None,
    repos_dir: Path | None,
    split: str,
) -> SWETask:
    instance_id = row.get("instance_id")
    where = f"{origin}: row {index}" + (f" ({instance_id})" if isinstance(instance_id, str) else "")
    missing = [name for name in REQUIRED_FIELDS if name not in row or row[name] is None]
    if missing:
        raise ConfigError(
            f"{where}: missing field(s) {', '.join(missing)}; SWE rows need {', '.join(REQUIRED_FIELDS)}"
        )
    for name in ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch"):
        if not isinstance(row[name], str):
            raise ConfigError(f"{where}: field {name} must be a string, got {type(row[name]).__name__}")
    for name in ("instance_id", "repo", "problem_statement", "patch"):
        if not row[name].strip():
            raise ConfigError(f"{where}: field {name} is empty")
    base_commit = row["base_commit"].strip().lower()
    if not re.fullmatch(r"[0-9a-f]{7,64}", base_commit):
        raise ConfigError(f"{where}: field base_commit must be a hex commit id, got {row['base_commit']!r}")
    fail_to_pass = row_node_ids(row["FAIL_TO_PASS"], "FAIL_TO_PASS", where)
    if not fail_to_pass:
        raise ConfigError(
            f"{where}: field FAIL_TO_PASS is empty; a task needs a test that the fix makes pass"
        )
    pass_to_pass = row_node_ids(row["PASS_TO_PASS"], "PASS_TO_PASS", where)
    for name in ("image", "eval_script", "test_command", "difficulty"):
        if row.get(name) is not None and not isinstance(row[name], str):
            raise ConfigError(f"{where}: field {name} must be a string, got {type(row[name]).__name__}")
    consumed = {
        *REQUIRED_FIELDS,
        "test_deps",
        "repo_source",
        "image",
        "eval_script",
        "test_command",
        "difficulty",
        "split",
    }
    metadata = {key: value for key, value in row.items() if key not in consumed}
    if row.get("repo_source"):
        metadata["repo_source_given"] = row["repo_source"]
    return SWETask(
        instance_id=row["instance_id"].strip(),
        repo=row["repo"].strip(),
        base_commit=base_commit,
        problem_statement=row["problem_statement"],
        patch=row["patch"],
        test_patch=row["test_patch"],
        fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass,
        repo_source=_resolve_repo_source(row, where, base_dir, repos_dir),
        image=row.get("image") or None,
        eval_script=row.get("eval_script") or None,
        test_command=row.get("test_command") or "python -m pytest",
        difficulty=row.get("difficulty") or None,
        split=split,
        test_deps=row_test_deps(row.get("test_deps"), where),
        metadata=metadata,
    )


_DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
"""A distribution's name as packaging accepts it (PEP 508), without version or extras."""


def row_test_deps(value: Any, where: str) -> tuple[str, ...]:
    """A row's ``test_deps``: distribution names, as a list or a comma-separated string (``None``:
    none). Raises ``ConfigError`` naming the row for anything else: the names become arguments of
    the toolchain's resolver, so a version, an extra or a path is refused, not interpreted."""
    if value is None:
        return ()
    if hasattr(value, "tolist"):  # numpy arrays from some parquet readers
        value = value.tolist()
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"{where}: field test_deps must be a list of distribution names, got {value!r:.120}"
        )
    names = [n.strip() for n in names if n.strip()]
    bad = [n for n in names if not _DISTRIBUTION_NAME.fullmatch(n)]
    if bad:
        raise ConfigError(f"{where}: field test_deps: {bad[0]!r:.80} is not a distribution name")
    return tuple(dict.fromkeys(names))


def row_node_ids(value: Any, name: str, where: str) -> tuple[str, ...]:
    """A list of pytest node ids from a list, or from a JSON-encoded list (swebench's datasets)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: field {name} is a string but not a JSON list of test ids") from None
    if hasattr(value, "tolist"):  # numpy arrays from some parquet readers
        value = value.tolist()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(
            f"{where}: field {name} must be a list of test ids (or its JSON string), got {value!r:.120}"
        )
    return tuple(value)


def _resolve_repo_source(
    row: Mapping[str, Any], where: str, base_dir: Path | None, repos_dir: Path | None
) -> str:
    given = row.get("repo_source")
    if given is not None and not isinstance(given, str):
        raise ConfigError(f"{where}: field repo_source must be a string path, got {type(given).__name__}")
    candidates: list[Path] = []
    if given:
        path = Path(given).expanduser()
        if path.is_absolute():
            candidates.append(path)
        else:
            if repos_dir is not None:
                candidates += [repos_dir / path, repos_dir / path.name]
            if base_dir is not None:
                candidates.append(base_dir / path)
    elif repos_dir is not None:
        key = row["repo"].strip().replace("/", "__")
        if key in (".", ".."):  # repos_dir itself or its parent would pass for the repository
            raise ConfigError(f"{where}: field repo {row['repo']!r} names no repository: write owner/name")
        candidates += [repos_dir / f"{key}.bundle", repos_dir / key, repos_dir / f"{key}.git"]
    else:
        raise ConfigError(
            f"{where}: no repo_source and no repos_dir; pass repos_dir holding "
            f"{row['repo'].strip().replace('/', '__')}.bundle or a git directory of that name"
        )
    for candidate in candidates:
        if candidate.exists():
            return str(candidate.resolve())
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    raise ConfigError(f"{where}: repository of {row['repo']} not found; looked at {looked}")


# --------------------------------------------------------------------------------------------
# Git with a controlled environment
# --------------------------------------------------------------------------------------------


def git_environment(home: str | Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for git commands that no user, system or repository setting can steer.

    No system or global config (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL``), ``HOME`` a
    private directory, no inherited ``GIT_*`` variables (``GIT_DIR`` would redirect every
    command), no hooks, no prompts, a fixed identity, and ``safe.directory=*`` so a repository
    owned by another user can be cloned (it is only read).
    """
    settings = {
        "user.name": GIT_NAME,
        "user.email": GIT_EMAIL,
        "init.defaultBranch": BRANCH,
        "core.hooksPath": os.devnull,
        "core.fsmonitor": "false",
        "core.autocrlf": "false",
        "safe.directory": "*",
        "gc.auto": "0",
        "maintenance.auto": "false",
        "advice.detachedHead": "false",
        "pack.threads": "1",  # deterministic packs (bundles, repack) and gentle on small machines
    }
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_AUTHOR_NAME": GIT_NAME,
        "GIT_AUTHOR_EMAIL": GIT_EMAIL,
        "GIT_COMMITTER_NAME": GIT_NAME,
        "GIT_COMMITTER_EMAIL": GIT_EMAIL,
        "GIT_CONFIG_COUNT": str(len(settings)),
    }
    for i, (key, value) in enumerate(settings.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    env.update(extra or {})
    return env


class GitError(RuntimeError):
    """A git command that failed; the message holds the command and its stderr."""


def run_git(
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path | None = None,
    input: str | None = None,
    check: bool = True,
) -> str:
    """``git *args`` with ``env``; its stdout as git wrote it: UTF-8, other bytes as surrogate
    escapes, line ends untouched (``text=True`` read ``\r`` as a line end and decoded strictly: a
    reference fix of a file with ``\r\n`` line ends was a patch that did not apply, one of a
    Latin-1 module raised ``UnicodeDecodeError``). A failure raises :class:`GitError` when ``check``."""
    data = None if input is None else input.encode("utf-8", "surrogateescape")
    done = subprocess.run(["git", *args], cwd=cwd, env=dict(env), input=data, capture_output=True)
    if check and done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()[:2000]
        raise GitError(f"git {' '.join(args)} failed ({done.returncode}): {err}")
    return done.stdout.decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------------------------
# The time-safe working copy
# --------------------------------------------------------------------------------------------


class LeakError(RuntimeError):
    """A prepared copy still holds history that is not an ancestor of the base commit."""


def prepare_repo(task: SWETask, dest: Path) -> Path:
    """A working copy of ``task``'s repository at ``base_commit`` that holds nothing later.

    Steps: clone the bundle or directory (no hardlinks, no alternates, so nothing is shared with
    the source); check out the base as branch ``main``; remove every remote; delete every other
    ref (branches, tags, notes, stash, replace refs) and pseudo-ref; expire every reflog; repack
    and prune so unreachable objects leave the object database. Then check it: ``main`` is the
    only ref, every commit reachable from any ref or reflog is an ancestor of the base, and every
    commit or tag that was in the clone but is not an ancestor (the fix, later releases, other
    branches) is gone (``git cat-file -e`` would fail).

    Args:
        task: The task; ``repo_source`` is a git bundle or a git directory.
        dest: An absent or empty directory; it becomes the working copy.

    Returns:
        ``dest``.

    Raises:
        ConfigError: the source is missing or does not hold ``base_commit``.
        LeakError: the check failed (a bug here, or a git that behaves unexpectedly).
    """
    dest = Path(dest)
    source = Path(task.repo_source)
    if not source.exists():
        raise ConfigError(f"{task.instance_id}: repository source {source} does not exist")
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    with tempfile.TemporaryDirectory(prefix="lcrl-git-home-") as home:
        env = git_environment(home)

        def git(*args: str, input: str | None = None, check: bool = True) -> str:
            return run_git(["-C", str(dest), *args], env, input=input, check=check)

        # --no-local makes a directory source go through the pack protocol, so only objects
        # reachable from its refs are copied (a plain local clone copies the object store
        # whole, dangling objects included); bundles are always read that way.
        local = ["--no-local"] if source.is_dir() else []
        try:
            run_git(
                ["clone", "--quiet", "--no-checkout", "--no-hardlinks", *local, str(source), str(dest)], env
            )
        except GitError as err:
            raise ConfigError(f"{task.instance_id}: cannot clone {source}: {err}") from None
        base = git("rev-parse", "--verify", "--quiet", f"{task.base_commit}^{{commit}}", check=False).strip()
        if not base:
            raise ConfigError(f"{task.instance_id}: base commit {task.base_commit} is not in {source}")
        ancestors = set(git("rev-list", base).split())
        present = set(git("rev-list", "--all").split())
        present |= set(git("for-each-ref", "--format=%(objectname)").split())
        later = sorted(present - ancestors)

        git("checkout", "--quiet", "--force", "-B", BRANCH, base)
        for remote in git("remote").split():
            git("remote", "remove", remote)
        doomed = [
            ref for ref in git("for-each-ref", "--format=%(refname)").split() if ref != f"refs/heads/{BRANCH}"
        ]
        if doomed:
            git("update-ref", "--stdin", input="".join(f"delete {ref}\n" for ref in doomed))
        git_dir = dest / ".git"
        for name in _PSEUDO_REFS:
            (git_dir / name).unlink(missing_ok=True)
        git("config", "--remove-section", f"branch.{BRANCH}", check=False)
        git("reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
        # repack -a -d writes one pack of what is reachable and drops the old packs, so the
        # unreachable objects they held are gone (no -A/--cruft keeps them); prune takes loose ones.
        git("repack", "-a", "-d", "-q")
        git("prune", "--expire=now")
        _check_time_safe(git, task, base, later)
    return dest


def _check_time_safe(git: Any, task: SWETask, base: str, later: list[str]) -> None:
    where = f"{task.instance_id}: time-safe copy"
    refs = git("for-each-ref", "--format=%(refname)").split()
    if refs != [f"refs/heads/{BRANCH}"]:
        raise LeakError(f"{where} still has refs {refs}")
    if (
        git("rev-parse", "HEAD").strip() != base
        or git("symbolic-ref", "HEAD").strip() != f"refs/heads/{BRANCH}"
    ):
        raise LeakError(f"{where}: HEAD is not {BRANCH} at {base}")
    if git("remote").split():
        raise LeakError(f"{where} still has remotes")
    ancestors = set(git("rev-list", base).split())
    reachable = set(git("rev-list", "--all", "--reflog").split())
    if reachable - ancestors:
        raise LeakError(
            f"{where}: commits not ancestors of the base are reachable: {sorted(reachable - ancestors)[:5]}"
        )
    if later:
        report = git("cat-file", "--batch-check", input="".join(f"{sha}\n" for sha in later), check=False)
        kept = [line.split()[0] for line in report.splitlines() if not line.endswith(" missing")]
        if kept:
            raise LeakError(f"{where}: later objects are still in the object database: {kept[:5]}")


# --------------------------------------------------------------------------------------------
# Cache of prepared copies
# --------------------------------------------------------------------------------------------


class RepoCache:
    """Prepares each task's copy once, keyed by ``instance_id`` and ``base_commit``.

    ``get`` returns the pristine copy; callers copy it (workspaces do) and never write to it.
    Building happens in a temporary directory beside the final one and ends with a rename, so a
    copy is either complete or absent, even after a crash. Concurrent builders (threads or
    processes) serialise on a lock file per entry; where locks do not work (some network file
    systems) the rename still lets exactly one build win.
    """

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root or os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser().resolve()
        """Directory holding one prepared copy per task (``$LIT_CODERL_SWE_CACHE`` by default)."""

    def path_for(self, task: SWETask) -> Path:
        """Where ``task``'s copy lives (whether or not it exists yet)."""
        slug = name_chars(task.instance_id)[:80]
        digest = hashlib.sha256(f"{task.instance_id}\0{task.base_commit}".encode()).hexdigest()[:12]
        return self.root / f"{slug}-{digest}"

    def get(self, task: SWETask) -> Path:
        """The prepared copy of ``task`` (built on first use)."""
        final = self.path_for(task)
        if (final / ".git").is_dir():
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{final.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (final / ".git").is_dir():  # built by whoever held the lock before us
                return final
            scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=self.root))
            try:
                prepare_repo(task, scratch / "repo")
                try:
                    os.rename(scratch / "repo", final)
                except OSError as err:
                    # Lost a race that the lock did not prevent: the winner's copy is equivalent.
                    if err.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not (final / ".git").is_dir():
                        raise
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return final
