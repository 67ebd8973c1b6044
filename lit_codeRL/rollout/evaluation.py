"""Scoring a policy on code problems: what the interval callback and the evaluation job share.

``evaluate_problems`` runs problems through the same path as training rollouts (env observation ->
chat template -> ids -> the episode runner -> the sandbox) and returns one JSON-ready result per
problem; ``code_eval_metrics`` turns results into the ``mbpp_eval/*`` metrics. Both the
``MBPPEvalCallback`` (during training) and the ``EvaluationModule`` (``lit-coderl validate``) use
exactly these two functions, so a training curve and a standalone evaluation compare directly.
Their knobs are one :class:`CodeEvalSettings`, so they share one set of defaults too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from lit_codeRL.algorithms.passk import pass_at_k
from lit_codeRL.envs import CodeRepairEnv, UnitTestEnv
from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.errors import ConfigError
from lit_codeRL.policy import platform
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.problems import Problem
from lit_codeRL.problems.mbpp import DATASET_PATH_ENV
from lit_codeRL.rollout.episodes import Episode, EpisodeRunner
from lit_codeRL.rollout.prompts import ProblemSettings

if TYPE_CHECKING:  # imported where used: the gateway's server (aiohttp) only with a harness
    from lit_codeRL.rollout.harness import HarnessRunner

log = logging.getLogger("lit_codeRL")

DEFAULT_SOURCE = "mbpp"
"""Source when neither the settings nor ``$MBPP_DATASET_PATH`` name one (the hub's MBPP)."""


@dataclass(frozen=True)
class CodeEvalSettings:
    """What one code evaluation runs: the knobs ``MBPPEvalCallback`` (during training) and
    ``lit-coderl validate`` (``EvaluationModule``) share. Both take them as flat arguments whose
    defaults are this class's, so the two cannot drift apart. The defaults are the standard
    protocol: greedy pass@1 on MBPP test, one shown test, one answer."""

    source: str | None = None
    """Problem source: ``mbpp`` (hub; ``$MBPP_DATASET_PATH`` replaces it with a local copy), a hub
    id, a local MBPP file/dir, ``mbpp-sanitized`` layout, ``humaneval``, a seed-format JSON file,
    ``embedded``. ``None``: ``$MBPP_DATASET_PATH`` if set, else ``mbpp``."""
    split: str = "test"
    """Split to evaluate (MBPP: ``test`` = task ids 11-510, ``validation``; embedded: ``eval``)."""
    limit: int | None = None
    """Evaluate only the first ``limit`` problems; ``None``: ``$MBPP_EVAL_NUM_QUESTIONS`` if set
    (one knob for all of a cluster's jobs), else all."""
    n_samples: int = 1
    """Completions per problem; with n > 1, pass@k uses the unbiased estimator."""
    k: list[int] | None = None
    """The k values of pass@k to report (those above ``n_samples`` are dropped); ``None``: [1]."""
    temperature: float = 0.0
    """0 = greedy (the usual pass@1 protocol); e.g. 0.2-0.8 with n > 1."""
    top_p: float = 0.95
    """Nucleus sampling mass when ``temperature > 0``."""
    max_new_tokens: int = 512
    """Completion length limit (per turn)."""
    batch_size: int | None = None
    """Problems generated together; ``None``: 16, or 4 on GPUs under 16 GiB."""
    system_prompt: str | None = None
    """System message; ``None`` uses the model default (as in training)."""
    num_shown_tests: int = 1
    """Tests shown in the prompt (MBPP protocol: the first of three)."""
    max_turns: int = 1
    """1 = the standard single-answer protocol; more = code repair with feedback on the shown
    tests, reporting ``mbpp_eval/pass_rate_turn_k`` for every k. Debugging tasks (``source:
    debug``) are agent episodes of up to this many tool calls."""
    debug: DebugSettings = field(default_factory=DebugSettings)
    """Debugging tasks (``source: debug`` or ``debug:<file>``): the debugging gym's tools, time
    limits and grading (``env.debug`` of training)."""
    swe: SWESettings = field(default_factory=SWESettings)
    """SWE tasks (``source: swe`` or ``swe:<file>``): the SWE env's tools, time limits and grading
    (``env.swe`` of training)."""
    harness: HarnessSettings | None = None
    """SWE or debugging tasks solved by an agent program through the gateway (``env.harness`` of
    training: its command, files, wall clock, grading); ``None``: the built-in action formats.
    One agent run per sample; resolve rate = pass@1 (``max_turns`` stays 1)."""

    def __post_init__(self) -> None:
        if self.n_samples < 1 or self.max_turns < 1 or (self.batch_size is not None and self.batch_size < 1):
            raise ConfigError("n_samples, batch_size and max_turns must be >= 1")
        if isinstance(self.harness, dict):
            self.harness = HarnessSettings(**self.harness)
        if self.n_samples > 1 and self.temperature == 0:
            raise ConfigError("n_samples > 1 needs temperature > 0 (greedy samples are identical)")

    def problem_settings(self) -> ProblemSettings:
        """The problems, with ``source`` and ``limit`` resolved from the environment where unset."""
        return ProblemSettings(
            source=resolve_source(self.source),
            split=self.split,
            limit=resolve_limit(self.limit),
            system_prompt=self.system_prompt,
            num_shown_tests=self.num_shown_tests,
        )

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p
        )

    def k_values(self) -> list[int]:
        """The k of pass@k that ``n_samples`` supports (at least [1])."""
        return [kk for kk in (self.k or [1]) if kk <= self.n_samples] or [1]

    def generation_batch(self) -> int:
        """``batch_size``, or the platform's default where unset."""
        return self.batch_size if self.batch_size is not None else platform.eval_batch_size()


