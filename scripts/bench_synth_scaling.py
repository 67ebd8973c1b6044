"""How candidate generation of ``lit-coderl synth`` scales with a file's length: the seconds
``candidates_by_function`` (every mutant of a file, as a de-duplicated diff) takes on one generated
module of N functions, with and without a final newline.

    python scripts/bench_synth_scaling.py [--functions 250 500 1000]
                                          [--out bench_results/synth_scaling.json]

Linear is the target: seconds per candidate the same at every N. (Before: 4.6, 11.3 and 43.9 s
for 250, 500 and 1,000 functions, each candidate's diff made from the whole new file; without a
final newline every site also rendered the whole module again: 250 functions, 543 s.)
Prints a table and writes JSON with the CPU named.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.problems.synth.candidates import candidates_by_function  # noqa: E402


def module(functions: int) -> str:
    """``functions`` small functions, each with sites of several kinds, ending in a newline."""
    return "\n\n".join(
        f"def f{i}(x, y):\n    total = 0\n    for k in range(x):\n        if k % 3 == {i % 3}:\n"
        f"            total += k * y\n    return total - {i}\n"
        for i in range(functions)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--functions", type=int, nargs="+", default=[250, 500, 1000])
    parser.add_argument("--out", type=Path, default=REPO / "bench_results" / "synth_scaling.json")
    args = parser.parse_args()
    rows = []
    for n in args.functions:
        for final_newline in (True, False):
            source = module(n) if final_newline else module(n).rstrip("\n")
            t0 = time.perf_counter()
            groups = candidates_by_function({"pkg/mod.py": source})
            seconds = time.perf_counter() - t0
            count = sum(len(group) for group in groups.values())
            rows.append(
                {
                    "functions": n,
                    "lines": source.count("\n") + 1,
                    "final_newline": final_newline,
                    "candidates": count,
                    "seconds": round(seconds, 2),
                    "ms_per_candidate": round(1000 * seconds / count, 2),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    lines = [
        "| functions | lines | final newline | candidates | s | ms per candidate |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['functions']} | {r['lines']} | {'yes' if r['final_newline'] else 'no'} | {r['candidates']} "
        f"| {r['seconds']} | {r['ms_per_candidate']} |"
        for r in rows
    ]
    table = "\n".join(lines)
    print(table)
    from lit_codeRL.policy.cpu_path import cpu_path

    result = {
        "workload": {"functions": args.functions},
        "cpu": cpu_path(),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "results": rows,
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
