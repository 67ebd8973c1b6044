"""GRPO learning run on CPU: SmolLM2-135M-Instruct on the embedded MBPP-style train problems.

Trains through the same CLI a user runs (``configs/quickstart.yaml`` + overrides), then reads the
run's ``metrics.csv`` and reports the per-step training reward, its rolling mean, and the interval
evaluations (start / middle / end). Writes ``bench_results/grpo_learning_curve.json``.

    python scripts/grpo_learning_curve.py                  # 50 steps on 8 train problems, ~13 min on 2 cores
    python scripts/grpo_learning_curve.py --problems-limit 0 --steps 40 --lr 5e-6 -- --any.cli=override

Defaults: the first 8 train problems (each seen every 4 steps, so the rolling mean tracks
learning rather than which problems a step happened to draw), 2 prompts x 4 completions of at
most 128 tokens per step, lr 2e-5. Evaluation runs on the 13 held-out eval problems.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from spiral_report import smooth  # scripts/ is on sys.path when a script runs

from lit_codeRL.cli import CodeRLCLI

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--window", type=int, default=10, help="rolling-mean window (steps)")
    parser.add_argument("--eval-interval", type=int, default=25)
    parser.add_argument("--problems-limit", type=int, default=8, help="train problems used; 0 = all")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--run-dir", default="runs/learning_curve")
    parser.add_argument("--out", default="bench_results/grpo_learning_curve.json")
    parser.add_argument(
        "extra", nargs="*", help="extra CLI overrides, e.g. --model.init_args.prompts_per_step=4"
    )
    args = parser.parse_args()

    start = time.time()
    cli = CodeRLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs/quickstart.yaml"),
            "--trainer.max_steps",
            str(args.steps),
            "--trainer.default_root_dir",
            args.run_dir,
            "--trainer.logger",
            "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir",
            args.run_dir,
            "--trainer.logger.name",
            "",
            "--trainer.callbacks.init_args.eval_interval_steps",
            str(args.eval_interval),
            # the held-out greedy protocol (the quickstart itself evaluates on its training tasks)
            "--trainer.callbacks.init_args.split",
            "eval",
            "--trainer.callbacks.init_args.limit",
            "null",
            "--trainer.callbacks.init_args.n_samples",
            "1",
            "--trainer.callbacks.init_args.temperature",
            "0.0",
            "--trainer.callbacks.init_args.max_new_tokens",
            "192",
            "--model.init_args.optimizer.learning_rate",
            str(args.lr),
            "--model.init_args.problems.limit",
            str(args.problems_limit) if args.problems_limit else "null",
            "--model.init_args.sampling.max_new_tokens",
            str(args.max_new_tokens),
            *args.extra,
        ]
    )
    elapsed = time.time() - start
    metrics_csv = Path(cli.trainer.logger.log_dir) / "metrics.csv"
    rewards: dict[int, float] = {}
    evals: list[dict[str, float]] = []
    with metrics_csv.open() as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            if row.get("train/reward"):
                rewards[step] = float(row["train/reward"])
            if row.get("mbpp_eval/pass_rate"):
                evals.append(
                    {
                        "step": step,
                        "pass_rate": float(row["mbpp_eval/pass_rate"]),
                        "problems_passed": float(row["mbpp_eval/problems_passed"]),
                    }
                )
    steps = sorted(rewards)
    curve = [rewards[s] for s in steps]
    rolling = smooth(curve, args.window)
    print("| step | reward | rolling mean |\n|---|---|---|")
    for s, r, m in zip(steps, curve, rolling, strict=True):
        print(f"| {s} | {r:.3f} | {m:.3f} |")
    print("\n| eval step | pass@1 | problems passed |\n|---|---|---|")
    for e in evals:
        print(f"| {e['step']} | {e['pass_rate']:.3f} | {e['problems_passed']:.0f} |")
    first_window = sum(curve[: args.window]) / max(1, len(curve[: args.window]))
    last_window = sum(curve[-args.window :]) / max(1, len(curve[-args.window :]))
    summary = {
        "steps": len(curve),
        "lr": args.lr,
        "wall_s": elapsed,
        "first_reward": curve[0] if curve else None,
        "first_window_mean": first_window,
        "last_window_mean": last_window,
        "rewards": curve,
        "rolling_mean": rolling,
        "evals": evals,
        "metrics_csv": str(metrics_csv),
    }
    print(
        f"\nfirst {args.window}-step mean {first_window:.3f} -> last {args.window}-step mean {last_window:.3f} "
        f"({len(curve)} steps, {elapsed / 60:.1f} min)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
