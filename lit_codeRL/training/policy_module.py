"""``PolicyModule``: the base ``LightningModule`` of every algorithm that trains a language policy.

A subclass writes its algorithm in ``training_step``: get a batch, compute advantages, call
:meth:`PolicyModule.backward_micro_batches` with its loss, :meth:`PolicyModule.optimizer_step`.
Everything else lives here once:

* the policy and tokenizer (any source ``policy/loading.py`` accepts), the generation engine
  chosen by config, and a frozen reference policy when a KL term needs one (under LoRA the base
  model with adapters switched off is the reference: no copy);
* micro-batched forward/backward inside the step (``training/optimizer_steps.py``) (``micro_batch_size``, or a hint from free
  memory), whose losses are normalised by whole-batch counts so the micro-batch sum equals the
  whole-batch loss for every aggregation; the reference forward runs in the same micro-batches;
* the sampler/trainer mismatch correction of every policy-gradient loss
  (:meth:`sampler_correction`: a truncated importance weight to the sampler's log-probs, with
  several updates beside the clipped ratio to the trainer's pi_old, and the ``tis/*`` metrics), so a module whose engine samples in bf16
  still follows the trainer's gradient;
* manual optimization with one :class:`~lit_codeRL.training.optim.OptimizerSettings` group
  (``optimizer``): AdamW (fused where the device allows), linear warm-up then constant or cosine
  learning rate, gradient-norm clipping at the point where gradients are unscaled;
* checkpoint state beyond weights and optimizer (``training/checkpoint_state.py``): any object registered with
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
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, IterableDataset

from lit_codeRL.algorithms.grpo import LossType, normaliser_rows, policy_loss, sequence_token_counts
from lit_codeRL.algorithms.importance import sampler_correction
from lit_codeRL.policy.engine import EngineSettings, GenerationEngine, make_engine
from lit_codeRL.policy.loading import LoraSettings, ModelSettings, full_precision_merged, load_model
from lit_codeRL.policy.logprobs import grouped_prompt_token_logprobs, shares_prompts
from lit_codeRL.rollout.dataset import RolloutWriter
from lit_codeRL.rollout.trajectory import TrajectoryBatch, pad_columns
from lit_codeRL.training import distributed
from lit_codeRL.training.checkpoint_state import RegisteredState
from lit_codeRL.training.context_parallel import context_parallel_logprobs
from lit_codeRL.training.loaders import SleepAfterEachBatch, in_process_loader, whole_batch
from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.optimizer_steps import MicroBatchBudget, MicroBatchedUpdates
from lit_codeRL.training.rng import GlobalRNG
from lit_codeRL.training.strategies import check_strategy

log = logging.getLogger("lit_codeRL")


def as_settings(cls: type, value: Any) -> Any:
    """Settings given as a dict (a checkpoint's hparams, a script) become their dataclass again."""
    if isinstance(value, dict):
        if cls is ModelSettings and isinstance(value.get("lora"), dict):
            value = {**value, "lora": LoraSettings(**value["lora"])}
        return cls(**value)
    return value


class _TeardownOnException(Callback):
    """Lightning calls a module's ``teardown`` only when a stage ends normally: a step that raises
    would leave the sandbox workers and workspaces running in the caller's process (a notebook, a
    script that catches the error, a test). Release them on the way out."""

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        pl_module.teardown(trainer.state.stage.value if trainer.state.stage else "fit")


class PolicyModule(MicroBatchedUpdates, RegisteredState, LightningModule):
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
        self._frozen_engines: list[tuple[GenerationEngine, torch.nn.Module]] = []
        """Engines of models that never train (``frozen_engine``), with their model."""
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
        # Python, NumPy, torch CPU/CUDA global streams (dropout, anything drawing without a
        # generator of its own); restored at the first step after a resume, see training/rng.py.
        self.global_rng = GlobalRNG()
        self.register_state("global_rng", self.global_rng)
        self.micro_batch_budget = MicroBatchBudget()  # micro_batch_size: null (optimizer_steps.py)
        self.register_state("micro_batch_budget", self.micro_batch_budget)
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
        ``loss_type`` counts them, :func:`~lit_codeRL.algorithms.grpo.normaliser_rows`: every
        sequence for ``dr_grpo``, sequences still in the loss otherwise) and trainable tokens over
        the world size (see ``training/distributed.py``), so that N ranks x B rows give the
        gradient of one process on the N*B rows; this batch's own counts on one process.

        Where ``batch.sequence_ids`` joins rows (an episode split by a rewritten history), it also
        fills ``batch.sequence_tokens``, which ``grpo``'s per-sequence mean reads per micro-batch."""
        ids = batch.sequence_ids
        if ids is not None and int(ids.unique().numel()) == batch.batch_size:
            ids = None  # one row per sequence: the plain per-row mean
        batch.sequence_tokens = None if ids is None else sequence_token_counts(batch.trainable_mask, ids)
        rows, tokens = distributed.per_rank_normalisers(
            [normaliser_rows(batch.trainable_mask, loss_type, ids), batch.num_trainable_tokens], self.device
        )
        return rows, tokens

    def global_std(self, values: torch.Tensor) -> torch.Tensor:
        """Unbiased std of ``values`` over every rank's values (a batch-level statistic)."""
        return distributed.global_std(values)

    def train_dataloader(self) -> DataLoader:
        # Batches come whole from the dataset, in the main process (see in_process_loader).
        batches = SleepAfterEachBatch(self.dataset, self.release_engines)
        return in_process_loader(batches, batch_size=None, collate_fn=whole_batch)

    # ------------------------------------------------------------------ engines
    @property
    def engines(self) -> list[GenerationEngine]:
        """The policy's engine and every frozen model's."""
        return [self.engine, *(engine for engine, _ in self._frozen_engines)]

    def frozen_engine(self, settings: EngineSettings, model: torch.nn.Module) -> GenerationEngine:
        """An engine for ``model``, which never trains (a fixed opponent). ``on_fit_start`` moves
        ``model`` to the device and pushes its weights, the only push it needs; so it sleeps at
        vLLM level 1 at most (offloaded weights come back as they were, discarded ones would
        need a push outside ``sync_weights``). It sleeps and closes with the policy's."""
        if settings.name == "vllm" and settings.sleep_level > 1:
            settings = dataclasses.replace(settings, sleep_level=1)
        engine = make_engine(settings, self.tokenizer, model)
        self._frozen_engines.append((engine, model))
        return engine

    def release_engines(self) -> None:
        """The step's rollouts are done: engines that sleep (vLLM) free their GPU memory for the
        forward and backward. Local, no collective: a rank may call it alone."""
        for engine in self.engines:
            sleep = getattr(engine, "sleep", None)
            if callable(sleep):
                sleep()

    def teardown(self, stage: str) -> None:
        # A vLLM engine's GPU memory and config directory would otherwise live until the process
        # exits, and a second fit would build another beside it; the next sync rebuilds it.
        for engine in self.engines:
            close = getattr(engine, "close", None)
            if callable(close):
                close()

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
        for engine, model in self._frozen_engines:  # every rank: a push may gather (FSDP2)
            engine.sync_weights(model.to(self.device))

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
        the clipped ratio's old policy, unless ``mb`` carries the trainer's own pi_old
        (``mb.policy_old_logprobs``, ``training/step_setup.py: attach_policy_old``): then the
        ratio is to it and the weight ``min(pi_old / pi_sampler, cap)``. ``stats`` holds the ``tis/*`` metrics. See
        :func:`~lit_codeRL.algorithms.importance.sampler_correction`."""
        return sampler_correction(
            logprobs,
            mb.old_logprobs[:, start:],
            mb.trainable_mask[:, start:],
            cap,
            num_updates,
            old_logprobs=mb.policy_old_logprobs,
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
            sequence_tokens=mb.sequence_tokens,
        )
        return loss, {**stats, **tis}, old

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
