"""The shared training layer: learning-rate schedule, LoRA-merged export, checkpoint-state registry."""

from __future__ import annotations

import math

import pytest
import torch

from lit_codeRL.training.optim import OptimizerSettings, lr_factor
from tests.conftest import quiet_trainer


def test_lr_factor_by_hand():
    f = lr_factor(4, "constant", 100)
    assert [f(s) for s in (0, 1, 3, 4, 50)] == [0.25, 0.5, 1.0, 1.0, 1.0]
    f = lr_factor(2, "cosine", 12, min_ratio=0.1)
    assert f(0) == 0.5 and f(2) == pytest.approx(1.0)
    assert f(7) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(12) == pytest.approx(0.1) and f(40) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        lr_factor(0, "linear", 10)


def test_lora_export_is_a_plain_merged_model(tmp_path):
    from transformers import AutoModelForCausalLM

    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.loading import LoraSettings, ModelSettings

    m = BCModule(model=ModelSettings(name_or_path="tiny-random", lora=LoraSettings(r=4)))
    with torch.no_grad():
        for name, p in m.policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # adapters that change the output
    out = m.export_hf(tmp_path / "hf")
    plain = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in n for n, _ in plain.named_parameters())
    ids = torch.tensor([[1, 5, 9, 200, 7]])
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, m.policy(ids).logits, atol=1e-4, rtol=1e-4)
        with m.policy.disable_adapter():
            assert not torch.allclose(plain(ids).logits, m.policy(ids).logits, atol=1e-3)
    assert any("lora" in n for n, _ in m.policy.named_parameters()), "export must not merge the live policy"


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


def test_state_registry_restores_before_or_after_registration():
    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.loading import ModelSettings

    m = BCModule(model=ModelSettings(name_or_path="tiny-random"))
    c = _Counter()
    c.n = 7
    m.register_state("counter", c)
    ckpt: dict = {}
    m.on_save_checkpoint(ckpt)
    # checkpoint loaded after registration
    late = _Counter()
    m2 = BCModule(model=ModelSettings(name_or_path="tiny-random"))
    m2.register_state("counter", late)
    m2.on_load_checkpoint(ckpt)
    assert late.n == 7
    # checkpoint loaded before registration (setup after restore)
    m3 = BCModule(model=ModelSettings(name_or_path="tiny-random"))
    m3.on_load_checkpoint(ckpt)
    early = _Counter()
    m3.register_state("counter", early)
    assert early.n == 7


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true"])
def test_gradients_are_clipped_and_adamw_stays_fused_without_a_grad_scaler(tmp_path, precision, monkeypatch):
    """bf16-mixed has no grad scaler: clipping works on the true gradients and the optimizer
    stays fused (Lightning's own clip refuses fused optimizers under any mixed precision). The
    gradient norm is computed once a step (the finiteness check's, reused to clip) and logged
    as ``train/grad_norm``, before clipping."""
    import lightning as L

    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.rollout.demonstrations import DemonstrationSettings

    def global_norm(policy) -> float:
        grads = [p.grad for p in policy.parameters() if p.grad is not None]
        return float(torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads])))

    norms: list[float] = []
    before: list[float] = []

    class Probed(BCModule):
        def on_before_optimizer_step(self, optimizer):
            before.append(global_norm(self.policy))
            super().on_before_optimizer_step(optimizer)  # clips
            norms.append(global_norm(self.policy))

    def second_norm(*args, **kwargs):
        raise AssertionError("the gradient norm was computed again to clip")

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", second_norm)

    module = Probed(
        model=ModelSettings(name_or_path="tiny-random"),
        demonstrations=DemonstrationSettings(source="embedded"),
        batch_size=4,
        optimizer=OptimizerSettings(learning_rate=1e-3, max_grad_norm=1e-3),
        save_hf_model=False,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        precision=precision,
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module)
    assert trainer.optimizers[0].defaults["fused"] is True
    assert len(norms) == 2 and all(n <= 1e-3 * 1.01 for n in norms), norms
    assert before[-1] > 1e-2  # so the clip did something
    assert float(trainer.callback_metrics["train/grad_norm"]) == pytest.approx(before[-1], rel=1e-4)


