"""``lit-coderl regrade ROLLOUTS.jsonl``: score the diffs of dumped SWE episodes again, without the model.

Every SWE episode's record in ``rollouts.jsonl`` carries its ``instance_id`` and final ``diff``
(``env.py``), so a grader fix (or another grading setting) can be applied to a finished run: each
diff is graded in a fresh workspace exactly as during training, and a JSONL file of the new grades
plus a summary (how many grades changed) is written.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lit_codeRL.envs.workspace_episodes import check_test_deps
from lit_codeRL.errors import ConfigError
from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.swe import RepoCache, SWETask, load_swe_tasks, to_problem
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from lit_codeRL.sandbox.workspace_toolchain import with_test_deps


def episodes(path: Path) -> Iterator[dict[str, Any]]:
    """The SWE episode records of a rollout dump (those with an ``instance_id`` and a ``diff``)."""
    with path.open() as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                if "instance_id" in record and "diff" in record:
                    yield record


def regrade(
    rollouts: Path,
    source: str = "embedded",
    out: Path | None = None,
    partial_credit: bool = False,
    parallel: int = 2,
    toolchain: tuple[str, ...] = ("pytest",),
) -> dict[str, Any]:
    """Grade every dumped diff again; writes ``out`` (default ``<rollouts>.regraded.jsonl``).
    ``toolchain``: the distributions the tests may import (the run's ``workspace.toolchain``;
    each row's ``test_deps`` are added to it for its own task, as in training)."""
    if not rollouts.is_file():
        raise ConfigError(f"no rollout dump at {rollouts}")
    tasks: dict[str, SWETask] = {t.instance_id: t for t in load_swe_tasks(source, split="all")}
    records = list(episodes(rollouts))
    if not records:
        raise ConfigError(f"{rollouts} holds no SWE episodes (records with instance_id and diff)")
    unknown = sorted({r["instance_id"] for r in records} - tasks.keys())
    if unknown:
        raise ConfigError(f"tasks not found in source {source!r}: {', '.join(unknown[:5])}")
    grader = SWEGrader(WorkspaceConfig(toolchain=toolchain), RepoCache(), partial_credit=partial_credit)
    used = dict.fromkeys(r["instance_id"] for r in records)
    check_test_deps([to_problem(tasks[i]) for i in used], grader.workspace)
    with ThreadPoolExecutor(parallel) as pool:
        grades = list(pool.map(lambda r: grader.grade(tasks[r["instance_id"]], r["diff"]), records))
    out = out or rollouts.with_suffix(".regraded.jsonl")
    changed = 0
    with out.open("w") as f:
        for record, grade in zip(records, grades, strict=True):
            before = (record.get("grade") or {}).get("reward")
            changed += before is not None and before != grade.reward
            row = {
                "instance_id": record["instance_id"],
                "step": record.get("step"),
                "group": record.get("group"),
                "reward_before": before,
                "reward": grade.reward,
                "grade": grade.to_dict(),
            }
            f.write(json.dumps(row) + "\n")
    summary = {
        "episodes": len(records),
        "resolved": sum(g.resolved for g in grades),
        "changed": changed,
        "infra_errors": sum(g.infra_error for g in grades),
        "out": str(out),
    }
    return summary


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="lit-coderl regrade", description=__doc__.split("\n\n")[0])
    parser.add_argument("rollouts", type=Path, help="a rollouts.jsonl of a SWE run")
    parser.add_argument(
        "--source", default="embedded", help="the task source of the run (problems.source without 'swe:')"
    )
    parser.add_argument("--out", type=Path, default=None, help="where the new grades go")
    parser.add_argument("--partial-credit", action="store_true")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument(
        "--test-deps",
        default="",
        help="comma-separated distributions the tests import besides pytest (the run's workspace.toolchain)",
    )
    args = parser.parse_args(argv)
    summary = regrade(
        args.rollouts,
        args.source,
        args.out,
        args.partial_credit,
        args.parallel,
        with_test_deps(args.test_deps),
    )
    print(json.dumps(summary, indent=1))
