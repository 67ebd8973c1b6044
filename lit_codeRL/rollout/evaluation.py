"""Scoring a policy on code problems: what the interval callback and the evaluation job share.

``evaluate_problems`` runs problems through the same path as training rollouts (env observation ->
chat template -> ids -> the episode runner -> the sandbox) and returns one JSON-ready result per
problem; ``code_eval_metrics`` turns results into the ``mbpp_eval/*`` metrics. Both the
``MBPPEvalCallback`` (during training) and the ``EvaluationModule`` (``lit-coderl validate``) use
exactly these two functions, so a training curve and a standalone evaluation compare directly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch.distributed as dist

from lit_codeRL.algorithms.passk import pass_at_k
from lit_codeRL.envs import CodeRepairEnv, UnitTestEnv
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.episodes import Episode, EpisodeRunner


def make_eval_runner(
    engine: GenerationEngine,
    sandbox: Any,
    sampling: SamplingParams,
    max_turns: int = 1,
    num_shown_tests: int = 1,
    system_prompt: str | None = None,
) -> EpisodeRunner:
    """The episode runner of an evaluation: unit tests (one answer) or code repair (``max_turns``)."""
    env = (
        CodeRepairEnv(sandbox, num_shown_tests=num_shown_tests)
        if max_turns > 1
        else UnitTestEnv(sandbox, num_shown_tests=num_shown_tests)
    )
    return EpisodeRunner(engine, env, sampling, max_turns, system_prompt=system_prompt)


def evaluate_problems(
    runner: EpisodeRunner,
    problems: Sequence[Problem],
    n_samples: int,
    batch_size: int,
    on_batch: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """``n_samples`` episodes per problem, ``batch_size`` problems per generate; one result per
    problem (``task_id``, ``num_samples`` graded, ``num_correct``, ``correct_by_turn``,
    ``sandbox_errors``, ``prompt``, ``samples``). ``on_batch`` sees each batch's results."""
    results: list[dict[str, Any]] = []
    for i in range(0, len(problems), batch_size):
        chunk = list(problems[i : i + batch_size])
        episodes = runner.run(chunk, n_samples)
        batch = [
            problem_result(problem, episodes[j * n_samples : (j + 1) * n_samples], runner.max_turns)
            for j, problem in enumerate(chunk)
        ]
        results += batch
        if on_batch is not None:
            on_batch(batch)
    return results


def problem_result(problem: Problem, group: list[Episode], max_turns: int) -> dict[str, Any]:
    valid = [e for e in group if e.valid]
    return {
        "task_id": problem.task_id,
        "num_samples": len(valid),
        "num_correct": sum(e.first_success_turn() is not None for e in valid),
        "correct_by_turn": [
            sum(e.first_success_turn() is not None and e.first_success_turn() <= k for e in valid)
            for k in range(1, max_turns + 1)
        ],
        "sandbox_errors": len(group) - len(valid),
        "prompt": group[0].prompt_text,
        "samples": [sample_record(e) for e in group],
    }


def sample_record(episode: Episode) -> dict[str, Any]:
    """One sample of a problem: completion, extracted code, verdict, failing test and details."""
    last = episode.turns[-1]
    info = {k: v for k, v in last.info.items() if k not in ("code", "verdict", "pass_fraction")}
    return {
        "completion": episode.record()["completion"],
        "code": last.info.get("code", ""),
        "verdict": last.info.get("verdict", ""),
        "pass_fraction": last.info.get("pass_fraction", 0.0),
        "failed_test": last.info.get("failed_test"),
        "num_turns": len(episode.turns),
        "success_turn": episode.first_success_turn(),
        "info": info,
    }


def code_eval_metrics(
    results: list[dict[str, Any]], k: Sequence[int] = (1,), max_turns: int = 1
) -> dict[str, float]:
    """pass@k over the problems with at least one graded sample; sandbox failures are counted
    apart (``mbpp_eval/sandbox_errors``), never as wrong answers."""
    graded = [r for r in results if r["num_samples"] > 0]
    count = max(1, len(graded))

    def mean_pass(kk: int, key: str = "num_correct", turn: int | None = None) -> float:
        total = 0.0
        for r in graded:
            correct = r[key] if turn is None else r[key][turn]
            total += pass_at_k(r["num_samples"], correct, min(kk, r["num_samples"]))
        return total / count

    metrics = {
        "mbpp_eval/pass_rate": mean_pass(1),
        "mbpp_eval/problems_passed": float(sum(r["num_correct"] > 0 for r in graded)),
        "mbpp_eval/num_problems": float(len(results)),
        "mbpp_eval/sandbox_errors": float(sum(r["sandbox_errors"] for r in results)),
    }
    for kk in k:
        if kk > 1:
            metrics[f"mbpp_eval/pass@{kk}"] = mean_pass(kk)
    if max_turns > 1:
        for t in range(max_turns):
            metrics[f"mbpp_eval/pass_rate_turn_{t + 1}"] = mean_pass(1, "correct_by_turn", t)
    return metrics


def gather_results(local: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    """Every rank's results on every rank (``all_gather_object``); the local list without DDP."""
    if world <= 1 or not (dist.is_available() and dist.is_initialized()):
        return local
    gathered: list[list[dict[str, Any]] | None] = [None] * world
    dist.all_gather_object(gathered, local)
    return [r for part in gathered for r in (part or [])]


__all__ = [
    "code_eval_metrics",
    "evaluate_problems",
    "gather_results",
    "make_eval_runner",
    "problem_result",
    "sample_record",
]
