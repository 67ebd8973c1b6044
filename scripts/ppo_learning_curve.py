"""PPO learning runs on CPU, with and without a critic: SmolLM2-135M-Instruct on MBPP train tasks.

    python scripts/ppo_learning_curve.py                       # select tasks, then both runs (~1 h on 2 cores)
    python scripts/ppo_learning_curve.py --variants gae --steps 20

1. **Task selection.** A 135M model solves almost no MBPP task, and a group whose completions all
   score 0 carries no gradient, with or without a critic. So the runs train on the MBPP train
   tasks the base policy already gets partly right: ``lit-coderl validate`` scores the first
   ``--scan`` train tasks greedily (``--max-new-tokens``), and those where at least one test passes
   are kept (the list is written to the JSON, and reused with ``--task-ids``). The reward is the
   fraction of a task's tests passed (``unit_test``), sampled at temperature 1.
2. **Runs.** ``configs/ppo_mbpp.yaml`` through the CLI for each variant: ``gae`` (a separate critic,
   GAE with the length-adaptive actor lambda, value pre-training) and ``grpo`` (PPO's clipped update
   on group advantages, no critic); the same tasks, seed, batch and learning rate; one update per
   rollout. The MBPP test evaluation of the config is off (a 30-step run does not move it).
3. **Report.** Per run: the per-step reward, its rolling mean, the first and last windows, the
   critic's explained variance, the step time; ``bench_results/ppo_learning_curve.json`` and each
   run's ``learning_curve.png``.
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
SHARED_MBPP = REPO.parent / "shared" / "data" / "mbpp"


def csv_logger(run_dir: str) -> list[str]:
    return [
        "--trainer.default_root_dir",
        run_dir,
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir",
        run_dir,
        "--trainer.logger.name",
        "",
    ]


def select_tasks(args) -> list[str]:
    """MBPP train tasks where the greedy base policy passes at least one test."""
    run_dir = f"{args.run_root}/select"
    cli = CodeRLCLI(
        args=[
            "validate",
            "--config",
            str(REPO / "configs/eval_mbpp.yaml"),
            "--model.init_args.model.name_or_path",
            args.model,
            "--model.init_args.source",
            args.mbpp,
            "--model.init_args.split",
            "train",
            "--model.init_args.limit",
            str(args.scan),
            "--model.init_args.max_new_tokens",
            str(args.max_new_tokens),
            *csv_logger(run_dir),
        ]
    )
    results = json.loads(next(Path(cli.trainer.log_dir).glob("mbpp_eval/*.json")).read_text())
    return [p["task_id"] for p in results["problems"] if any(s["pass_fraction"] > 0 for s in p["samples"])]


def train(variant: str, task_ids: list[str], args) -> dict:
    run_dir = f"{args.run_root}/{variant}"
    start = time.time()
    cli = CodeRLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs/ppo_mbpp.yaml"),
            "--model.init_args.model.name_or_path",
            args.model,
            "--model.init_args.problems.source",
            args.mbpp,
            "--model.init_args.problems.task_ids",
            json.dumps(task_ids),
            "--model.init_args.advantage",
            variant,
            "--model.init_args.sampling.max_new_tokens",
            str(args.max_new_tokens),
            "--model.init_args.prompts_per_step",
            str(args.prompts),
            "--model.init_args.num_generations",
            str(args.generations),
            "--model.init_args.optimizer.learning_rate",
            str(args.lr),
            "--model.init_args.num_minibatches",
            "1",
            "--model.init_args.critic.optimizer.learning_rate",
            str(args.critic_lr),
            "--model.init_args.critic.pretrain_steps",
            str(args.pretrain_steps),
            "--trainer.max_steps",
            str(args.steps),
            "--trainer.callbacks.init_args.source",
            args.mbpp,
            "--trainer.callbacks.init_args.eval_at_start",
            "false",
            "--trainer.callbacks.init_args.eval_at_end",
            "false",
            "--trainer.callbacks.init_args.eval_interval_steps",
            "0",
            *csv_logger(run_dir),
            *args.extra,
        ]
    )
    elapsed = time.time() - start
    log_dir = Path(cli.trainer.log_dir)
    rows: dict[int, dict[str, str]] = {}
    with (log_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            if row.get("train/reward"):
                rows[int(row["step"])] = row
    steps = sorted(rows)
    rewards = [float(rows[s]["train/reward"]) for s in steps]

    def column(name: str) -> list[float | None]:
        return [float(rows[s][name]) if rows[s].get(name) else None for s in steps]

    w = args.window
    return {
        "variant": variant,
        "steps": steps,
        "rewards": rewards,
        "rolling_mean": smooth(rewards, w),
        "first_reward": rewards[0] if rewards else None,
        "first_window_mean": sum(rewards[:w]) / max(1, len(rewards[:w])),
        "last_window_mean": sum(rewards[-w:]) / max(1, len(rewards[-w:])),
        "explained_variance": column("train/explained_variance_before"),
        "value_pretraining": column("train/value_pretraining"),
        "step_s": [
            float(rows[s].get("time/generate_s") or 0)
            + float(rows[s].get("time/train_s") or 0)
            + float(rows[s].get("time/old_values_s") or 0)
            for s in steps
        ],
        "wall_s": elapsed,
        "run_dir": str(log_dir),
        "curve_png": str(log_dir / "learning_curve.png"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--mbpp", default=str(SHARED_MBPP))
    ap.add_argument("--scan", type=int, default=374, help="MBPP train tasks scanned for the selection")
    ap.add_argument("--task-ids", default=None, help="a JSON list of task ids instead of the scan")
    ap.add_argument("--variants", default="gae,grpo")
    ap.add_argument("--steps", type=int, default=30, help="rollout steps per run (one update each)")
    ap.add_argument("--pretrain-steps", type=int, default=3, help="gae: value pre-training steps")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--critic-lr", type=float, default=1e-4, help="gae: the critic's learning rate")
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--run-root", default="runs/ppo_learning_curve")
    ap.add_argument("--out", default="bench_results/ppo_learning_curve.json")
    ap.add_argument("extra", nargs="*", help="extra CLI overrides for both runs")
    args = ap.parse_args()
    t0 = time.time()
    task_ids = json.loads(args.task_ids) if args.task_ids else select_tasks(args)
    print(f"{len(task_ids)} tasks: {task_ids}")
    if not task_ids:
        raise SystemExit(
            f"the base policy passes no test of the first {args.scan} MBPP train tasks: nothing to train on"
        )
    runs = [train(v, task_ids, args) for v in args.variants.split(",")]
    for r in runs:
        print(f"\n{r['variant']}: | step | reward | rolling mean |\n|---|---|---|")
        for s, x, m in zip(r["steps"], r["rewards"], r["rolling_mean"], strict=True):
            print(f"| {s} | {x:.3f} | {m:.3f} |")
        print(
            f"{r['variant']}: first reward {r['first_reward']:.3f}, first {args.window}-step mean "
            f"{r['first_window_mean']:.3f} -> last {args.window}-step mean {r['last_window_mean']:.3f}, "
            f"{r['wall_s'] / 60:.1f} min"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = {
        "task_ids": task_ids,
        "settings": {k: v for k, v in vars(args).items() if k != "extra"},
        "runs": runs,
        "wall_s": time.time() - t0,
    }
    out.write_text(json.dumps(summary, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
