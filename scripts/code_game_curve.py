"""A code-game run on CPU and its curves: validity rate, prediction accuracy, the writer's reward.

    python scripts/code_game_curve.py                          # SmolLM2-135M-Instruct, 30 steps
    python scripts/code_game_curve.py --steps 10 -- --model.init_args.game.reward_mode zero_sum

Runs ``configs/grpo_code_game.yaml`` through the CLI (self-play: the policy writes programs and
predicts their outputs), reads the run's ``metrics.csv`` and writes, per step, the share of
programs the sandbox's gate admitted and why the others were rejected, the predictors' accuracy,
the writer's shaped reward, the original game's ``reward/avg_batch_reward`` and
``reward/successful_predictions_count``, with rolling means over ``--window`` steps:
``bench_results/code_game_curve.json`` and a Markdown table on stdout. Extra words after ``--``
go to ``lit-coderl fit`` as overrides.
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
COLUMNS = {
    "validity": "train/game/validity_rate",
    "accuracy": "train/game/prediction_accuracy",
    "format": "train/game/prediction_format_rate",
    "writer_reward": "train/game/writer_reward",
    "writer_groups_with_signal": "train/game/writer_groups_with_signal",
    "no_program": "train/game/rejected/no_program",
    "avg_batch_reward": "reward/avg_batch_reward",
    "successful_predictions": "reward/successful_predictions_count",
    "predictions": "train/game/predictions",
    "program_chars": "train/game/program_chars",
}


def run(args) -> Path:
    run_dir = args.run_dir
    cli = CodeRLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs/grpo_code_game.yaml"),
            "--model.init_args.model.name_or_path",
            args.model,
            "--model.init_args.game.prompts_per_step",
            str(args.prompts),
            "--model.init_args.game.programs_per_prompt",
            str(args.programs),
            "--model.init_args.game.predictions_per_program",
            str(args.predictions),
            "--model.init_args.optimizer.learning_rate",
            str(args.lr),
            "--trainer.max_steps",
            str(args.steps),
            "--trainer.default_root_dir",
            run_dir,
            "--trainer.logger",
            "lightning.pytorch.loggers.CSVLogger",
            "--trainer.logger.save_dir",
            run_dir,
            "--trainer.logger.name",
            "",
            *args.extra,
        ]
    )
    return Path(cli.trainer.log_dir)


def read(log_dir: Path) -> tuple[list[int], dict[str, list[float | None]], dict[str, float]]:
    rows: dict[int, dict[str, str]] = {}
    with (log_dir / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            if row.get(COLUMNS["validity"]):
                rows[int(row["step"])] = row
    steps = sorted(rows)
    series = {
        name: [float(rows[s][col]) if rows[s].get(col) else None for s in steps]
        for name, col in COLUMNS.items()
    }
    rejected: dict[str, float] = {}
    for s in steps:
        for key, value in rows[s].items():
            if key.startswith("train/game/rejected/") and value:
                reason = key.removeprefix("train/game/rejected/")
                rejected[reason] = rejected.get(reason, 0.0) + float(value) / len(steps)
    return steps, series, rejected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--prompts", type=int, default=4, help="topics per step")
    ap.add_argument("--programs", type=int, default=4, help="programs per topic (the writer's group)")
    ap.add_argument("--predictions", type=int, default=4, help="predictions per valid program")
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--run-dir", default="runs/code_game_curve")
    ap.add_argument("--log-dir", default=None, help="report an existing run's log dir instead of running")
    ap.add_argument("--out", default="bench_results/code_game_curve.json")
    ap.add_argument("extra", nargs="*", help="overrides for lit-coderl fit (after --)")
    args = ap.parse_args()
    start = time.time()
    log_dir = Path(args.log_dir) if args.log_dir else run(args)
    wall = time.time() - start
    steps, series, rejected = read(log_dir)
    if not steps:
        raise SystemExit(f"no code-game steps in {log_dir / 'metrics.csv'}")
    w = args.window

    def window(name: str, first: bool) -> float | None:
        vals = [v for v in (series[name][:w] if first else series[name][-w:]) if v is not None]
        return sum(vals) / len(vals) if vals else None

    summary = {
        name: {"first_window": window(name, True), "last_window": window(name, False)} for name in COLUMNS
    }
    result = {
        "command": "python scripts/code_game_curve.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k not in ("extra", "log_dir", "out")
        ),
        "extra": args.extra,
        "log_dir": str(log_dir),
        "wall_s": None if args.log_dir else wall,  # a re-report did not time the run
        "steps": steps,
        "series": series,
        "rolling_mean": {name: smooth([v or 0.0 for v in vals], w) for name, vals in series.items()},
        "rejected_share_mean": rejected,
        "summary": summary,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    header = "| step | " + " | ".join(COLUMNS) + " |"
    print(header)
    print("|" + "---|" * (len(COLUMNS) + 1))
    for i, s in enumerate(steps):
        cells = [f"{series[n][i]:.3g}" if series[n][i] is not None else "" for n in COLUMNS]
        print(f"| {s} | " + " | ".join(cells) + " |")
    print(
        f"\nfirst/last {w}-step means: "
        + ", ".join(
            f"{n} {v['first_window']:.3g} -> {v['last_window']:.3g}"
            for n, v in summary.items()
            if v["first_window"] is not None
        )
    )
    print(
        "rejections (mean share of programs): "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(rejected.items()))
    )
    print(f"wrote {args.out} ({wall:.0f} s)")


if __name__ == "__main__":
    main()
