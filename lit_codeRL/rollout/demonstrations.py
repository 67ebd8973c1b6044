"""Demonstrations for behavioural cloning, laid out as the same trajectory record rollouts use.

Two kinds of source (``DemonstrationSettings.source``):

* **a problem source** (``embedded``, an MBPP file or directory, seed JSON, ``humaneval``...): each
  problem with a reference solution becomes one row, its prompt rendered exactly as rollouts
  render it (env observation -> chat template) and its answer in the code fence rollouts are
  asked for, ended by the end-of-turn token;
* **SWE tasks** (``swe``, ``swe:<file or dataset>``): each task's reference trajectory, played for
  real in a workspace (``envs/swe/reference.py``: the gold patch applied with ``git apply`` in one
  ``<execute>`` turn, then ``<submit/>``), kept only when its grade resolves the task; the
  observation between the turns is the env's own;
* **a rollout dump** (``rollouts.jsonl`` of any lit-coderl run, single- or multi-turn): rows
  rebuilt from the saved token ids, trainable exactly on the spans the policy wrote (observations
  stay masked), optionally only those with ``reward >= min_reward`` (filtered BC / rejection
  sampling fine-tuning).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import Problem
from lit_codeRL.problems.prompts import format_prompt
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch


@dataclass
class DemonstrationSettings:
    """Where demonstrations come from and which to keep."""

    source: str = "embedded"
    """A problem source with reference solutions (``embedded``, an MBPP file/dir, seed JSON,
    ``humaneval``), or a ``rollouts.jsonl`` dump of a lit-coderl run."""
    split: str = "train"
    """Split of a problem source (MBPP: train = task ids 601-974)."""
    limit: int | None = None
    """Use only the first ``limit`` demonstrations."""
    min_reward: float | None = None
    """Rollout dumps: keep only episodes with at least this return (``None``: all)."""
    max_length: int = 1024
    """Drop demonstrations longer than this many tokens (prompt included)."""
    system_prompt: str | None = None
    """System message of rendered prompts (as in ``problems.system_prompt`` of the RL run)."""
    num_shown_tests: int = 1
    """Tests shown in rendered prompts (as in the RL run)."""


def is_rollout_dump(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".jsonl"):
        return False
    with path.open() as f:
        first = f.readline()
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and "input_ids" in row and "trainable_spans" in row


def answer_text(solution: str) -> str:
    """A reference solution in the fence the prompt asks for (``format_prompt``'s last line)."""
    code = solution.replace("\r\n", "\n").strip("\n")
    return f"```python\n{code}\n```"


def problem_demonstrations(
    problems: list[Problem], chat: ChatFormat, num_shown_tests: int
) -> list[list[Segment]]:
    """One row per problem with a reference solution: prompt, then the answer and end-of-turn."""
    tokenizer = chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows = []
    for p in problems:
        if not p.reference_solution:
            continue
        prompt = chat.prompt_ids(format_prompt(p, num_shown_tests))
        answer = tokenizer(answer_text(p.reference_solution), add_special_tokens=False)["input_ids"] + eos
        rows.append([Segment(prompt), Segment(answer, trainable=True, turn=0)])
    return rows


def dump_demonstrations(path: Path, min_reward: float | None) -> list[list[Segment]]:
    """Rows rebuilt from a rollout dump: the prompt, then alternating trainable and masked spans."""
    rows = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ids, spans = rec["input_ids"], rec["trainable_spans"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ConfigError(f"{path}:{line_no}: not a rollout record with token ids ({err})") from None
            if min_reward is not None and float(rec.get("reward", 0.0)) < min_reward:
                continue
            if rec.get("valid") is False or not spans:
                continue
            segs, pos = [Segment(ids[: spans[0][0]])], spans[0][0]
            for turn, (a, b) in enumerate(spans):
                if a > pos:
                    segs.append(Segment(ids[pos:a], turn=turn - 1))
                segs.append(Segment(ids[a:b], trainable=True, turn=turn))
                pos = b
            if pos < len(ids):
                segs.append(Segment(ids[pos:], turn=len(spans) - 1))
            rows.append(segs)
    return rows


def swe_demonstrations(problems: list[Problem], chat: ChatFormat) -> list[list[Segment]]:
    """The reference trajectory of every SWE task (see the module docstring) as trajectory rows:
    prompt, ``<execute>`` action, the env's observation (masked), ``<submit/>`` and end-of-turn."""
    import logging

    from lit_codeRL.envs.swe.env import ContainerEnv
    from lit_codeRL.envs.swe.reference import reference_episode

    tokenizer = chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows, dropped = [], []
    with ContainerEnv(data_name_or_path=None) as env:
        for p in problems:
            episode = reference_episode(env, p.metadata["swe_task"])
            if episode.reward < 1.0 or len(episode.actions) != 2:
                dropped.append(p.task_id)
                continue
            prompt = chat.prompt_ids(episode.prompt)
            first = tokenizer(episode.actions[0], add_special_tokens=False)["input_ids"]
            observation = chat.observation_ids(episode.observations[0], first)
            last = tokenizer(episode.actions[1], add_special_tokens=False)["input_ids"] + eos
            rows.append(
                [
                    Segment(prompt),
                    Segment(first, True, turn=0),
                    Segment(observation, turn=0),
                    Segment(last, True, turn=1),
                ]
            )
    if dropped:
        logging.getLogger(__name__).warning(
            "%d SWE reference trajectories did not resolve their task and were dropped: %s",
            len(dropped),
            ", ".join(dropped[:10]),
        )
    return rows


def load_demonstrations(settings: DemonstrationSettings, tokenizer) -> list[list[Segment]]:
    """Every kept demonstration as trajectory segments; a clear error when there are none."""
    path = Path(settings.source).expanduser()
    if is_rollout_dump(path):
        rows = dump_demonstrations(path, settings.min_reward)
    else:
        problems = load_problem_set(ProblemSettings(source=settings.source, split=settings.split))
        chat = ChatFormat(tokenizer, settings.system_prompt)
        if problems and "swe_task" in problems[0].metadata:
            rows = swe_demonstrations(problems, chat)
        else:
            rows = problem_demonstrations(problems, chat, settings.num_shown_tests)
    rows = [r for r in rows if sum(len(s.ids) for s in r) <= settings.max_length]
    if settings.limit is not None:
        rows = rows[: settings.limit]
    if not rows:
        raise ConfigError(
            f"no demonstrations from {settings.source!r} (split {settings.split!r}): no reference "
            f"solutions, every row filtered by min_reward/max_length, or an empty dump"
        )
    return rows


class DemonstrationDataset(IterableDataset):
    """Endless shuffled batches of demonstrations (epoch after epoch); position is checkpointed."""

    def __init__(self, rows: list[list[Segment]], batch_size: int, pad_token_id: int, seed: int = 0) -> None:
        super().__init__()
        self.rows, self.batch_size, self.pad_token_id, self.seed = rows, batch_size, pad_token_id, seed
        self.epoch, self.position = 0, 0

    def _order(self) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> TrajectoryBatch:
        order, picked = self._order(), []
        while len(picked) < self.batch_size:
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            picked.append(order[self.position])
            self.position += 1
        return TrajectoryBatch.from_segments(
            [self.rows[i] for i in picked],
            self.pad_token_id,
            rewards=torch.zeros(len(picked)),
            group_ids=torch.arange(len(picked)),
            records=[{"demonstration": i} for i in picked],
        )

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]
