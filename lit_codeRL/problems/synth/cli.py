"""``lit-coderl synth SOURCE... --out DIR``: synthesized, validated SWE and debugging tasks.

Sources: a repository with a passing test suite (a directory, git or not, or a git bundle);
``swe`` (the shipped SWE repositories, ``data/swe/src/*/base``); ``debug`` (the shipped debugging
programs with their fixes applied); ``mbpp:<MBPP file or dir>`` (single-file tasks from MBPP's
reference solutions; ``--mbpp-split``). Writes ``DIR/swe/tasks.jsonl`` with ``DIR/swe/repos/*.bundle``
(``problems.source: swe:DIR/swe/tasks.jsonl``), ``DIR/debug/tasks.jsonl``
(``problems.source: debug:DIR/debug/tasks.jsonl``) and ``DIR/report.json``: per source the
functions, candidates, how many were validated, kept and why the others were rejected, the
mutation kinds kept, and seconds per kept task. The final check (``--no-check`` skips it) then
grades every SWE row both ways in the sandbox (the gold patch resolves it, the base does not) with
the default toolchain and the row's ``test_deps``, and validates every debugging row as a
debugging run does (in that run's cache, so the run finds them validated); it drops the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug import default_grader, load_debug_tasks, why_not_trainable
from lit_codeRL.problems.files import embedded_data_dir
from lit_codeRL.problems.mbpp import canonical_split
from lit_codeRL.problems.swe import RepoCache, load_swe_tasks
from lit_codeRL.problems.synth.mbpp import MBPPBugSettings, mbpp_bug_rows, mbpp_split_of
from lit_codeRL.problems.synth.mutations import MUTATION_KINDS
from lit_codeRL.problems.synth.repository import SynthSettings, read_repository, synthesize_files
from lit_codeRL.problems.synth.tasks import SynthTask, debug_row, slug, swe_rows, write_jsonl
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig
from lit_codeRL.sandbox.workspace_toolchain import with_test_deps

log = logging.getLogger(__name__)


def shipped_swe_repositories() -> list[tuple[str, dict[str, str | bytes]]]:
    """The shipped SWE repositories' base trees (their suites pass; the hand-written tasks'
    bugs are only caught by the tests their test patches add)."""
    return [read() for _, read in _shipped_swe_readers()]


def shipped_debug_programs() -> list[tuple[str, dict[str, str | bytes]]]:
    """The shipped debugging programs with their reference fixes applied."""
    return [read() for _, read in _shipped_debug_readers()]


Reader = Callable[[], tuple[str, dict[str, str | bytes]]]
"""Reads one repository: its name and files (path -> content)."""


def _shipped_swe_readers() -> list[tuple[str, Reader]]:
    def read(repo_dir: Path) -> tuple[str, dict[str, str | bytes]]:
        try:
            meta = json.loads((repo_dir.parent / "repo.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ConfigError(f"synth: {repo_dir.parent / 'repo.json'}: {err}") from None
        _, files = read_repository(repo_dir)
        name = meta.get("repo") if isinstance(meta, dict) else None
        return str(name or repo_dir.parent.name), files

    found = sorted((embedded_data_dir() / "swe" / "src").glob("*/base"))
    return [(f"swe:{repo_dir.parent.name}", partial(read, repo_dir)) for repo_dir in found]


def _shipped_debug_readers() -> list[tuple[str, Reader]]:
    tasks = [task for task in load_debug_tasks("embedded", "all") if task.fix is not None]

    def read(task: Any) -> tuple[str, dict[str, str | bytes]]:
        return slug(task.task_id), {**task.files, **(task.fix or {})}

    return [(f"debug:{slug(task.task_id)}", partial(read, task)) for task in tasks]


def _readers(source: str) -> list[tuple[str, Reader]]:
    """Each repository of ``source`` as (its label in ``failed_sources``, its reader): read one
    at a time, so one that cannot be read or synthesized is its own failure, not its source's."""
    if source == "swe":
        return _shipped_swe_readers()
    if source == "debug":
        return _shipped_debug_readers()
    return [(source, partial(read_repository, source))]


