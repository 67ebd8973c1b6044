"""Run a shipped config through the real CLI and report what it learned: one script for the
BC-on-MBPP and multi-turn-repair measurements (and any other run with interval evaluations).

    python scripts/run_report.py bc_mbpp -- --trainer.max_steps 300        # BC, MBPP test before/after
    python scripts/run_report.py reinforce_repair -- --trainer.max_steps 16 # RLOO on code repair

It trains with ``configs/<name>.yaml`` plus the overrides after ``--``, then reads the run's
``metrics.csv`` and ``mbpp_eval/step_*.json`` and prints a table: every evaluation (pass@1,
problems passed, and per turn for multi-turn evaluations) and the training curve (loss or reward,
and success after each turn for multi-turn runs) at a few points. Writes everything as JSON to
``bench_results/<name>.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from lit_codeRL.cli import CodeRLCLI

REPO = Path(__file__).resolve().parents[1]


def _float(row: dict[str, str], key: str) -> float | None:
    value = row.get(key)
    return float(value) if value not in (None, "") else None


def read_evaluations(log_dir: Path) -> list[dict]:
    """Every ``MBPPEvalCallback`` report of a run, ``{"step": ..., **metrics}``, in step order."""
    evals = []
    for path in sorted((log_dir / "mbpp_eval").glob("step_*.json")):
        report = json.loads(path.read_text())
        evals.append({"step": report["step"], **report["metrics"]})
    return evals


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("config", help="config name under configs/ (without .yaml)")
    parser.add_argument("--run-dir", default=None, help="default: runs/report_<config>")
    parser.add_argument("--out", default=None, help="default: bench_results/<config>.json")
    parser.add_argument("--points", type=int, default=6, help="training-curve rows to print")
    parser.add_argument("extra", nargs="*", help="CLI overrides, after --")
    args = parser.parse_args()
    run_dir = args.run_dir or f"runs/report_{args.config}"
    start = time.time()
    cli = CodeRLCLI(
        args=[
            "fit",
            "--config",
            str(REPO / "configs" / f"{args.config}.yaml"),
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
    wall = time.time() - start
    log_dir = Path(cli.trainer.log_dir)
    with (log_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    evals = read_evaluations(log_dir)
    curve_keys = ["train/loss", "train/reward", "train/pass_rate"] + sorted(
        {k for r in rows for k in r if k.startswith("train/success_after_turn_")}
    )
    curve = []
    for r in rows:
        point = {k: _float(r, k) for k in curve_keys if _float(r, k) is not None}
        if point:
            curve.append({"step": int(r["step"]), **point})

    print(f"\nrun: {log_dir}  wall: {wall / 60:.1f} min")
    print("\n| eval step | pass@1 | problems passed | per turn | seconds |\n|---|---|---|---|---|")
    for e in evals:
        turns = sorted(k for k in e if k.startswith("mbpp_eval/pass_rate_turn_"))
        per_turn = ", ".join(f"{e[k]:.3f}" for k in turns) or "-"
        print(
            f"| {e['step']} | {e['mbpp_eval/pass_rate']:.3f} | {int(e['mbpp_eval/problems_passed'])}/"
            f"{int(e['mbpp_eval/num_problems'])} | {per_turn} | {e.get('mbpp_eval/seconds', 0):.0f} |"
        )
    if curve:
        keys = [k for k in curve_keys if any(k in p for p in curve)]
        print("\n| step | " + " | ".join(keys) + " |\n|" + "---|" * (len(keys) + 1))
        every = max(1, len(curve) // max(1, args.points - 1))
        for p in curve[::every] + ([curve[-1]] if (len(curve) - 1) % every else []):
            print(f"| {p['step']} | " + " | ".join(f"{p[k]:.3f}" if k in p else "" for k in keys) + " |")
    out = Path(args.out or REPO / "bench_results" / f"{args.config}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"config": args.config, "overrides": args.extra, "wall_s": wall, "evals": evals, "curve": curve},
            indent=1,
        )
    )
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
