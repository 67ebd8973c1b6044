"""Report a SPIRAL run: the invalid-move curve of training and every game evaluation, with intervals.

    lit-coderl fit --config configs/spiral_self_play.yaml        # the run (CPU: ~30 min)
    python scripts/spiral_report.py runs/spiral_self_play/version_0

Reads the run's ``metrics.csv`` (``train/game/*`` per step) and ``game_eval/step_*.json``, prints
the training curve (invalid-move rate per step, smoothed over ``--window`` steps, and the seats'
outcomes) and each evaluation (win / draw / loss / invalid with Wilson 95% intervals, per opponent),
and writes it all as JSON (``--out``, default ``bench_results/spiral_self_play.json``).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def training_curve(metrics_csv: Path) -> list[dict[str, float]]:
    rows = []
    with metrics_csv.open() as f:
        for row in csv.DictReader(f):
            if row.get("train/game/invalid_move_rate"):
                rows.append(
                    {
                        "step": int(row["step"]),
                        **{
                            k.removeprefix("train/"): float(v)
                            for k, v in row.items()
                            if v
                            and k.startswith(("train/game/", "train/baseline/", "train/loss"))
                            or k in ("train/completion_length", "train/advantage_abs")
                            and v
                        },
                    }
                )
    return rows


def smooth(values: list[float], window: int) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def evaluations(run: Path) -> list[dict]:
    out = []
    for path in sorted((run / "game_eval").glob("step_*.json")):
        data = json.loads(path.read_text())
        out.append({"step": data["step"], "metrics": data["metrics"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", type=Path, help="the run's log directory (holds metrics.csv)")
    parser.add_argument("--window", type=int, default=5, help="smoothing window of the printed curve")
    parser.add_argument("--out", type=Path, default=REPO / "bench_results/spiral_self_play.json")
    args = parser.parse_args()
    curve = training_curve(args.run / "metrics.csv")
    evals = evaluations(args.run)
    invalid = [r["game/invalid_move_rate"] for r in curve]
    smoothed = smooth(invalid, args.window)
    print(
        f"training: {len(curve)} steps; invalid-move rate (share of the policy's moves), smoothed over {args.window}"
    )
    print("| training step | invalid | smoothed | game length | seat0 win | seat1 win |")
    print("|---|---|---|---|---|---|")
    for r, s in zip(curve, smoothed, strict=True):
        print(
            f"| {r['step']} | {r['game/invalid_move_rate']:.3f} | {s:.3f} | {r.get('game/game_length', 0):.2f} "
            f"| {r.get('game/seat0/win', 0):.2f} | {r.get('game/seat1/win', 0):.2f} |"
        )
    print(
        "\nevaluations at optimizer steps (ppo_epochs per training step); rates over both seats, Wilson 95% intervals:"
    )
    print("| optimizer step | opponent | games | win | draw | loss | invalid | invalid moves |")
    print("|---|---|---|---|---|---|---|---|")
    for e in evals:
        m = e["metrics"]
        prefixes = sorted(
            {
                k.rsplit("/", 1)[0]
                for k in m
                if k.startswith("game_eval/") and k.endswith("/win") and "/seat" not in k
            }
        )
        for p in prefixes:

            def cell(name: str, p: str = p, m: dict = m) -> str:
                return f"{m[f'{p}/{name}']:.3f} [{m[f'{p}/{name}_lo']:.3f}, {m[f'{p}/{name}_hi']:.3f}]"

            print(
                f"| {e['step']} | {p.removeprefix('game_eval/')} | {int(m[f'{p}/games'])} | {cell('win')} | {cell('draw')} "
                f"| {cell('loss')} | {cell('invalid')} | {m[f'{p}/invalid_move_rate']:.3f} |"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"run": str(args.run), "curve": curve, "smoothed_invalid": smoothed, "evaluations": evals},
            indent=1,
        )
    )
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
