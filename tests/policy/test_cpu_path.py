"""Which CPU path runs: native-bf16 detection, its documented override, and what the benchmarks report."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lit_codeRL.policy import cpu_path, precision
from lit_codeRL.policy.hf_engine import HFGenerationEngine

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_detection():
    precision.cpu_has_native_bf16.cache_clear()
    precision.generation_dtype.cache_clear()
    yield
    precision.cpu_has_native_bf16.cache_clear()
    precision.generation_dtype.cache_clear()


@pytest.mark.parametrize(
    ("flags", "env", "native"),
    [
        ({"avx2", "avx512_bf16"}, {}, True),
        ({"avx2", "amx_bf16"}, {}, True),
        ({"avx2", "fma"}, {}, False),
        # the documented switch: run the AVX2 path on a bf16 machine, or force bf16 on
        ({"avx2", "avx512_bf16"}, {"LIT_CODERL_CPU_BF16": "0"}, False),
        ({"avx2", "fma"}, {"LIT_CODERL_CPU_BF16": "on"}, True),
        # oneDNN capped below its bf16 ISA cannot compute in bf16 natively whatever the CPU has
        ({"avx2", "avx512_bf16"}, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
        ({"avx2", "avx512_bf16"}, {"ONEDNN_MAX_CPU_ISA": "avx512_core_bf16"}, True),
    ],
)
def test_native_bf16_detection_and_its_switch(monkeypatch, flags, env, native):
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    for key in ("LIT_CODERL_CPU_BF16", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(key, raising=False)  # the AVX2 emulation the suite also runs under
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert precision.cpu_has_native_bf16() is native
    # engine.dtype auto follows it: bf16 replica where native, else the policy's own dtype
    assert precision.generation_dtype("auto", "cpu") == (torch.bfloat16 if native else None)
    path = cpu_path.cpu_path()
    assert path["native_bf16"] is native
    assert path["engine_auto_dtype"] == ("bfloat16" if native else "float32")
    assert path["env"] == env


def test_without_native_bf16_auto_samples_the_live_fp32_module_through_the_lean_forward(
    monkeypatch, tiny_model
):
    """The AVX2 class: ``auto`` keeps no replica and decodes with the lean fp32 forward."""
    model, tokenizer = tiny_model
    monkeypatch.setenv("LIT_CODERL_CPU_BF16", "0")
    engine = HFGenerationEngine(tokenizer, model, dtype="auto")
    assert engine.dtype is None and engine._replica is None
    assert engine._lean is not None and engine._lean.model is model


def test_benchmark_precision_auto_is_the_faster_one_for_the_cpu(monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    import bench_grpo_vs_trl as bench

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert bench.resolve_bench_precision("auto") == "32-true"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert bench.resolve_bench_precision("auto") == "bf16-mixed"
    assert bench.resolve_bench_precision("32-true") == "32-true"
    assert bench.Workload().precision == "auto"
