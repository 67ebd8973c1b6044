"""Synthesizing tasks from a repository with a passing test suite (SWE-smith's procedural way).

:func:`synthesize_repository`: read the repository (a directory, git or not, or a git bundle, at
its ``HEAD``), build a one-commit clean copy, run its suite ``clean_runs`` times, enumerate
candidate bugs per function (:mod:`.candidates`), validate each in a sandbox workspace
(:mod:`.validate`) until ``per_function`` are kept (one per FAIL_TO_PASS set), write each kept
bug's statement from the failing tests' reports (:mod:`.statements`, dropped if it would leak the
change), and split by function: every bug of a function lands in the same
split, so held-out tasks exercise code the training tasks never touched.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError, listed
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug_repo import _build_repo
from lit_codeRL.problems.debug_task import _is_test_module, _is_test_path
from lit_codeRL.problems.files import name_chars
from lit_codeRL.problems.swe import SWETask, git_environment, run_git
from lit_codeRL.problems.synth import run_cache
from lit_codeRL.problems.synth.candidates import (
    Candidate,
    candidates_by_function,
    generated_files,
    source_files,
)
from lit_codeRL.problems.synth.discover import collected_modules, configured_modules
from lit_codeRL.problems.synth.installed import installed_copies
from lit_codeRL.problems.synth.metadata import project_metadata
from lit_codeRL.problems.synth.mutations import MUTATION_KINDS
from lit_codeRL.problems.synth.repo_held_out import held_out_counts, repository_held_out
from lit_codeRL.problems.synth.statements import leaked_lines, repository_statement
from lit_codeRL.problems.synth.tasks import SynthTask
from lit_codeRL.problems.synth.validate import (
    Baseline,
    SuiteDoesNotCollect,
    baseline,
    remeasure,
    validate_functions,
    why_not_collected,
    workspace_check,
    workspace_run,
)
from lit_codeRL.problems.test_names import misnamed_test_modules, protected_name
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 1 << 20
"""A file over this size is carried as bytes and never mutated."""
MAX_CARRIED_BYTES = 16 << 20
"""A file over this size is left out (with a warning): every task's rows would carry it."""
_SKIP_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".venv",
    "venv",
    "node_modules",
    ".tox",
}


@dataclass(frozen=True)
class SynthSettings:
    """What bugs to inject and which to keep."""

    kinds: tuple[str, ...] = MUTATION_KINDS
    """Mutation kinds to draw from."""
    per_function: int = 1
    """Validated bugs kept per function."""
    tries_per_function: int = 6
    """Candidates validated per function at most (in a seeded order)."""
    max_functions: int | None = None
    """Functions whose candidates are validated, per repository, at most: a seeded sample of them
    (``None``: every function). Each candidate runs the repository's whole suite, so this bounds
    a synthesis of a big repository (one of 258 functions and a 45 s suite takes hours)."""
    max_fail_to_pass: int = 10
    """A bug failing more tests than this is dropped (it breaks everything: an easy, noisy task)."""
    min_pass_to_pass: int = 1
    """Tests that must still pass (a bug that fails every test says nothing about where it is)."""
    clean_runs: int = 3
    """Runs of the clean suite; a test failing in any of them is left out (flaky), and a test whose
    ids differ between any two is never graded. Three, not two: ids named after an object's
    address (``None`` in a set before Python 3.12) came out alike in about one pair of runs in 100
    here (2-core EPYC), and every candidate was then rejected as "test ids differ"."""
    eval_fraction: float = 0.3
    """Share of functions whose bugs are held out (split ``eval``), chosen by a hash of the name."""
    workers: int = 2
    """Validations run at a time (each a sandboxed workspace)."""
    seed: int = 0
    held_out: int = 5
    """Held-out checks a task gets at most (``repo_held_out.py``): the test modules' calls with
    their literal arguments changed, answered by the clean repository, graded and never in the
    workspace, so hard-coded answers to the visible tests fail. 0: none."""
    cache: bool = True
    """Read and write the suite runs in the synthesis cache (:mod:`.run_cache`): synthesizing the
    same repository again runs no test it already ran."""

    def __post_init__(self) -> None:
        if self.max_functions is not None and self.max_functions < 1:
            raise ConfigError(f"synth: max_functions must be >= 1 or None, got {self.max_functions}")


