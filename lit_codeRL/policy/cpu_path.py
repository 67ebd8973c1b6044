"""Which CPU code path this process takes, for benchmark reports.

Its own module because it reads both sides: the precision rules (``precision.py``: native bf16,
the engine's ``auto`` dtype) and the lean forward's packing gate (``fast_decode.py``), which
itself asks ``precision.py`` whether bf16 is native; imports go one way only.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from lit_codeRL.policy import precision
from lit_codeRL.policy.fast_decode import packing_available


def cpu_path() -> dict[str, Any]:
    """Which CPU code path this process takes, for benchmark reports: the CPU, the SIMD flags
    found, torch's kernel level, whether bf16 counts as native (and why), what the generation
    engine samples in under ``engine.dtype: auto`` and whether its projections run prepacked."""
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile")
    native = precision.cpu_has_native_bf16()
    engine_dtype = torch.bfloat16 if native else torch.float32
    return {
        "cpu": name,
        "flags_found": [f for f in wanted if f in precision.cpu_flags()],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native,
        "env": {
            k: os.environ[k]
            for k in (precision.CPU_BF16_ENV, "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
            if k in os.environ
        },
        "engine_auto_dtype": str(engine_dtype).removeprefix("torch."),
        "decode_prepacked": packing_available(engine_dtype),
        "threads": torch.get_num_threads(),
    }
