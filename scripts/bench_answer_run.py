"""Which failing tests the answer run asks, and what it costs a resolved grade.

    python scripts/bench_answer_run.py [--swe embedded] [--debug embedded mbpp:../shared/data/mbpp]
                                       [--limit 60] [--repeats 5] [--workers 2]
                                       [--out bench_results/answer_run.json]

Each task is validated by a fresh grader (``grading/repo.py: SWEGrader.validate``), whose answer
run of the reference patch decides which FAIL_TO_PASS test functions are *answered*: every check
of theirs compares a computed value with a literal, and the reference answers each with it in a
process with no test in it (``grading/_answers.py``). On an answered test, a pass forged past the
in-process checks, or an answer read from the test, is ``tamper``. Then the reference patch of
the first tasks that have an answered test is graded ``--repeats`` times with the answer run
and without it, alternating (the mirror runs on in both), for the median cost. Prints a table
and writes JSON with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_workspace import cpu_info  # noqa: E402

from lit_codeRL.grading import SWEGrader  # noqa: E402
from lit_codeRL.problems.debug_rows import load_debug_tasks  # noqa: E402
from lit_codeRL.problems.debug_task import DebugTaskInvalid  # noqa: E402
from lit_codeRL.problems.swe import RepoCache, load_swe_tasks  # noqa: E402
from lit_codeRL.sandbox.workspace import WorkspaceConfig  # noqa: E402


def swe_tasks(source: str, limit: int | None, grader: SWEGrader, cache: Path) -> list[Any]:
    return load_swe_tasks(source, split="all")[:limit]


def debug_tasks(source: str, limit: int | None, grader: SWEGrader, cache: Path) -> list[Any]:
    tasks = []
    for task in load_debug_tasks(source, split="all", limit=limit):
        try:
            tasks.append(task.to_swe_task(cache / "debug", grader))
        except DebugTaskInvalid:
            continue
    return tasks


def measure(kind: str, source: str, limit: int | None, repeats: int, timed: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="lcrl-bench-answers-") as cache:
        root = Path(cache)
        grader = SWEGrader(WorkspaceConfig(), RepoCache(root / "prepared"))
        tasks = (swe_tasks if kind == "swe" else debug_tasks)(source, limit, grader, root)
        start = time.monotonic()
        with ThreadPoolExecutor(max(1, workers)) as pool:
            reasons = list(pool.map(grader.validate, tasks))
        validate_s = time.monotonic() - start
        valid = [t for t, why in zip(tasks, reasons, strict=True) if why is None]
        functions = [sorted({str(n).partition("[")[0] for n in t.fail_to_pass}) for t in valid]
        answered = [grader.answered(t) for t in valid]
        unanswered = SWEGrader(WorkspaceConfig(), grader.repos, answer_check=False)
        for task in valid:  # the same limits: validated by the other grader too
            unanswered.validate(task)
        with_s, without_s, graded = [], [], [t for t, a in zip(valid, answered, strict=True) if a][:timed]
        for _ in range(repeats):
            for task in graded:
                for which, times in ((grader, with_s), (unanswered, without_s)):
                    grade = which.grade(task, task.patch)
                    assert grade.resolved, (task.instance_id, grade.reason)
                    times.append(grade.wall_s)
    return {
        "tasks": len(tasks),
        "valid": len(valid),
        "failing_functions": sum(len(f) for f in functions),
        "answered_functions": sum(len(a) for a in answered),
        "tasks_all_answered": sum(
            1 for f, a in zip(functions, answered, strict=True) if f and len(a) == len(f)
        ),
        "tasks_none_answered": sum(1 for a in answered if not a),
        "unanswered_functions": sorted(
            f"{t.instance_id}: {f}"
            for t, fs, a in zip(valid, functions, answered, strict=True)
            for f in fs
            if f not in a
        )[:50],
        "validate_s": round(validate_s, 1),
        "timed_tasks": len(graded),
        "resolved_grade_s_with": round(statistics.median(with_s), 3) if with_s else None,
        "resolved_grade_s_without": round(statistics.median(without_s), 3) if without_s else None,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--swe", nargs="*", default=["embedded"], help="problems.source swe:<SOURCE> values")
    ap.add_argument("--debug", nargs="*", default=["embedded"], help="debugging task sources")
    ap.add_argument("--limit", type=int, default=None, help="first tasks of each source")
    ap.add_argument("--repeats", type=int, default=5, help="timed grades of each timed task, each way")
    ap.add_argument("--timed", type=int, default=3, help="tasks with an answered test timed")
    ap.add_argument("--workers", type=int, default=2, help="validations at once")
    ap.add_argument("--out", default=str(REPO / "bench_results" / "answer_run.json"))
    args = ap.parse_args(argv)
    results = {}
    head = (
        f"{'source':44s} {'tasks':>5s} {'valid':>5s} {'F2P fn':>6s} {'answered':>8s} {'all':>4s} {'none':>4s}"
    )
    print(f"{head} {'with s':>7s} {'w/o s':>7s}")
    for kind, sources in (("swe", args.swe), ("debug", args.debug)):
        for source in sources:
            row = measure(kind, source, args.limit, args.repeats, args.timed, args.workers)
            results[f"{kind}:{source}"] = row
            print(
                f"{(kind + ':' + source)[-44:]:44s} {row['tasks']:5d} {row['valid']:5d}"
                f" {row['failing_functions']:6d} {row['answered_functions']:8d} {row['tasks_all_answered']:4d}"
                f" {row['tasks_none_answered']:4d} {row['resolved_grade_s_with'] or 0:7.2f}"
                f" {row['resolved_grade_s_without'] or 0:7.2f}"
            )
    out = {"cpu": cpu_info(), "python": platform.python_version(), "sources": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
