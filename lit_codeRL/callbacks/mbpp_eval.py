"""``MBPPEvalCallback``: pass@k on an MBPP-format problem set before, during and after training.

Works with any ``LightningModule`` that exposes ``generation_context() -> (model, engine, ctx)``
(every lit-coderl language-model module does), so it also drops into a user's own script::

    trainer = L.Trainer(callbacks=[MBPPEvalCallback(source="../shared/data/mbpp", split="test")])

Problems are sharded across ranks, each rank generates and grades its shard, and the per-problem
results are gathered, so the counts do not depend on the number of processes.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer

from lit_codeRL.algorithms.passk import pass_at_k
from lit_codeRL.envs import UnitTestEnv
from lit_codeRL.policy.generation import SamplingParams
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.dataset import render_prompt
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set
from lit_codeRL.sandbox import SandboxConfig, make_sandbox

log = logging.getLogger("lit_codeRL")


class MBPPEvalCallback(Callback):
    """Interval MBPP-style evaluation: logs ``mbpp_eval/pass_rate`` and ``mbpp_eval/problems_passed``.

    Args:
        source: Problem source: ``embedded``, ``mbpp`` (hub), a hub id, or a local MBPP file/dir.
        split: Split to evaluate (MBPP: ``test`` = task ids 11-510).
        limit: Evaluate only the first ``limit`` problems (``None`` = all).
        n_samples: Completions per problem; with n > 1, pass@k uses the unbiased estimator.
        k: The k values of pass@k to report (each <= ``n_samples``).
        temperature: 0 = greedy (the usual pass@1 protocol); e.g. 0.2 with n > 1.
        top_p: Nucleus sampling mass when ``temperature > 0``.
        max_new_tokens: Completion length limit.
        batch_size: Prompts generated together.
        eval_interval_steps: Evaluate every N optimizer steps (0 = only start/end).
        eval_at_start: Evaluate before the first training step.
        eval_at_end: Evaluate after the last training step.
        system_prompt: System message; ``None`` uses the model default.
        num_shown_tests: Tests shown in the prompt (MBPP protocol: the first of three).
        sandbox: Sandbox for grading.
        output_dir: Where per-problem JSON goes; default ``<log_dir>/mbpp_eval``.
    """

    def __init__(
        self,
        source: str = "embedded",
        split: str = "eval",
        limit: int | None = None,
        n_samples: int = 1,
        k: list[int] | None = None,
        temperature: float = 0.0,
        top_p: float = 0.95,
        max_new_tokens: int = 256,
        batch_size: int = 16,
        eval_interval_steps: int = 50,
        eval_at_start: bool = True,
        eval_at_end: bool = True,
        system_prompt: str | None = None,
        num_shown_tests: int = 1,
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008 - dataclass defaults show in --print_config
        output_dir: str | None = None,
    ) -> None:
        self.problem_settings = ProblemSettings(
            source=source,
            split=split,
            limit=limit,
            system_prompt=system_prompt,
            num_shown_tests=num_shown_tests,
        )
        self.n_samples = n_samples
        self.k = [kk for kk in (k or [1]) if kk <= n_samples] or [1]
        self.sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
        if n_samples > 1 and temperature == 0:
            raise ValueError("n_samples > 1 needs temperature > 0 (greedy samples are identical)")
        self.batch_size = batch_size
        self.eval_interval_steps = eval_interval_steps
        self.eval_at_start, self.eval_at_end = eval_at_start, eval_at_end
        self.sandbox_config = sandbox
        self.output_dir = output_dir
        self.last_eval_step: int | None = None
        self.history: list[dict[str, Any]] = []
        self._problems: list[Problem] | None = None
        self._log_dir: str | None = None

    # ------------------------------------------------------------------ hooks
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # trainer.log_dir is a collective under DDP: every rank resolves it here, so the
        # rank-zero-only writer never calls it alone (which deadlocks the other ranks).
        self._log_dir = trainer.log_dir

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.eval_at_start:
            self.evaluate(trainer, pl_module)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any) -> None:
        step = trainer.global_step
        # ">=" not "%": one training step may advance global_step by several optimizer steps.
        if self.eval_interval_steps > 0 and step - (self.last_eval_step or 0) >= self.eval_interval_steps:
            self.evaluate(trainer, pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.eval_at_end and self.last_eval_step != trainer.global_step:
            self.evaluate(trainer, pl_module)

    # ------------------------------------------------------------- evaluation
    def problems(self) -> list[Problem]:
        if self._problems is None:
            self._problems = load_problem_set(self.problem_settings)
        return self._problems

    @torch.no_grad()
    def evaluate(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, float]:
        """Run one evaluation on all ranks; returns (and logs) the gathered metrics."""
        if not hasattr(pl_module, "generation_context"):
            raise TypeError(
                f"{type(pl_module).__name__} has no generation_context(); MBPPEvalCallback needs one"
            )
        start = time.perf_counter()
        model, engine, ctx = pl_module.generation_context()
        problems = self.problems()
        rank, world = trainer.global_rank, trainer.world_size
        shard = problems[rank::world]
        local: list[dict[str, Any]] = []
        with make_sandbox(self.sandbox_config) as sandbox, trainer.precision_plugin.forward_context(), ctx:
            env = UnitTestEnv(sandbox)
            for i in range(0, len(shard), self.batch_size):
                chunk = shard[i : i + self.batch_size]
                prompts = [
                    render_prompt(
                        engine.tokenizer,
                        p,
                        self.problem_settings.system_prompt,
                        self.problem_settings.num_shown_tests,
                    )
                    for p in chunk
                ]
                ids, mask = engine.encode_prompts(prompts)
                out = engine.generate(model, ids, mask, self.sampling, self.n_samples)
                graded = env.score_batch([p for p in chunk for _ in range(self.n_samples)], out.texts)
                for j, problem in enumerate(chunk):
                    rows = range(j * self.n_samples, (j + 1) * self.n_samples)
                    local.append(
                        {
                            "task_id": problem.task_id,
                            "num_correct": sum(graded[r].verdict == "passed" for r in rows),
                            "samples": [
                                {
                                    "completion": out.texts[r],
                                    "code": graded[r].code,
                                    "verdict": graded[r].verdict,
                                    "pass_fraction": graded[r].pass_fraction,
                                    "info": graded[r].info,
                                }
                                for r in rows
                            ],
                        }
                    )
        results = _gather(local, world)
        results.sort(key=lambda r: r["task_id"])
        metrics = self._metrics(results)
        metrics["mbpp_eval/seconds"] = time.perf_counter() - start
        step = trainer.global_step
        self.last_eval_step = step
        self.history.append({"step": step, **metrics})
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)
            self._write(trainer, results, metrics, step)
            log.info(
                "mbpp_eval step %d: pass@1 %.3f (%d/%d problems) in %.0fs",
                step,
                metrics["mbpp_eval/pass_rate"],
                metrics["mbpp_eval/problems_passed"],
                len(results),
                metrics["mbpp_eval/seconds"],
            )
        for key, value in metrics.items():
            trainer.callback_metrics[key] = torch.tensor(value)
        return metrics

    def _metrics(self, results: list[dict[str, Any]]) -> dict[str, float]:
        n = self.n_samples
        metrics = {
            "mbpp_eval/pass_rate": sum(pass_at_k(n, r["num_correct"], 1) for r in results)
            / max(1, len(results)),
            "mbpp_eval/problems_passed": float(sum(r["num_correct"] > 0 for r in results)),
            "mbpp_eval/num_problems": float(len(results)),
        }
        for k in self.k:
            if k > 1:
                metrics[f"mbpp_eval/pass@{k}"] = sum(
                    pass_at_k(n, r["num_correct"], k) for r in results
                ) / max(1, len(results))
        return metrics

    def _write(
        self, trainer: Trainer, results: list[dict[str, Any]], metrics: dict[str, float], step: int
    ) -> None:
        root = Path(self.output_dir or Path(self._log_dir or ".") / "mbpp_eval")
        root.mkdir(parents=True, exist_ok=True)
        (root / f"step_{step:06d}.json").write_text(
            json.dumps({"step": step, "metrics": metrics, "problems": results}, indent=1, default=str)
        )

    def state_dict(self) -> dict[str, Any]:
        return {"last_eval_step": self.last_eval_step, "history": self.history}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_eval_step = state_dict.get("last_eval_step")
        self.history = state_dict.get("history", [])


def _gather(local: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    if world <= 1 or not (dist.is_available() and dist.is_initialized()):
        return local
    gathered: list[list[dict[str, Any]] | None] = [None] * world
    dist.all_gather_object(gathered, local)
    return [r for part in gathered for r in (part or [])]
