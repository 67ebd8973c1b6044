"""``MBPPEvalCallback``: pass@k on an MBPP-format problem set before, during and after training.

Works with any ``LightningModule`` that exposes ``generation_engine() -> GenerationEngine``
(every lit-coderl language-policy module does), so it also drops into a user's own script::

    trainer = L.Trainer(callbacks=[MBPPEvalCallback(source="../shared/data/mbpp", split="test")])

Problems are sharded across ranks, each rank generates and grades its shard, and the per-problem
results are gathered, so the counts do not depend on the number of processes. Prompts go through
the same path as training rollouts (env observation -> chat template -> ids -> the episode
runner). With ``max_turns > 1`` the evaluation is multi-turn code repair and reports the pass
rate after each turn on the same problems.
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
from lit_codeRL.envs import CodeRepairEnv, UnitTestEnv
from lit_codeRL.policy.engine import SamplingParams
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.episodes import EpisodeRunner
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
        max_turns: 1 = the standard single-answer protocol; more = code repair with feedback on
            the shown tests, reporting ``mbpp_eval/pass_rate_turn_k`` for every k.
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
        max_turns: int = 1,
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
        self.max_turns = max_turns
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
        if not hasattr(pl_module, "generation_engine"):
            raise TypeError(
                f"{type(pl_module).__name__} has no generation_engine(); MBPPEvalCallback needs one"
            )
        start = time.perf_counter()
        engine = pl_module.generation_engine()
        problems = self.problems()
        rank, world = trainer.global_rank, trainer.world_size
        shard = problems[rank::world]
        local: list[dict[str, Any]] = []
        n = self.n_samples
        with make_sandbox(self.sandbox_config) as sandbox, trainer.precision_plugin.forward_context():
            shown = self.problem_settings.num_shown_tests
            env = (
                CodeRepairEnv(sandbox, num_shown_tests=shown)
                if self.max_turns > 1
                else UnitTestEnv(sandbox, num_shown_tests=shown)
            )
            runner = EpisodeRunner(
                engine, env, self.sampling, self.max_turns, system_prompt=self.problem_settings.system_prompt
            )
            for i in range(0, len(shard), self.batch_size):
                chunk = shard[i : i + self.batch_size]
                episodes = runner.run(chunk, n)
                for j, problem in enumerate(chunk):
                    group = episodes[j * n : (j + 1) * n]
                    valid = [e for e in group if e.valid]
                    local.append(
                        {
                            "task_id": problem.task_id,
                            "num_samples": len(valid),
                            "num_correct": sum(e.first_success_turn() is not None for e in valid),
                            "correct_by_turn": [
                                sum(
                                    e.first_success_turn() is not None and e.first_success_turn() <= k
                                    for e in valid
                                )
                                for k in range(1, self.max_turns + 1)
                            ],
                            "sandbox_errors": len(group) - len(valid),
                            "prompt": group[0].prompt_text,
                            "samples": [_sample(e) for e in group],
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
        """pass@k over the problems with at least one graded sample; sandbox failures are counted
        apart (``mbpp_eval/sandbox_errors``), never as wrong answers."""
        graded = [r for r in results if r["num_samples"] > 0]
        count = max(1, len(graded))

        def mean_pass(k: int, key: str = "num_correct", turn: int | None = None) -> float:
            total = 0.0
            for r in graded:
                correct = r[key] if turn is None else r[key][turn]
                total += pass_at_k(r["num_samples"], correct, min(k, r["num_samples"]))
            return total / count

        metrics = {
            "mbpp_eval/pass_rate": mean_pass(1),
            "mbpp_eval/problems_passed": float(sum(r["num_correct"] > 0 for r in graded)),
            "mbpp_eval/num_problems": float(len(results)),
            "mbpp_eval/sandbox_errors": float(sum(r["sandbox_errors"] for r in results)),
        }
        for k in self.k:
            if k > 1:
                metrics[f"mbpp_eval/pass@{k}"] = mean_pass(k)
        if self.max_turns > 1:
            for t in range(self.max_turns):
                metrics[f"mbpp_eval/pass_rate_turn_{t + 1}"] = mean_pass(1, "correct_by_turn", t)
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


def _sample(episode: Any) -> dict[str, Any]:
    last = episode.turns[-1]
    info = {k: v for k, v in last.info.items() if k not in ("code", "verdict", "pass_fraction")}
    return {
        "completion": episode.record()["completion"],
        "code": last.info.get("code", ""),
        "verdict": last.info.get("verdict", ""),
        "pass_fraction": last.info.get("pass_fraction", 0.0),
        "num_turns": len(episode.turns),
        "success_turn": episode.first_success_turn(),
        "info": info,
    }


def _gather(local: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    if world <= 1 or not (dist.is_available() and dist.is_initialized()):
        return local
    gathered: list[list[dict[str, Any]] | None] = [None] * world
    dist.all_gather_object(gathered, local)
    return [r for part in gathered for r in (part or [])]
