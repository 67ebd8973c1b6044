"""One trained network's optimizer: ``OptimizerSettings`` (AdamW, its learning-rate schedule and
gradient clipping), the schedule as a pure function, and the AdamW it builds.

Every language-policy module takes one group, ``optimizer``, instead of repeating its knobs in
its own signature (as litgpt's ``TrainArgs`` and Lightning's ``optimizer`` config group do); a
module that trains a second network (a PPO critic) takes a second group of the same type
(``critic_optimizer: OptimizerSettings``). :func:`build_optimizer` makes *one* AdamW with a
parameter group per network, each with its own learning rate, weight decay and schedule: one
optimizer step per update keeps Lightning's ``global_step`` (which counts every optimizer's
steps under manual optimization) equal to the number of updates, and a group whose parameters
have no gradient (a frozen policy while the critic pre-trains) is skipped by AdamW untouched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch

from lit_codeRL.policy.precision import use_fused_adamw

LR_SCHEDULES = ("constant", "cosine")


@dataclass
class OptimizerSettings:
    """AdamW, its learning-rate schedule and gradient clipping for one trained network."""

    learning_rate: float = 1e-6
    """AdamW learning rate: the peak, reached at the end of the warm-up."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up, in optimizer steps (step s of the warm-up uses
    ``(s + 1) / warmup_steps`` of ``learning_rate``); 0 starts at ``learning_rate``."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """After the warm-up: ``constant``, or ``cosine`` decay to ``min_lr_ratio * learning_rate`` at
    ``trainer.max_steps`` (constant when ``max_steps`` is not set)."""
    min_lr_ratio: float = 0.0
    """Final learning rate of the ``cosine`` schedule as a fraction of ``learning_rate``, in [0, 1]."""
    max_grad_norm: float = 1.0
    """Clip the gradients' global L2 norm to this before each optimizer step; 0 disables clipping."""
    max_nonfinite_steps: int = 3
    """Optimizer steps in a row whose gradient is not finite (NaN/inf: a bf16 overflow, a bad
    row) that are skipped, weights, moments and schedule untouched, before training stops with
    an error; 0 stops at the first. Under ``16-mixed`` the grad scaler skips such steps itself.
    A step is one for every trained network (a critic's group too), so the policy's value is
    the one read; a critic's ``optimizer`` block leaves it unused."""
    fused: bool = True
    """Use the fused AdamW kernel where the parameters' device supports it (one kernel per step;
    0.41 -> 0.13 s a step for 135M parameters on CPU). Off by itself under ``16-mixed`` with
    clipping, whose grad scaler must unscale before clipping."""

    def __post_init__(self) -> None:
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {self.lr_schedule!r}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate >= 0):
            raise ValueError(f"learning_rate must be a finite number >= 0, got {self.learning_rate}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(
                f"min_lr_ratio must be in [0, 1] (a fraction of learning_rate), got {self.min_lr_ratio}"
            )
        if self.max_nonfinite_steps < 0:
            raise ValueError(f"max_nonfinite_steps must be >= 0, got {self.max_nonfinite_steps}")
        if self.max_grad_norm < 0:
            raise ValueError(f"max_grad_norm must be >= 0 (0 disables clipping), got {self.max_grad_norm}")

    def build(
        self, params: Iterable[torch.nn.Parameter], *, precision: Any = None, total_steps: int = 0
    ) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
        """AdamW over ``params`` and its per-step schedule (``total_steps``: ``trainer.max_steps``,
        where the cosine ends; 0 = unknown, constant after the warm-up). Fused unless a grad
        scaler (``precision`` ``16-mixed``) must unscale before clipping: see ``use_fused_adamw``."""
        return build_optimizer([(params, self)], precision=precision, total_steps=total_steps)

    def factor(self, total_steps: int) -> Callable[[int], float]:
        """This group's learning-rate multiplier per optimizer step (see :func:`lr_factor`)."""
        return lr_factor(self.warmup_steps, self.lr_schedule, total_steps, self.min_lr_ratio)


def build_optimizer(
    groups: list[tuple[Iterable[torch.nn.Parameter], OptimizerSettings]],
    *,
    precision: Any = None,
    total_steps: int = 0,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """One AdamW with a parameter group per ``(params, settings)`` pair, in that order, and a
    schedule with each group's own multiplier. Fused only if every group may be (a grad scaler
    must unscale before clipping: ``use_fused_adamw``); ``settings.fused`` of the first group
    decides otherwise."""
    groups = [(list(params), settings) for params, settings in groups]
    everything = [p for params, _ in groups for p in params]
    fused = all(
        use_fused_adamw(groups[0][1].fused, params, precision, settings.max_grad_norm)
        for params, settings in groups
        if params
    )
    opt = torch.optim.AdamW(
        [
            {"params": params, "lr": settings.learning_rate, "weight_decay": settings.weight_decay}
            for params, settings in groups
        ],
        lr=groups[0][1].learning_rate,
        fused=fused and bool(everything),
    )
    factors = [settings.factor(total_steps) for _, settings in groups]
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factors)


def lr_factor(
    warmup_steps: int, schedule: str, total_steps: int, min_ratio: float = 0.0
) -> Callable[[int], float]:
    """Multiplier of the base learning rate at optimizer step ``s``: linear warm-up over
    ``warmup_steps``, then constant, or cosine decay to ``min_ratio`` at ``total_steps``."""
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be 'constant' or 'cosine', got {schedule!r}")
    warmup = max(0, warmup_steps)

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total_steps <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


LEGACY_KEYS = {
    "learning_rate": "learning_rate",
    "weight_decay": "weight_decay",
    "warmup_steps": "warmup_steps",
    "lr_schedule": "lr_schedule",
    "min_lr_ratio": "min_lr_ratio",
    "max_grad_norm": "max_grad_norm",
    "fused_optimizer": "fused",
}
"""Module arguments before the ``optimizer`` group -> their field in it."""


def move_legacy_keys(hparams: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split the hparams of a checkpoint written before the ``optimizer`` group into
    ``(rest, optimizer)``: the other args, and the old flat optimizer args under their names in
    the group (``fused_optimizer`` -> ``fused``)."""
    rest = {k: v for k, v in hparams.items() if k not in LEGACY_KEYS}
    return rest, {LEGACY_KEYS[k]: v for k, v in hparams.items() if k in LEGACY_KEYS}
