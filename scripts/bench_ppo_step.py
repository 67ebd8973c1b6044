"""The phases of a PPO step beside a GRPO step, on the same rollout batch.

    python scripts/bench_ppo_step.py [--steps 3] [--warmup 1] [--out bench_results/ppo_step.json]
    python scripts/bench_ppo_step.py --quick        # tiny random model: a smoke test

One rollout batch is sampled once (SmolLM2-135M-Instruct, the first MBPP train tasks, 4 prompts x
4 completions of at most 128 tokens: the workload of ``bench_grpo_vs_trl.py``) and its rewards set
to a fixed pattern with signal in every group, so that every variant trains every row. The same
batch then goes through one update of each variant, in its own ``Trainer``:

* ``grpo``: ``GRPOModule`` (every row trained: ``skip_zero_advantage_groups`` off);
* ``ppo_grpo``: ``PPOModule`` with GRPO advantages (no critic);
* ``ppo_gae_head``: ``PPOModule`` with a value head on the policy (one forward gives both);
* ``ppo_gae_model``: ``PPOModule`` with a separate critic (a second backbone).

Per variant, the median over ``--steps`` measured updates (after ``--warmup``) of the phases the
modules log: the critic's values before the update (``time/old_values_s``), forward+backward,
the optimizer, and the whole training part of the step; the batch's generation time is the same
for all. Prints a markdown table and writes JSON with the CPU path it ran on.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

PHASES = ("time/old_values_s", "time/forward_backward_s", "time/optimizer_s", "time/train_s")
VARIANTS = ("grpo", "ppo_grpo", "ppo_gae_head", "ppo_gae_model")


def common(args) -> dict[str, Any]:
    from lit_codeRL.envs.settings import EnvSettings
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.rollout.prompts import ProblemSettings

    return dict(
        model=ModelSettings(name_or_path=args.model, dtype="float32"),
        problems=ProblemSettings(source=args.mbpp_path, split="train", limit=16, num_shown_tests=1),
        env=EnvSettings(name="unit_test"),
        sampling=SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0),
        num_generations=args.generations,
        prompts_per_step=args.prompts,
        optimizer={"learning_rate": 1e-6},
        save_hf_model=False,
        seed=0,
    )


def build(variant: str, args):
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.modules.ppo import PPOModule

    kw = common(args)
    if variant == "grpo":
        return GRPOModule(**kw, skip_zero_advantage_groups=False)
    if variant == "ppo_grpo":
        return PPOModule(**kw, advantage="grpo")
    kind = "head" if variant == "ppo_gae_head" else "model"
    return PPOModule(**kw, advantage="gae", critic={"kind": kind})


def trainer(steps: int, callbacks: list, precision: str):
    import lightning as L

    return L.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def sample_batch(args, precision: str):
    """One rollout batch of the workload, and its generation time."""
    import lightning as L
    import torch

    from lit_codeRL.modules.grpo import GRPOModule

    seen: dict[str, Any] = {}
    original = GRPOModule.next_batch

    def keep(self, it):
        batch = original(self, it)
        seen["batch"], seen["generate_s"] = copy.deepcopy(batch), batch.stats.get("generate_s", 0.0)
        return batch

    GRPOModule.next_batch = keep
    try:
        L.seed_everything(0)
        trainer(1, [], precision).fit(build("grpo", args))
    finally:
        GRPOModule.next_batch = original
    batch = seen["batch"]
    pattern = torch.tensor([1.0, 0.0, 0.5, 0.25])
    batch.rewards = pattern.repeat(batch.batch_size // 4 + 1)[: batch.batch_size].to(batch.rewards)
    return batch, seen["generate_s"]


def measure(variant: str, batch, args, precision: str) -> dict[str, Any]:
    import lightning as L

    module = build(variant, args)
    cls, original = type(module), type(module).next_batch
    cls.next_batch = lambda self, it: copy.deepcopy(batch).to(self.device)  # the same batch every step
    steps: list[dict[str, float]] = []

    class Timer(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if k in PHASES}
            metrics["step_s"] = time.perf_counter() - self.t0
            steps.append(metrics)

    L.seed_everything(0)
    try:
        trainer(args.warmup + args.steps, [Timer()], precision).fit(module)
    finally:
        cls.next_batch = original
    measured = steps[args.warmup :]
    return {
        "steps": steps,
        "median": {k: statistics.median(s.get(k, 0.0) for s in measured) for k in (*PHASES, "step_s")},
    }


def table(results: dict[str, Any], generate_s: float) -> str:
    def total(m: dict[str, float]) -> float:
        return m["time/old_values_s"] + m["time/train_s"]

    base = total(results["grpo"]["median"])
    lines = [
        "| variant | critic values s | forward+backward s | optimizer s | update total s | vs GRPO | whole step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        m = results[variant]["median"]
        lines.append(
            f"| {variant} | {m['time/old_values_s']:.2f} | {m['time/forward_backward_s']:.2f} | "
            f"{m['time/optimizer_s']:.2f} | {total(m):.2f} | {total(m) / base:.2f}x | {m['step_s']:.2f} |"
        )
    lines.append(
        f"\ngeneration of the batch (the same for every variant, not in these steps): {generate_s:.2f} s; "
        "whole step = the training step's wall time without generation (the batch is given)"
    )
    return "\n".join(lines)


def main() -> None:
    from bench_grpo_vs_trl import Workload

    d = Workload()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=d.model)
    ap.add_argument("--mbpp-path", default=d.mbpp_path)
    ap.add_argument("--prompts", type=int, default=d.prompts_per_step)
    ap.add_argument("--generations", type=int, default=d.num_generations)
    ap.add_argument("--max-new-tokens", type=int, default=d.max_completion_length)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--precision", default="auto", choices=["auto", "bf16-mixed", "32-true"])
    ap.add_argument("--quick", action="store_true", help="tiny random model, 1 measured step")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results" / "ppo_step.json")
    args = ap.parse_args()
    if args.quick:
        args.model, args.max_new_tokens, args.warmup, args.steps = "tiny-random", 8, 0, 1
    from lit_codeRL.policy.cpu_path import cpu_path
    from lit_codeRL.policy.precision import cpu_has_native_bf16

    precision = args.precision
    if precision == "auto":
        precision = "bf16-mixed" if cpu_has_native_bf16() else "32-true"
    batch, generate_s = sample_batch(args, precision)
    results = {variant: measure(variant, batch, args, precision) for variant in VARIANTS}
    text = table(results, generate_s)
    print(text)
    out = {
        "workload": {
            "model": args.model,
            "rows": batch.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "completion_tokens": int(batch.trainable_mask.sum()),
            "precision": precision,
            "warmup": args.warmup,
            "steps": args.steps,
        },
        "cpu_path": cpu_path(),
        "generate_s": generate_s,
        "results": results,
        "table": text,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
