"""``RolloutDataset``: prompts -> current policy -> environment -> trajectory batches.

Each ``next()`` samples ``num_generations`` completions for each of ``prompts_per_step``
problems with the policy *as it is at that moment* and scores them. Two Lightning details make
that true: ``num_workers=0`` (a worker process would hold a stale copy of the model) and the
module pulls batches itself through ``training_step(self, dataloader_iter)``, which turns off
Lightning's one-batch prefetch (a prefetched batch would come from the previous policy).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.envs import RewardResult, SingleTurnCodeEnv
from lit_codeRL.policy.generation import (
    GenerationOutput,
    HFGenerationEngine,
    SamplingParams,
    concat_generation_outputs,
)
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.prompts import ProblemStream
from lit_codeRL.rollout.trajectory import TrajectoryBatch


def render_prompt(tokenizer, problem: Problem, system_prompt: str | None, num_shown_tests: int) -> str:
    """The chat-templated prompt string the policy sees for ``problem``."""
    from lit_codeRL.problems.prompts import chat_messages

    messages = chat_messages(problem, system_prompt=system_prompt, num_shown_tests=num_shown_tests)
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


class RolloutWriter:
    """Appends one JSON line per trajectory (prompt, completion, reward, verdict) beside the logs."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, records: list[dict[str, Any]], **common: Any) -> None:
        if not self.path:
            return
        with self.path.open("a") as f:
            for record in records:
                f.write(json.dumps({**common, **record}, default=str) + "\n")