@dataclass
class RepoSynthesis:
    """What one repository gave: the tasks and the counts a report needs."""

    name: str
    tasks: list[SynthTask]
    files: dict[str, str | bytes]
    stats: dict[str, Any] = field(default_factory=dict)


def read_repository(source: str | Path) -> tuple[str, dict[str, str | bytes]]:
    """The name and files (path -> content) of a directory or a git bundle at ``HEAD``: UTF-8
    text up to 1 MiB as ``str`` (what bugs go into), any other file as ``bytes`` (a binary fixture
    or a source in another encoding the tests need, carried as it is). Symbolic links and files
    over 16 MiB are left out, with a warning: a link may point outside the repository, and it is
    never followed."""
    path = Path(source).expanduser().resolve()
    if not path.exists():
        raise ConfigError(f"synth: repository {path} does not exist")
    # the name is in every task's instance id and its bundle's file name: a file name's characters
    name = name_chars(path.name.removesuffix(".bundle").removesuffix(".git"))
    name = name.strip("._") or "repo"
    if path.is_file() or (path / ".git").exists() or path.suffix == ".git":
        with tempfile.TemporaryDirectory(prefix="lcrl-synth-read-") as tmp:
            env = git_environment(Path(tmp))
            work = Path(tmp) / "work"
            try:
                run_git(["clone", "--quiet", "--no-hardlinks", str(path), str(work)], env)
            except RuntimeError as err:
                raise ConfigError(f"synth: cannot read {path}: {_git_error(str(err))}") from None
            _check_out_head(work, path, env)
            if path.is_dir():
                _warn_uncommitted(path, env)
            tracked = run_git(["-C", str(work), "ls-files", "-z"], env).split("\0")
            return name, _read_files(work, [t for t in tracked if t])
    listed, outputs = [], []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.endswith(".egg-info"))
        # a synth output (`synth . --out synth_out` run before): its rows and bundles are not the
        # repository's files, and every task would carry them
        outputs += [str((Path(root) / d).relative_to(path)) for d in dirs if _is_synth_output(Path(root) / d)]
        dirs[:] = [d for d in dirs if not _is_synth_output(Path(root) / d)]
        # a linked directory is not walked into (os.walk follows no link): listed, to be left out
        # with the warning a linked file gets
        linked = [d for d in dirs if (Path(root) / d).is_symlink()]
        for n in sorted([*names, *linked]):
            listed.append(str((Path(root) / n).relative_to(path)))
    if outputs:
        log.warning("synth: %s: left out %d synth output(s): %s", path, len(outputs), outputs[:5])
    return name, _read_files(path, listed)


def _is_synth_output(directory: Path) -> bool:
    """Does ``directory`` hold what ``lit-coderl synth --out`` writes?"""
    return (directory / "report.json").is_file() and any(
        (directory / kind / "tasks.jsonl").is_file() for kind in ("swe", "debug")
    )


