"""How a policy module turns a batch into optimizer steps: micro-batched forward/backward,
gradient clipping, the AdamW step and its schedule (``optimizer_groups``/``configure_optimizers``).

A mixin of :class:`~lit_codeRL.training.policy_module.PolicyModule`: it reads the module's
``policy``, ``engine``, ``micro_batch_size``, ``optimizer_settings`` and context-parallel group
(``sp_group``, ``sequence_parallel_size``), set up by ``PolicyModule``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from lit_codeRL.policy.precision import default_micro_batch_size
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.training import distributed
from lit_codeRL.training.optim import OptimizerSettings, build_optimizer

log = logging.getLogger("lit_codeRL")

LossFn = Callable[[TrajectoryBatch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class MicroBatchBudget:
    """The token budget of the automatic micro-batch size (``micro_batch_size: null``), read from
    free memory at a run's first step and checkpointed (``PolicyModule`` registers it).

    A resumed run must cut its batches where the run it continues did: micro-batches decide the
    shapes dropout draws its masks for from the global RNG and the order gradients add up in. Read
    again at the resume, from whatever memory the machine had free then, it once halved the
    micro-batches of the first step after a resume and that step's gradient differed by 30%. A
    resume on a device with less memory than the checkpoint's sets ``micro_batch_size`` instead."""

    def __init__(self) -> None:
        self.tokens: int | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.tokens = state.get("tokens")


