"""``RolloutDataset``: problems -> live policy -> environment episodes -> trajectory batches.

Each ``next()`` runs ``num_generations`` episodes for each of ``prompts_per_step`` problems with
the policy *as it is at that moment* (through the engine, which the module keeps in sync) and
lays them out as one :class:`TrajectoryBatch`, one row per episode. Two Lightning details make
"as it is at that moment" true: ``num_workers=0`` (a worker process would hold a stale copy of
the model) and the module pulls batches itself through ``training_step(self, dataloader_iter)``,
which turns off Lightning's one-batch prefetch (a prefetched batch would come from the previous
policy).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.algorithms.grpo import zero_std_groups
from lit_codeRL.rollout.difficulty import DifficultyFilter
from lit_codeRL.rollout.episodes import Episode, EpisodeRunner
from lit_codeRL.rollout.prompts import ProblemStream
from lit_codeRL.rollout.trajectory import TrajectoryBatch


class RolloutWriter:
    """Appends one JSON line per trajectory beside the logs: prompt, completion (every turn),
    reward, verdict, and the token ids with the spans the policy wrote (what BC trains on)."""

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


def episode_batch(
    episodes: list[Episode], pad_token_id: int, stats: dict[str, float] | None = None
) -> TrajectoryBatch:
    """One row per episode (plus its ``extra_rows``, which share its id, group and reward);
    reward = the episode's return (0 for invalid episodes)."""
    rows, records, index = [], [], []
    for i, e in enumerate(episodes):
        record = e.record()
        rows.append(e.segments())
        records.append(record)
        index.append(i)
        for k, segments in enumerate(e.extra_rows, 1):
            rows.append(segments)
            records.append(extra_row_record(record, segments, k))
            index.append(i)
    at = torch.tensor(index, dtype=torch.long)
    batch = TrajectoryBatch.from_segments(
        rows,
        pad_token_id,
        rewards=torch.tensor([e.episode_return if e.valid else 0.0 for e in episodes], dtype=torch.float32)[
            at
        ],
        group_ids=torch.tensor([e.group for e in episodes], dtype=torch.long)[at],
        records=records,
        episode_ids=at,
        sequence_ids=at,  # an episode's extra rows are parts of its one trajectory
        terminated=torch.tensor([e.terminated for e in episodes])[at],
        truncated=torch.tensor([e.truncated for e in episodes])[at],
        valid=torch.tensor([e.valid for e in episodes])[at],
    )
    batch.stats.update(stats or {})
    return batch


def extra_row_record(record: dict[str, Any], segments: list[Any], k: int) -> dict[str, Any]:
    """The dump record of an episode's ``k``-th extra row: the episode's outcome, this row's ids
    and trainable spans; ``extra_row`` marks it, so per-episode metrics count the episode once."""
    ids, spans = [], []
    for seg in segments:
        if seg.trainable:
            spans.append([len(ids), len(ids) + len(seg.ids)])
        ids += seg.ids
    keep = ("problem_id", "group", "reward", "verdict", "pass_fraction", "finished", "terminated",
            "truncated", "end_reason", "valid", "instance_id", "sandbox_s", "success_turn")  # fmt: skip
    return {
        **{key: record[key] for key in keep if key in record},
        "extra_row": k,
        "num_turns": sum(seg.trainable for seg in segments),
        "completion_tokens": sum(b - a for a, b in spans),
        "input_ids": ids,
        "trainable_spans": spans,
    }


class RolloutDataset(IterableDataset):
    """Endless stream of episode batches from the live policy.

    Args:
        stream: Where problems come from (checkpointed position).
        runner: Runs the episodes (engine, env, sampling, turn and context limits).
        num_generations: Episodes per problem (a group: GRPO/RLOO baselines compare within it).
        prompts_per_step: Groups per batch.
        filter_zero_std_groups: Dynamic sampling (DAPO): drop groups whose returns are all equal
            and refill from new problems.
        max_refill_rounds: Extra rounds allowed per batch when filtering.
        seed: Seed of the sampling generator (checkpointed).
        difficulty: Online difficulty filter: tasks it calls dead are skipped when drawn (checkpointed).
    """

    def __init__(
        self,
        stream: ProblemStream,
        runner: EpisodeRunner,
        num_generations: int,
        prompts_per_step: int,
        filter_zero_std_groups: bool = False,
        max_refill_rounds: int = 3,
        seed: int = 0,
        difficulty: DifficultyFilter | None = None,
    ):
        super().__init__()
        self.stream, self.runner = stream, runner
        self.difficulty = difficulty
        self.num_generations, self.prompts_per_step = num_generations, prompts_per_step
        self.filter_zero_std_groups, self.max_refill_rounds = filter_zero_std_groups, max_refill_rounds
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.collect()

    def collect(self) -> TrajectoryBatch:
        """One batch: ``prompts_per_step`` groups of ``num_generations`` episodes."""
        n = self.num_generations
        start = time.perf_counter()
        episodes: list[Episode] = []
        stats: dict[str, float] = {"generate_s": 0.0, "reward_wait_s": 0.0, "filtered_groups": 0.0}
        kept, rounds = 0, 0
        while True:
            rounds += 1
            accept = (lambda p: self.difficulty.wants(p.task_id)) if self.difficulty else None
            problems = self.stream.take(self.prompts_per_step - kept, accept)
            ran = self.runner.run(problems, n, self.generator, stats)
            groups = [ran[g * n : (g + 1) * n] for g in range(len(problems))]
            if self.difficulty is not None:
                for problem, grp in zip(problems, groups, strict=True):
                    self.difficulty.record(
                        problem.task_id, [e.episode_return for e in grp], [e.valid for e in grp]
                    )
            if self.filter_zero_std_groups and rounds <= self.max_refill_rounds and groups:
                flat = [e for grp in groups for e in grp]
                returns = torch.tensor([e.episode_return for e in flat], dtype=torch.float64)
                dead = zero_std_groups(returns, n, torch.tensor([e.valid for e in flat])).tolist()
                alive = [grp for grp, no_signal in zip(groups, dead, strict=True) if not no_signal]
                stats["filtered_groups"] += len(groups) - len(alive)
                groups = alive
            for grp in groups:
                for e in grp:
                    e.group = kept
                episodes += grp
                kept += 1
            if kept >= self.prompts_per_step or rounds > self.max_refill_rounds:
                break
        stats["rollout_rounds"] = rounds
        stats["rollout_s"] = time.perf_counter() - start
        if self.difficulty is not None:
            stats.update({f"difficulty_{k}": v for k, v in self.difficulty.counts().items()})
        return episode_batch(episodes, self.runner.engine.pad_token_id, stats)

    def state_dict(self) -> dict[str, Any]:
        state = {"stream": self.stream.state_dict(), "generator": self.generator.get_state()}
        if self.difficulty is not None:
            state["difficulty"] = self.difficulty.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stream.load_state_dict(state["stream"])
        self.generator.set_state(state["generator"])
        if self.difficulty is not None and "difficulty" in state:
            self.difficulty.load_state_dict(state["difficulty"])
