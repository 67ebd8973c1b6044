"""Behavioural cloning (supervised fine-tuning on demonstrations), as a LightningModule.

One training step, as data::

    demonstrations (reference solutions rendered as rollouts are, or saved trajectories)
        -> batch of [prompt | answer tokens (| observation | answer ...)]
        -> mean NLL of the demonstrator's tokens -> optimizer step

It trains the same trajectory record as the RL modules, so a BC run's ``hf_model`` warm-starts
any of them: ``--model.init_args.model.name_or_path <bc run>/hf_model``.
"""

from __future__ import annotations

from lit_codeRL.policy.engine import EngineSettings
from lit_codeRL.policy.loading import ModelSettings
from lit_codeRL.rollout.demonstrations import DemonstrationDataset, DemonstrationSettings, load_demonstrations
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.training.behaviour_cloning import nll_update
from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.policy_module import PolicyModule, as_settings


class BCModule(PolicyModule):
    """Behavioural cloning on demonstrations.

    Args:
        model: Policy model source, dtype, LoRA and gradient checkpointing.
        demonstrations: Where demonstrations come from (reference solutions or a rollout dump).
        engine: Generation engine (used by evaluation callbacks).
        batch_size: Demonstrations per optimizer step.
        optimizer: AdamW, learning-rate schedule and gradient clipping of the policy (here
            1e-5, 10 warm-up steps, cosine to 0.1 of it at ``trainer.max_steps``).
        micro_batch_size: Rows per forward/backward chunk; ``None`` = a free-memory hint.
        save_hf_model: Write ``<run>/hf_model`` at the end.
        seed: Seed of the demonstration order.
    """

    def __init__(
        self,
        model: ModelSettings = ModelSettings(),  # noqa: B008 - dataclass defaults show up in --print_config
        demonstrations: DemonstrationSettings = DemonstrationSettings(),  # noqa: B008
        engine: EngineSettings = EngineSettings(),  # noqa: B008
        batch_size: int = 8,
        optimizer: OptimizerSettings = OptimizerSettings(  # noqa: B008
            learning_rate=1e-5, warmup_steps=10, lr_schedule="cosine", min_lr_ratio=0.1
        ),
        micro_batch_size: int | None = None,
        save_hf_model: bool = True,
        seed: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        super().__init__(
            model=as_settings(ModelSettings, model),
            engine=as_settings(EngineSettings, engine),
            optimizer=optimizer,
            micro_batch_size=micro_batch_size,
            save_hf_model=save_hf_model,
        )
        self.demo_settings = as_settings(DemonstrationSettings, demonstrations)
        self.save_hyperparameters()
        self.plain_hparams()
        self.dataset: DemonstrationDataset | None = None

    def setup(self, stage: str) -> None:
        if stage != "fit" or self.dataset is not None:
            return
        rows = load_demonstrations(self.demo_settings, self.tokenizer)
        self.dataset = DemonstrationDataset(
            rows, self.hparams.batch_size, self.engine.pad_token_id, self.hparams.seed
        )
        self.register_state("demonstrations", self.dataset)
        self.setup_run_dir("demonstrations")

    def training_step(self, batch: TrajectoryBatch, batch_idx: int) -> None:
        stats, times = nll_update(self, batch)
        metrics = {f"train/{k}": sum(v) / len(v) for k, v in stats.items()}
        metrics.update(times)
        metrics["train/tokens"] = float(batch.num_trainable_tokens)
        metrics["train/epoch"] = float(self.dataset.epoch) if self.dataset else 0.0
        metrics["train/lr"] = self.optimizers().param_groups[0]["lr"]
        self.log(
            "train/loss", metrics.pop("train/loss"), on_step=True, prog_bar=True, batch_size=batch.batch_size
        )
        self.log_dict(metrics, on_step=True, batch_size=batch.batch_size)