def _fit_one_step(module, tmp_path, **fit_kwargs) -> list[str]:
    """The warnings a one-step CPU fit emits, on a host where Lightning would suggest 8 workers."""
    import warnings

    import lightning as L
    from lightning.pytorch.trainer.connectors import data_connector

    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    # Lightning advises workers only where it could use more than one (a 2-core runner: not)
    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings(record=True) as caught:
        mp.setattr(data_connector, "suggested_max_num_workers", lambda devices: 8)
        warnings.simplefilter("always")
        trainer.fit(module, **fit_kwargs)
    return [str(w.message) for w in caught]


def test_in_process_train_loader_gets_no_advice_to_add_workers(tmp_path):
    """The module's own loader runs in the main process by design: Lightning's "does not have
    many workers" warning is silenced for it, and still comes for a map-style loader a user brings."""
    from torch.utils.data import DataLoader

    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.rollout.demonstrations import DemonstrationSettings

    def settings() -> dict:
        return dict(
            model=ModelSettings(name_or_path="tiny-random"),
            demonstrations=DemonstrationSettings(source="embedded"),
            batch_size=2,
            save_hf_model=False,
        )

    ours = _fit_one_step(BCModule(**settings()), tmp_path)
    assert not [m for m in ours if "does not have many workers" in m], ours

    module = BCModule(**settings())  # now trained on a loader of the user's: the module is not asked
    module.setup("fit")
    batch = module.dataset.next_batch()
    theirs = _fit_one_step(
        module, tmp_path, train_dataloaders=DataLoader([batch], batch_size=None, collate_fn=lambda b: b)
    )
    assert [m for m in theirs if m.startswith("The 'train_dataloader' does not have many workers")], theirs


def _fit_poisoned(tmp_path, poisoned: set[int], max_steps: int, max_nonfinite_steps: int):
    """A BC fit whose loss is NaN on the ``poisoned`` batches (0-based); returns the module, the
    trainer and the batches it took."""
    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.rollout.demonstrations import DemonstrationSettings

    class Poisoned(BCModule):
        batches = 0

        def training_step(self, batch, batch_idx):
            self.poison = Poisoned.batches in poisoned
            Poisoned.batches += 1
            return super().training_step(batch, batch_idx)

        def token_logprobs(self, *args, **kwargs):
            logps, *rest = super().token_logprobs(*args, **kwargs)
            return (logps * float("nan") if self.poison else logps), *rest

    module = Poisoned(
        model=ModelSettings(name_or_path="tiny-random"),
        demonstrations=DemonstrationSettings(source="embedded"),
        batch_size=2,
        optimizer=OptimizerSettings(learning_rate=1e-3, max_nonfinite_steps=max_nonfinite_steps),
        save_hf_model=False,
    )
    return module, quiet_trainer(tmp_path, max_steps), Poisoned


def test_a_step_with_a_nan_gradient_is_skipped_and_training_goes_on(tmp_path):
    """One NaN loss must not reach the weights through AdamW (a policy with NaN weights then
    samples out-of-vocabulary ids: a device-side assert on a GPU): the step is skipped, the
    weights, the schedule and ``global_step`` stay, and the next batches train."""
    module, trainer, poisoned = _fit_poisoned(tmp_path, {1, 2}, max_steps=3, max_nonfinite_steps=2)
    trainer.fit(module)
    assert poisoned.batches == 5 and trainer.global_step == 3  # 2 batches skipped, 3 steps taken
    assert all(torch.isfinite(p).all() for p in module.policy.parameters())
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 3


def test_nan_gradients_in_a_row_past_the_limit_stop_training_with_a_clear_error(tmp_path):
    from lit_codeRL.errors import DivergedError

    module, trainer, poisoned = _fit_poisoned(tmp_path, {1, 2, 3}, max_steps=5, max_nonfinite_steps=2)
    with pytest.raises(DivergedError, match="3 optimizer steps in a row had a non-finite gradient"):
        trainer.fit(module)
    assert poisoned.batches == 4
    with pytest.raises(ValueError, match="max_nonfinite_steps must be >= 0"):
        OptimizerSettings(max_nonfinite_steps=-1)
