"""``MBPPEvalCallback``: pass@k on an MBPP-format problem set before, during and after training.

Works with any ``LightningModule`` that exposes ``generation_engine() -> GenerationEngine``
(every lit-coderl language-policy module does), so it also drops into a user's own script::

    trainer = L.Trainer(callbacks=[MBPPEvalCallback(source="../shared/data/mbpp")])

Problems are sharded across ranks, each rank generates and grades its shard, and the per-problem
results are gathered, so the counts do not depend on the number of processes. Prompts go through
the same path as training rollouts (env observation -> chat template -> ids -> the episode
runner). With ``max_turns > 1`` the evaluation is multi-turn code repair and reports the pass
rate after each turn on the same problems. The evaluation knobs and their defaults are
``lit-coderl validate``'s (:class:`~lit_codeRL.rollout.evaluation.CodeEvalSettings`), and so are
the functions that run it: a standalone evaluation equals the interval one at the same weights.
While it runs, it shows problems done, the running pass rate and the ETA (:class:`EvalProgress`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer

from lit_codeRL.callbacks.interval import IntervalEvaluation
from lit_codeRL.callbacks.progress import EvalProgress
from lit_codeRL.envs.debug.env import DebugSettings
from lit_codeRL.envs.harness.env import HarnessSettings
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.evaluation import (
    CodeEvalSettings,
    close_runner,
    code_eval_metrics,
    evaluate_problems,
    gather_results,
    make_eval_runner,
    running_pass_score,
)
from lit_codeRL.rollout.prompts import load_problem_set
from lit_codeRL.sandbox import SandboxConfig, make_sandbox

log = logging.getLogger("lit_codeRL")

_D = CodeEvalSettings  # the one set of defaults, shared with ``lit-coderl validate``


class MBPPEvalCallback(IntervalEvaluation):
    """Interval MBPP-style evaluation: logs ``mbpp_eval/pass_rate`` and ``mbpp_eval/problems_passed``.

    Defaults: greedy pass@1 on MBPP test, as ``lit-coderl validate``
    (:class:`~lit_codeRL.rollout.evaluation.CodeEvalSettings` documents each knob).

    Args:
        source: Problem source: ``mbpp`` (hub; ``$MBPP_DATASET_PATH`` replaces it with a local
            copy), a hub id, a local MBPP file/dir, ``humaneval``, ``embedded``; unset:
            ``$MBPP_DATASET_PATH``, else ``mbpp``.
        split: Split to evaluate (MBPP: ``test`` = task ids 11-510; embedded: ``eval``).
        limit: Evaluate only the first ``limit`` problems; unset: ``$MBPP_EVAL_NUM_QUESTIONS``
            if set (one knob for all of a cluster's jobs), else all.
        n_samples: Completions per problem; with n > 1, pass@k uses the unbiased estimator.
        k: The k values of pass@k to report (each <= ``n_samples``).
        temperature: 0 = greedy (the usual pass@1 protocol); e.g. 0.2 with n > 1.
        top_p: Nucleus sampling mass when ``temperature > 0``.
        max_new_tokens: Completion length limit.
        batch_size: Prompts generated together; unset: 16, or 4 on GPUs under 16 GiB.
        eval_interval_steps: Evaluate every N optimizer steps (0 = only start/end).
        eval_at_start: Evaluate before the first training step.
        eval_at_end: Evaluate after the last training step.
        system_prompt: System message; ``None`` uses the model default.
        num_shown_tests: Tests shown in the prompt (MBPP protocol: the first of three).
        max_turns: 1 = the standard single-answer protocol; more = code repair with feedback on
            the shown tests, reporting ``mbpp_eval/pass_rate_turn_k`` for every k; the tool calls
            of a debugging episode (``source: debug``).
        debug: Debugging tasks: the gym's tools, time limits and grading (``env.debug``).
        swe: SWE tasks (``source: swe``): the SWE env's tools, time limits and grading (``env.swe``).
        harness: SWE or debugging tasks solved by an agent program through the gateway
            (``env.harness``; ``docs/gateway.md``); unset: the built-in action formats.
        sandbox: Sandbox for grading.
        output_dir: Where per-problem JSON goes; default ``<log_dir>/mbpp_eval``.
    """

    def __init__(
        self,
        source: str | None = _D.source,
        split: str = _D.split,
        limit: int | None = _D.limit,
        n_samples: int = _D.n_samples,
        k: list[int] | None = _D.k,
        temperature: float = _D.temperature,
        top_p: float = _D.top_p,
        max_new_tokens: int = _D.max_new_tokens,
        batch_size: int | None = _D.batch_size,
        eval_interval_steps: int = 50,
        eval_at_start: bool = True,
        eval_at_end: bool = True,
        system_prompt: str | None = _D.system_prompt,
        num_shown_tests: int = _D.num_shown_tests,
        max_turns: int = _D.max_turns,
        debug: DebugSettings = DebugSettings(),  # noqa: B008 - dataclass defaults show in --print_config
        swe: SWESettings = SWESettings(),  # noqa: B008
        harness: HarnessSettings | None = None,
        sandbox: SandboxConfig = SandboxConfig(),  # noqa: B008
        output_dir: str | None = None,
    ) -> None:
        super().__init__(eval_interval_steps, eval_at_start, eval_at_end)
        self.settings = CodeEvalSettings(
            source=source,
            split=split,
            limit=limit,
            n_samples=n_samples,
            k=k,
            temperature=temperature,
            top_p=top_p,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            system_prompt=system_prompt,
            num_shown_tests=num_shown_tests,
            max_turns=max_turns,
            debug=DebugSettings(**debug) if isinstance(debug, dict) else debug,
            swe=SWESettings(**swe) if isinstance(swe, dict) else swe,
            harness=HarnessSettings(**harness) if isinstance(harness, dict) else harness,
        )
        self.problem_settings = self.settings.problem_settings()
        self.n_samples = n_samples
        self.k = self.settings.k_values()
        self.sampling = self.settings.sampling()
        self.batch_size = self.settings.generation_batch()
        self.max_turns = max_turns
        self.sandbox_config = sandbox
        self.output_dir = output_dir
        self._problems: list[Problem] | None = None

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
        with make_sandbox(self.sandbox_config) as sandbox, trainer.precision_plugin.forward_context():
            runner = make_eval_runner(
                engine,
                sandbox,
                self.sampling,
                self.max_turns,
                self.problem_settings.num_shown_tests,
                self.problem_settings.system_prompt,
                self.problem_settings.source,
                self.settings.debug,
                self.settings.swe,
                self.settings.harness,
            )
            progress = EvalProgress(f"mbpp_eval step {trainer.global_step}", len(shard), trainer=trainer)
            try:
                local = evaluate_problems(
                    runner,
                    shard,
                    self.n_samples,
                    self.batch_size,
                    on_batch=lambda batch: progress.advance(len(batch), *running_pass_score(batch)),
                )
            finally:
                progress.close()
                close_runner(runner)
        for result in local:  # which rank graded it: shows the sharding in the step JSON
            result["rank"] = rank
        results = gather_results(local, world)
        order = {p.task_id: i for i, p in enumerate(problems)}  # the problem set's own order
        results.sort(key=lambda r: order[r["task_id"]])
        metrics = self._metrics(results)
        metrics["mbpp_eval/seconds"] = time.perf_counter() - start
        self.publish(trainer, metrics, {"problems": results}, "mbpp_eval", self.output_dir)
        if trainer.is_global_zero:
            log.info(
                "mbpp_eval step %d: pass@1 %.3f (%d/%d problems) in %.0fs",
                trainer.global_step,
                metrics["mbpp_eval/pass_rate"],
                metrics["mbpp_eval/problems_passed"],
                len(results),
                metrics["mbpp_eval/seconds"],
            )
        return metrics

    def _metrics(self, results: list[dict[str, Any]]) -> dict[str, float]:
        return code_eval_metrics(results, self.k, self.max_turns)
