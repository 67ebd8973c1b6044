"""``PolicyModule``: the base ``LightningModule`` of every algorithm that trains a language policy.

A subclass writes its algorithm in ``training_step``: get a batch, compute advantages, call
:meth:`PolicyModule.backward_micro_batches` with its loss, :meth:`PolicyModule.optimizer_step`.
Everything else lives here once:

* the policy and tokenizer (any source ``policy/loading.py`` accepts), the generation engine
  chosen by config, and a frozen reference policy when a KL term needs one (under LoRA the base
  model with adapters switched off is the reference: no copy);
* micro-batched forward/backward inside the step (``micro_batch_size``, or a hint from free
  memory), whose losses are normalised by whole-batch counts so the micro-batch sum equals the
  whole-batch loss for every aggregation; the reference forward runs in the same micro-batches;
* the sampler/trainer mismatch correction of every policy-gradient loss
  (:meth:`sampler_correction`: a truncated importance weight to the sampler's log-probs, or the
  clipped ratio to them, and the ``tis/*`` metrics), so a module whose engine samples in bf16
  still follows the trainer's gradient;
* manual optimization with one :class:`~lit_codeRL.training.optim.OptimizerSettings` group
  (``optimizer``): AdamW (fused where the device allows), linear warm-up then constant or cosine
  learning rate, gradient-norm clipping at the point where gradients are unscaled;
* checkpoint state beyond weights and optimizer: any object registered with
  :meth:`register_state` (rollout position and RNG, baselines, schedules) is saved and restored,
  whichever of ``setup`` and checkpoint loading happens first;
* at the end, the policy as a plain ``save_pretrained`` directory ``<run>/hf_model`` (LoRA
  adapters merged in), loadable by ``transformers`` and as ``model.name_or_path`` of a new run.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, IterableDataset

from lit_codeRL.algorithms.grpo import LossType, normaliser_rows, policy_loss
from lit_codeRL.algorithms.importance import sampler_correction
from lit_codeRL.policy.engine import EngineSettings, GenerationEngine, make_engine
from lit_codeRL.policy.loading import LoraSettings, ModelSettings, full_precision_merged, load_model
from lit_codeRL.policy.logprobs import grouped_prompt_token_logprobs, shares_prompts
from lit_codeRL.policy.precision import default_micro_batch_size
from lit_codeRL.rollout.dataset import RolloutWriter
from lit_codeRL.rollout.trajectory import TrajectoryBatch, pad_columns
from lit_codeRL.training import distributed
from lit_codeRL.training.context_parallel import context_parallel_logprobs
from lit_codeRL.training.optim import OptimizerSettings, build_optimizer
from lit_codeRL.training.rng import GlobalRNG, own_rank_state, save_rank_states
from lit_codeRL.training.strategies import check_strategy

log = logging.getLogger("lit_codeRL")

LossFn = Callable[[TrajectoryBatch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def as_settings(cls: type, value: Any) -> Any:
    """Settings given as a dict (a checkpoint's hparams, a script) become their dataclass again."""
    if isinstance(value, dict):
        if cls is ModelSettings and isinstance(value.get("lora"), dict):
            value = {**value, "lora": LoraSettings(**value["lora"])}
        return cls(**value)
    return value


FEW_WORKERS_WARNING = r"The 'train_dataloader' does not have many workers"
"""Lightning's advice (a ``PossibleUserWarning``) to give the train loader more workers."""


def in_process_loader(dataset: IterableDataset, **kwargs: Any) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` in the main process (``num_workers=0``), without
    Lightning's advice to add workers.

    Rollout and replay datasets generate with the live policy (or Q-network): a worker process
    would sample from a stale copy of it, so 0 workers is the design, and Lightning's "does not
    have many workers" warning at every fit is advice that must not be followed. It is ignored
    for the train loader only, only from Lightning's data connector, and only once a module has
    built such a loader (the filter is process-wide, as every ``warnings`` filter is); a loader
    passed to ``Trainer.fit`` in a process that never built one still gets the warning.
    """
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    # re-adding an identical filter replaces it, so building loaders again adds nothing
    warnings.filterwarnings(
        "ignore",
        message=FEW_WORKERS_WARNING,
        category=PossibleUserWarning,
        module=r"lightning\.pytorch\.trainer\.connectors\.data_connector\Z",
    )
    return DataLoader(dataset, num_workers=0, **kwargs)


def _identity(batch: Any) -> Any:
    return batch


class _TeardownOnException(Callback):
    """Lightning calls a module's ``teardown`` only when a stage ends normally: a step that raises
    would leave the sandbox workers and workspaces running in the caller's process (a notebook, a
    script that catches the error, a test). Release them on the way out."""

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        pl_module.teardown(trainer.state.stage.value if trainer.state.stage else "fit")


class PolicyModule(LightningModule):
    """Shared machinery of language-policy algorithms (see the module docstring).

    Subclasses call ``super().__init__(...)`` with their settings, then
    ``self.save_hyperparameters()``, build ``self.dataset`` (an iterable of ready
    :class:`TrajectoryBatch` es) in ``setup``, and implement ``training_step``.
    """

    def __init__(
        self,
        model: ModelSettings,
        engine: EngineSettings,
        *,
        optimizer: OptimizerSettings,
        micro_batch_size: int | None = None,
        save_hf_model: bool = True,
        needs_reference: bool = False,
    ) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.optimizer_settings = as_settings(OptimizerSettings, optimizer)
        self.micro_batch_size, self.save_hf_model = micro_batch_size, save_hf_model
        self.policy, self.tokenizer = load_model(model)
        self.engine: GenerationEngine = make_engine(engine, self.tokenizer, self.policy)
        # The reference is never trained and is rebuilt from the same source on resume, so it
        # lives outside the module tree (not in checkpoints, not in the optimizer).
        self._reference: list[torch.nn.Module] = []
        self.is_lora = model.lora is not None
        self.model_settings = model
        self.is_quantized = model.quantization != "none"
        self.sequence_parallel_size = model.sequence_parallel_size
        self.sp_group: Any = None
        """This rank's context-parallel group (``setup_sequence_parallel``)."""
        if self.is_quantized:
            # the checkpoint keeps the quantized base with its quantization state; bitsandbytes
            # restores that state from the first entries and reports the rest as unexpected
            self.strict_loading = False
        if needs_reference and not self.is_lora:
            self._reference.append(copy.deepcopy(self.policy).eval().requires_grad_(False))
        self._state: dict[str, Stateful] = {}
        self._pending_state: dict[str, Any] = {}
        # Python, NumPy, torch CPU/CUDA global streams (dropout, anything drawing without a
        # generator of its own); restored at the first step after a resume, see training/rng.py.
        self.global_rng = GlobalRNG()
        self.register_state("global_rng", self.global_rng)
        self._auto_micro_batch_tokens: int | None = None
        self.run_dir: Path | None = None
        self.writer: RolloutWriter | None = None
        self.last_records: list[dict[str, Any]] = []
        self.dataset: IterableDataset | None = None
        self.sharded = False
        """True once ``configure_model`` has sharded the policy (FSDP2)."""

    def configure_model(self) -> None:
        """Under FSDP2 (``fsdp2``, ``ModelParallelStrategy``): shard the policy and the reference.

        The model is still built in ``__init__`` (each rank loads it once into host memory) and
        sharded here, before Lightning moves it to the device, so only shards reach the
        accelerator; loading every source (hub, directory, GGUF, LoRA) straight into a sharded
        meta-device module would be a second loader. Before sharding, the engine takes a full
        replica to sample from (``HFGenerationEngine.replicate``): rollouts then never run a
        sharded forward, which would make every decode step a collective that all ranks must
        call in lockstep, with an all-gather of every block per generated token."""
        if self._trainer is not None:
            check_strategy(self.trainer.strategy)
        mesh = self.device_mesh
        if mesh is None or self.sharded:
            return
        if self.is_quantized:
            from lit_codeRL.errors import ConfigError

            raise ConfigError(
                "model.quantization with fsdp2 is not supported (bitsandbytes' packed weights are "
                "not DTensor-shardable): use --trainer.strategy ddp, or model.quantization none"
            )
        if mesh.mesh_dim_names and "tensor_parallel" in mesh.mesh_dim_names:
            if mesh["tensor_parallel"].size() > 1:
                from lit_codeRL.errors import ConfigError

                raise ConfigError(
                    "tensor parallelism is not supported: set tensor_parallel_size=1 or use fsdp2"
                )
            mesh = mesh["data_parallel"]
        self.engine.replicate(self.policy)
        distributed.shard_model(self.policy, mesh)
        for ref in self._reference:
            distributed.shard_model(ref, mesh)
        self.sharded = True

    def loss_normalisers(self, batch: TrajectoryBatch, loss_type: LossType = "dapo") -> tuple[float, float]:
        """``(num_rows, num_tokens)`` a loss divides its sum by: the whole global batch's rows (as
        ``loss_type`` counts them, :func:`~lit_codeRL.algorithms.grpo.normaliser_rows`: every row
        for ``dr_grpo``, rows still in the loss otherwise) and trainable tokens over the world size
        (see ``training/distributed.py``), so that N ranks x B rows give the gradient of one
        process on the N*B rows; this batch's own counts on one process."""
        rows, tokens = distributed.per_rank_normalisers(
            [normaliser_rows(batch.trainable_mask, loss_type), batch.num_trainable_tokens], self.device
        )
        return rows, tokens

    def global_std(self, values: torch.Tensor) -> torch.Tensor:
        """Unbiased std of ``values`` over every rank's values (a batch-level statistic)."""
        return distributed.global_std(values)

    def train_dataloader(self) -> DataLoader:
        # Batches come whole from the dataset, in the main process (see in_process_loader).
        return in_process_loader(self.dataset, batch_size=None, collate_fn=_identity)

    def plain_hparams(self) -> None:
        """Store dataclass hparams as plain dicts: checkpoints load with ``weights_only=True``."""
        for key, value in list(self.hparams.items()):
            if dataclasses.is_dataclass(value):
                self.hparams[key] = dataclasses.asdict(value)

    # ------------------------------------------------------------------ run directory
    def setup_run_dir(self, dump_name: str = "rollouts") -> None:
        """Resolve the log dir on every rank (a collective under DDP) and open the JSONL dump."""
        attached = self._trainer is not None
        log_dir = self.trainer.log_dir if attached else None
        suffix = f".rank{self.trainer.global_rank}" if attached and self.trainer.world_size > 1 else ""
        self.run_dir = Path(log_dir) if log_dir else None
        self.writer = RolloutWriter(self.run_dir / f"{dump_name}{suffix}.jsonl" if self.run_dir else None)

    def configure_callbacks(self) -> list[Callback]:
        return [_TeardownOnException()]

    supports_sequence_parallel = False
    """Whether the module trains every rank of a context-parallel group on the same rows
    (``RolloutModule`` broadcasts them); the others refuse ``sequence_parallel_size`` > 1."""

    def setup_sequence_parallel(self) -> None:
        """Make this rank's context-parallel group (every rank makes every group, in order)."""
        size = self.sequence_parallel_size
        if size == 1 or self.sp_group is not None:
            return
        from lit_codeRL.errors import ConfigError

        if not self.supports_sequence_parallel:
            raise ConfigError(
                f"model.sequence_parallel_size {size}: {type(self).__name__} does not support it "
                "(GRPO, REINFORCE and PPO with GRPO advantages do)"
            )
        world = distributed.world_size()
        if world % size:
            raise ConfigError(f"model.sequence_parallel_size {size} does not divide the world size {world}")
        import torch.distributed as dist

        rank = dist.get_rank()
        for first in range(0, world, size):
            group = dist.new_group(list(range(first, first + size)))
            if first <= rank < first + size:
                self.sp_group, self.sp_leader = group, first

    def on_fit_start(self) -> None:
        self.setup_sequence_parallel()
        # An endpoint engine that returns no token ids / log-probs can only evaluate: say so now,
        # before a step trains on re-tokenised text.
        check = getattr(self.engine, "check_for_training", None)
        if check is not None:
            check()
        # from_pretrained returns eval mode and Lightning keeps submodule modes: without this,
        # dropout and gradient checkpointing (both gated on .training in transformers) stay off.
        self.policy.train()
        for ref in self._reference:
            ref.to(self.device)
        self.engine.sync_weights(self.policy)

    # ------------------------------------------------------------------ forward / backward
    def token_logprobs(
        self,
        batch: TrajectoryBatch,
        start: int,
        *,
        temperature: float = 1.0,
        group_size: int = 1,
        with_entropy: bool | str = False,
        model: torch.nn.Module | None = None,
        with_hidden: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        """``[B, L - start]`` log-probs of ``batch.input_ids[:, start:]`` under ``model`` (the
        policy by default); groups of ``group_size`` rows sharing a prompt run it once. The
        entropy per token (``with_entropy``: ``True`` detached, ``"grad"`` differentiable) or
        ``None``; with ``with_hidden`` also the final hidden states before each token
        ``[B, L - start, H]`` (``policy/logprobs.py``)."""
        input_ids, attention_mask = batch.input_ids, batch.attention_mask
        if self.sp_group is not None:
            if with_hidden:
                from lit_codeRL.errors import ConfigError

                raise ConfigError(
                    "model.sequence_parallel_size > 1 cannot return hidden states (a value head)"
                )
            return context_parallel_logprobs(
                model if model is not None else self.policy,
                input_ids,
                attention_mask,
                start,
                temperature,
                group=self.sp_group,
                pad_token_id=self.tokenizer.pad_token_id or 0,
                with_entropy=with_entropy,
            )
        width = input_ids.size(1)
        if self.sharded and group_size > 1:
            # The shared-prompt path runs two forwards, the plain one one: a sharded forward is a
            # collective, so every rank must take the same path.
            share = shares_prompts(input_ids, attention_mask, start, group_size)
            group_size = group_size if distributed.all_ranks(share, self.device) else 1
            if group_size > 1 and width - start == 1:
                # ...and it runs its second forward only over two or more completion columns: a
                # rank whose rows all stopped after one token (a trimmed micro-batch) gets a pad
                # column, so it runs that forward with the others; its outputs are cut back.
                input_ids, attention_mask = (
                    pad_columns(input_ids, start + 2),
                    pad_columns(attention_mask, start + 2),
                )
        out = grouped_prompt_token_logprobs(
            model if model is not None else self.policy,
            input_ids,
            attention_mask,
            start,
            group_size,
            temperature,
            with_entropy=with_entropy,
            with_hidden=with_hidden,
        )
        if input_ids.size(1) == width:
            return out
        return tuple(t[:, : width - start] if t is not None else None for t in out)

    @torch.no_grad()
    def reference_logprobs(
        self, batch: TrajectoryBatch, start: int, temperature: float = 1.0, group_size: int = 1
    ) -> torch.Tensor:
        """``[B, L - start]`` log-probs under the frozen reference (LoRA: the base model, adapters
        off), in the policy forward's micro-batches (:meth:`micro_batch_rows`): one forward over
        the whole batch would hold ``[B, T, V]`` logits at once."""
        if not self.is_lora and not self._reference:
            raise RuntimeError("no reference policy was built (needs_reference=False)")
        model = None if self.is_lora else self._reference[0]
        micro = batch.micro_batches(self.micro_batch_rows(batch, group_size), trim_from=start)
        count = len(micro)
        if self.sharded:  # a sharded forward is a collective: every rank runs as many
            count = distributed.global_max(count, self.device)
        parts = []
        with self.policy.disable_adapter() if self.is_lora else contextlib.nullcontext():
            for k in range(count):
                mb = micro[min(k, len(micro) - 1)]
                logps, _ = self.token_logprobs(
                    mb, start, temperature=temperature, group_size=group_size, model=model
                )
                if k < len(micro):
                    parts.append(logps)
        return torch.cat([pad_columns(p, batch.input_ids.size(1) - start) for p in parts])

    def sampler_correction(
        self, logprobs: torch.Tensor, mb: TrajectoryBatch, start: int, cap: float, num_updates: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, torch.Tensor]]:
        """The sampler/trainer mismatch correction every policy-gradient loss applies:
        ``(old, weights, stats)`` for ``logprobs`` ``[B, L - start]`` of micro-batch ``mb``,
        against the log-probs the sampler recorded (``mb.old_logprobs``), over its trainable
        tokens. One update on the batch: ratio 1 and the truncated importance weight
        ``min(pi_train / pi_sampler, cap)`` (``cap`` 0: none); more: the sampler's log-probs as
        the clipped ratio's old policy. ``stats`` holds the ``tis/*`` metrics. See
        :func:`~lit_codeRL.algorithms.importance.sampler_correction`."""
        return sampler_correction(
            logprobs, mb.old_logprobs[:, start:], mb.trainable_mask[:, start:], cap, num_updates
        )

    def clipped_policy_loss(
        self,
        logprobs: torch.Tensor,
        mb: TrajectoryBatch,
        start: int,
        counts: tuple[float, float],
        *,
        epsilon: float,
        epsilon_high: float | None = None,
        loss_type: LossType = "dapo",
        beta: float = 0.0,
        tis_cap: float = 2.0,
        num_updates: int = 1,
        max_completion_length: int | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """The clipped surrogate every PPO-style module trains with, on micro-batch ``mb``:
        the sampler correction (:meth:`sampler_correction`), then
        :func:`~lit_codeRL.algorithms.grpo.policy_loss` on ``mb.advantages`` over its trainable
        tokens, normalised by the whole batch's ``counts`` (:meth:`loss_normalisers`), plus
        ``beta`` x k3 KL to ``mb.ref_logprobs``. Returns ``(loss, stats, old)``: ``old`` is the
        log-probs the ratio compared with."""
        old, weights, tis = self.sampler_correction(logprobs, mb, start, tis_cap, num_updates)
        loss, stats = policy_loss(
            logprobs,
            old,
            mb.advantages[:, start:],
            mb.trainable_mask[:, start:],
            epsilon=epsilon,
            epsilon_high=epsilon_high,
            loss_type=loss_type,
            max_completion_length=max_completion_length,
            ref_logprobs=mb.ref_logprobs if beta else None,
            beta=beta,
            num_rows=counts[0],
            num_tokens=counts[1],
            importance_weights=weights,
        )
        return loss, {**stats, **tis}, old

    def micro_batch_rows(self, batch: TrajectoryBatch, group_size: int = 1) -> int:
        """Rows per forward/backward chunk: the configured size or a free-memory hint (the same on
        every rank), rounded down to whole groups so a group's prompt still runs once."""
        size = self.micro_batch_size
        if not size:
            length = batch.input_ids.size(1)
            if self._auto_micro_batch_tokens is None:
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
                self._auto_micro_batch_tokens = hint * length
            rows = max(1, self._auto_micro_batch_tokens // max(length, 1))
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
            opt_s += self.optimizer_step(sync=not freeze_policy)
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
        policy changed); returns seconds."""
        t0 = time.perf_counter()
        opt, sched = self.optimizers(), self.lr_schedulers()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        if sync:
            self.engine.sync_weights(self.policy)
        return time.perf_counter() - t0

    def on_before_optimizer_step(self, optimizer) -> None:
        # Here (not in training_step) gradients are already unscaled under 16-mixed. Each
        # parameter group (the policy's; a critic's) is clipped to its own max_grad_norm.
        groups = optimizer.param_groups
        for group, (_, settings) in zip(groups, self.optimizer_groups(), strict=False):
            self.clip_grad_norm(optimizer, settings.max_grad_norm, group["params"])

    def clip_grad_norm(
        self, optimizer: torch.optim.Optimizer, max_norm: float, params: list | None = None
    ) -> None:
        """Clip the gradients of ``params`` (default: all of ``optimizer``'s) to global L2 norm
        ``max_norm`` (0: no clipping), unscaled first when a grad scaler (``16-mixed``) scaled
        them."""
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
            torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], max_norm)

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

    # ------------------------------------------------------------------ checkpoint state
    def register_state(self, name: str, obj: Stateful) -> None:
        """Checkpoint ``obj.state_dict()`` under ``name``; restore it now if a checkpoint already
        loaded (``setup`` may run after ``on_load_checkpoint``)."""
        self._state[name] = obj
        if name in self._pending_state:
            obj.load_state_dict(self._pending_state.pop(name))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Per rank: under DDP each rank's stream position and RNG states differ (training/rng.py).
        state = {name: obj.state_dict() for name, obj in self._state.items()}
        save_rank_states(checkpoint, "lit_coderl_state", self._trainer, state)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rank = self.trainer.global_rank if self._trainer is not None else 0
        saved = dict(own_rank_state(checkpoint, "lit_coderl_state", rank) or {})
        if "rollout_state" in checkpoint:  # checkpoints written before the state registry
            saved.setdefault("rollout", checkpoint["rollout_state"])
        for name, state in saved.items():
            if name in self._state:
                self._state[name].load_state_dict(state)
            else:
                self._pending_state[name] = state

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        # The first step after a resume starts from the global RNG state of the checkpoint.
        self.global_rng.restore_pending()

    # ------------------------------------------------------------------ export
    def on_train_end(self) -> None:
        # self.run_dir, not trainer.log_dir: the latter is a collective.
        if not self.save_hf_model:
            return
        # Sharded weights are gathered by every rank (a collective); rank 0 writes them.
        state = distributed.full_state_dict(self.policy) if self.sharded else None
        if self.trainer.is_global_zero and self.run_dir:
            self.export_hf(self.run_dir / "hf_model", state)

    def export_hf(self, out: Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """Write the policy as a plain ``save_pretrained`` directory (LoRA merged into a copy).

        ``state_dict``: the gathered full weights when the live policy is sharded (FSDP2);
        ``save_pretrained`` writes them instead of reading the shards."""
        model = self.policy
        if state_dict is not None:
            if self.is_lora:
                from lit_codeRL.errors import ConfigError

                raise ConfigError(
                    "exporting a LoRA policy trained under fsdp2 is not supported: set save_hf_model false"
                )
            model.save_pretrained(out, state_dict=state_dict)
            self.tokenizer.save_pretrained(out)
            rank_zero_info(f"saved the trained policy to {out}")
            return out
        if self.is_quantized:
            model = full_precision_merged(model, self.model_settings)
        elif self.is_lora:
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        rank_zero_info(f"saved the trained policy to {out}")
        return out

    # ------------------------------------------------------------------ for callbacks
    def generation_engine(self) -> GenerationEngine:
        """The engine, synced to the live policy: what evaluation callbacks sample with."""
        self.engine.sync_weights(self.policy)
        return self.engine


def _uses_grad_scaler(trainer: Any) -> bool:
    """Does the trainer's precision scale the loss (``16-mixed``)? Then gradients must be
    unscaled before clipping, which Lightning does only for non-fused optimizers."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None
