"""The one trajectory record every algorithm trains on.

A row is a whole interaction laid out as tokens: ``[left padding | prompt | turn 1 action |
observation 1 | turn 2 action | ... | right padding]`` (one row per episode), or the context
before one turn plus that turn's action (one row per turn, self-play). ``trainable_mask`` marks
the tokens the policy produced, so the same record serves single-turn GRPO, multi-turn REINFORCE
and PPO, self-play (``role_ids``) and behaviour cloning. The loss path reads these tensors only;
``records`` are for logs and dumps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


@dataclass
class Segment:
    """A run of tokens in a trajectory row: the prompt, one action, or one observation."""

    ids: list[int]
    """Exact token ids (actions: as sampled, never re-tokenized)."""
    trainable: bool = False
    """True for the policy's own tokens."""
    logprobs: list[float] | None = None
    """Sampling log-probs of ``ids`` (trainable segments)."""
    turn: int = -1
    """Turn index (-1 for the prompt)."""


def interaction_segments(
    prompt_ids: Sequence[int], turns: Sequence[tuple[Sequence[int], list[float] | None, Sequence[int]]]
) -> list[Segment]:
    """One row of a multi-turn interaction: the prompt, then each turn's ``(action ids, their
    sampling log-probs, observation ids)`` as a trainable action and (where not empty) the
    observation after it, both tagged with the turn's index."""
    segs = [Segment(list(prompt_ids))]
    for k, (action_ids, logprobs, observation_ids) in enumerate(turns):
        segs.append(Segment(list(action_ids), True, logprobs, k))
        if observation_ids:
            segs.append(Segment(list(observation_ids), False, None, k))
    return segs


