"""Does a bf16 sampler, corrected, learn like the fp32 one? Short REINFORCE and SPIRAL curves.

    python scripts/sampler_parity.py                 # 4 runs (2 algorithms x 2 samplers), 2 at a time
    python scripts/sampler_parity.py --algos spiral --steps 6 --jobs 1

``engine.dtype: bfloat16`` samples from a bf16 replica of the fp32 policy (what ``auto`` picks on an
Ampere+ GPU or a CPU with AVX-512-BF16/AMX; forced here, so it runs, emulated and slower, on any
CPU); ``engine.dtype: model`` samples from the fp32 trainer itself, through transformers' forward
(``fast_decode: false``, as the fp32 path of ``scripts/grpo_parity.py``). The trainer corrects the
mismatch (``PolicyModule.sampler_correction``): REINFORCE weights each token by
``min(pi_train / pi_sampler, tis_cap)``; SPIRAL (2 PPO epochs) takes the trainer's own log-probs
before the first epoch as the old policy of its clipped ratio (1 in the first epoch) and weights
each token by ``min(pi_old / pi_sampler, tis_cap)`` (the ``bench_results/sampler_parity.json``
figures predate this: there SPIRAL's ratio was to the sampler). Every run logs the mismatch, ``train/tis/logprob_diff`` (mean
``|log pi_train - log pi_sampler|`` over action tokens).

The runs (SmolLM2-135M-Instruct, fp32 training, each in its own process with ``--threads`` torch
threads, seeded alike so the two samplers start from the same weights and problems):

- ``reinforce``: RLOO on two embedded tasks the model solves about one time in three (groups
  disagree: there is a gradient), 2 prompts x 4 completions of <= 96 tokens, lr 2e-5. Curve: the
  training reward.
- ``spiral``: TicTacToe self-play with ``configs/spiral_self_play.yaml``'s prompt, 8 samples per
  step, moves of <= 32 tokens at T = 0.7, 2 PPO epochs, lr 3e-5. Curve: the invalid-move rate.

Per run: the curve, its rolling mean (``spiral_report.smooth``), first and last ``--window`` steps,
and the mismatch metrics; per algorithm the bf16 - fp32 difference of the last window (one seed
each: a check that the corrected bf16 run is not off course, not a significance test; see
``scripts/grpo_parity.py`` for GRPO over seeds). Writes ``bench_results/sampler_parity.json``.
Runs are resumable (a run whose JSON exists under ``--out-dir`` is read, not rerun); a run sent
SIGTERM stops after its current step (Lightning) and its JSON covers the steps it took.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import mean
from typing import Any

from grpo_parity import REPO  # scripts/ is on sys.path when a script runs
from spiral_report import smooth

ALGOS = ("reinforce", "spiral")
SAMPLERS = {"bf16": "bfloat16", "fp32": "model"}
CURVE = {"reinforce": "train/reward", "spiral": "train/game/invalid_move_rate"}
MISMATCH = (
    "train/tis/logprob_diff",
    "train/tis/weight",
    "train/tis/capped",
    "train/ratio",
    "train/clip_ratio",
)
SPIRAL_INSTRUCTION = (
    "You are playing Tic Tac Toe. Make valid actions to win.\nObservation: {observation}\n"
    "Which square do you take? Answer with \\boxed{N}, where N is one of the available squares."
)


def build_module(algo: str, engine_dtype: str, model: str, seed: int) -> Any:
    """The module of one run; ``model`` ``tiny-random`` shrinks everything for a smoke test."""
    from lit_codeRL.policy.engine import EngineSettings, SamplingParams
    from lit_codeRL.policy.loading import ModelSettings

    tiny = model == "tiny-random"
    # fp32: the trainer samples from itself through transformers' forward (grpo_parity's fp32
    # path); bf16: a replica through the lean CPU decode (policy/fast_decode.py).
    engine = EngineSettings(dtype=engine_dtype, fast_decode=engine_dtype != "model")
    common = {
        "model": ModelSettings(name_or_path=model),
        "engine": engine,
        "save_hf_model": False,
        "seed": seed,
    }
    if algo == "reinforce":
        from lit_codeRL.modules.reinforce import REINFORCEModule
        from lit_codeRL.rollout.prompts import ProblemSettings
        from lit_codeRL.sandbox import SandboxConfig

        return REINFORCEModule(
            **common,
            problems=ProblemSettings(task_ids=["coderl/square", "coderl/reverse_string"]),
            sampling=SamplingParams(max_new_tokens=8 if tiny else 96, temperature=1.0),
            sandbox=SandboxConfig(workers=1),
            num_generations=4,
            prompts_per_step=2,
            optimizer={"learning_rate": 2e-5},
        )
    from lit_codeRL.modules.spiral import GameSettings, SpiralModule

    return SpiralModule(
        **common,
        games=GameSettings(games=["tictactoe"], instruction=SPIRAL_INSTRUCTION),
        sampling=SamplingParams(max_new_tokens=6 if tiny else 32, temperature=0.7),
        samples_per_step=4 if tiny else 8,
        games_per_round=4 if tiny else 8,
        ppo_epochs=2,
        optimizer={"learning_rate": 3e-5},
    )


def train(algo: str, sampler: str, steps: int, model: str, seed: int, run_dir: Path) -> Path:
    """One run in this process; returns its ``metrics.csv``."""
    from lightning.pytorch import Callback, Trainer, seed_everything
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    class Progress(Callback):  # one line per training step in the run's log
        def on_train_batch_end(self, trainer: Trainer, *args: Any) -> None:
            m = trainer.callback_metrics
            shown = {k: round(float(m[k]), 4) for k in (CURVE[algo], *MISMATCH) if k in m}
            print(f"step {trainer.global_step} {time.strftime('%H:%M:%S')} {shown}", flush=True)

    seed_everything(seed)
    module = build_module(algo, SAMPLERS[sampler], model, seed)
    logger = CSVLogger(save_dir=str(run_dir), name="", version="")
    trainer = Trainer(
        accelerator="cpu",
        precision="32-true",
        # SPIRAL counts ppo_epochs optimizer steps per training step
        max_steps=steps * (module.hparams.ppo_epochs if algo == "spiral" else 1),
        logger=logger,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(run_dir),
        callbacks=[Progress()],
    )
    try:
        trainer.fit(module)
    except SIGTERMException:  # stopped early on purpose: the metrics of the steps taken stand
        print(f"stopped by SIGTERM after step {trainer.global_step}", flush=True)
    return Path(logger.log_dir) / "metrics.csv"


def run_one(algo: str, sampler: str, args: argparse.Namespace, out_dir: Path) -> Path:
    """One run in a subprocess with ``args.threads`` threads (skipped when its JSON exists)."""
    name = f"{algo}_{sampler}"
    result = out_dir / f"{name}.json"
    if result.exists():
        return result
    command = [sys.executable, __file__, "--one", algo, sampler, "--steps", str(args.steps)]
    command += ["--model", args.model, "--seed", str(args.seed), "--out-dir", str(out_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "HF_HUB_OFFLINE": "1"}
    with (out_dir / f"{name}.log").open("w") as log:
        done = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {done.returncode}); see {out_dir / f'{name}.log'}")
    return result


def run_summary(algo: str, metrics_csv: Path, wall_s: float, window: int) -> dict[str, Any]:
    """A run's curve and mismatch metrics from its ``metrics.csv``."""
    from lit_codeRL.callbacks.curves import read_metrics_csv

    history = read_metrics_csv(metrics_csv)
    curve = [v for _, v in history.get(CURVE[algo], [])]
    out: dict[str, Any] = {
        "metric": CURVE[algo],
        "curve": curve,
        "rolling_mean": smooth(curve, window),
        "first_window": mean(curve[:window]) if curve else None,
        "last_window": mean(curve[-window:]) if curve else None,
        "wall_s": wall_s,
    }
    for key in MISMATCH:
        values = [v for _, v in history.get(key, [])]
        out[key.removeprefix("train/")] = {"per_step": values, "mean": mean(values)} if values else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--steps", type=int, default=12, help="training steps per run")
    parser.add_argument("--window", type=int, default=4, help="first/last window and rolling mean (steps)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="tiny-random: a smoke test")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument(
        "--out-dir", default="runs/sampler_parity", help="run directories, logs, per-run JSON"
    )
    parser.add_argument("--out", default="bench_results/sampler_parity.json")
    parser.add_argument("--one", nargs=2, metavar=("ALGO", "SAMPLER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    out_dir = REPO / args.out_dir  # an absolute path stays as given
    out_dir.mkdir(parents=True, exist_ok=True)

    if args.one:  # a worker: train, then write the run's JSON
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        algo, sampler = args.one
        start = time.perf_counter()
        metrics_csv = train(algo, sampler, args.steps, args.model, args.seed, out_dir / f"{algo}_{sampler}")
        summary = run_summary(algo, metrics_csv, time.perf_counter() - start, args.window)
        (out_dir / f"{algo}_{sampler}.json").write_text(json.dumps(summary, indent=1))
        return

    todo = [(a, s) for a in args.algos for s in args.samplers]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda t: run_one(*t, args, out_dir), todo))
    runs: dict[str, dict[str, Any]] = {a: {} for a in args.algos}
    for (a, s), result in zip(todo, results, strict=True):
        runs[a][s] = json.loads(result.read_text())

    def fmt(value: Any, digits: int = 4) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    print(
        f"| algorithm | sampler | curve | first {args.window} | last {args.window} | "
        "log-prob diff | TIS weight | capped | ratio | clip | wall |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for a in args.algos:
        for s, r in runs[a].items():
            stat = {
                k: (r[k] or {}).get("mean")
                for k in ("tis/logprob_diff", "tis/weight", "tis/capped", "ratio", "clip_ratio")
            }
            print(
                f"| {a} | {s} | {r['metric'].removeprefix('train/')} | {fmt(r['first_window'], 3)} | "
                f"{fmt(r['last_window'], 3)} | {fmt(stat['tis/logprob_diff'])} | {fmt(stat['tis/weight'])} | "
                f"{fmt(stat['tis/capped'])} | {fmt(stat['ratio'])} | {fmt(stat['clip_ratio'])} | "
                f"{r['wall_s'] / 60:.1f} min |"
            )
    summary: dict[str, Any] = {"steps": args.steps, "model": args.model, "seed": args.seed, "runs": runs}
    if set(args.samplers) == set(SAMPLERS):
        summary["bf16_minus_fp32_last_window"] = {}
        for a in args.algos:
            # over the steps both runs took (a run stopped early is shorter)
            both = min(len(runs[a]["bf16"]["curve"]), len(runs[a]["fp32"]["curve"]))
            bf16, fp32 = (runs[a][s]["curve"][:both][-args.window :] for s in ("bf16", "fp32"))
            d = mean(bf16) - mean(fp32)
            summary["bf16_minus_fp32_last_window"][a] = {"steps": both, "diff": d}
            print(
                f"\n{a}: bf16 - fp32, {runs[a]['bf16']['metric']} over steps {both - len(bf16) + 1}-{both}: "
                f"{d:+.3f}",
                end="",
            )
        print()
    print("\n| step | " + " | ".join(f"{a} {s}" for a in args.algos for s in args.samplers) + " |")
    print("|---|" + "---|" * (len(args.algos) * len(args.samplers)))
    for i in range(args.steps):
        cells = [
            runs[a][s]["curve"][i] if i < len(runs[a][s]["curve"]) else None
            for a in args.algos
            for s in args.samplers
        ]
        print(f"| {i + 1} | " + " | ".join(fmt(c, 3) for c in cells) + " |")
    out = REPO / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