def _check_out_head(work: Path, source: Path, env: dict[str, str]) -> None:
    """``work``, a clone of ``source``, checked out at its ``HEAD``; a bundle without one at its
    one branch or tag. Raises ``ConfigError`` when there is no commit, or several to choose from
    (``git clone`` then leaves an empty work tree, read before as "no test module")."""
    if run_git(["-C", str(work), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"], env, check=False):
        return
    refs = run_git(["-C", str(work), "for-each-ref", "--format=%(refname)", "refs/remotes", "refs/tags"], env)
    names = sorted(
        ref.removeprefix("refs/remotes/origin/").removeprefix("refs/tags/") for ref in refs.split()
    )
    if not names:
        raise ConfigError(
            f"synth: {source} has no commit (synthesis reads the last commit: commit the files)"
        )
    if len(names) > 1:
        raise ConfigError(
            f"synth: {source} has no HEAD and {len(names)} branches or tags ({', '.join(names[:10])}): "
            "make a bundle of the one to read (git bundle create x.bundle <branch>)"
        )
    run_git(["-C", str(work), "checkout", "--quiet", "--detach", refs.split()[0]], env)


def _warn_uncommitted(path: Path, env: dict[str, str]) -> None:
    """Warn of the changes to a git work tree that synthesis leaves out (it reads ``HEAD``)."""
    status = run_git(
        ["--no-optional-locks", "-C", str(path), "status", "--porcelain", "-z", "--untracked-files=all"],
        env,
        check=False,
    )
    changed = [entry[3:] for entry in status.split("\0") if entry[2:3] == " "]
    if changed:
        log.warning(
            "synth: %s: %d uncommitted change(s) left out (synthesis reads the last commit): %s",
            path, len(changed), changed[:5],
        )  # fmt: skip


def _git_error(message: str) -> str:
    """git's first ``error:``/``fatal:`` line (a one-line error, not git's whole advice)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("error:", "fatal:"))]
    return (said or lines or ["git failed"])[0]


def _read_files(root: Path, paths: Sequence[str]) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {}
    skipped, submodules, undecodable = [], [], []
    for rel in paths:
        full = root / rel
        try:
            rel.encode("utf-8")
        except UnicodeEncodeError:  # a name in another encoding: the rows, the cache keys are UTF-8
            undecodable.append(os.fsencode(rel).decode("utf-8", "replace"))
            continue
        if full.is_dir() and not full.is_symlink():  # a submodule's path (git lists it, not its files)
            submodules.append(rel)
            continue
        if rel.endswith((".pyc", ".pyo")) or not (full.is_symlink() or full.is_file()):
            continue
        if full.is_symlink() or full.stat().st_size > MAX_CARRIED_BYTES:
            skipped.append(rel)
            continue
        data = full.read_bytes()
        try:
            files[rel] = data.decode("utf-8") if len(data) <= MAX_FILE_BYTES else data
        except UnicodeDecodeError:
            files[rel] = data
    if undecodable:
        log.warning("synth: %d file(s) named not UTF-8 left out: %s", len(undecodable), undecodable[:5])
    if submodules:
        log.warning("synth: %d submodule(s) left out (never cloned): %s", len(submodules), submodules[:5])
    if skipped:
        log.warning(
            "synth: %d file(s) left out (symbolic links, or over 16 MiB): %s", len(skipped), skipped[:5]
        )
    return files


def _name_test_modules(files: dict[str, str | bytes]) -> tuple[dict[str, str | bytes], dict[str, str]]:
    """``files`` with every ``tests.py``/``test.py`` that holds tests and that no other module
    imports renamed ``test_tests.py``/``test_test.py`` in its directory (``problems/test_names.py``),
    and the renames. Under a test directory too: grading protects it there, but neither pytest
    nor synthesis collects a module by that name (polib's tests are all in ``tests/tests.py``)."""
    renamed = {
        path: protected_name(path)
        for path in misnamed_test_modules(files)
        if protected_name(path) not in files
    }
    return {renamed.get(path, path): content for path, content in files.items()}, renamed


def _eval_function(function: str, fraction: float, seed: int) -> bool:
    digest = hashlib.sha256(f"{seed}\0{function}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _sample_functions(
    groups: dict[str, list[Candidate]], limit: int | None, seed: int
) -> dict[str, list[Candidate]]:
    """At most ``limit`` functions, chosen by a seeded hash of each name (a function's choice does
    not depend on the others: a repository with one function more keeps the same sample but
    maybe one), in the order they came; the hash differs from the held-out split's."""
    if limit is None or len(groups) <= limit:
        return groups
    rank = sorted(groups, key=lambda name: hashlib.sha256(f"{seed}\0tried\0{name}".encode()).digest())
    chosen = set(rank[:limit])
    return {name: group for name, group in groups.items() if name in chosen}


def _baseline(
    repo_name: str,
    grader: SWEGrader,
    task: SWETask,
    files: dict[str, str | bytes],
    modules: list[str],
    settings: SynthSettings,
) -> tuple[Baseline, list[str], list[str]]:
    """The clean runs, the test modules they ran and those left out: a test module that does not
    collect on the clean repository (a test dependency the sandbox lacks: ``hypothesis``,
    ``freezegun``) is left out with a warning, and the others run again without it. A directory
    that does not collect (its ``conftest.py``), or nothing left, is the clean suite's error."""
    try:
        cache = run_cache.tree_dir(files, modules, grader.workspace.toolchain) if settings.cache else None
        return baseline(grader, task, modules, settings.clean_runs, cache), modules, []
    except SuiteDoesNotCollect as err:
        failing = {node.split("::", 1)[0] for node in err.nodes}  # a class of a module: the module
        excluded = sorted(failing & set(modules))
        if not excluded or failing - set(excluded) or len(excluded) == len(modules):
            raise
        why = why_not_collected(err.nodes, err.reasons)
    log.warning(
        "synth: %s: %d of %d test module(s) do not collect on the clean repository, left out: %s",
        repo_name, len(excluded), len(modules), why + _missing_module_hint(why, files),
    )  # fmt: skip
    kept = [m for m in modules if m not in excluded]
    cache = run_cache.tree_dir(files, kept, grader.workspace.toolchain) if settings.cache else None
    return baseline(grader, task, kept, settings.clean_runs, cache), kept, excluded


def _missing_module_hint(message: str, files: Mapping[str, str | bytes]) -> str:
    """What to do about a module the tests import and the sandbox lacks, when ``message`` says so:
    the repository's own package under ``src/`` without the packaging that puts ``src`` on the
    import path (``repo_layout.PACKAGING_FILES``), or a test dependency."""
    if "No module named" not in message:
        return ""
    named = {m.split(".")[0] for m in re.findall(r"No module named '([^']+)'", message)}
    in_src = sorted(n for n in named if f"src/{n}/__init__.py" in files or f"src/{n}.py" in files)
    if in_src:
        return (
            f" (src/{in_src[0]} is imported from src/ only beside a pyproject.toml, setup.cfg or "
            "setup.py, as pip install -e . needs: add one that names the project)"
        )
    return (
        " (the sandbox imports pytest and the --test-deps distributions only: install what is missing "
        "here and name it in --test-deps)"
    )


def _refuse_installed_copies(repo_name: str, files: dict[str, str | bytes], grader: SWEGrader) -> None:
    """A repository the sandbox holds an installed copy of (``installed.installed_copies``) gives
    no task: its tests would exercise that copy, and an agent could copy the answer from it."""
    copies = installed_copies(files, grader.workspace)
    by_pytest = [name for name, where in copies.items() if where == "pytest"]
    if by_pytest:
        raise ConfigError(
            f"synth: {repo_name}: pytest itself imports {', '.join(by_pytest)} from its own "
            "installation before any test runs, so the tests would exercise that copy, never this "
            "repository's code"
        )
    if copies:
        raise ConfigError(
            f"synth: {repo_name}: the sandbox's toolchain ({', '.join(grader.workspace.toolchain)} "
            f"with their dependencies) holds an installed copy of {', '.join(copies)}, which grading "
            "imports in place of the repository's (and an agent could copy the answer from): leave "
            "out the test dependency that needs it"
        )


def clean_task(name: str, files: Mapping[str, str | bytes], tmp: Path, **fields: Any) -> SWETask:
    """The clean repository of ``files`` built in ``tmp/clean`` (one commit), as a task whose base
    is that commit and which asks nothing (its runs are synthesis's: the clean suite, candidates)."""
    _build_repo(files, tmp / "clean")
    (tmp / "home").mkdir(exist_ok=True)
    head = run_git(["-C", str(tmp / "clean"), "rev-parse", "HEAD"], git_environment(tmp / "home")).strip()
    return SWETask(
        instance_id=f"{name}.synth-clean-{head[:8]}",
        repo=name,
        base_commit=head,
        problem_statement="",
        patch="",
        test_patch="",
        fail_to_pass=(),
        pass_to_pass=(),
        repo_source=str(tmp / "clean"),
        **fields,
    )


def synthesize_repository(
    source: str | Path,
    grader: SWEGrader,
    settings: SynthSettings | None = None,
    name: str | None = None,
) -> RepoSynthesis:
    """Validated tasks of the repository at ``source`` (see the module docstring)."""
    repo_name, files = read_repository(source)
    return synthesize_files(name or repo_name, files, grader, settings)


def synthesize_files(
    repo_name: str, files: dict[str, str | bytes], grader: SWEGrader, settings: SynthSettings | None = None
) -> RepoSynthesis:
    """Validated tasks of the repository whose files (path -> content) are ``files``."""
    settings = settings or SynthSettings()
    start = time.monotonic()
    files, renamed = _name_test_modules(files)
    metadata = project_metadata(files)
    if metadata:
        log.info("synth: %s reads its installed metadata: added %s", repo_name, ", ".join(metadata))
        files = {**files, **metadata}
    if renamed:
        log.warning(
            "synth: %s: its tests are in %s, which grading would not protect from an agent's "
            "edits: renamed %s",
            repo_name, ", ".join(renamed), ", ".join(f"{a} -> {b}" for a, b in renamed.items()),
        )  # fmt: skip
    modules = sorted(p for p in files if _is_test_path(p) and _is_test_module(p))
    if not modules:
        raise ConfigError(f"synth: {repo_name} has no test module (test_*.py or *_test.py)")
    unmutated = [
        p for p, c in files.items() if p.endswith(".py") and isinstance(c, bytes) and not _is_test_path(p)
    ]
    if unmutated:
        log.warning(
            "synth: %s: %d Python file(s) not UTF-8 (or over 1 MiB) get no bugs: %s",
            repo_name, len(unmutated), unmutated[:5],
        )  # fmt: skip
    generated = [p for p in generated_files(files) if not _is_test_path(p)]
    if generated:
        log.warning(
            "synth: %s: %d Python file(s) say they are generated (DO NOT EDIT, @generated) and get no "
            "bugs: %s", repo_name, len(generated), generated[:5],
        )  # fmt: skip
    _refuse_installed_copies(repo_name, files, grader)
    with tempfile.TemporaryDirectory(prefix="lcrl-synth-") as tmp:
        task = clean_task(repo_name, files, Path(tmp))
        collection = collected_modules(grader, task, files, settings.cache)
        modules, unconfigured = configured_modules(modules, collection)
        empty = [
            path
            for path in unconfigured
            if collection is not None and path in collection.empty and path not in renamed.values()
        ]
        unconfigured = [path for path in unconfigured if path not in empty]
        if empty:  # helpers named like tests, or a test class pytest cannot instantiate
            log.warning(
                "synth: %s: %d test module(s) collect no test, none of theirs graded: %s",
                repo_name, len(empty), listed(empty),
            )  # fmt: skip
        # a renamed tests.py is a test module by its old name (jsonpatch's python_files names it);
        # grading runs it by path, which pytest collects whatever python_files says
        back = [path for path in unconfigured if path in renamed.values()]
        modules, unconfigured = sorted([*modules, *back]), [p for p in unconfigured if p not in back]
        if unconfigured:
            through = [m for m in modules if not _is_test_module(m) and m not in renamed.values()]
            log.warning(
                "synth: %s: %d file(s) named like tests are not collected by the repository's pytest "
                "configuration (testpaths, norecursedirs, python_files, --ignore, collect_ignore), "
                "left out: %s%s",
                repo_name, len(unconfigured), unconfigured[:5],
                f" (it collects its tests through {', '.join(through[:5])})" if through else "",
            )  # fmt: skip
        if not modules:
            raise ConfigError(
                f"synth: {repo_name}: its pytest configuration collects none of its test modules "
                f"(test_*.py or *_test.py): {unconfigured[:5]}"
                if unconfigured
                else f"synth: {repo_name}: its test modules collect no test: {listed(empty)}"
            )
        try:
            clean, modules, excluded = _baseline(repo_name, grader, task, files, modules, settings)
        except (ValueError, RuntimeError) as err:  # RuntimeError: the sandbox failed
            raise ConfigError(f"synth: {repo_name}: {err}{_missing_module_hint(str(err), files)}") from None
        collected = {node.split("::", 1)[0] for node in [*clean.ids, *clean.unstable]}
        empty = [m for m in modules if m not in collected]
        if empty:  # as above, where the collection told nothing (a root conftest.py that fails it)
            log.warning(
                "synth: %s: %d test module(s) collect no test, none of theirs graded: %s",
                repo_name, len(empty), listed(empty),
            )  # fmt: skip
        if clean.failing:
            log.warning(
                "synth: %s: %d test(s) fail or error on the clean repository, never graded: %s%s",
                repo_name, len(clean.failing), listed(clean.failing),
                f"; {clean.first_failure}" if clean.first_failure else "",
            )  # fmt: skip
        if clean.unstable:
            log.warning(
                "synth: %s: %d test id(s) differ from run to run (a parametrization named after "
                "objects hashed by address), never graded: %s",
                repo_name, len(clean.unstable), listed(clean.unstable),
            )  # fmt: skip
        cache = run_cache.tree_dir(files, modules, grader.workspace.toolchain) if settings.cache else None
        groups = candidates_by_function(files, settings.kinds, settings.seed)
        if not groups:  # after the clean runs: a suite that does not pass is the first thing to fix
            raise ConfigError(
                f"synth: {repo_name}: no function to put a bug in: none of its {len(source_files(files))} "
                f"non-test Python file(s) has a function or method body with a site of the kinds "
                f"{', '.join(settings.kinds)}"
            )
        found = len(groups)
        groups = _sample_functions(groups, settings.max_functions, settings.seed)
        check = workspace_check(
            grader, task, modules, clean, settings.max_fail_to_pass, settings.min_pass_to_pass, cache
        )
        bugs, rejected = validate_functions(
            groups, check, settings.per_function, settings.tries_per_function, settings.workers
        )
        again = workspace_run(grader, task, modules, clean, cache, attempt=1)
        bugs, flaky, twice = remeasure(bugs, again, settings.min_pass_to_pass, settings.workers)
        for reason, n in twice.items():
            rejected[reason] = rejected.get(reason, 0) + n
        if flaky:
            log.warning(
                "synth: %s: %d test(s) passed and failed in two runs of one bug (flaky), never graded: %s",
                repo_name, len(flaky), listed(flaky),
            )  # fmt: skip
        validated = sum(rejected.values()) + len(bugs)  # a bug dropped by its second run: in `rejected`
        statements = {}
        for bug in bugs:
            statement = repository_statement(bug.fail_to_pass, bug.messages, len(bug.pass_to_pass))
            if leaked_lines(statement, bug.candidate.diff):
                rejected["statement leaks the change"] = rejected.get("statement leaks the change", 0) + 1
            else:
                statements[bug.candidate.key] = statement
        bugs = [bug for bug in bugs if bug.candidate.key in statements]
        hidden = repository_held_out(
            grader,
            task,
            files,
            modules,
            [bug.candidate.diff for bug in bugs],
            settings.held_out,
            settings.seed,
            settings.workers,
            cache,
        )
        shutil.rmtree(grader.repos.path_for(task), ignore_errors=True)
    # the toolchain beyond the default: the rows carry it, so a run with the default one grades them alike
    default = WorkspaceConfig().toolchain
    test_deps = tuple(name for name in grader.workspace.toolchain if name not in default)
    tasks: list[SynthTask] = []
    for bug, checks in zip(bugs, hidden, strict=True):
        candidate = bug.candidate
        tasks.append(
            SynthTask(
                task_id=f"{repo_name}.synth__{candidate.site.kind}__{candidate.key[:8]}",
                files={**files, candidate.path: candidate.content},
                fix={candidate.path: files[candidate.path]},
                statement=statements[candidate.key],
                # the held-out checks after the visible tests: a trajectory runs the first failing one
                fail_to_pass=bug.fail_to_pass + (checks.failing if checks else ()),
                pass_to_pass=bug.pass_to_pass + (checks.passing if checks else ()),
                split="eval"
                if _eval_function(candidate.function, settings.eval_fraction, settings.seed)
                else "train",
                uncollectable=tuple(excluded),
                test_deps=test_deps,
                test_modules=tuple(modules),
                info={
                    "bug_kind": candidate.site.kind,
                    "function": candidate.function,
                    "line": candidate.site.line,
                    "source": repo_name,
                    **held_out_counts(checks),
                },
                hidden_files=checks.files if checks else {},
            )
        )
    stats = {
        "source": repo_name,
        "functions": found,
        "functions_tried": len(groups),
        "candidates": sum(len(g) for g in groups.values()),
        "validated": validated,
        "kept": len(tasks),
        "rejected": dict(sorted(rejected.items())),
        "kinds": dict(sorted(Counter(t.info["bug_kind"] for t in tasks).items())),
        "clean_tests": len(clean.ids),
        "excluded_test_modules": excluded,
        "not_configured_test_files": unconfigured,
        "renamed_test_files": renamed,
        "added_metadata": sorted(metadata),
        "failing_at_base": len(clean.failing),
        "unstable_test_ids": len(clean.unstable),
        "flaky_tests": list(flaky),
        "held_out": {
            "tasks_with_checks": sum(1 for t in tasks if t.hidden_files),
            "checks": sum(t.info["held_out_checks"] for t in tasks),
            "failing_checks": sum(t.info["held_out_failing"] for t in tasks),
        },
        "wall_s": round(time.monotonic() - start, 2),
    }
    stats["kept_fraction"] = round(len(tasks) / validated, 3) if validated else 0.0
    stats["seconds_per_validated"] = round(stats["wall_s"] / validated, 3) if validated else None
    return RepoSynthesis(repo_name, tasks, files, stats)
