"""The MBPP recipe end to end: SmolLM2-135M-Instruct, behavioural cloning then RL on MBPP train,
scored on two held-out sets (MBPP test, all 500 tasks; HumanEval, all 164) after every stage.

    python scripts/mbpp_recipe.py                         # base, BC, BC + RL (60 min), noise band
    python scripts/mbpp_recipe.py --rl-minutes 0          # stage 1 (BC) only
    python scripts/mbpp_recipe.py --bc-run runs/mbpp_recipe/bc/run     # reuse a finished BC stage
    python scripts/mbpp_recipe.py --rl-args "--model.init_args.sampling.temperature 1.0" \\
        --out-dir runs/mbpp_recipe_t1 --bc-run runs/mbpp_recipe/bc/run  # an RL variant, same BC

Stage 1, ``configs/mbpp_recipe_bc.yaml``: behavioural cloning on the 374 train reference
solutions. Stage 2, ``configs/mbpp_recipe_grpo.yaml``: GRPO from stage 1's ``hf_model`` for
``--rl-minutes`` of wall clock (its interval evaluations on MBPP validation, 90 tasks never
trained on, included in the budget). Each stage is the real CLI in its own process; its command
is printed and kept, so each stage reproduces on its own.

Every policy (base, BC, BC + RL) is then scored by ``lit-coderl validate`` (the same functions as
the training-time callback), greedy, 256 new tokens, one shown test: MBPP test pass@1 and
HumanEval pass@1, in the engine's default dtype (bf16 where the CPU computes it natively). The
**noise band** is the same policy scored again in the other engine dtype (fp32 <-> bf16): greedy
decoding is deterministic, so the only noise in a single evaluation is how a near-tie between two
tokens falls, and the change of dtype is what moves those ties. A gain smaller than the band is
not a gain. The band is the net change of the score; the table also counts the verdicts the
dtype moved (the churn under the net), and RL vs BC is compared task by task: tasks only RL
solves, tasks only BC solves, and the exact McNemar p of that split. An evaluation whose result
exists under ``<out-dir>/eval`` is reused (delete the directory to redo it), so an interrupted
recipe resumes where it stopped.

At the end the script loads the final ``hf_model`` with ``transformers`` (the check that it is a
plain HF checkpoint), prints the before/after table (pass@1 and problems on both sets, the band,
wall times, commands), draws ``<out-dir>/mbpp_recipe.png`` (the held-out scores) and
``<out-dir>/rl_curves.png`` (the RL stage's reward, groups with signal and validation pass@1) and
writes everything to ``bench_results/mbpp_recipe.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import recipe_stages as stages  # scripts/ is on sys.path when a script runs
from recipe_stages import logger_args, paired, reused_stage
from run_report import read_evaluations
from spiral_report import smooth

REPO = Path(__file__).resolve().parents[1]
HELDOUT = {"mbpp": "MBPP test", "humaneval": "HumanEval"}
OTHER_DTYPE = {"bfloat16": "float32", "float32": "bfloat16"}


def cli(args: list[str]) -> tuple[str, float]:
    return stages.cli(args, "mbpp_recipe")


def train_stage(name: str, config: str, run_dir: Path, extra: list[str]) -> dict[str, Any]:
    return stages.train_stage(name, config, run_dir, extra, "mbpp_recipe")


def native_dtype() -> str:
    """The dtype ``engine.dtype: auto`` samples in on this machine."""
    from lit_codeRL.policy.precision import cpu_has_native_bf16

    return "bfloat16" if cpu_has_native_bf16() else "float32"


def evaluate(
    policy: str, heldout: str, dtype: str, data: str, out_dir: Path, extra: list[str]
) -> dict[str, Any]:
    """Greedy pass@1 of ``policy`` on a held-out set (``mbpp``: MBPP test; ``humaneval``), reusing
    a finished evaluation of the same policy, set and dtype under ``out_dir``."""
    run_dir = out_dir / f"{heldout}_{dtype}"
    done = run_dir / "result.json"
    if done.exists():
        result = json.loads(done.read_text())
        if "solved" not in result and (reports := list((run_dir / "run" / "mbpp_eval").glob("*.json"))):
            result["solved"] = solved_tasks(reports[0])  # cached before results kept their tasks
        return result
    source = data if heldout == "mbpp" else "humaneval"
    shown, wall = cli(
        [
            "validate",
            "--config",
            "configs/eval_mbpp.yaml",
            *logger_args(run_dir),
            "--model.init_args.model.name_or_path",
            policy,
            "--model.init_args.source",
            source,
            "--model.init_args.split",
            "test",
            "--model.init_args.max_new_tokens",
            "256",
            "--model.init_args.batch_size",
            "32",
            "--model.init_args.engine.dtype",
            dtype,
            *extra,
        ]
    )
    (report,) = (run_dir / "run" / "mbpp_eval").glob("*.json")  # validate's per-problem report
    metrics = json.loads(report.read_text())["metrics"]
    result = {
        "heldout": heldout,
        "dtype": dtype,
        "pass@1": metrics["mbpp_eval/pass_rate"],
        "problems_passed": int(metrics["mbpp_eval/problems_passed"]),
        "num_problems": int(metrics["mbpp_eval/num_problems"]),
        "eval_s": wall,
        "command": shown,
        "solved": solved_tasks(report),
    }
    done.write_text(json.dumps(result, indent=1))
    return result


def solved_tasks(report: Path) -> list[str]:
    """The task ids a per-problem evaluation report counts as solved (greedy: its one sample passed)."""
    return sorted(p["task_id"] for p in json.loads(report.read_text())["problems"] if p["num_correct"] > 0)


def check_hf_model(path: Path) -> str:
    """Load the saved policy with plain ``transformers`` and greedy-decode a few tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ids = tokenizer("def add(a, b):", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    return tokenizer.decode(out[0], skip_special_tokens=True)


def metric_points(log_dir: Path, key: str) -> list[tuple[int, float]]:
    from lit_codeRL.callbacks.curves import read_metrics_csv

    return read_metrics_csv(log_dir / "metrics.csv").get(key, [])


def rl_curves(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The RL stage's reward, share of groups with signal and validation pass@1, by step."""
    zero = metric_points(log_dir, "train/frac_zero_std_groups")
    return {
        "reward": metric_points(log_dir, "train/reward"),
        "groups_with_signal": [(s, 1.0 - v) for s, v in zero],
        "validation_pass@1": [(m["step"], m["mbpp_eval/pass_rate"]) for m in read_evaluations(log_dir)],
    }


def _plot(ax: Any, points: list[tuple[int, float]], title: str, smoothed: bool = True) -> None:
    if not points:
        ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    else:
        steps, ys = zip(*points, strict=True)
        if smoothed:
            ax.plot(steps, ys, alpha=0.35, color="#4c72b0")
            ax.plot(steps, smooth(list(ys), max(1, len(ys) // 10)), color="#4c72b0")
        else:
            ax.plot(steps, ys, marker="o", color="#55a868")
    ax.set_title(title)
    ax.set_xlabel("step")


def draw_heldout(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(HELDOUT), figsize=(6 * len(HELDOUT), 4))
    names = [r["after"] for r in rows]
    for ax, (key, title) in zip(axes, HELDOUT.items(), strict=True):
        values = [100 * r[key]["pass@1"] for r in rows]
        band = [100 * r.get(f"{key}_band", 0.0) for r in rows]
        ax.bar(names, values, yerr=band, capsize=6, color=["#999999", "#4c72b0", "#55a868"][: len(rows)])
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom")
        ax.set_title(f"{title} greedy pass@1 (%), {rows[0][key]['num_problems']} tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_rl(curves: dict[str, list[tuple[int, float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    _plot(axes[0], curves["reward"], "RL: train reward (fraction of tests passed)")
    _plot(axes[1], curves["groups_with_signal"], "RL: groups with signal (returns not all equal)")
    _plot(axes[2], curves["validation_pass@1"], "RL: MBPP validation greedy pass@1 (90)", smoothed=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=str((REPO / "../shared/data/mbpp").resolve()), help="MBPP directory"
    )
    parser.add_argument("--out-dir", default="runs/mbpp_recipe", help="run directories of every stage")
    parser.add_argument(
        "--rl-minutes", type=float, default=60.0, help="RL wall-clock budget; 0 skips stage 2"
    )
    parser.add_argument(
        "--bc-run", default=None, help="a finished BC stage's log dir to reuse (skips stage 1)"
    )
    parser.add_argument(
        "--rl-run", default=None, help="a finished RL stage's log dir to reuse (skips stage 2)"
    )
    parser.add_argument("--bc-args", default="", help="extra CLI overrides for stage 1 (one quoted string)")
    parser.add_argument("--rl-args", default="", help="extra CLI overrides for stage 2 (one quoted string)")
    parser.add_argument(
        "--noise-band",
        choices=("all", "trained", "final", "none"),
        default="trained",
        help="score these policies again in the other engine dtype: every one, BC and RL, the last one, none",
    )
    parser.add_argument(
        "--band-sets",
        default="mbpp,humaneval",
        help="held-out sets the noise band is measured on (comma-separated)",
    )
    parser.add_argument(
        "--base-model", default="smollm2-135m-instruct", help="the policy stage 1 starts from"
    )
    parser.add_argument("--skip-base", action="store_true", help="do not score the base model")
    parser.add_argument(
        "--eval-args", default="", help="extra overrides for every `validate` (one quoted string)"
    )
    parser.add_argument("--out", default=str(REPO / "bench_results" / "mbpp_recipe.json"))
    args = parser.parse_args()
    data = str(Path(args.data).resolve())
    if not Path(data).is_dir():
        sys.exit(f"no MBPP directory at {data} (pass --data)")
    out_dir = (REPO / args.out_dir).resolve()
    start = time.time()

    # The held-out sets are scored by `validate` below, not by the stages' own callbacks.
    quiet = ["--trainer.callbacks.init_args.source", data]
    stages: list[dict[str, Any]] = []
    if args.bc_run:
        bc_dir = Path(args.bc_run).resolve()
        stages.append(reused_stage("bc", bc_dir))
    else:
        bc = train_stage(
            "bc",
            "mbpp_recipe_bc.yaml",
            out_dir / "bc",
            [
                *quiet,
                "--trainer.callbacks.init_args.eval_at_start",
                "false",
                "--trainer.callbacks.init_args.eval_at_end",
                "false",
                "--model.init_args.demonstrations.source",
                data,
                "--model.init_args.model.name_or_path",
                args.base_model,
                *shlex.split(args.bc_args),
            ],
        )
        stages.append(bc)
        bc_dir = Path(bc["log_dir"])
    policies = [("base", args.base_model), ("BC", str(bc_dir / "hf_model"))]
    if args.skip_base:
        policies = policies[1:]
    if args.rl_run:
        rl_dir: Path | None = Path(args.rl_run).resolve()
        stages.append(reused_stage("rl", rl_dir))
    elif args.rl_minutes > 0:
        minutes = int(round(args.rl_minutes))
        rl = train_stage(
            "rl",
            "mbpp_recipe_grpo.yaml",
            out_dir / "rl",
            [
                *quiet,
                "--model.init_args.model.name_or_path",
                str(bc_dir / "hf_model"),
                "--model.init_args.problems.source",
                data,
                "--trainer.max_time",
                f"00:{minutes // 60:02d}:{minutes % 60:02d}:00",
                *shlex.split(args.rl_args),
            ],
        )
        stages.append(rl)
        rl_dir = Path(rl["log_dir"])
    else:
        rl_dir = None
    if rl_dir is not None:
        policies.append(("BC + RL", str(rl_dir / "hf_model")))

    native = native_dtype()
    eval_extra = shlex.split(args.eval_args)
    band_sets = [h for h in args.band_sets.split(",") if h]
    if unknown := set(band_sets) - set(HELDOUT):
        sys.exit(f"--band-sets: unknown held-out sets {sorted(unknown)} (known: {','.join(HELDOUT)})")
    rows = [{"after": after, "policy": policy} for after, policy in policies]
    for row in rows:  # every score first, then the band: the table's numbers come soonest
        evals = out_dir / "eval" / row["after"].replace(" + ", "_").lower()
        for heldout in HELDOUT:
            row[heldout] = evaluate(row["policy"], heldout, native, data, evals, eval_extra)
    for row in rows:
        wanted = {"all": True, "trained": row["after"] != "base", "final": row is rows[-1], "none": False}
        if not wanted[args.noise_band]:
            continue
        evals = out_dir / "eval" / row["after"].replace(" + ", "_").lower()
        for heldout in band_sets:
            other = evaluate(row["policy"], heldout, OTHER_DTYPE[native], data, evals, eval_extra)
            row[f"{heldout}_other_dtype"] = other
            row[f"{heldout}_band"] = abs(other["pass@1"] - row[heldout]["pass@1"])
            if (churn := paired(other, row[heldout])) is not None:  # verdicts the dtype moved
                row[f"{heldout}_flips"] = churn["gained"] + churn["lost"]
    total = time.time() - start
    final = Path(policies[-1][1])
    sample = check_hf_model(final) if final.is_dir() else None

    print(f"\n[mbpp_recipe] total wall {total / 60:.1f} min; final policy {final}")
    print(f"[mbpp_recipe] transformers loads it: {sample!r}")
    print(
        f"\nGreedy pass@1, engine dtype {native}; band = |{native} - {OTHER_DTYPE[native]}| of the same policy"
    )
    print("\n| after | MBPP test (500) | band | HumanEval (164) | band |\n|---|---|---|---|---|")
    for r in rows:
        cells = []
        for key in HELDOUT:
            e = r[key]
            band = r.get(f"{key}_band")
            cells.append(f"{100 * e['pass@1']:.1f}% ({e['problems_passed']}/{e['num_problems']})")
            flips = f" ({r[f'{key}_flips']} verdicts moved)" if f"{key}_flips" in r else ""
            cells.append(f"±{100 * band:.1f} pts{flips}" if band is not None else "-")
        print(f"| {r['after']} | " + " | ".join(cells) + " |")
    rl_over_bc: dict[str, Any] = {}
    if len(rows) >= 2 and rows[-1]["after"] == "BC + RL":
        bc_row = next(r for r in rows if r["after"] == "BC")
        for key, title in HELDOUT.items():
            gain = rows[-1][key]["problems_passed"] - bc_row[key]["problems_passed"]
            bands = [r[f"{key}_band"] for r in (rows[-1], bc_row) if f"{key}_band" in r]
            band = max(bands) if bands else None
            pair = paired(rows[-1][key], bc_row[key])
            rl_over_bc[key] = {"gain": gain, "band": band, **(pair or {})}
            flips = [r.get(f"{key}_flips") for r in (bc_row, rows[-1])]
            print(
                f"[mbpp_recipe] RL over BC on {title}: {gain:+d} problems "
                f"({100 * gain / rows[-1][key]['num_problems']:+.1f} pts; "
                + (f"noise band ±{100 * band:.1f} pts" if band is not None else "noise band not measured")
                + (
                    f", dtype moved {flips[0]} / {flips[1]} verdicts of BC / BC + RL"
                    if None not in flips
                    else ""
                )
                + (
                    f"; RL alone solves {pair['gained']}, BC alone {pair['lost']}, "
                    f"exact McNemar p = {pair['mcnemar_p']:.3f})"
                    if pair
                    else ")"
                )
            )
    print("\n| stage | wall (training + its interval evaluations) | command |\n|---|---|---|")
    for s in stages:
        wall = f"{s['wall_s'] / 60:.1f} min" if s["wall_s"] is not None else "reused"
        print(f"| {s['stage']} | {wall} | `{s['command']}` |")
    picture = out_dir / "mbpp_recipe.png"
    draw_heldout(rows, picture)
    curves = {"bc_loss": metric_points(bc_dir, "train/loss")}
    rl_picture = None
    if rl_dir is not None:
        curves.update(rl_curves(rl_dir))
        rl_picture = out_dir / "rl_curves.png"
        draw_rl(curves, rl_picture)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": shlex.join([Path(sys.executable).name, *sys.argv]),
                "total_wall_s": total,
                "engine_dtype": native,
                "rows": rows,
                "rl_over_bc": rl_over_bc,
                "stages": stages,
                "final_policy": str(final),
                "transformers_sample": sample,
                "curves": curves,
                "pictures": [str(picture), str(rl_picture)],
            },
            indent=1,
        )
    )
    print(f"\n[mbpp_recipe] pictures: {picture} {rl_picture or ''}\n[mbpp_recipe] wrote {out}")


if __name__ == "__main__":
    main()
