"""GRPO step time: lit-coderl's ``GRPOModule`` vs TRL's ``GRPOTrainer``, same workload, same machine.

    pip install trl && python scripts/bench_grpo_vs_trl.py [--rounds 2] [--warmup 1] [--steps 5]
    python scripts/bench_grpo_vs_trl.py --quick     # tiny random model, 2 steps: a smoke test
    python scripts/bench_grpo_vs_trl.py --device cuda --precision bf16-mixed   # both on one GPU

``--device`` (default ``auto``: ``cuda`` where ``torch.cuda.is_available()``, else ``cpu``) puts
both frameworks on the same device: ours ``Trainer(accelerator="gpu", devices=1)``, TRL
``use_cpu=False`` (one visible GPU); the JSON records the device, the GPU's name, torch's version
and its CUDA version next to the CPU details. ``--threads`` sets torch's CPU threads either way
(on a GPU they only run the host-side work).

The workload (identical in both frameworks): SmolLM2-135M-Instruct (fp32 weights) trained in
``--precision`` (default ``auto``: ``bf16-mixed``, TRL's own default ``bf16=True``, where the CPU
computes in bf16 natively, else ``32-true``: emulated bf16 autocast made our step 7x slower on an
AVX2-only CPU; ours ``trainer.precision``), our rollouts generated in ``--engine-dtype`` (default
``auto``: bf16 on a CPU with AVX-512-BF16, else the lean fp32 decode; TRL generates under its
training autocast); which CPU path ran (flags, dtypes) is in the JSON's ``cpu_path``; the first 16 MBPP
train tasks (ids 601-616) shown as a chat prompt with the task text and its first assert; each
step takes 4 prompts x ``num_generations=4`` completions of at most 128 tokens at temperature
1.0; reward = fraction of the task's asserts passed in the sandbox (``UnitTestEnv``); one AdamW
update per rollout (lr 1e-6, constant, grad-norm clip 1.0), ``beta=0`` (no reference model), the
same ``loss_type`` and ``scale_rewards="group"``. Both frameworks see the *same prompts in the same
order* (TRL's dataset is laid out in the order of our ``ProblemStream`` and not reshuffled), so
the only difference left in the work is what each sampler draws.

Every (framework, round) runs in its own subprocess (``_bench_ours_worker.py`` /
``_bench_trl_worker.py``) with the same torch thread count, alternating A-B / B-A between rounds
so that drift on a shared machine hits both alike. A step's time is the wall time of one whole
training step (rollout + reward + forward/backward + optimizer), from the framework's own
step-begin hook to its step-end hook; warm-up steps are dropped. The parent prints a markdown
table (median step time, tokens generated per step, tokens/s, ratio) plus where each
framework's step time goes, and writes everything to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent
FRAMEWORKS = ("ours", "trl")
# The breakdown keys every worker reports per step (seconds); "other" = step time minus their sum.
PHASES = ("generate_s", "reward_s", "forward_backward_s", "optimizer_s")
SPEEDUP_TARGET = 2.5
TOKEN_TOLERANCE = 0.10


@dataclass
class Workload:
    """Everything that defines the work of one benchmark step; identical for both frameworks."""

    model: str = "smollm2-135m-instruct"
    """Model source as ``lit_codeRL.policy.loading.load_model`` understands it (both frameworks get
    the very same fp32 model object and tokenizer)."""
    mbpp_path: str = str(REPO.parent / "shared" / "data" / "mbpp" / "mbpp.jsonl")
    """MBPP file or directory; the first ``num_problems`` train tasks (601, 602, ...) are used."""
    num_problems: int = 16
    num_generations: int = 4
    prompts_per_step: int = 4
    max_completion_length: int = 128
    temperature: float = 1.0
    learning_rate: float = 1e-6
    beta: float = 0.0
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    num_shown_tests: int = 1
    max_grad_norm: float = 1.0
    seed: int = 0
    warmup: int = 1
    """Steps run first and left out of the statistics (allocator, caches, first sandbox forks)."""
    steps: int = 5
    """Measured steps per (framework, round)."""
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    """torch intra-op threads in every worker."""
    precision: str = "auto"
    """Training precision of both frameworks: ``bf16-mixed`` (TRL's default), ``32-true``, or
    ``auto`` (resolved in the parent: bf16-mixed where the device computes bf16 natively (the CPU
    has native bf16; a GPU with bf16 support), else 32-true)."""
    device: str = "cpu"
    """Where both frameworks train and generate: ``cpu`` or ``cuda`` (one GPU; resolved from
    ``--device auto`` in the parent)."""
    engine_dtype: str = "auto"
    """Our generation engine's dtype (``EngineSettings.dtype``); ``model`` samples in fp32."""
    skip_zero_advantage_groups: bool = True
    """Ours skips the forward/backward of groups whose advantages are all 0 (exact with
    ``beta=0``; GRPOModule's default). ``--no-skip`` runs every row, as TRL does."""
    sandbox_backend: str = "auto"
    sandbox_workers: int = 0
    """Sandbox worker processes; 0 = CPU count (the ``SandboxConfig`` default)."""

    @property
    def total_steps(self) -> int:
        return self.warmup + self.steps

    @property
    def batch_size(self) -> int:
        """Completions per optimizer step."""
        return self.prompts_per_step * self.num_generations


# ----------------------------------------------------------------- shared by both workers
def load_workload_problems(w: Workload) -> list:
    """The benchmark's problems, in task-id order, exactly as ``GRPOModule`` selects them."""
    from lit_codeRL.rollout.prompts import load_problem_set

    return load_problem_set(problem_settings(w))


def problem_settings(w: Workload):
    from lit_codeRL.rollout.prompts import ProblemSettings

    return ProblemSettings(
        source=w.mbpp_path, split="train", limit=w.num_problems, num_shown_tests=w.num_shown_tests
    )


def step_problem_order(problems: list, w: Workload) -> list:
    """The problems ``GRPOModule`` will prompt with, step after step (its ``ProblemStream`` order)."""
    from lit_codeRL.rollout.prompts import ProblemStream

    return ProblemStream(problems, seed=w.seed, rank=0).take(w.total_steps * w.prompts_per_step)


def sandbox_config(w: Workload):
    from lit_codeRL.sandbox import SandboxConfig

    return SandboxConfig(backend=w.sandbox_backend, workers=w.sandbox_workers)


def configure_threads(w: Workload) -> None:
    import torch

    torch.set_num_threads(w.threads)


def library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for name in ("torch", "transformers", "lightning", "trl", "accelerate"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def resolve_device(device: str) -> str:
    """``auto``: ``cuda`` where torch sees a GPU, else ``cpu``; ``cuda`` without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    return device


def device_info(device: str) -> dict[str, Any]:
    """The device the run used: its kind, the GPU's name (``cuda``), torch and its CUDA version."""
    import torch

    info: dict[str, Any] = {
        "device": device,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "gpu_name": None,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    if device == "cuda" and torch.cuda.is_available():
        info["gpu_name"] = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["gpu_capability"] = f"{props.major}.{props.minor}"
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    return info


def report_step(step: dict[str, Any]) -> None:
    """One progress line per finished step on stderr (the parent relays lines with this prefix)."""
    phases = " ".join(f"{p.removesuffix('_s')}={step.get(p, 0.0):.1f}" for p in PHASES)
    print(
        f"[bench] step {step['step']}: {step['time_s']:.1f} s, {step['tokens']} tokens, {phases}",
        file=sys.stderr,
        flush=True,
    )


def worker_main(run) -> None:
    """Entry point shared by the worker scripts: ``run(workload) -> result dict`` -> ``--out`` JSON."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, help="Workload as JSON")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    w = Workload(**json.loads(args.workload))
    configure_threads(w)
    result = run(w)
    result.update(
        workload=asdict(w), versions=library_versions(), cpus=os.cpu_count(), device=device_info(w.device)
    )
    args.out.write_text(json.dumps(result, indent=2))


# ------------------------------------------------------------------------- aggregation
def summarize(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Per-framework statistics over all measured steps (warm-up steps of every run dropped)."""
    out: dict[str, Any] = {}
    for fw in FRAMEWORKS:
        steps = [s for r in runs if r["framework"] == fw for s in r["steps"] if s["step"] >= warmup]
        if not steps:
            continue
        times = [s["time_s"] for s in steps]
        tokens = [s["tokens"] for s in steps]
        phases = {p: statistics.median(s.get(p, 0.0) for s in steps) for p in PHASES}
        phases["other_s"] = statistics.median(s["time_s"] - sum(s.get(p, 0.0) for p in PHASES) for s in steps)
        out[fw] = {
            "steps_measured": len(steps),
            "median_step_s": statistics.median(times),
            "mean_step_s": statistics.fmean(times),
            "min_step_s": min(times),
            "max_step_s": max(times),
            "tokens_per_step": statistics.fmean(tokens),
            "tokens_per_s": sum(tokens) / sum(times),
            # Median of per-step cost, like the step time: one disturbed step does not move it.
            "s_per_1k_tokens": statistics.median(
                1000 * t / max(1, n) for t, n in zip(times, tokens, strict=True)
            ),
            "median_phase_s": phases,
            "round_medians_s": [
                statistics.median(s["time_s"] for s in r["steps"] if s["step"] >= warmup)
                for r in runs
                if r["framework"] == fw
            ],
        }
    if "ours" in out and "trl" in out:
        ours, trl = out["ours"], out["trl"]
        tok_gap = abs(ours["tokens_per_step"] - trl["tokens_per_step"]) / max(
            ours["tokens_per_step"], trl["tokens_per_step"], 1e-9
        )
        speedup = trl["median_step_s"] / ours["median_step_s"]
        out["comparison"] = {
            "speedup_median_step": speedup,
            "speedup_per_token": trl["s_per_1k_tokens"] / ours["s_per_1k_tokens"],
            "tokens_per_step_gap": tok_gap,
            "tokens_match": tok_gap <= TOKEN_TOLERANCE,
            "enough_steps": min(ours["steps_measured"], trl["steps_measured"]) >= 5,
            "target_speedup": SPEEDUP_TARGET,
            "meets_target": speedup >= SPEEDUP_TARGET and tok_gap <= TOKEN_TOLERANCE,
        }
    return out


def render_table(summary: dict[str, Any]) -> str:
    lines = [
        "| framework | median step s | mean step s | steps | tokens/step | tokens/s | median s per 1k tokens | speedup |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = summary.get("trl", {}).get("median_step_s")
    for fw in FRAMEWORKS:
        if fw not in summary:
            continue
        s = summary[fw]
        speedup = f"{base / s['median_step_s']:.2f}x" if base else "-"
        lines.append(
            f"| {fw} | {s['median_step_s']:.2f} | {s['mean_step_s']:.2f} | {s['steps_measured']} "
            f"| {s['tokens_per_step']:.0f} | {s['tokens_per_s']:.1f} | {s['s_per_1k_tokens']:.2f} | {speedup} |"
        )
    lines += ["", "Median time per phase (s):", "", "| framework | " + " | ".join(PHASES) + " | other_s |"]
    lines.append("|---" * (len(PHASES) + 2) + "|")
    for fw in FRAMEWORKS:
        if fw in summary:
            ph = summary[fw]["median_phase_s"]
            lines.append(f"| {fw} | " + " | ".join(f"{ph[p]:.2f}" for p in (*PHASES, "other_s")) + " |")
    if "comparison" in summary:
        c = summary["comparison"]
        lines += [
            "",
            f"speedup (TRL median / ours median): {c['speedup_median_step']:.2f}x "
            f"(target >= {c['target_speedup']}x); per generated token: {c['speedup_per_token']:.2f}x",
            f"tokens/step gap: {100 * c['tokens_per_step_gap']:.1f}% "
            f"({'within' if c['tokens_match'] else 'OUTSIDE'} {100 * TOKEN_TOLERANCE:.0f}%)",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ driver
def run_worker(framework: str, w: Workload, round_idx: int, timeout_s: float) -> dict[str, Any]:
    """Run one worker subprocess, relaying its ``[bench]`` progress lines; returns its result JSON."""
    script = SCRIPTS / f"_bench_{framework}_worker.py"
    with tempfile.TemporaryDirectory(prefix=f"bench_{framework}_") as tmp:
        out, log = Path(tmp) / "result.json", Path(tmp) / "worker.log"
        path = os.pathsep.join(p for p in (str(REPO), str(SCRIPTS), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": path}
        cmd = [sys.executable, str(script), "--workload", json.dumps(asdict(w)), "--out", str(out)]
        t0 = time.perf_counter()
        with (
            log.open("w") as log_f,
            subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log_f, stderr=subprocess.PIPE, text=True) as proc,
        ):
            assert proc.stderr is not None
            for line in proc.stderr:  # ends when the worker exits
                if line.startswith("[bench]"):
                    print(f"round {round_idx}: {framework}: {line[8:].rstrip()}", file=sys.stderr, flush=True)
                else:
                    log_f.write(line)
                if time.perf_counter() - t0 > timeout_s:
                    proc.kill()
                    raise RuntimeError(f"{framework} worker (round {round_idx}) ran past {timeout_s:.0f} s")
        if proc.returncode != 0 or not out.is_file():
            sys.stderr.write(log.read_text()[-8000:])
            raise RuntimeError(
                f"{framework} worker (round {round_idx}) failed with exit code {proc.returncode}"
            )
        result = json.loads(out.read_text())
    result.update(framework=framework, round=round_idx, wall_s=time.perf_counter() - t0)
    return result


def check_same_prompts(runs: list[dict[str, Any]]) -> bool:
    """Every run must have prompted with the same task ids in the same step order."""
    seqs = {json.dumps([s["task_ids"] for s in r["steps"]]) for r in runs}
    return len(seqs) == 1


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Workload]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = Workload()
    ap.add_argument("--model", default=d.model, help="model source (load_model syntax)")
    ap.add_argument("--mbpp-path", default=d.mbpp_path)
    ap.add_argument("--rounds", type=int, default=2, help="subprocess runs per framework, alternating")
    ap.add_argument("--warmup", type=int, default=d.warmup, help="steps dropped at the start of every run")
    ap.add_argument("--steps", type=int, default=d.steps, help="measured steps per run")
    ap.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads in every worker")
    ap.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where both frameworks run (auto: cuda when torch.cuda.is_available(), else cpu)",
    )
    ap.add_argument("--max-completion-length", type=int, default=d.max_completion_length)
    ap.add_argument("--loss-type", default=d.loss_type, choices=["grpo", "dapo", "dr_grpo"])
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--precision", default=d.precision, choices=["auto", "bf16-mixed", "32-true"])
    ap.add_argument(
        "--engine-dtype", default=d.engine_dtype, choices=["auto", "model", "bfloat16", "float32"]
    )
    ap.add_argument(
        "--no-skip",
        action="store_true",
        help="ours runs forward/backward on zero-advantage groups too (skip_zero_advantage_groups=False)",
    )
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma list: ours,trl")
    ap.add_argument(
        "--quick", action="store_true", help="tiny random model, 1 round of 1+2 steps (smoke test)"
    )
    ap.add_argument("--worker-timeout", type=float, default=3600.0, help="seconds per worker subprocess")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results" / "grpo_vs_trl.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.model, args.rounds, args.warmup, args.steps = "tiny-random", 1, 1, 2
    device = resolve_device(args.device)
    w = Workload(
        model=args.model,
        mbpp_path=str(Path(args.mbpp_path).expanduser().resolve()),
        warmup=args.warmup,
        steps=args.steps,
        threads=args.threads,
        max_completion_length=args.max_completion_length,
        loss_type=args.loss_type,
        seed=args.seed,
        precision=resolve_bench_precision(args.precision, device),
        device=device,
        engine_dtype=args.engine_dtype,
        skip_zero_advantage_groups=not args.no_skip,
    )
    return args, w


def resolve_bench_precision(precision: str, device: str = "cpu") -> str:
    """``auto``: the faster training precision on this device for both frameworks (a GPU: bf16-mixed
    where it supports bf16, as every Ampere or newer does; a CPU: bf16-mixed where it computes
    bf16 natively)."""
    if precision != "auto":
        return precision
    if device == "cuda":
        import torch

        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    from lit_codeRL.policy.precision import cpu_has_native_bf16

    return "bf16-mixed" if cpu_has_native_bf16() else "32-true"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, w = parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    if unknown := set(frameworks) - set(FRAMEWORKS):
        raise SystemExit(f"unknown framework(s) {sorted(unknown)}; choose from {FRAMEWORKS}")
    if "trl" in frameworks:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit("TRL is not installed: pip install trl (a benchmark-only dependency)") from None
    if not Path(w.mbpp_path).exists():
        raise SystemExit(f"MBPP not found at {w.mbpp_path}; pass --mbpp-path")

    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = frameworks if r % 2 == 0 else frameworks[::-1]  # A-B, B-A, ...
        for fw in order:
            print(f"round {r}: running {fw} ({w.total_steps} steps)...", file=sys.stderr, flush=True)
            res = run_worker(fw, w, r, args.worker_timeout)
            times = ", ".join(f"{s['time_s']:.1f}" for s in res["steps"])
            print(f"round {r}: {fw}: step times [{times}] s, wall {res['wall_s']:.0f} s", file=sys.stderr)
            runs.append(res)
            _write(args.out, {"workload": asdict(w), "partial": True, "runs": runs})

    summary = summarize(runs, w.warmup)
    same_prompts = check_same_prompts(runs)
    if "comparison" in summary:
        summary["comparison"]["same_prompts"] = same_prompts
    table = render_table(summary)
    dev = device_info(w.device)
    gpu = f" ({dev['gpu_name']})" if dev["gpu_name"] else ""
    header = (
        f"GRPO step, {w.model}: {w.prompts_per_step} prompts x {w.num_generations} completions, "
        f"<= {w.max_completion_length} new tokens, loss {w.loss_type}, training {w.precision}, "
        f"our generation {w.engine_dtype}, device {w.device}{gpu}, {w.threads} torch threads, {os.cpu_count()} CPUs; {args.rounds} round(s) x {w.steps} measured steps (+{w.warmup} warm-up) each"
    )
    print(f"\n{header}\n\n{table}")
    if not same_prompts:
        print("WARNING: the runs did not prompt with the same task sequence", file=sys.stderr)

    from lit_codeRL.policy.cpu_path import cpu_path

    result = {
        "workload": asdict(w),
        "device": dev,
        "cpu_path": cpu_path(),
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "versions": runs[0]["versions"] if runs else library_versions(),
        "summary": summary,
        "table": table,
        "runs": runs,
    }
    _write(args.out, result)
    print(f"\nwrote {args.out}")
    return result


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