def mbpp_tasks(source: str, split: str, settings: MBPPBugSettings) -> tuple[list[SynthTask], dict[str, Any]]:
    """The MBPP bugs of ``split`` as tasks. Every split comes from one screening of all of MBPP,
    the one ``debug:mbpp:<path>`` reads (cached): the SWE rows of a split are the same bugs as
    its debugging tasks, so one policy's two envs can be compared task by task."""
    rows, stats = mbpp_bug_rows(source, "all", settings)
    wanted = canonical_split(split or "all")
    rows = [row for row in rows if wanted in ("all", mbpp_split_of(row["extra_info"]["mbpp_task_id"]))]
    stats = {**stats, "split": wanted, "kept_in_split": len(rows)}
    tasks = []
    for row in rows:
        files = {f["path"]: f["content"] for f in row["files"]}
        hidden = {f["path"]: f["content"] for f in row.get("hidden_files", ())}
        held_out = [f"{path}::{name}" for path, text in hidden.items() for name in _test_names(text)]
        # the held-out checks the bug fails come first in their module (``held_out.choose``)
        failing = (
            *row["extra_info"]["failing_tests"],
            *held_out[: row["extra_info"].get("held_out_failing", 0)],
        )
        tests = sorted(f"test_solution.py::{name}" for name in _test_names(files["test_solution.py"]))
        tests += held_out
        tasks.append(
            SynthTask(
                task_id=row["task_name"],
                files=files,
                fix={f["path"]: f["content"] for f in row["fix"]},
                statement=row["description"],
                fail_to_pass=failing,
                pass_to_pass=tuple(t for t in tests if t not in failing),
                split=row["split"],
                info={k: v for k, v in row["extra_info"].items() if k != "failing_tests"},
                hidden_files=hidden,
            )
        )
    return tasks, stats


def _test_names(source: str) -> list[str]:
    return [line[4:].split("(")[0] for line in source.splitlines() if line.startswith("def test_")]


def check_swe_rows(path: Path, grader: SWEGrader, workers: int) -> dict[str, str]:
    """Why each SWE row of ``path`` fails the two-way check (gold resolves, base does not)."""
    tasks = load_swe_tasks(str(path), "all")

    def one(task: Any) -> str | None:
        try:
            return grader.validate(task)
        except RuntimeError as err:
            return f"sandbox error: {err}"

    with ThreadPoolExecutor(max(1, workers)) as pool:
        reasons = list(pool.map(one, tasks))
    return {t.instance_id: why for t, why in zip(tasks, reasons, strict=True) if why}


def check_debug_rows(path: Path, workers: int) -> dict[str, str]:
    """Why each debugging row of ``path`` cannot be trained on, decided as a debugging run with
    the default settings decides it (base measured, the fix resolves, the base does not), in that
    run's cache (``$LIT_CODERL_DEBUG_CACHE``): such a run then finds every row validated."""
    tasks = load_debug_tasks(str(path))
    reasons = why_not_trainable(tasks, default_grader(), None, workers, sandbox_errors_as_reasons=True)
    return {t.task_id: why for t, why in zip(tasks, reasons, strict=True) if why}