def resolve_source(source: str | None) -> str:
    """``source``, else ``$MBPP_DATASET_PATH`` (logged), else :data:`DEFAULT_SOURCE`."""
    if source is not None:
        return source
    env = os.environ.get(DATASET_PATH_ENV, "").strip()
    if env:
        log.info("evaluation source from $%s: %s", DATASET_PATH_ENV, env)
        return env
    return DEFAULT_SOURCE


def resolve_limit(limit: int | None) -> int | None:
    """``limit``, else ``$MBPP_EVAL_NUM_QUESTIONS`` (logged; a ``ConfigError`` if malformed)."""
    if limit is not None:
        return limit
    value = platform.eval_questions()  # the one parser of the variable
    if value is not None:
        log.info("evaluating the first %d problems ($%s)", value, platform.EVAL_QUESTIONS_ENV)
    return value


def is_debug_source(source: str | None) -> bool:
    """Does ``source`` name debugging tasks (``debug``, ``debug:<file or directory>``)?"""
    return source is not None and (source == "debug" or source.startswith("debug:"))


def is_swe_source(source: str | None) -> bool:
    """Does ``source`` name SWE tasks (``swe``, ``swe:<file, dataset or hub id>``)?"""
    return source is not None and (source == "swe" or source.startswith("swe:"))


def make_eval_runner(
    engine: GenerationEngine,
    sandbox: Any,
    sampling: SamplingParams,
    max_turns: int = 1,
    num_shown_tests: int = 1,
    system_prompt: str | None = None,
    source: str | None = None,
    debug: DebugSettings | None = None,
    swe: SWESettings | None = None,
    harness: HarnessSettings | None = None,
) -> EpisodeRunner | HarnessRunner:
    """The episode runner of an evaluation: unit tests (one answer), code repair (``max_turns``),
    the debugging gym (a ``debug`` source) or the SWE env (a ``swe`` source; both episodes of up
    to ``max_turns`` actions). Close its env afterwards (:func:`close_runner`): the agent envs
    hold workspaces."""
    if harness is not None:
        if not (is_debug_source(source) or is_swe_source(source)):
            raise ConfigError("a harness evaluates SWE or debugging tasks: set source to swe... or debug...")
        from lit_codeRL.rollout.harness import HarnessRunner  # the gateway's aiohttp: only here

        return HarnessRunner(engine, HarnessEnv(harness), sampling)
    if is_debug_source(source) or is_swe_source(source):
        if max_turns < 2:
            raise ConfigError("agent tasks are multi-turn episodes: set max_turns >= 2 (e.g. 20)")
        env: Any = (
            DebugEnv(debug or DebugSettings())
            if is_debug_source(source)
            else ContainerEnv(data_name_or_path=None, settings=swe or SWESettings())
        )
    elif max_turns > 1:
        env = CodeRepairEnv(sandbox, num_shown_tests=num_shown_tests)
    else:
        env = UnitTestEnv(sandbox, num_shown_tests=num_shown_tests)
    return EpisodeRunner(engine, env, sampling, max_turns, system_prompt=system_prompt)


def close_runner(runner: EpisodeRunner | HarnessRunner | None) -> None:
    """Release what the runner's env holds (the debugging gym's workspaces, a harness's gateway)."""
    if hasattr(runner, "gateway"):  # a HarnessRunner: its gateway and its env
        runner.close()
        return
    close = getattr(getattr(runner, "env", None), "close", None)
    if close is not None:
        close()


EVAL_TIME_PARTS = ("generate_s", "reward_wait_s", "env_reset_s", "env_finish_s")
"""The runner's times an evaluation reports (``evaluate_problems``' ``stats``)."""


def evaluate_problems(
    runner: EpisodeRunner,
    problems: Sequence[Problem],
    n_samples: int,
    batch_size: int,
    on_batch: Callable[[list[dict[str, Any]]], None] | None = None,
    stats: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """``n_samples`` episodes per problem, ``batch_size`` problems per generate; one result per
    problem (``task_id``, ``num_samples`` graded, ``num_correct``, ``correct_by_turn``,
    ``sandbox_errors``, ``prompt``, ``samples``). ``on_batch`` sees each batch's results;
    ``stats`` accumulates the runner's times (``generate_s``, ``reward_wait_s``: the batch
    waiting on env steps after its generation, ``env_reset_s``, ``env_finish_s``; see
    ``EpisodeRunner.run``): where an evaluation's wall time goes."""
    results: list[dict[str, Any]] = []
    for i in range(0, len(problems), batch_size):
        chunk = list(problems[i : i + batch_size])
        episodes = runner.run(chunk, n_samples, stats=stats)
        batch = [
            problem_result(problem, episodes[j * n_samples : (j + 1) * n_samples], runner.max_turns)
            for j, problem in enumerate(chunk)
        ]
        results += batch
        if on_batch is not None:
            on_batch(batch)
    return results


def running_pass_score(results: Sequence[dict[str, Any]]) -> tuple[float, int]:
    """``(sum of per-problem pass fractions, problems graded)`` over ``results``: the running
    pass@1 of an evaluation in progress is the first over the second, summed over its batches."""
    graded = [r for r in results if r["num_samples"]]
    return sum(r["num_correct"] / r["num_samples"] for r in graded), len(graded)


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
    "CodeEvalSettings",
    "close_runner",
    "code_eval_metrics",
    "is_debug_source",
    "is_swe_source",
    "EVAL_TIME_PARTS",
    "evaluate_problems",
    "gather_results",
    "make_eval_runner",
    "problem_result",
    "resolve_limit",
    "resolve_source",
    "running_pass_score",
    "sample_record",
]
