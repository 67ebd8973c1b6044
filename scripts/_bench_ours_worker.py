"""Benchmark worker: ``warmup + steps`` GRPO steps with ``GRPOModule`` + ``lightning.Trainer``.

A step's time is the wall time from ``on_train_batch_start`` to ``on_train_batch_end``; the
rollout happens inside ``training_step`` (the module pulls its batch from ``dataloader_iter``),
so it is inside that window. The phase breakdown is what the module logs every step
(``time/generate_s``, ``time/reward_wait_s``, ``time/forward_backward_s``, ``time/optimizer_s``);
tokens per step = ``train/completion_length`` (mean completion tokens, EOS included) x batch size.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from bench_grpo_vs_trl import (
    Workload,
    load_workload_problems,
    problem_settings,
    report_step,
    sandbox_config,
    step_problem_order,
    worker_main,
)


def run(w: Workload) -> dict[str, Any]:
    import lightning as L
    import torch

    from lit_codeRL.envs.settings import EnvSettings
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.engine import EngineSettings
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.training.optim import OptimizerSettings

    expected_order = [p.task_id for p in step_problem_order(load_workload_problems(w), w)]
    module = GRPOModule(
        model=ModelSettings(name_or_path=w.model, dtype="float32"),
        engine=EngineSettings(dtype=w.engine_dtype),
        problems=problem_settings(w),
        env=EnvSettings(name="unit_test"),
        sandbox=sandbox_config(w),
        sampling=SamplingParams(max_new_tokens=w.max_completion_length, temperature=w.temperature),
        num_generations=w.num_generations,
        prompts_per_step=w.prompts_per_step,
        optimizer=OptimizerSettings(learning_rate=w.learning_rate, max_grad_norm=w.max_grad_norm),
        beta=w.beta,
        loss_type=w.loss_type,
        scale_rewards=w.scale_rewards,
        num_iterations=1,
        skip_zero_advantage_groups=w.skip_zero_advantage_groups,
        save_hf_model=False,
        seed=w.seed,
    )
    steps: list[dict[str, Any]] = []

    class StepTimer(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            elapsed = time.perf_counter() - self.t0
            m = {k: float(v) for k, v in trainer.callback_metrics.items()}
            records = pl_module.last_records
            task_ids = [r["problem_id"] for r in records[:: w.num_generations]]  # rows are group-contiguous
            steps.append(
                {
                    "step": len(steps),
                    "time_s": elapsed,
                    "tokens": int(sum(r["completion_tokens"] for r in records)),
                    "task_ids": task_ids,
                    "generate_s": m.get("time/generate_s", 0.0),
                    "reward_s": m.get("time/reward_wait_s", 0.0),
                    "forward_backward_s": m.get("time/forward_backward_s", 0.0),
                    "optimizer_s": m.get("time/optimizer_s", 0.0),
                    "train_s": m.get("time/train_s", 0.0),
                    "trained_rows_frac": m.get("train/trained_rows_frac", 1.0),
                    "sandbox_cpu_s": m.get("train/sandbox_s", 0.0),
                    "completion_length": m.get("train/completion_length", 0.0),
                    "reward_mean": sum(r["reward"] for r in records) / max(1, len(records)),
                    "threads": torch.get_num_threads(),
                }
            )
            report_step(steps[-1])

    with tempfile.TemporaryDirectory(prefix="ours_bench_") as root:
        trainer = L.Trainer(
            accelerator="gpu" if w.device == "cuda" else "cpu",
            devices=1,
            precision=w.precision,
            max_steps=w.total_steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            default_root_dir=root,
            callbacks=[StepTimer()],
        )
        torch.set_num_threads(w.threads)
        trainer.fit(module)

    seen = [t for s in steps for t in s["task_ids"]]
    if seen != expected_order[: len(seen)]:
        raise RuntimeError(
            f"GRPOModule prompted {seen[:8]}..., the benchmark expected {expected_order[:8]}..."
        )
    return {"framework": "ours", "steps": steps}


if __name__ == "__main__":
    worker_main(run)