class RolloutDataset(IterableDataset):
    """Endless stream of scored single-turn rollouts from the live policy."""

    def __init__(
        self,
        stream: ProblemStream,
        env: SingleTurnCodeEnv,
        engine: HFGenerationEngine,
        sampling: SamplingParams,
        num_generations: int,
        prompts_per_step: int,
        system_prompt: str | None = None,
        num_shown_tests: int = 1,
        filter_zero_std_groups: bool = False,
        max_refill_rounds: int = 3,
        seed: int = 0,
    ):
        super().__init__()
        self.stream, self.env, self.engine, self.sampling = stream, env, engine, sampling
        self.num_generations, self.prompts_per_step = num_generations, prompts_per_step
        self.system_prompt, self.num_shown_tests = system_prompt, num_shown_tests
        self.filter_zero_std_groups, self.max_refill_rounds = filter_zero_std_groups, max_refill_rounds
        self.generator = torch.Generator().manual_seed(seed)
        self._policy: Callable[[], torch.nn.Module] | None = None
        self._prompt_cache: dict[str, str] = {}

    def attach_policy(self, policy: Callable[[], torch.nn.Module]) -> None:
        """``policy()`` returns the model to sample from (called at every rollout, never cached)."""
        self._policy = policy

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.collect()

    def collect(self) -> TrajectoryBatch:
        """One rollout batch: ``prompts_per_step`` groups of ``num_generations`` scored completions."""
        if self._policy is None:
            raise RuntimeError("RolloutDataset has no policy; call attach_policy() first")
        outputs, results, problems, stats = [], [], [], {"generate_s": 0.0, "reward_wait_s": 0.0}
        kept_groups, rounds = 0, 0
        while True:
            rounds += 1
            need = self.prompts_per_step - kept_groups
            batch_problems = self.stream.take(need)
            out, res = self._generate_and_score(batch_problems, stats)
            keep = list(range(len(batch_problems)))
            if self.filter_zero_std_groups and rounds <= self.max_refill_rounds:
                keep = [g for g in keep if not self._zero_std(res, g)]
                stats["filtered_groups"] = stats.get("filtered_groups", 0) + len(batch_problems) - len(keep)
            if keep:
                rows = [g * self.num_generations + i for g in keep for i in range(self.num_generations)]
                outputs.append(_select_rows(out, rows))
                results += [res[r] for r in rows]
                problems += [batch_problems[g] for g in keep]
                kept_groups += len(keep)
            if kept_groups >= self.prompts_per_step or rounds > self.max_refill_rounds:
                break
        stats["rollout_rounds"] = rounds
        merged = concat_generation_outputs(outputs, self.engine.pad_token_id)
        return self._to_batch(merged, results, problems, stats)

    def _zero_std(self, results: list[RewardResult], group: int) -> bool:
        g = self.num_generations
        rewards = [r.reward for r in results[group * g : (group + 1) * g]]
        return max(rewards) - min(rewards) < 1e-9

    def _prompt(self, problem: Problem) -> str:
        if problem.task_id not in self._prompt_cache:
            self._prompt_cache[problem.task_id] = render_prompt(
                self.engine.tokenizer, problem, self.system_prompt, self.num_shown_tests
            )
        return self._prompt_cache[problem.task_id]

    def _generate_and_score(
        self, problems: list[Problem], stats: dict[str, float]
    ) -> tuple[GenerationOutput, list[RewardResult]]:
        tokenizer, n = self.engine.tokenizer, self.num_generations
        prompt_ids, prompt_mask = self.engine.encode_prompts([self._prompt(p) for p in problems])
        pending: list[tuple[list[int], Any]] = []

        def score_finished(rows: list[int], token_ids: list[list[int]]) -> None:
            # Sandbox work starts while the rest of the batch is still generating.
            texts = tokenizer.batch_decode(token_ids, skip_special_tokens=True)
            pending.append((rows, self.env.submit_batch([problems[r // n] for r in rows], texts)))

        start = time.perf_counter()
        out = self.engine.generate(
            self._policy(),
            prompt_ids,
            prompt_mask,
            self.sampling,
            n,
            self.generator,
            on_finished=score_finished,
        )
        stats["generate_s"] += time.perf_counter() - start
        start = time.perf_counter()
        results: list[RewardResult | None] = [None] * len(out.texts)
        for rows, handle in pending:
            for row, result in zip(rows, handle.result(), strict=True):
                results[row] = result
        stats["reward_wait_s"] += time.perf_counter() - start
        return out, results  # type: ignore[return-value]

    def _to_batch(
        self,
        out: GenerationOutput,
        results: list[RewardResult],
        problems: list[Problem],
        stats: dict[str, float],
    ) -> TrajectoryBatch:
        n = self.num_generations
        rewards = torch.tensor([r.reward for r in results], dtype=torch.float32)
        group_ids = torch.arange(len(problems)).repeat_interleave(n)
        records = [
            {
                "problem_id": problems[i // n].task_id,
                "group": i // n,
                "prompt": self._prompt(problems[i // n]),
                "completion": out.texts[i],
                "reward": r.reward,
                "verdict": r.verdict,
                "pass_fraction": r.pass_fraction,
                "completion_tokens": int(out.completion_mask[i].sum()),
                "finished": bool(out.finished[i]),
                "sandbox_s": float(r.info.get("wall_time_s", 0.0) or 0.0),
            }
            for i, r in enumerate(results)
        ]
        batch = TrajectoryBatch.from_completions(
            out.prompt_ids,
            out.prompt_mask,
            out.completion_ids,
            out.completion_mask,
            out.logprobs,
            rewards,
            group_ids,
            records,
        )
        batch.stats.update(stats)
        batch.stats["completion_tokens"] = float(out.num_completion_tokens)
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])
        self.generator.set_state(state["generator"])


def _select_rows(out: GenerationOutput, rows: list[int]) -> GenerationOutput:
    if rows == list(range(len(out.texts))):
        return out
    idx = torch.tensor(rows, dtype=torch.long)
    return GenerationOutput(
        prompt_ids=out.prompt_ids[idx],
        prompt_mask=out.prompt_mask[idx],
        completion_ids=out.completion_ids[idx],
        completion_mask=out.completion_mask[idx],
        logprobs=out.logprobs[idx],
        texts=[out.texts[i] for i in rows],
        finished=out.finished[idx],
    )
