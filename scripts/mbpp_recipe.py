"""The MBPP recipe end to end: SmolLM2-135M-Instruct, MBPP train -> greedy pass@1 on all 500 MBPP
test tasks before and after, on a CPU in under two hours.

    python scripts/mbpp_recipe.py                      # both stages, ../shared/data/mbpp
    python scripts/mbpp_recipe.py --grpo-minutes 0     # stage 1 (BC) only
    python scripts/mbpp_recipe.py --data /path/to/mbpp --out-dir runs/my_recipe

Stage 1, ``configs/mbpp_recipe_bc.yaml``: behavioural cloning on the 374 train reference
solutions, evaluated on MBPP test before (the base model) and after. Stage 2,
``configs/mbpp_recipe_grpo.yaml``: GRPO on the train tasks from stage 1's ``hf_model`` for
``--grpo-minutes`` of wall clock, evaluated after. Each stage is the real CLI in its own process
(the command is printed, so each stage reproduces on its own), writes its rollouts, metrics and
``learning_curve.png`` into its run directory and saves its policy as a plain ``hf_model``
directory.

At the end the script loads the final ``hf_model`` with ``transformers`` (the check that it is a
plain HF checkpoint), prints the before/after table (pass@1 on 500, problems passed, evaluation
and training wall time, command per stage), draws ``<out-dir>/mbpp_recipe.png`` and writes
everything to ``bench_results/mbpp_recipe.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from run_report import read_evaluations  # scripts/ is on sys.path when a script runs
from spiral_report import smooth

REPO = Path(__file__).resolve().parents[1]


def run_stage(name: str, config: str, run_dir: Path, data: str, extra: list[str]) -> dict[str, Any]:
    """Train one stage through the CLI; returns its command, wall time and log directory."""
    command = [
        sys.executable,
        "-m",
        "lit_codeRL.cli",
        "fit",
        "--config",
        f"configs/{config}",
        "--trainer.default_root_dir",
        str(run_dir),
        "--trainer.logger",
        "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir",
        str(run_dir),
        "--trainer.logger.name",
        "",
        "--trainer.logger.version",
        "run",
        "--trainer.callbacks.init_args.source",
        data,
        *extra,
    ]
    shown = shlex.join(["lit-coderl", *command[3:]])
    print(f"\n[mbpp_recipe] stage {name}: {shown}", flush=True)
    start = time.time()
    subprocess.run(command, cwd=REPO, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    log_dir = run_dir / "run"
    return {"stage": name, "command": shown, "wall_s": time.time() - start, "log_dir": str(log_dir)}


def evaluations(log_dir: Path) -> list[dict[str, Any]]:
    """Every MBPP evaluation the stage ran, in step order, as table rows."""
    return [
        {
            "step": m["step"],
            "pass@1": m["mbpp_eval/pass_rate"],
            "problems_passed": int(m["mbpp_eval/problems_passed"]),
            "num_problems": int(m["mbpp_eval/num_problems"]),
            "eval_s": m.get("mbpp_eval/seconds"),
        }
        for m in read_evaluations(log_dir)
    ]


def check_hf_model(path: Path) -> str:
    """Load the saved policy with plain ``transformers`` and greedy-decode a few tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tokenizer("def add(a, b):", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def draw(rows: list[dict[str, Any]], curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    names = [r["after"] for r in rows]
    values = [100 * r["pass@1"] for r in rows]
    axes[0].bar(names, values, color=["#999999", "#4c72b0", "#55a868"][: len(rows)])
    for i, v in enumerate(values):
        axes[0].text(i, v, f"{v:.1f}", ha="center", va="bottom")
    axes[0].set_title(f"MBPP test greedy pass@1 (%), {rows[0]['num_problems']} tasks")
    for ax, (title, key) in zip(
        axes[1:], (("BC: train loss", "bc"), ("GRPO: train reward", "grpo")), strict=True
    ):
        points = curves.get(key, [])
        if points:
            steps, ys = zip(*points, strict=True)
            ax.plot(steps, ys, alpha=0.35, color="#4c72b0")
            window = max(1, len(ys) // 20)
            ax.plot(steps, smooth(list(ys), window), color="#4c72b0")
        else:
            ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title)
        ax.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def metric_points(log_dir: Path, key: str) -> list[tuple[int, float]]:
    from lit_codeRL.callbacks.curves import read_metrics_csv

    return read_metrics_csv(log_dir / "metrics.csv").get(key, [])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=str((REPO / "../shared/data/mbpp").resolve()), help="MBPP directory"
    )
    parser.add_argument("--out-dir", default="runs/mbpp_recipe", help="run directories of both stages")
    parser.add_argument(
        "--grpo-minutes", type=float, default=40.0, help="GRPO wall-clock budget; 0 skips stage 2"
    )
    parser.add_argument("--bc-args", default="", help="extra CLI overrides for stage 1 (one quoted string)")
    parser.add_argument("--grpo-args", default="", help="extra CLI overrides for stage 2 (one quoted string)")
    parser.add_argument("--out", default=str(REPO / "bench_results" / "mbpp_recipe.json"))
    args = parser.parse_args()
    data = str(Path(args.data).resolve())
    if not Path(data).is_dir():
        sys.exit(f"no MBPP directory at {data} (pass --data)")
    out_dir = (REPO / args.out_dir).resolve()
    start = time.time()

    bc = run_stage(
        "bc",
        "mbpp_recipe_bc.yaml",
        out_dir / "bc",
        data,
        ["--model.init_args.demonstrations.source", data, *shlex.split(args.bc_args)],
    )
    bc_evals = evaluations(Path(bc["log_dir"]))
    stages, policy = [bc], Path(bc["log_dir"]) / "hf_model"
    rows = [{"after": "base", **bc_evals[0]}, {"after": "BC", **bc_evals[-1]}]
    curves = {"bc": metric_points(Path(bc["log_dir"]), "train/loss")}
    if args.grpo_minutes > 0:
        minutes = int(round(args.grpo_minutes))
        grpo = run_stage(
            "grpo",
            "mbpp_recipe_grpo.yaml",
            out_dir / "grpo",
            data,
            [
                "--model.init_args.model.name_or_path",
                str(policy),
                "--model.init_args.problems.source",
                data,
                "--trainer.max_time",
                f"00:{minutes // 60:02d}:{minutes % 60:02d}:00",
                *shlex.split(args.grpo_args),
            ],
        )
        stages.append(grpo)
        policy = Path(grpo["log_dir"]) / "hf_model"
        rows.append({"after": "BC + GRPO", **evaluations(Path(grpo["log_dir"]))[-1]})
        curves["grpo"] = metric_points(Path(grpo["log_dir"]), "train/reward")
    total = time.time() - start
    sample = check_hf_model(policy)

    base = rows[0]["pass@1"]
    print(f"\n[mbpp_recipe] total wall {total / 60:.1f} min; final policy {policy}")
    print(f"[mbpp_recipe] transformers loads it: {sample!r}")
    print("\n| after | MBPP test pass@1 | problems passed | vs base | eval s |\n|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['after']} | {r['pass@1']:.3f} | {r['problems_passed']}/{r['num_problems']} | "
            f"{100 * (r['pass@1'] - base):+.1f} pts | {r['eval_s'] or 0:.0f} |"
        )
    print("\n| stage | wall (train + its evaluations) | command |\n|---|---|---|")
    for s in stages:
        print(f"| {s['stage']} | {s['wall_s'] / 60:.1f} min | `{s['command']}` |")
    picture = out_dir / "mbpp_recipe.png"
    draw(rows, curves, picture)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": shlex.join([Path(sys.executable).name, *sys.argv]),
                "total_wall_s": total,
                "rows": rows,
                "stages": stages,
                "final_policy": str(policy),
                "transformers_sample": sample,
                "curves": curves,
                "picture": str(picture),
            },
            indent=1,
        )
    )
    print(f"\n[mbpp_recipe] curve: {picture}\n[mbpp_recipe] wrote {out}")


if __name__ == "__main__":
    main()
