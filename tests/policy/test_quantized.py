"""Quantized policies with LoRA (QLoRA) through bitsandbytes, on CPU: the base loads packed,
only the adapters learn (and they do), the reference is the base with the adapters off, the
export merges the adapters into a full-precision copy, a run trains and resumes from the CLI,
and the combinations that cannot work are refused in one line."""

from __future__ import annotations

import pytest
import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.loading import (
    LoraSettings,
    ModelLoadError,
    ModelSettings,
    full_precision_merged,
    is_quantized,
    load_model,
)

bnb = pytest.importorskip("bitsandbytes", reason="pip install -e '.[quant]'")

BATCH = torch.tensor([[5, 17, 33, 2, 91, 40, 7, 12, 64, 3], [8, 8, 21, 77, 5, 17, 33, 2, 91, 40]])


def _qlora(bits: str):
    torch.manual_seed(0)
    return load_model(
        name_or_path="tiny-random",
        quantization=bits,
        quant_compute_dtype="float32",
        lora=LoraSettings(r=8, alpha=16),
    )


def test_quantization_needs_lora_and_a_known_mode():
    with pytest.raises(ModelLoadError, match="needs model.lora"):
        ModelSettings(name_or_path="tiny-random", quantization="4bit")
    with pytest.raises(ModelLoadError, match="none, 8bit or 4bit"):
        ModelSettings(name_or_path="tiny-random", quantization="3bit", lora=LoraSettings())


@pytest.mark.parametrize("bits, layer", [("4bit", "Linear4bit"), ("8bit", "Linear8bitLt")])
def test_the_base_loads_packed_and_only_the_adapters_train(bits, layer):
    model, _ = _qlora(bits)
    assert is_quantized(model)
    kinds = {type(m).__name__ for m in model.modules()}
    assert layer in kinds
    plain, _ = load_model(name_or_path="tiny-random")
    assert not is_quantized(plain)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


@pytest.mark.parametrize("bits", ["4bit", "8bit"])
def test_lora_on_a_quantized_base_reduces_the_loss_of_a_fixed_batch(bits):
    # the real model: a tiny random one's tied, frozen embedding leaves LoRA almost nothing to move
    torch.manual_seed(0)
    model, tok = load_model(
        name_or_path="smollm2-135m-instruct", quantization=bits, lora=LoraSettings(r=8, alpha=16)
    )
    batch = tok(["def add(a, b):\n    return a + b  # a fixed batch"], return_tensors="pt").input_ids
    with torch.no_grad(), model.disable_adapter():
        base_before = model(input_ids=batch).logits
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    losses = []
    for _ in range(12):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    # the quantized base never moved (bitsandbytes repacks CPU weights at the first forward, so
    # compare what the base computes, not its bytes)
    with torch.no_grad(), model.disable_adapter():
        torch.testing.assert_close(model(input_ids=batch).logits, base_before)


def test_the_reference_is_the_quantized_base_with_the_adapters_off():
    model, _ = _qlora("4bit")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(std=0.3)
        with model.disable_adapter():
            ref = model(input_ids=BATCH).logits
        adapted = model(input_ids=BATCH).logits
        fresh, _ = load_model(name_or_path="tiny-random", quantization="4bit", quant_compute_dtype="float32",
                              lora=LoraSettings(r=8, alpha=16))  # fmt: skip
        base = fresh(input_ids=BATCH).logits  # lora_B zero at init: the bare quantized base
    torch.testing.assert_close(ref, base)
    assert not torch.allclose(adapted, ref)


def test_the_export_merges_the_adapters_into_a_full_precision_base():
    settings = ModelSettings(name_or_path="tiny-random", quantization="4bit", quant_compute_dtype="float32",
                             lora=LoraSettings(r=8, alpha=16))  # fmt: skip
    policy, _ = load_model(settings)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_" in n:
                p.normal_(std=0.3)
    merged = full_precision_merged(policy, settings)
    assert not is_quantized(merged) and not hasattr(merged, "peft_config")
    assert all(p.dtype == torch.float32 for p in merged.parameters())
    assert not any("bitsandbytes" in type(m).__module__ for m in merged.modules())
    # by hand: W_export = W_base (full precision, from the source) + (alpha / r) * B @ A
    base, _ = load_model(name_or_path="tiny-random")
    layer = policy.base_model.model.model.layers[0].mlp.up_proj
    delta = (16 / 8) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    want = base.model.layers[0].mlp.up_proj.weight + delta
    torch.testing.assert_close(merged.model.layers[0].mlp.up_proj.weight, want)
    # and the policy is still what it was: quantized, adapters in place
    assert is_quantized(policy) and hasattr(policy, "peft_config")


def test_fsdp2_and_vllm_refuse_a_quantized_policy(monkeypatch):
    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.policy.vllm_engine import VLLMEngine

    module = BCModule(
        model=ModelSettings(name_or_path="tiny-random", quantization="4bit", lora=LoraSettings(r=4)),
        demonstrations={"source": "embedded"},
    )
    monkeypatch.setattr(type(module), "device_mesh", property(lambda self: object()), raising=False)
    with pytest.raises(ConfigError, match="fsdp2 is not supported"):
        module.configure_model()
    with pytest.raises(ConfigError, match="quantization is not supported"):
        VLLMEngine(module.tokenizer, device="cpu").sync_weights(module.policy)


def test_a_qlora_run_trains_resumes_and_exports_from_the_cli(tmp_path):
    """``lit-coderl fit`` with ``model.quantization 4bit``: the adapters train (BC on the embedded
    demonstrations), the checkpoint resumes, the exported hf_model is a plain full-precision model."""
    from transformers import AutoModelForCausalLM

    from tests.modules.test_grpo_module import cli, read_metrics
    from tests.modules.test_reinforce_bc import csv_logger

    common = [
        "--model", "BCModule",
        "--model.init_args.model.name_or_path", "tiny-random",
        "--model.init_args.model.quantization", "4bit",
        "--model.init_args.model.lora.r", "4",
        "--model.init_args.demonstrations.source", "embedded",
        "--model.init_args.batch_size", "2",
        "--model.init_args.optimizer.learning_rate", "1e-2",
        "--trainer.accelerator", "cpu",
        "--trainer.log_every_n_steps", "1",
    ]  # fmt: skip
    run = tmp_path / "q"
    cli("fit", *common, "--trainer.max_steps", "3", *csv_logger(run))
    losses = [float(r["train/loss"]) for r in read_metrics(run) if r.get("train/loss")]
    assert len(losses) == 3
    version = next(run.glob("version_*"))
    hf = version / "hf_model"
    config = (hf / "config.json").read_text()
    assert "quantization_config" not in config
    exported = AutoModelForCausalLM.from_pretrained(hf)
    assert all(p.dtype == torch.float32 for p in exported.parameters())
    ckpt = next(version.rglob("*.ckpt"))
    resumed = tmp_path / "r"
    cli("fit", *common, "--trainer.max_steps", "4", "--ckpt_path", str(ckpt), *csv_logger(resumed))
    steps = [int(r["step"]) for r in read_metrics(resumed) if r.get("train/loss")]
    assert steps == [3]
