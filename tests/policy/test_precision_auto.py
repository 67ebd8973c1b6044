"""``precision: auto`` on every device and strategy, and the AdamW fused flag that goes with it.

What runs here for real: CPU 32-true, CPU bf16-mixed (explicit) through a GRPO step with gradient
clipping, FSDP2 (``ModelParallelStrategy``) resolution with a real Trainer. GPU rows are a table
with CUDA queries monkeypatched: the resolver only reads them, so the table is the contract.
"""

from __future__ import annotations

import logging

import pytest
import torch
from lightning.pytorch.strategies import ModelParallelStrategy, StrategyRegistry

from lit_codeRL.cli import CodeRLTrainer
from lit_codeRL.policy import precision as P
from lit_codeRL.policy.precision import is_model_parallel, resolve_precision, use_fused_adamw

GPUS = {  # name: (capability, native bf16)
    "Tesla V100-SXM2-32GB": ((7, 0), False),
    "Tesla T4": ((7, 5), False),
    "NVIDIA A100-SXM4-80GB": ((8, 0), True),
    "NVIDIA H100 80GB HBM3": ((9, 0), True),
}


class MyFSDP2(ModelParallelStrategy):
    """A user's subclass (e.g. a custom mesh): still FSDP2 for precision purposes."""


def fake_gpu(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    capability, bf16 = GPUS[name]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    # including_emulation=True would say yes on V100 too (bf16 emulated by fp32 kernels): the
    # resolver must ask for native support.
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16 or including_emulation
    )


# (gpu, strategy) -> (precision, fused AdamW with max_grad_norm=1.0)
TABLE = [
    ("Tesla V100-SXM2-32GB", "ddp", "16-mixed", False),
    ("Tesla V100-SXM2-32GB", "fsdp2", "32-true", True),
    ("Tesla T4", "ddp", "16-mixed", False),
    ("Tesla T4", "fsdp2", "32-true", True),
    # bf16 has no grad scaler: PolicyModule clips the true gradients itself, fused AdamW stays
    ("NVIDIA A100-SXM4-80GB", "ddp", "bf16-mixed", True),
    ("NVIDIA A100-SXM4-80GB", "fsdp2", "bf16-mixed", True),
    ("NVIDIA H100 80GB HBM3", "ddp", "bf16-mixed", True),
    ("NVIDIA H100 80GB HBM3", "fsdp2", "bf16-mixed", True),
]


@pytest.mark.parametrize(("gpu", "strategy", "expected", "fused"), TABLE)
def test_gpu_table(monkeypatch, gpu, strategy, expected, fused):
    fake_gpu(monkeypatch, gpu)
    strategies = [strategy] if strategy == "ddp" else ["fsdp2", ModelParallelStrategy(), MyFSDP2()]
    params = [torch.nn.Parameter(torch.zeros(2))]
    for flag in strategies:
        chosen = resolve_precision("auto", "auto", strategy=flag)
        assert chosen == expected, (gpu, flag)
        assert use_fused_adamw(True, params, chosen, max_grad_norm=1.0) is fused
    # Without clipping the grad scaler steps a fused AdamW fine: keep the fast kernel.
    assert use_fused_adamw(True, params, expected, max_grad_norm=0.0) is True
    assert use_fused_adamw(False, params, expected, max_grad_norm=0.0) is False


def test_explicit_precision_and_cpu_accelerator_pass_through(monkeypatch):
    fake_gpu(monkeypatch, "Tesla T4")
    assert resolve_precision("bf16-true", "auto", strategy="ddp") == "bf16-true"
    # an explicit cpu accelerator is the CPU's choice, not the GPU's (which CPU class: its own test)
    for native, expected in ((False, "32-true"), (True, "bf16-mixed")):
        monkeypatch.setattr(P, "cpu_has_native_bf16", lambda native=native: native)
        assert resolve_precision("auto", "cpu", strategy="fsdp2") == expected


def test_model_parallel_recognised_by_registered_alias(monkeypatch):
    """An alias registered for a ModelParallelStrategy subclass (what ``fsdp2`` is) counts."""
    monkeypatch.setitem(StrategyRegistry, "my_fsdp2_alias", {"strategy": MyFSDP2, "init_params": {}})
    assert is_model_parallel("my_fsdp2_alias")
    assert is_model_parallel("fsdp2") and is_model_parallel(MyFSDP2())
    assert not is_model_parallel("ddp") and not is_model_parallel("auto") and not is_model_parallel(None)
    fake_gpu(monkeypatch, "Tesla V100-SXM2-32GB")
    assert resolve_precision("auto", "gpu", strategy="my_fsdp2_alias") == "32-true"


def test_model_parallel_really_refuses_16_mixed():
    """The reason for the FSDP2 row: Lightning rejects this combination at construction."""
    with pytest.raises(ValueError, match="16-mixed"):
        CodeRLTrainer(
            accelerator="cpu", devices=1, strategy=ModelParallelStrategy(), precision="16-mixed", logger=False
        )