@dataclass
class TrajectoryBatch:
    """A batch of trajectories; tensors are ``[B, L]`` unless noted."""

    input_ids: Tensor
    """All tokens of each interaction (left padding before the prompt, right padding at the end)."""
    attention_mask: Tensor
    """1 on real tokens."""
    trainable_mask: Tensor
    """1 on tokens the policy produced (the loss runs over these), 0 on prompt/env/padding."""
    old_logprobs: Tensor
    """Per-token log-probs under the policy that sampled them (0 where not trainable)."""
    rewards: Tensor
    """``[B]`` final reward of each trajectory."""
    group_ids: Tensor
    """``[B]`` group index (GRPO/RLOO groups share a prompt); groups are contiguous."""
    roles: list[str] = field(default_factory=list)
    """Name of the acting role per row (self-play, e.g. ``"tictactoe/0"``); empty for single-agent envs."""
    role_ids: Tensor | None = None
    """``[B]`` integer seat of the acting player (self-play); ``None`` for single-agent envs."""
    episode_ids: Tensor | None = None
    """``[B]`` episode of each row (one-row-per-turn batches have several rows per episode)."""
    sequence_ids: Tensor | None = None
    """``[B]`` rows with one id are parts of one trajectory: an agent episode whose rewritten
    history was laid out as several rows (``rollout/harness.py``). Per-sequence loss aggregation
    (``grpo``, ``dr_grpo``) counts them as one sequence; ``None``: each row is one."""
    sequence_tokens: Tensor | None = None
    """``[B]`` trainable tokens of the sequence each row is part of, over the whole batch (or PPO
    minibatch), filled in with the loss normalisers when ``sequence_ids`` joins rows:
    micro-batches keep the whole sequence's count (``algorithms/grpo.py: aggregate_token_loss``)."""
    turn_ids: Tensor | None = None
    """``[B, L]`` turn index of each token: the action of turn k and the observation after it
    carry k; prompt and padding carry -1."""
    terminated: Tensor | None = None
    """``[B]`` bool: the episode reached a terminal state (tests passed, game over)."""
    truncated: Tensor | None = None
    """``[B]`` bool: the episode was cut (turn, token or context limit) before it terminated."""
    valid: Tensor | None = None
    """``[B]`` bool: the row has a reward. False when the sandbox failed on it: such rows are left
    out of advantages and the loss (their trainable mask is zeroed) and only counted."""
    ref_logprobs: Tensor | None = None
    """Per-token log-probs under the reference policy, when a KL penalty needs them."""
    policy_old_logprobs: Tensor | None = None
    """``[B, L - start]`` the trainer's own log-probs of the sampled tokens before the step's
    first update (pi_old of a clipped ratio over several updates; ``old_logprobs`` are the
    sampler's), recomputed without grad (``training/step_setup.py``)."""
    advantages: Tensor | None = None
    """``[B, L]`` per-token advantages (or ``[B]`` per sequence), filled in by the algorithm."""
    values: Tensor | None = None
    """``[B, L]`` the critic's values before the update (PPO with GAE; 0 off the trainable mask)."""
    returns: Tensor | None = None
    """``[B, L]`` the critic's targets (PPO with GAE)."""
    records: list[dict[str, Any]] = field(default_factory=list)
    """One JSON-ready dict per row for logs and rollout dumps (problem id, completion, verdict...)."""
    stats: dict[str, float] = field(default_factory=dict)
    """Batch-level numbers for logging: timings, token counts."""

    @property
    def batch_size(self) -> int:
        return self.input_ids.size(0)

    @property
    def num_trainable_tokens(self) -> int:
        return int(self.trainable_mask.sum())

    def first_trainable_position(self) -> int:
        """Smallest column holding a trainable token: logits before it are never needed."""
        cols = self.trainable_mask.any(0).nonzero()
        return int(cols[0]) if cols.numel() else self.input_ids.size(1)

    def to(self, device: torch.device | str) -> TrajectoryBatch:
        moved = {
            f.name: getattr(self, f.name).to(device)
            if isinstance(getattr(self, f.name), Tensor)
            else getattr(self, f.name)
            for f in fields(self)
        }
        return TrajectoryBatch(**moved)

    def select(self, index: slice | list[int]) -> TrajectoryBatch:
        """Rows ``index`` (a slice or list), e.g. one micro-batch."""
        rows = list(range(self.batch_size))[index] if isinstance(index, slice) else list(index)
        idx = torch.tensor(rows, dtype=torch.long)

        def pick(value: Any) -> Any:
            if isinstance(value, Tensor) and value.dim() > 0 and value.size(0) == self.batch_size:
                return value[idx.to(value.device)]
            if isinstance(value, list) and len(value) == self.batch_size:
                return [value[i] for i in rows]
            return value

        return replace(self, **{f.name: pick(getattr(self, f.name)) for f in fields(self)})

    def micro_batches(self, size: int, trim_from: int | None = None) -> list[TrajectoryBatch]:
        """Chunks of ``size`` rows; with ``trim_from`` (the loss's first column) each chunk is cut
        to its own longest row (:meth:`trimmed`)."""
        size = max(1, size)
        chunks = [self.select(slice(i, i + size)) for i in range(0, self.batch_size, size)]
        return chunks if trim_from is None else [c.trimmed(trim_from) for c in chunks]

    def trimmed(self, start: int) -> TrajectoryBatch:
        """These rows without the right-padding columns that none of them uses.

        A batch is as wide as its longest episode; a micro-batch of short ones (a group whose
        answers all stopped early) would otherwise run forward and backward over columns that
        are padding in every row: measured on MBPP GRPO, half the completion tokens of a step.
        Causal attention never lets a real token see a later column, so cutting them changes no
        value. Every ``[B, L]`` tensor is cut to the new width ``W``, every ``[B, L - start]`` one
        (per-token values from column ``start``, e.g. ``ref_logprobs``) to ``W - start``; ``W``
        is at least ``start + 1``."""
        length = self.input_ids.size(1)
        used = self.attention_mask.any(0).nonzero()
        width = max(int(used[-1]) + 1 if used.numel() else 0, start + 1)
        if width >= length:
            return self

        def cut(value: Any) -> Any:
            if isinstance(value, Tensor) and value.dim() >= 2:
                if value.size(1) == length:
                    return value[:, :width]
                if value.size(1) == length - start:
                    return value[:, : width - start]
            return value

        return replace(self, **{f.name: cut(getattr(self, f.name)) for f in fields(self)})

    @property
    def num_trainable_rows(self) -> int:
        """Rows with at least one trainable token (the ``B`` of per-sequence loss normalisers)."""
        return int((self.trainable_mask.sum(1) > 0).sum())

    def drop_invalid_from_loss(self) -> int:
        """Zero the trainable mask of rows without a reward (``valid`` False); returns how many."""
        if self.valid is None:
            return 0
        bad = ~self.valid.bool()
        self.trainable_mask = self.trainable_mask * (~bad)[:, None].to(self.trainable_mask.dtype)
        return int(bad.sum())

    @staticmethod
    def from_segments(
        rows: Sequence[Sequence[Segment]],
        pad_token_id: int,
        rewards: Tensor,
        group_ids: Tensor,
        records: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> TrajectoryBatch:
        """Lay out rows of token segments: the first segment of each row (the prompt) is
        left-padded to a common width, the rest follows and is right-padded.

        With the prompt first and left-aligned, rows whose prompts are equal have identical
        columns ``[0, prompt width)``, so a group's prompt can still be run once in training.
        ``extra`` sets further fields (``episode_ids``, ``terminated``...)."""
        if not rows or any(not row for row in rows):
            raise ValueError("every row needs at least its prompt segment")
        prompt_w = max(len(row[0].ids) for row in rows)
        rest_w = max(sum(len(seg.ids) for seg in row[1:]) for row in rows)
        width = prompt_w + rest_w
        b = len(rows)
        ids = torch.full((b, width), pad_token_id, dtype=torch.long)
        attn = torch.zeros((b, width), dtype=torch.long)
        train = torch.zeros((b, width), dtype=torch.long)
        logps = torch.zeros((b, width), dtype=torch.float32)
        turns = torch.full((b, width), -1, dtype=torch.long)
        for i, row in enumerate(rows):
            pos = prompt_w - len(row[0].ids)
            for seg in row:
                n = len(seg.ids)
                if n == 0:
                    continue
                sl = slice(pos, pos + n)
                ids[i, sl] = torch.tensor(seg.ids, dtype=torch.long)
                attn[i, sl] = 1
                turns[i, sl] = seg.turn
                if seg.trainable:
                    train[i, sl] = 1
                    if seg.logprobs is not None:
                        logps[i, sl] = torch.tensor(seg.logprobs, dtype=torch.float32)
                pos += n
        return TrajectoryBatch(
            input_ids=ids,
            attention_mask=attn,
            trainable_mask=train,
            old_logprobs=logps,
            rewards=rewards,
            group_ids=group_ids,
            turn_ids=turns,
            records=list(records or []),
            **extra,
        )


def pad_columns(values: Tensor, width: int) -> Tensor:
    """``values`` ``[B, w]`` right-padded with zeros to ``[B, width]``: per-token results of a
    :meth:`TrajectoryBatch.trimmed` micro-batch back at the batch's width."""
    missing = width - values.size(1)
    return values if missing <= 0 else torch.nn.functional.pad(values, (0, missing))