def _unique(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``... when a source before it had that name (its bundle's
    file name, ``slug``'s, included): two repositories both called ``pkg`` wrote one
    ``repos/pkg.bundle``, the second over the first, and their tasks could share ids."""
    unique, n = name, 1
    while slug(unique) in taken:
        n += 1
        unique = f"{name}-{n}"
    taken.add(slug(unique))
    return unique


def _synthesize_source(
    source: str, args: argparse.Namespace, settings: SynthSettings, grader: SWEGrader, taken: set[str]
) -> Iterator[tuple[str, tuple[str, list[SynthTask], dict[str, Any]] | str]]:
    """Each repository of one source as (its label, its name, tasks and report entry, or why it
    gave none); ``taken``: the names of the repositories before it. A repository that cannot be
    read or synthesized (a broken bundle, a suite that does not pass) is its own failure: the
    tasks of the others of its source still count."""
    if source == "mbpp" or source.startswith("mbpp:"):
        mbpp = MBPPBugSettings(args.per_function, args.tries, settings.kinds, args.seed, args.held_out)
        try:
            tasks, stats = mbpp_tasks(source, args.mbpp_split, mbpp)
        except (ConfigError, FileNotFoundError) as err:
            yield source, str(err)
            return
        except Exception as err:  # as a repository's below
            log.exception("synth: %s: stopped by an unexpected error", source)
            yield source, _unexpected(source, err)
            return
        yield source, ("mbpp", tasks, stats)
        return
    try:
        readers = _readers(source)
    except (ConfigError, FileNotFoundError) as err:
        yield source, str(err)
        return
    if not readers:
        yield source, f"synth: {source}: no repository found"
    for label, read in readers:
        try:
            name, files = read()
            name = _unique(name, taken)
            result = synthesize_files(name, files, grader, settings)
        except (ConfigError, FileNotFoundError) as err:
            yield label, str(err)
            continue
        except Exception as err:  # one repository's surprise must not end hours of the others'
            # a repository is input no one has read (its tests' values, its output): an error of
            # ours it brings out costs that repository, with the traceback in the log to report
            log.exception("synth: %s: stopped by an unexpected error", label)
            yield label, _unexpected(label, err)
            continue
        yield label, (name, result.tasks, result.stats)


def _unexpected(label: str, err: Exception) -> str:
    """The one line a source stopped by an error of ours is reported with."""
    text = " ".join(str(err).split())[:300]
    return (
        f"synth: {label}: unexpected error (a bug of lit-coderl, its traceback logged): {type(err).__name__}"
        + (f": {text}" if text else "")
    )


_OUTPUTS = ("report.json", "swe", "debug")
"""What synthesis writes in ``--out``."""


def _output_dir(out: Path) -> Path:
    """``out`` made and checked writable before any synthesis: a file, a path that cannot be made
    or written, or a non-empty directory holding no synth output (a user's repository, which the
    rows would be scattered into) is a one-line ``ConfigError``. A previous output (its
    ``report.json`` there) is removed first: written over, its bundles of repositories this run does not synthesize stayed beside
    the new rows."""
    if out.is_file():
        raise ConfigError(f"synth: --out {out} is a file: name a directory")
    if (
        out.is_dir()
        and not (out / "report.json").is_file()
        and {p.name for p in out.iterdir()} - set(_OUTPUTS)
    ):
        raise ConfigError(
            f"synth: --out {out} is not empty and holds no synth output ({', '.join(_OUTPUTS)}): "
            "name a new or empty directory"
        )
    try:
        for name in _OUTPUTS if (out / "report.json").is_file() else ():
            previous = out / name
            if previous.is_dir() and not previous.is_symlink():
                shutil.rmtree(previous)
            elif previous.exists() or previous.is_symlink():
                previous.unlink()
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        raise ConfigError(f"synth: cannot create or write --out {out}: {err.strerror or err}") from None
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="lit-coderl synth", description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="repository dirs/bundles, swe, debug, mbpp:<path>")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--kinds", default=",".join(MUTATION_KINDS), help="comma-separated mutation kinds")
    parser.add_argument(
        "--per-function", type=int, default=1, help="bugs kept per function (MBPP: per problem)"
    )
    parser.add_argument("--tries", type=int, default=6, help="candidates validated per function at most")
    parser.add_argument(
        "--max-functions",
        type=int,
        default=None,
        help="functions tried per repository at most (a seeded sample; every candidate runs the whole suite)",
    )
    parser.add_argument("--max-fail-to-pass", type=int, default=10)
    parser.add_argument(
        "--min-pass-to-pass", type=int, default=1, help="repositories; MBPP tasks may fail every assert"
    )
    parser.add_argument(
        "--eval-fraction", type=float, default=0.3, help="share of functions held out (repositories)"
    )
    parser.add_argument(
        "--mbpp-split", default="all", help="MBPP split(s) to use: train, test, validation, all"
    )
    parser.add_argument("--workers", type=int, default=2, help="sandboxed validations at a time")
    parser.add_argument(
        "--test-deps",
        default="",
        help="comma-separated distributions the tests import, besides pytest (hypothesis,six): "
        "installed here, importable read-only in the sandbox; train with the same "
        "workspace.toolchain (pytest plus these)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--held-out",
        type=int,
        default=MBPPBugSettings.held_out,
        help="hidden checks a task gets at most: the tests' calls with changed literal arguments, "
        "answered by the reference (MBPP) or the clean repository, graded and never in the workspace "
        "(the debugging row's hidden_files, the SWE row's test_patch); 0: none",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip the final check (the two-way grade of every SWE row, every debugging row validated)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="run every test suite again ($LIT_CODERL_SYNTH_CACHE keeps the runs of repositories)",
    )
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = sorted(set(kinds) - set(MUTATION_KINDS))
    if unknown:
        raise ConfigError(f"unknown mutation kinds {unknown}; choose from {', '.join(MUTATION_KINDS)}")
    settings = SynthSettings(
        kinds=kinds,
        per_function=args.per_function,
        tries_per_function=args.tries,
        max_functions=args.max_functions,
        max_fail_to_pass=args.max_fail_to_pass,
        min_pass_to_pass=args.min_pass_to_pass,
        eval_fraction=args.eval_fraction,
        workers=args.workers,
        seed=args.seed,
        held_out=args.held_out,
        cache=not args.no_cache,
    )
    out = _output_dir(args.out)
    report: dict[str, Any] = {"settings": {**vars(args), "out": str(out)}, "sources": []}
    failed: dict[str, str] = {}
    swe: list[dict[str, Any]] = []
    debug: list[dict[str, Any]] = []
    start = time.monotonic()
    workspace = WorkspaceConfig(toolchain=with_test_deps(args.test_deps))
    taken: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="lcrl-synth-cache-") as cache:
        grader = SWEGrader(workspace, RepoCache(Path(cache) / "prepared"))
        for source in args.sources:
            began, made, gave = time.monotonic(), 0, False
            for label, result in _synthesize_source(source, args, settings, grader, taken):
                if isinstance(result, str):  # the other repositories and sources still count
                    failed[label] = result
                    if len(args.sources) > 1 or label != source:  # else it is the error at the end
                        print(f"synth: {label}: skipped: {result}", file=sys.stderr)
                    continue
                name, tasks, stats = result
                swe += swe_rows(tasks, out / "swe", name)
                debug += [debug_row(t) for t in tasks]
                report["sources"].append({"source": source, "name": name, **stats})
                made, gave = made + len(tasks), True
            if gave:
                print(f"synth: {source}: {made} tasks in {time.monotonic() - began:.0f} s")
        write_jsonl(out / "swe" / "tasks.jsonl", swe)
        dropped: dict[str, str] = {}
        if not args.no_check and swe:
            # as a training run with the default toolchain grades them: the rows' own test_deps
            # must bring what their tests import
            checker = SWEGrader(WorkspaceConfig(), grader.repos)
            dropped = check_swe_rows(out / "swe" / "tasks.jsonl", checker, args.workers)
            swe = [row for row in swe if row["instance_id"] not in dropped]
            debug = [row for row in debug if row["task_name"] not in dropped]
            write_jsonl(out / "swe" / "tasks.jsonl", swe)
        write_jsonl(out / "debug" / "tasks.jsonl", debug)
        debug_dropped: dict[str, str] = {}
        if not args.no_check and debug:
            # its own check: a debugging row runs the modules that collect, its SWE row their files
            debug_dropped = check_debug_rows(out / "debug" / "tasks.jsonl", args.workers)
            debug = [row for row in debug if row["task_name"] not in debug_dropped]
            write_jsonl(out / "debug" / "tasks.jsonl", debug)
    wall = time.monotonic() - start
    report.update(
        {
            "tasks": len(swe),
            "train": sum(r["split"] == "train" for r in swe),
            "eval": sum(r["split"] == "eval" for r in swe),
            "dropped_by_check": dropped,
            "debug_tasks": len(debug),
            "debug_dropped_by_check": debug_dropped,
            "failed_sources": failed,
            "checked": not args.no_check,
            "wall_s": round(wall, 1),
            "seconds_per_task": round(wall / max(1, len(swe)), 3),
        }
    )
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    if failed and not report["sources"]:  # nothing synthesized: the first reason is the error
        raise ConfigError(next(iter(failed.values())))
    print(
        f"synth: {len(swe)} tasks ({report['train']} train, {report['eval']} eval) in {wall:.0f} s; "
        f"{len(dropped)} dropped by the final check ({len(debug_dropped)} more debugging rows); "
        f"rows in {out}/swe/tasks.jsonl and {out}/debug/tasks.jsonl"
    )
    return report


def command(argv: list[str]) -> None:
    """The console entry: errors as one line, exit status 2."""
    try:
        main(argv)
    except (ConfigError, FileNotFoundError) as err:
        print(f"lit-coderl synth: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
