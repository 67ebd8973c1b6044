"""The one trajectory record every algorithm trains on.

A row is a whole interaction laid out as tokens: prompt + completion here, later prompt + several
turns of model and environment. ``trainable_mask`` marks the tokens the policy produced, so the
same record serves single-turn GRPO, multi-turn PPO, self-play (``roles``) and behaviour cloning.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor


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
    """Seat of the acting player per row (self-play); empty for single-agent envs."""
    ref_logprobs: Tensor | None = None
    """Per-token log-probs under the reference policy, when a KL penalty needs them."""
    advantages: Tensor | None = None
    """``[B]`` (or ``[B, L]``) advantages, filled in by the algorithm."""
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

    def micro_batches(self, size: int) -> list[TrajectoryBatch]:
        size = max(1, size)
        return [self.select(slice(i, i + size)) for i in range(0, self.batch_size, size)]

    @staticmethod
    def from_completions(
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        completion_ids: Tensor,
        completion_mask: Tensor,
        logprobs: Tensor,
        rewards: Tensor,
        group_ids: Tensor,
        records: list[dict[str, Any]] | None = None,
    ) -> TrajectoryBatch:
        """Single-turn case: ``[left-padded prompt | right-padded completion]``."""
        zeros = torch.zeros_like(prompt_mask)
        return TrajectoryBatch(
            input_ids=torch.cat([prompt_ids, completion_ids], dim=1),
            attention_mask=torch.cat([prompt_mask, completion_mask], dim=1),
            trainable_mask=torch.cat([zeros, completion_mask], dim=1),
            old_logprobs=torch.cat([zeros.to(logprobs.dtype), logprobs], dim=1),
            rewards=rewards,
            group_ids=group_ids,
            records=list(records or []),
        )