class MicroBatchedUpdates:
    """Optimizer steps over micro-batches (see the module docstring)."""

    micro_batch_budget: MicroBatchBudget
    _grad_norm: float | None = None
    """The policy's gradient norm before clipping at the last optimizer step (``train/grad_norm``)."""
    _clip_norms: list[torch.Tensor] | None = None
    """Each parameter group's gradient norm, from the finiteness check to the clipping."""

    def micro_batch_rows(self, batch: TrajectoryBatch, group_size: int = 1) -> int:
        """Rows per forward/backward chunk: the configured size or a free-memory hint (the same on
        every rank), rounded down to whole groups so a group's prompt still runs once."""
        size = self.micro_batch_size
        if not size:
            length = batch.input_ids.size(1)
            budget = self.micro_batch_budget
            if budget.tokens is None:
                # a token budget: later batches may be longer than the first (the code game's
                # predictor prompts hold a program), and rows must shrink with them
                num_params = sum(p.numel() for p in self.policy.parameters())
                config = getattr(self.policy, "config", None)
                hint = default_micro_batch_size(
                    num_params,
                    seq_len=length,
                    vocab_size=getattr(config, "vocab_size", None),
                    hidden_size=getattr(config, "hidden_size", None),
                    num_layers=getattr(config, "num_hidden_layers", None),
                )
                if self._trainer is not None and self.trainer.world_size > 1:
                    hint = self.trainer.strategy.broadcast(hint, src=0)
                budget.tokens = hint * length
            rows = max(1, budget.tokens // max(length, 1))
            size = 1 << (rows.bit_length() - 1)
        if group_size > 1 and size > group_size:
            size -= size % group_size
        return size

    def backward_micro_batches(
        self, batch: TrajectoryBatch, loss_fn: LossFn, group_size: int = 1, start: int | None = None
    ) -> dict[str, list[float]]:
        """Run ``loss_fn`` and backward over micro-batches; gradients accumulate, DDP syncs once.

        ``loss_fn(micro_batch)`` must normalise by whole-batch counts (``num_rows`` /
        ``num_tokens``, :meth:`loss_normalisers`), so the micro-batch losses add up to the
        whole-batch loss. Returns the micro-batches' stats; ``loss`` is their sum (the
        whole-batch loss).

        Every rank runs as many micro-batches as the rank with the most: one with fewer rows
        (dynamic sampling dropped groups, shorter completions gave it another micro-batch size)
        repeats its last micro-batch with the loss times zero. Under FSDP2 every forward and
        backward is a collective, and a rank that stopped early would leave the others waiting."""
        opt = self.optimizers()
        micro = batch.micro_batches(self.micro_batch_rows(batch, group_size), trim_from=start)
        count = distributed.global_max(len(micro), self.device) if self.trainer.world_size > 1 else len(micro)
        if count > len(micro) and not micro:
            raise RuntimeError("a rank has an empty batch but others train: no micro-batch to pad with")
        stats: dict[str, list[float]] = {}
        total = 0.0
        for k in range(count):
            last = k == count - 1
            loss, step_stats = loss_fn(micro[min(k, len(micro) - 1)])
            if k >= len(micro):  # padding for the collectives: no gradient, no stats
                loss = loss * 0.0
                step_stats = {}
            distributed.set_gradient_sync(self.policy, last)
            with opt.toggle_model(sync_grad=last):
                # context parallelism: each rank's gradient is its chunk's share of its group's
                # rows, and DDP/FSDP2 average over every rank: times the group size is the sum
                self.manual_backward(loss * self.sequence_parallel_size if self.sp_group else loss)
            total += float(loss.detach())
            for key, value in step_stats.items():
                stats.setdefault(key, []).append(float(value))
        stats["loss"] = [total]
        return stats

    def update(
        self,
        batch: TrajectoryBatch | None,
        loss_fn: LossFn,
        group_size: int = 1,
        num_iterations: int = 1,
        freeze_policy: bool = False,
        start: int | None = None,
    ) -> tuple[dict[str, list[float]], dict[str, float]]:
        """``num_iterations`` optimizer steps on ``batch``; returns the loss stats and the timings
        (``time/forward_backward_s``, ``time/optimizer_s``, ``time/train_s``). ``start``: the
        loss's first column, for trimming micro-batches (:meth:`backward_micro_batches`).

        ``freeze_policy``: the step leaves the policy exactly as it is (its gradients are dropped
        before AdamW, which then skips its parameters, moments included) and only another
        network's group moves (a critic's pre-training).

        ``batch=None``: no row carries a gradient on any rank (every advantage is 0 and no KL
        term), so the gradient is exactly 0 and no forward or backward runs. The optimizer still
        steps on zero gradients, as it would after a backward that produced them (AdamW's moments
        decay, weight decay and the schedule advance): the parameters end where the full update
        would have put them, at the cost of the optimizer alone. Every rank must agree on it
        (``distributed.any_rank``), since a backward is a collective under DDP and FSDP2."""
        t0 = time.perf_counter()
        stats: dict[str, list[float]] = {}
        fwd_bwd_s = opt_s = 0.0
        for _ in range(num_iterations):
            t_fb = time.perf_counter()
            if batch is None:
                self.zero_gradients()
                stats.setdefault("loss", []).append(0.0)
            else:
                for key, values in self.backward_micro_batches(batch, loss_fn, group_size, start).items():
                    stats.setdefault(key, []).extend(values)
            fwd_bwd_s += time.perf_counter() - t_fb
            if freeze_policy:
                for p in self.policy.parameters():
                    p.grad = None
            # for the warning of a skipped step: a NaN loss (the forward) or a NaN gradient alone
            self._last_loss_finite = all(math.isfinite(v) for v in stats.get("loss", []))
            opt_s += self.optimizer_step(sync=not freeze_policy)
            if self._grad_norm is not None:
                stats.setdefault("grad_norm", []).append(self._grad_norm)
        times = {
            "time/forward_backward_s": fwd_bwd_s,
            "time/optimizer_s": opt_s,
            "time/train_s": time.perf_counter() - t0,
        }
        return stats, times

    def zero_gradients(self) -> None:
        """Set every trainable parameter's gradient to zeros: what a backward of a loss with no
        gradient would leave (``set_to_none`` would make AdamW skip those parameters instead)."""
        for group in self.optimizers().param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)

    def optimizer_step(self, sync: bool = True) -> float:
        """Step, zero the gradients, advance the schedule, refresh the engine (``sync``: the
        policy changed); returns seconds. A step whose gradient is not finite is skipped instead
        (:meth:`_gradient_is_finite`): one NaN would otherwise reach every weight through AdamW,
        and a policy with NaN weights samples garbage token ids (a device-side assert on a GPU)."""
        t0 = time.perf_counter()
        opt, sched = self.optimizers(), self.lr_schedulers()
        if not self._gradient_is_finite():
            opt.zero_grad(set_to_none=True)
            return time.perf_counter() - t0
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if sync:
            self.engine.sync_weights(self.policy)
        return time.perf_counter() - t0

    def _gradient_is_finite(self) -> bool:
        """False (and a warning) when some gradient holds a NaN or inf, on any rank; raises
        :class:`DivergedError` after ``max_nonfinite_steps`` such steps in a row. Lightning counts
        only the steps taken, so a skipped one leaves ``global_step`` and the schedule where they
        were. Under ``16-mixed`` the grad scaler does this itself (its scaled gradients overflow
        by design).

        The check is each parameter group's global L2 norm, the one clipping needs: kept for
        :meth:`on_before_optimizer_step` (which then reads no gradient again) and logged as
        ``train/grad_norm`` (the policy's, before clipping). Not under FSDP2, where a rank holds
        a shard and its norm is a part: clipping there computes the global norm itself."""
        self._grad_norm, self._clip_norms = None, None
        if _uses_grad_scaler(self.trainer):
            return True
        local_grads: list[list[torch.Tensor]] = []
        sharded = False
        for group in self.optimizers().param_groups:
            grads = [p.grad for p in group["params"] if p.grad is not None]
            sharded = sharded or any(hasattr(g, "to_local") for g in grads)
            local_grads.append([g.to_local() if hasattr(g, "to_local") else g for g in grads])
        flat = [g for grads in local_grads for g in grads]
        finite = True
        if flat:
            # one fused norm per tensor, a norm of those per group, one sync for all of them
            per_tensor = iter(torch._foreach_norm(flat))
            norms = torch.stack(
                [
                    torch.linalg.vector_norm(torch.stack([next(per_tensor).float() for _ in grads]))
                    if grads
                    else torch.zeros((), device=flat[0].device)
                    for grads in local_grads
                ]
            )
            values = norms.tolist()
            finite = all(math.isfinite(v) for v in values)
            if finite and not sharded:
                self._clip_norms = list(norms)
                self._grad_norm = values[0]
        if distributed.world_size() > 1:
            finite = not distributed.any_rank(not finite, self.device)
        if finite:
            self._nonfinite_in_a_row = 0
            return True
        self._nonfinite_in_a_row = getattr(self, "_nonfinite_in_a_row", 0) + 1
        limit = self.optimizer_settings.max_nonfinite_steps
        loss = "was finite" if getattr(self, "_last_loss_finite", True) else "too"
        if self._nonfinite_in_a_row > limit:
            from lit_codeRL.errors import DivergedError

            raise DivergedError(
                f"{self._nonfinite_in_a_row} optimizer steps in a row had a non-finite gradient "
                f"(the last one's loss {loss}) "
                f"at step {self.global_step}: lower optimizer.learning_rate, train in "
                "precision 32-true, or look for a batch row without trainable tokens "
                "(optimizer.max_nonfinite_steps allows more skipped steps)"
            )
        log.warning(
            "step %d: the gradient is not finite (NaN/inf; the loss %s); the optimizer step is skipped "
            "(%d in a row, optimizer.max_nonfinite_steps = %d)",
            self.global_step,
            loss,
            self._nonfinite_in_a_row,
            limit,
        )
        return False

    def on_before_optimizer_step(self, optimizer) -> None:
        # Here (not in training_step) gradients are already unscaled under 16-mixed. Each
        # parameter group (the policy's; a critic's) is clipped to its own max_grad_norm.
        groups = optimizer.param_groups
        norms, self._clip_norms = self._clip_norms, None
        for i, (group, (_, settings)) in enumerate(zip(groups, self.optimizer_groups(), strict=False)):
            norm = norms[i] if norms is not None and i < len(norms) else None
            self.clip_grad_norm(optimizer, settings.max_grad_norm, group["params"], norm)

    def clip_grad_norm(
        self,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        params: list | None = None,
        total_norm: torch.Tensor | None = None,
    ) -> None:
        """Clip the gradients of ``params`` (default: all of ``optimizer``'s) to global L2 norm
        ``max_norm`` (0: no clipping), unscaled first when a grad scaler (``16-mixed``) scaled
        them. ``total_norm``: their norm, already computed (:meth:`_gradient_is_finite`)."""
        if max_norm <= 0:
            return
        if _uses_grad_scaler(self.trainer):
            if params is not None and len(optimizer.param_groups) > 1:
                from lit_codeRL.errors import ConfigError

                raise ConfigError(
                    "16-mixed with two trained networks is not supported: use bf16-mixed or 32-true"
                )
            self.clip_gradients(optimizer, gradient_clip_val=max_norm, gradient_clip_algorithm="norm")
        else:
            # No scaler (32-true, bf16-mixed): the gradients are the true ones, so clip them
            # directly. Lightning's MixedPrecision.clip_gradients refuses any fused optimizer even
            # without a scaler, which would cost fused AdamW under bf16-mixed (0.41 -> 0.13 s a
            # step for a 135M model on 2 CPU cores).
            if params is None:
                params = [p for group in optimizer.param_groups for p in group["params"]]
            with_grad = [p for p in params if p.grad is not None]
            if total_norm is None:
                torch.nn.utils.clip_grad_norm_(with_grad, max_norm)
            else:
                torch.nn.utils.clip_grads_with_norm_(with_grad, max_norm, total_norm)

    # ------------------------------------------------------------------ optimizer
    def optimizer_groups(self) -> list[tuple[list[torch.nn.Parameter], OptimizerSettings]]:
        """``(parameters, settings)`` per trained network, the policy first: one AdamW parameter
        group each (``training/optim.py: build_optimizer``). A module training a second network
        (a critic) adds its group."""
        return [([p for p in self.policy.parameters() if p.requires_grad], self.optimizer_settings)]

    def configure_optimizers(self):
        precision = self.trainer.precision if self._trainer is not None else None
        total = self.trainer.max_steps if self._trainer is not None and self.trainer.max_steps > 0 else 0
        opt, sched = build_optimizer(self.optimizer_groups(), precision=precision, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def _uses_grad_scaler(trainer: Any) -> bool:
    """Does the trainer's precision scale the loss (``16-mixed``)? Then gradients must be
    unscaled before clipping, which Lightning does only for non-fused optimizers."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None
