"""Which SWE tasks the mirror run protects: a pass forged past the in-process checks is caught there.

    python scripts/bench_mirror_armed.py [SOURCE ...] [--workers 2]
                                         [--out bench_results/synth_mirror_armed.json]

``SOURCE``: what ``problems.source: swe:<SOURCE>`` reads (default ``embedded``, the shipped tasks;
a ``tasks.jsonl`` that ``lit-coderl synth`` wrote). Each task's reference patch is graded with
its mirror run (``grading/_mirror.py``), as validation grades it; a task whose mirror run armed
no test (no check its FAIL_TO_PASS tests make can be changed so that an honest fix fails it) is
*unarmed*: there, a forged pass that the child's in-process checks miss would be paid. Prints a
table (tasks, reference verdicts, unarmed, seconds) and writes JSON with the unarmed task ids and
the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_workspace import cpu_info  # noqa: E402

from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings  # noqa: E402
from lit_codeRL.problems.swe import load_swe_tasks  # noqa: E402
from lit_codeRL.sandbox.workspace import WorkspaceConfig  # noqa: E402


def measure(source: str, workers: int) -> dict:
    """Grade every reference patch of ``source`` with its mirror run; the unarmed tasks."""
    tasks = load_swe_tasks(source, split="all")
    with tempfile.TemporaryDirectory(prefix="lcrl-bench-mirror-") as cache:
        env = ContainerEnv(
            data_name_or_path=None, settings=SWESettings(workspace=WorkspaceConfig(), repo_cache=cache)
        )
        for task in tasks:
            env.repos.get(task)
        start = time.monotonic()
        with ThreadPoolExecutor(max(1, workers)) as pool:
            grades = list(pool.map(lambda t: env.grader.grade(t, t.patch), tasks))
        wall = time.monotonic() - start
        unarmed = sorted(t.instance_id for t in tasks if env.grader.mirror_armed(t) is False)
    return {
        "tasks": len(tasks),
        "reference_verdicts": dict(Counter(g.verdict for g in grades)),
        "unarmed": len(unarmed),
        "unarmed_ids": unarmed,
        "wall_s": round(wall, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sources", nargs="*", default=["embedded"])
    ap.add_argument("--workers", type=int, default=2, help="grading runs at once")
    ap.add_argument("--out", default=str(REPO / "bench_results" / "synth_mirror_armed.json"))
    args = ap.parse_args(argv)
    results = {}
    print(f"{'source':60s} {'tasks':>6s} {'unarmed':>8s} {'s':>7s}  reference verdicts")
    for source in args.sources:
        results[source] = row = measure(source, args.workers)
        print(
            f"{source[-60:]:60s} {row['tasks']:6d} {row['unarmed']:8d} {row['wall_s']:7.1f}  {row['reference_verdicts']}"
        )
    out = {"cpu": cpu_info(), "python": platform.python_version(), "sources": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
