"""``precision="auto"``: pick the fastest numerically safe precision for the hardware at hand."""

from __future__ import annotations

import functools
import logging

import torch

log = logging.getLogger(__name__)


def resolve_precision(
    precision: str | int | None = "auto", accelerator: str | None = "auto", cpu_default: str = "32-true"
) -> str | int | None:
    """Map ``"auto"`` to a Lightning precision string; any other value passes through unchanged.

    bf16-mixed on GPUs that support bf16 (Ampere and newer), 16-mixed on older GPUs (V100, T4),
    ``cpu_default`` on CPU (32-true; ``bf16-mixed`` when the user asks for it explicitly).
    """
    if precision != "auto":
        return precision
    if accelerator in ("auto", "gpu", "cuda", None) and torch.cuda.is_available():
        chosen = "bf16-mixed" if torch.cuda.is_bf16_supported(including_emulation=False) else "16-mixed"
        where = torch.cuda.get_device_name(0)
    else:
        chosen, where = cpu_default, "CPU"
    log.info("precision auto -> %s (%s)", chosen, where)
    return chosen


def default_micro_batch_size(num_params: int, seq_len: int = 512) -> int:
    """A device-memory-based hint for sequences per forward/backward chunk.

    A rough rule from fp32 Adam training: weights + grads + 2 moments = 16 bytes/param, the rest
    of free memory goes to activations (~ 24 * hidden-ish bytes/token/layer, folded into a
    per-token cost that scales with model size). Conservative by design: it is a starting point
    a user overrides, not a guarantee.
    """
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
    else:
        try:
            import os

            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            free = 8 * 2**30
    budget = free * 0.6 - 16 * num_params
    per_sequence = max(1, seq_len * num_params // 2_000)  # ~activation bytes per sequence
    hint = int(max(1, min(64, budget // per_sequence)))
    # Powers of two keep kernels and micro-batch splits regular.
    hint = 1 << (hint.bit_length() - 1)
    log.info("micro-batch hint: %d sequences of %d tokens (%.1f GiB free)", hint, seq_len, free / 2**30)
    return hint


GenerationDtype = str
"""``"auto"``, ``"float32"``, ``"bfloat16"`` or ``"float16"`` (see :func:`generation_dtype`)."""

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
"""Dtype names of the configs (model and engine dtypes), short aliases included."""


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Does this CPU compute in bf16 natively (AVX-512-BF16 or AMX-BF16)? Without it oneDNN
    emulates bf16 and a bf16 matmul is no faster than fp32, so ``auto`` keeps fp32."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool({"avx512_bf16", "amx_bf16"} & flags)
    except OSError:
        pass
    return False


@functools.cache
def generation_dtype(setting: GenerationDtype | None, device_type: str) -> torch.dtype | None:
    """The dtype the generation engine samples in on ``device_type``; ``None``: the policy's own.

    ``auto`` is bf16 where the hardware has it natively (CUDA Ampere and newer; a CPU with
    AVX-512-BF16/AMX), else the policy's own dtype. Logged once per device type.
    """
    if setting in (None, "model"):
        return None
    if setting != "auto":
        if setting not in ("float32", "bfloat16", "float16"):
            from lit_codeRL.errors import ConfigError

            raise ConfigError(f"engine dtype {setting!r}: use auto, float32, bfloat16 or float16")
        return DTYPES[setting]
    if device_type == "cuda":
        native = torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
        where = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda"
    elif device_type == "cpu":
        native, where = cpu_has_native_bf16(), "CPU (AVX-512-BF16/AMX)" if cpu_has_native_bf16() else "CPU"
    else:
        native, where = False, device_type
    chosen = torch.bfloat16 if native else None
    log.info("engine dtype auto -> %s on %s", "bfloat16" if chosen else "the policy's own dtype", where)
    return chosen
