"""Give debugging rows written by hand the held-out checks a synthesized task gets.

A debugging row shows all its tests to the agent, so hard-coded answers to them (``if args ==
(2, 3): return 5`` for each call the tests make) pass with the bug in place. For each row with a
reference ``fix`` and no ``hidden_files``, this adds up to ``--count`` checks: its tests' calls
with changed literal arguments (or whole test functions with changed literals, their asserts'
values recorded), answered by the fixed program in the sandbox, kept when the bug
answers some of them otherwise (``lit_codeRL/problems/synth/row_checks.py``). The grader adds them
after the agent's diff; they are never in the workspace. Rows it cannot give checks are written
unchanged, and counted.

    python scripts/add_held_out_checks.py my_rows.jsonl --out my_rows_checked.jsonl
    python scripts/add_held_out_checks.py data/debug/src --write-src   # the shipped tasks' sources

With ``--write-src`` the input is ``data/debug/src`` (``scripts/make_debug_tasks.py``'s sources):
each task's checks are written to ``<task>/held_out/``, which that script reads into its row.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lit_codeRL.grading import SWEGrader  # noqa: E402
from lit_codeRL.problems.debug import task_from_row  # noqa: E402
from lit_codeRL.problems.swe import RepoCache  # noqa: E402
from lit_codeRL.problems.synth.row_checks import row_checks, with_checks  # noqa: E402
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig  # noqa: E402


def checked_rows(rows: Sequence[dict[str, Any]], count: int, seed: int, workers: int) -> list[dict[str, Any]]:
    """``rows`` with checks added where they can be (the same row where not)."""
    with tempfile.TemporaryDirectory(prefix="lcrl-row-checks-") as tmp:
        grader = SWEGrader(WorkspaceConfig(), RepoCache(Path(tmp) / "prepared"))

        def one(numbered: tuple[int, dict[str, Any]]) -> dict[str, Any]:
            line, row = numbered
            task = task_from_row(row, f"row {line}", row.get("split", "train"))
            checks = row_checks(task, grader, count, seed)
            return with_checks(row, checks) if checks else row

        with ThreadPoolExecutor(max(1, workers)) as pool:
            return list(pool.map(one, enumerate(rows, 1)))


def main(argv: Sequence[str] | None = None) -> dict[str, int]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", help="a debugging rows file (.jsonl), or data/debug/src with --write-src")
    parser.add_argument("--out", help="where to write the rows with checks (.jsonl)")
    parser.add_argument(
        "--write-src", action="store_true", help="write each task's checks to <task>/held_out/"
    )
    parser.add_argument("--count", type=int, default=5, help="checks a row gets at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    if args.write_src:
        sys.path.insert(0, str(ROOT / "scripts"))
        import make_debug_tasks

        src = Path(args.rows)
        dirs = [d for d in sorted(src.iterdir()) if (d / "task.json").is_file()]
        # made again from the program and its tests alone: the checks there now are dropped
        rows = [{k: v for k, v in make_debug_tasks.build_row(d).items() if k != "hidden_files"} for d in dirs]
        out = checked_rows(rows, args.count, args.seed, args.workers)
        for directory, row in zip(dirs, out, strict=True):
            shutil.rmtree(directory / "held_out", ignore_errors=True)
            for entry in row.get("hidden_files", ()):
                target = directory / "held_out" / entry["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(entry["content"], encoding="utf-8")
    else:
        if not args.out:
            parser.error("--out is needed (or --write-src)")
        with open(args.rows, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        out = checked_rows(rows, args.count, args.seed, args.workers)
        Path(args.out).write_text(
            "".join(json.dumps(row, sort_keys=True) + "\n" for row in out), encoding="utf-8"
        )
    counts = {
        "rows": len(out),
        "with_checks": sum(1 for row in out if row.get("hidden_files")),
        "checks": sum(
            row.get("extra_info", {}).get("held_out_checks", 0) for row in out if row.get("hidden_files")
        ),
    }
    print(json.dumps(counts))
    return counts


if __name__ == "__main__":
    main()