@pytest.mark.parametrize(("native_bf16", "expected"), [(False, "32-true"), (True, "bf16-mixed")])
def test_cpu_auto_follows_native_bf16_under_ddp_and_fsdp2(monkeypatch, native_bf16, expected):
    """An AVX2-only CPU trains in fp32 (emulated bf16 autocast was 7x slower there); a CPU with
    AVX-512-BF16/AMX in bf16-mixed."""
    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: native_bf16)
    for strategy in ("auto", "ddp", ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1)):
        trainer = CodeRLTrainer(accelerator="cpu", devices=1, strategy=strategy, logger=False, max_steps=1)
        assert trainer.precision == expected, strategy


def test_auto_choice_logged_once(caplog, monkeypatch):
    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: False)
    P._LOGGED.clear()
    with caplog.at_level(logging.INFO, logger=P.log.name):
        for _ in range(3):
            resolve_precision("auto", "cpu", strategy="ddp")
    assert [r.getMessage() for r in caplog.records].count(
        "precision auto -> 32-true (CPU, strategy ddp)"
    ) == 1


def _grpo():
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.sandbox import SandboxConfig

    return GRPOModule(
        model=ModelSettings(name_or_path="tiny-random"),
        sampling=SamplingParams(max_new_tokens=6),
        sandbox=SandboxConfig(workers=1),
        num_generations=2,
        prompts_per_step=1,
        save_hf_model=False,
        optimizer={"max_grad_norm": 1.0},
    )


@pytest.mark.parametrize(("precision", "fused"), [("auto", True), ("bf16-mixed", True)])
def test_cpu_step_with_clipping_picks_the_optimizer_lightning_can_clip(tmp_path, precision, fused):
    """A real clipped GRPO step on CPU: 32-true and bf16-mixed (no grad scaler) keep fused AdamW;
    the module clips the true gradients itself (Lightning's MixedPrecision.clip_gradients raises
    for a fused optimizer, so routing the clip through it would fail the fit)."""
    module = _grpo()
    trainer = CodeRLTrainer(
        accelerator="cpu",
        max_steps=1,
        precision=precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module)
    opt = trainer.optimizers[0]
    assert opt.param_groups[0]["fused"] is fused
    assert trainer.global_step == 1
    # The (clipped) optimizer step ran: AdamW keeps a step count per parameter it updated.
    assert any(float(state["step"]) == 1 for state in opt.state.values())


@pytest.fixture
def matmul_precision():
    """The fp32 matmul precision is process-wide: start each test at torch's default, restore after."""
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    P._LOGGED.clear()
    yield
    torch.set_float32_matmul_precision(saved)


@pytest.mark.parametrize(
    ("gpu", "trainer_precision", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "bf16-mixed", "high"),
        ("NVIDIA A100-SXM4-80GB", "16-mixed", "high"),
        ("NVIDIA H100 80GB HBM3", "bf16-true", "high"),
        ("NVIDIA H100 80GB HBM3", "16-true", "high"),
        ("NVIDIA H100 80GB HBM3", "32-true", "highest"),  # exact fp32 is what was asked for
        ("Tesla V100-SXM2-32GB", "16-mixed", "highest"),  # no TF32 tensor cores before sm_80
        ("Tesla T4", "16-mixed", "highest"),
    ],
)
def test_tf32_only_for_reduced_precision_on_ampere_and_newer(
    monkeypatch, matmul_precision, caplog, gpu, trainer_precision, expected
):
    fake_gpu(monkeypatch, gpu)
    with caplog.at_level(logging.INFO, logger=P.log.name):
        changed = P.set_matmul_precision(trainer_precision, torch.device("cuda", 0))
        P.set_matmul_precision(trainer_precision, torch.device("cuda", 0))
    assert torch.get_float32_matmul_precision() == expected
    assert changed is (expected == "high")
    lines = [r.getMessage() for r in caplog.records if "matmul precision" in r.getMessage()]
    assert lines == (
        [
            f"float32 matmul precision -> high (TF32 on {gpu}: {trainer_precision} already "
            "multiplies in 16 bits)"
        ]
        if changed
        else []
    )


def test_tf32_leaves_a_users_choice_and_the_cpu_alone(monkeypatch, matmul_precision):
    fake_gpu(monkeypatch, "NVIDIA H100 80GB HBM3")
    assert not P.set_matmul_precision("bf16-mixed", torch.device("cpu"))
    assert torch.get_float32_matmul_precision() == "highest"
    torch.set_float32_matmul_precision("medium")  # the user's own
    assert not P.set_matmul_precision("bf16-mixed", torch.device("cuda", 0))
    assert torch.get_float32_matmul_precision() == "medium"


def test_trainer_sets_matmul_precision_for_its_resolved_precision_and_device(monkeypatch, matmul_precision):
    """``CodeRLTrainer`` hands its resolved precision and root device over, before any fit."""
    import lit_codeRL.cli as cli

    calls: list[tuple[str, torch.device]] = []
    monkeypatch.setattr(cli, "set_matmul_precision", lambda p, d: calls.append((p, d)) or False)
    monkeypatch.setattr(P, "cpu_has_native_bf16", lambda: True)
    CodeRLTrainer(accelerator="cpu", devices=1, logger=False, max_steps=1)
    assert calls == [("bf16-mixed", torch.device("cpu"))]
