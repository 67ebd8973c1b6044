"""``precision="auto"``: pick the fastest numerically safe precision for the hardware at hand."""

from __future__ import annotations

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
