"""Peak memory per rank of the training forward+backward of one long episode, on 1 rank and with
its sequence split over 2 (context parallelism, ``model.sequence_parallel_size``). A table and
``bench_results/context_parallel.json``.

    python scripts/bench_context_parallel.py                     # SmolLM2-135M, 2048 and 4096 tokens
    python scripts/bench_context_parallel.py --lengths 8192 --model tiny-random

Each configuration runs in fresh processes (gloo on CPU): the policy is loaded, the resident
memory noted, its peak reset (``/proc/self/clear_refs``), then one forward and backward of a
``--rows`` x ``L`` batch through ``training/context_parallel.py`` (a group of 1 is the unsharded
forward plus two no-op gathers), and the peak resident memory above the noted level is each
rank's figure. The gradient is checked against the 1-rank run (max relative difference).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _worker(rank: int, world: int, port: int, model_name: str, rows: int, length: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sys.path.insert(0, str(REPO))
    from lit_codeRL.policy.loading import load_model
    from lit_codeRL.training.context_parallel import context_parallel_logprobs

    model, _ = load_model(name_or_path=model_name)
    model.train()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 20000, (rows, length), generator=gen)
    mask = torch.ones_like(ids)
    start = 64  # a short prompt, the rest the episode's turns
    base = _rss_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    t = time.perf_counter()
    logps, _ = context_parallel_logprobs(model, ids, mask, start)
    logps.sum().backward()
    seconds = time.perf_counter() - t
    peak = _rss_mb("VmHWM") - base
    grad = model.model.layers[0].mlp.up_proj.weight.grad.clone()
    dist.all_reduce(grad)
    peaks = [None] * world
    dist.all_gather_object(peaks, peak)
    if rank == 0:
        torch.save({"peaks": peaks, "seconds": seconds, "grad": grad}, out)
    dist.destroy_process_group()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--lengths", default="2048,4096")
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "bench_results" / "context_parallel.json"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from lit_codeRL.policy.cpu_path import cpu_path

    results = []
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    for length in [int(v) for v in args.lengths.split(",")]:
        runs = {}
        for world in (1, 2):
            out = tmp / f"cp_bench_{os.getpid()}_{world}.pt"
            mp.spawn(_worker, args=(world, _port(), args.model, args.rows, length, str(out)), nprocs=world)
            runs[world] = torch.load(out)
            out.unlink()
        g1, g2 = runs[1]["grad"], runs[2]["grad"]
        results.append(
            {
                "length": length,
                "peak_mb_1_rank": runs[1]["peaks"][0],
                "peak_mb_per_rank_2_ranks": runs[2]["peaks"],
                "seconds_1_rank": runs[1]["seconds"],
                "seconds_2_ranks": runs[2]["seconds"],
                "grad_max_rel_diff": float((g1 - g2).abs().max() / g1.abs().max().clamp_min(1e-30)),
            }
        )
    rows = [
        "| tokens | peak, 1 rank (MiB) | peak per rank, 2 ranks (MiB) | ratio | s, 1 rank | s, 2 ranks | grad rel. diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        two = max(r["peak_mb_per_rank_2_ranks"])
        rows.append(
            f"| {r['length']} | {r['peak_mb_1_rank']:.0f} | {' / '.join(f'{p:.0f}' for p in r['peak_mb_per_rank_2_ranks'])} "
            f"| {two / r['peak_mb_1_rank']:.2f} | {r['seconds_1_rank']:.1f} | {r['seconds_2_ranks']:.1f} "
            f"| {r['grad_max_rel_diff']:.1e} |"
        )
    table = "\n".join(rows)
    report = {
        "command": "python scripts/bench_context_parallel.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": args.model,
        "rows": args.rows,
        "cpu_path": cpu_path(),
        "results": results,
        "table": table,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(table)
    print(f"\nwrote {args.out}")
    return report


if __name__ == "__main__":
    main()
