"""Does the fast generation path learn like the fp32 one? The 50-step GRPO learning curve over seeds.

    python scripts/grpo_parity.py                          # fast and fp32, seeds 0-4, 2 runs at a time (~75 min on 2 cores)
    python scripts/grpo_parity.py --seeds 0 1 2 3 --jobs 1

Each (path, seed) is one run of ``scripts/grpo_learning_curve.py`` (SmolLM2-135M-Instruct, the first
8 embedded train problems, 2 prompts x 4 completions of <= 128 tokens per step, lr 2e-5, held-out
greedy evaluation at steps 0/25/50) with ``--seed_everything`` and the module's ``seed`` set to the
seed. Runs are resumable: a run whose JSON exists under ``--out-dir`` is read, not rerun.

The paths:

- ``fast``: the defaults. Sampling from a bf16 replica (``engine.dtype: auto``) through the lean,
  oneDNN-prepacked decode; the fp32 trainer weights each token by the truncated importance weight
  ``min(pi_train / pi_sampler, tis_cap=2)``; groups with all-zero advantages skip forward/backward.
- ``fp32``: what ran before: the fp32 trainer samples from itself (``engine.dtype: model``,
  transformers' forward), every row trained.

Learning outcome per run: the mean training reward of the last 10 steps and of the second half,
and the held-out evaluations. Per path: the mean and standard deviation over seeds; the difference
of the means with its standard error (Welch). It also reads the sampler/trainer log-prob gap
(``train/tis/logprob_diff``) in the first and last 10 steps: a gap that grows would mean the
sampler fell behind the trainer's weights. Writes ``bench_results/grpo_parity.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean, median, stdev, variance
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PATHS: dict[str, list[str]] = {
    "fast": [],
    "fp32": [
        "--model.init_args.engine.dtype=model",
        "--model.init_args.skip_zero_advantage_groups=false",
    ],
}
WINDOW = 10


def run_one(path: str, seed: int, out_dir: Path, threads: int, extra: list[str]) -> Path:
    """One learning-curve run (skipped when its JSON exists); returns the JSON's path."""
    name = f"{path}_s{seed}"
    result = out_dir / f"{name}.json"
    if result.exists():
        return result
    command = [
        sys.executable,
        str(REPO / "scripts/grpo_learning_curve.py"),
        "--run-dir",
        str(out_dir / name),
        "--out",
        str(result),
        "--",
        f"--seed_everything={seed}",
        f"--model.init_args.seed={seed}",
        *PATHS[path],
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with (out_dir / f"{name}.log").open("w") as log:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {done.returncode}); see {out_dir / f'{name}.log'}")
    return result


