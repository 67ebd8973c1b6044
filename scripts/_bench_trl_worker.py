"""Benchmark worker: ``warmup + steps`` GRPO steps with TRL's ``GRPOTrainer`` (see bench_grpo_vs_trl.py).

Times each optimizer step with a ``TrainerCallback`` (``on_step_begin`` -> ``on_step_end``) and
splits it into phases by wrapping TRL's generation call, the reward function and the optimizer
hooks. Tokens per step are counted from the completion ids TRL hands to the reward function
(EOS included, nothing after it), the same count ``GRPOModule`` logs.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from bench_grpo_vs_trl import (
    Workload,
    load_workload_problems,
    report_step,
    sandbox_config,
    step_problem_order,
    worker_main,
)


def run(w: Workload) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lit_codeRL.envs import UnitTestEnv
    from lit_codeRL.policy.loading import load_model
    from lit_codeRL.problems.prompts import chat_messages
    from lit_codeRL.rollout.chat import render_prompt
    from lit_codeRL.sandbox import make_sandbox

    problems = load_workload_problems(w)
    by_id = {p.task_id: p for p in problems}
    order = step_problem_order(problems, w)
    # Laid out in GRPOModule's prompt order and not reshuffled: step k sees the same 4 tasks in both.
    dataset = Dataset.from_list(
        [{"prompt": chat_messages(p, num_shown_tests=w.num_shown_tests), "task_id": p.task_id} for p in order]
    )
    model, tokenizer = load_model(name_or_path=w.model)
    sandbox = make_sandbox(sandbox_config(w))
    env = UnitTestEnv(sandbox)

    current: dict[str, Any] = {}  # per-step measurements, filled by the wrappers below

    def unit_test_reward(prompts, completions, task_id, completion_ids, **_: Any) -> list[float]:
        t0 = time.perf_counter()
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        results = env.score_batch([by_id[t] for t in task_id], texts)
        current["reward_s"] = current.get("reward_s", 0.0) + time.perf_counter() - t0
        current["tokens"] = current.get("tokens", 0) + sum(len(ids) for ids in completion_ids)
        # TRL's RepeatSampler hands the G copies of a prompt over contiguously (it shuffles later).
        current["task_ids"] = current.get("task_ids", []) + list(task_id[:: w.num_generations])
        current["rewards"] = [r.reward for r in results]
        return [r.reward for r in results]

    with tempfile.TemporaryDirectory(prefix="trl_bench_") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            per_device_train_batch_size=w.batch_size,
            num_generations=w.num_generations,
            steps_per_generation=1,  # one rollout of prompts_per_step x G completions per optimizer step
            gradient_accumulation_steps=1,
            max_completion_length=w.max_completion_length,
            temperature=w.temperature,
            learning_rate=w.learning_rate,
            lr_scheduler_type="constant",  # GRPOModule's schedule (no warm-up, no decay)
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=w.max_grad_norm,
            beta=w.beta,
            num_iterations=1,
            loss_type=w.loss_type,
            scale_rewards=w.scale_rewards,
            shuffle_dataset=False,
            max_steps=w.total_steps,
            use_cpu=w.device != "cuda",  # on cuda: the one visible GPU (accelerate's default device)
            bf16=w.precision == "bf16-mixed",  # True is TRL's own default
            fp16=False,
            logging_steps=1,
            report_to="none",
            eval_strategy="no",
            save_strategy="no",
            seed=w.seed,
            # TRL defaults to activation checkpointing; GRPOModule does not (ModelSettings
            # default). Off here so both run the same forward/backward compute.
            gradient_checkpointing=False,
            dataloader_num_workers=0,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=unit_test_reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        _wrap_phases(trainer, current)
        steps: list[dict[str, Any]] = []
        prompt_tokens: dict[str, int] = {}

        original_tokenize = trainer._tokenize_prompts

        def tokenize_prompts(prompts, *args, **kwargs):
            out = original_tokenize(prompts, *args, **kwargs)
            for messages, ids in zip(prompts, out[0], strict=True):
                prompt_tokens[messages[-1]["content"]] = len(ids)
            return out

        trainer._tokenize_prompts = tokenize_prompts

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                current.clear()
                current["t0"] = time.perf_counter()

            def on_pre_optimizer_step(self, args, state, control, **kwargs):
                current["t_opt"] = time.perf_counter()

            def on_optimizer_step(self, args, state, control, **kwargs):
                current["optimizer_s"] = time.perf_counter() - current["t_opt"]

            def on_step_end(self, args, state, control, **kwargs):
                elapsed = time.perf_counter() - current["t0"]
                # Everything between the end of scoring and the optimizer hook is the loss
                # forward/backward plus TRL's grad-norm clip (GRPOModule times its clip with the
                # optimizer, so "other" absorbs the small difference).
                fwd_bwd = current["t_opt"] - current.get("t_scored", current["t0"])
                rewards = current.get("rewards", [])
                steps.append(
                    {
                        "step": len(steps),
                        "time_s": elapsed,
                        "tokens": current.get("tokens", 0),
                        "task_ids": current.get("task_ids", []),
                        "generate_s": current.get("generate_s", 0.0),
                        "reward_s": current.get("reward_s", 0.0),
                        "forward_backward_s": fwd_bwd,
                        "optimizer_s": current.get("optimizer_s", 0.0),
                        "reward_mean": sum(rewards) / max(1, len(rewards)),
                        "threads": torch.get_num_threads(),
                    }
                )
                report_step(steps[-1])

        trainer.add_callback(StepTimer())
        torch.set_num_threads(w.threads)  # accelerate may have touched it while setting up
        try:
            trainer.train()
        finally:
            sandbox.close()

    # Both frameworks must prompt with the same tokens: GRPOModule's prompt is render_prompt().
    mismatched = [
        p.task_id
        for p in problems
        if (text := chat_messages(p, num_shown_tests=w.num_shown_tests)[-1]["content"]) in prompt_tokens
        and prompt_tokens[text]
        != len(
            tokenizer(
                render_prompt(tokenizer, p, None, w.num_shown_tests), add_special_tokens=False
            ).input_ids
        )
    ]
    if mismatched:
        raise RuntimeError(f"TRL tokenized these prompts differently from GRPOModule: {mismatched}")
    import trl

    return {
        "framework": "trl",
        "steps": steps,
        "prompt_tokens_checked": len(prompt_tokens),
        "trl_optimizer": str(config.optim),
        "trl_version": trl.__version__,
    }


def _wrap_phases(trainer, current: dict[str, Any]) -> None:
    """Time TRL's generation call and mark when scoring (generation + rewards + advantages) ends."""
    generate = trainer._generate_single_turn
    score = trainer._generate_and_score_completions

    def timed_generate(*args, **kwargs):
        t0 = time.perf_counter()
        out = generate(*args, **kwargs)
        current["generate_s"] = current.get("generate_s", 0.0) + time.perf_counter() - t0
        return out

    def timed_score(*args, **kwargs):
        out = score(*args, **kwargs)
        current["t_scored"] = time.perf_counter()
        return out

    trainer._generate_single_turn = timed_generate
    trainer._generate_and_score_completions = timed_score


if __name__ == "__main__":
    worker_main(run)