def run_summary(result: Path) -> dict[str, Any]:
    """What one run learned, and its sampler/trainer gap, from its JSON and metrics.csv."""
    from lit_codeRL.callbacks.curves import read_metrics_csv

    data = json.loads(result.read_text())
    rewards = data["rewards"]
    history = read_metrics_csv(REPO / data["metrics_csv"])  # absolute stays absolute
    gap = [v for _, v in history.get("train/tis/logprob_diff", [])]
    step_s = [v for _, v in history.get("time/train_s", [])]
    generate_s = [v for _, v in history.get("time/generate_s", [])]
    return {
        "rewards": rewards,
        "rolling_mean": data["rolling_mean"],
        "first10": mean(rewards[:WINDOW]),
        "last10": mean(rewards[-WINDOW:]),
        "second_half": mean(rewards[len(rewards) // 2 :]),
        "evals": [e["pass_rate"] for e in data["evals"]],
        "logprob_gap_first10": mean(gap[:WINDOW]) if gap else None,
        "logprob_gap_last10": mean(gap[-WINDOW:]) if gap else None,
        "median_generate_s": median(generate_s) if generate_s else None,
        "median_train_s": median(step_s) if step_s else None,
        "wall_s": data["wall_s"],
    }


def compare(a: list[float], b: list[float]) -> dict[str, float | None]:
    """Mean of ``a`` minus mean of ``b`` with its Welch standard error (None below 2 runs each)."""
    diff = mean(a) - mean(b)
    if len(a) < 2 or len(b) < 2:
        return {"diff": diff, "se": None}
    return {"diff": diff, "se": math.sqrt(variance(a) / len(a) + variance(b) / len(b))}


def mean_curve(curves: list[list[float]]) -> list[float]:
    """Step-wise mean of several runs' curves (over the steps all of them have)."""
    steps = min(len(c) for c in curves)
    return [mean(c[i] for c in curves) for i in range(steps)]


def path_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": len(runs)}
    for key in ("first10", "last10", "second_half", "wall_s"):
        values = [r[key] for r in runs]
        out[key] = {"mean": mean(values), "std": stdev(values) if len(values) > 1 else 0.0}
    return out


def draw(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for colour, (name, runs) in zip(("tab:orange", "tab:blue"), summary["runs"].items(), strict=False):
        for r in runs.values():
            ax.plot(r["rolling_mean"], color=colour, alpha=0.3, linewidth=1)
        ax.plot(
            summary["mean_rolling_curve"][name],
            color=colour,
            linewidth=2.5,
            label=f"{name} (mean of {len(runs)} seeds)",
        )
    ax.set_xlabel("step")
    ax.set_ylabel(f"training reward, {WINDOW}-step rolling mean")
    ax.set_title("GRPO learning curve: fast path (bf16 sampler + TIS, skip) vs fp32")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (cores are split between them)")
    parser.add_argument("--out-dir", default="runs/parity", help="run directories, logs and per-run JSON")
    parser.add_argument("--out", default="bench_results/grpo_parity.json")
    parser.add_argument("extra", nargs="*", help="CLI overrides passed to every run")
    args = parser.parse_args()

    out_dir = REPO / args.out_dir  # an absolute path stays as given
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    todo = [(p, s) for p in args.paths for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda ps: run_one(*ps, out_dir, threads, args.extra), todo))

    runs: dict[str, dict[str, Any]] = {p: {} for p in args.paths}
    for (p, s), result in zip(todo, results, strict=True):
        runs[p][str(s)] = run_summary(result)
    summary: dict[str, Any] = {
        "seeds": args.seeds,
        "paths": {p: path_summary(list(runs[p].values())) for p in args.paths},
        "runs": runs,
    }
    print(
        "| path | seed | first 10 | last 10 | 2nd half | held-out evals 0/25/50 | log-prob gap first/last 10 | wall |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for p in args.paths:
        for s, r in runs[p].items():
            gap = (
                f"{r['logprob_gap_first10']:.4f} / {r['logprob_gap_last10']:.4f}"
                if r["logprob_gap_first10"] is not None
                else "-"
            )
            evals = " / ".join(f"{e:.3f}" for e in r["evals"])
            print(
                f"| {p} | {s} | {r['first10']:.3f} | {r['last10']:.3f} | {r['second_half']:.3f} | {evals} | "
                f"{gap} | {r['wall_s'] / 60:.1f} min |"
            )
    print("\n| path | seeds | last 10 (mean ± std) | 2nd half (mean ± std) | wall |\n|---|---|---|---|---|")
    for p, ps in summary["paths"].items():
        print(
            f"| {p} | {ps['seeds']} | {ps['last10']['mean']:.3f} ± {ps['last10']['std']:.3f} | "
            f"{ps['second_half']['mean']:.3f} ± {ps['second_half']['std']:.3f} | {ps['wall_s']['mean'] / 60:.1f} min |"
        )
    mean_curves = {p: mean_curve([r["rolling_mean"] for r in runs[p].values()]) for p in args.paths}
    summary["mean_rolling_curve"] = mean_curves
    print(f"\n| step | {' | '.join(args.paths)} |  ({WINDOW}-step rolling mean, mean over seeds)")
    print("|---|" + "---|" * len(args.paths))
    steps = min(len(c) for c in mean_curves.values())
    for i in [*range(0, steps, 5), steps - 1]:
        print(f"| {i + 1} | " + " | ".join(f"{mean_curves[p][i]:.3f}" for p in args.paths) + " |")
    if len(args.paths) == 2:
        a, b = args.paths
        summary["difference"] = {}
        for key in ("last10", "second_half"):
            d = compare([r[key] for r in runs[a].values()], [r[key] for r in runs[b].values()])
            summary["difference"][key] = d
            se = f" ± {d['se']:.3f} (SE)" if d["se"] is not None else ""
            print(f"\n{a} - {b}, {key}: {d['diff']:+.3f}{se}", end="")
        print()
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    draw(summary, out.with_suffix(".png"))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
