"""``precision="auto"``: pick the fastest numerically safe precision for the hardware at hand."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)


def resolve_precision(
    precision: str | int | None = "auto",
    accelerator: str | None = "auto",
    cpu_default: str = "32-true",
    strategy: Any = None,
) -> str | int | None:
    """Map ``"auto"`` to a Lightning precision string; any other value passes through unchanged.

    ============================  ==========================  =========================
    device                        DDP / single device         FSDP2 (ModelParallelStrategy)
    ============================  ==========================  =========================
    GPU with bf16 (Ampere+)       bf16-mixed                  bf16-mixed
    GPU without bf16 (V100, T4)   16-mixed                    32-true
    CPU with AVX-512-BF16/AMX     bf16-mixed                  bf16-mixed
    CPU without (AVX2 only)       ``cpu_default`` (32-true)   ``cpu_default`` (32-true)
    ============================  ==========================  =========================

    Why: bf16 needs no loss scaler, so it is the simple fast choice where the hardware has it
    (SPIRAL self-play trained 2x faster in bf16-mixed than in fp32 on a 2-core AVX-512-BF16 CPU).
    Older GPUs get fp16 with a grad scaler; gradient clipping then needs the plain (non-fused)
    AdamW, which :func:`use_fused_adamw` picks. ``ModelParallelStrategy`` refuses 16-mixed
    (Lightning raises at Trainer construction), so FSDP2 on those GPUs trains in fp32. A CPU
    without native bf16 keeps fp32: there bf16 autocast is emulated, and a GRPO step took 198 s
    under it against 29 s in fp32 (2-core AVX2 EPYC). Native bf16 is :func:`cpu_has_native_bf16`
    (overridable with ``$LIT_CODERL_CPU_BF16``). The choice is logged once per process, on rank 0.

    Args:
        precision: ``"auto"`` or any Lightning precision value.
        accelerator: The Trainer's accelerator flag (``auto``, ``gpu``, ``cuda``, ``cpu``...).
        cpu_default: What ``auto`` means on CPU.
        strategy: The Trainer's strategy flag (a name such as ``"ddp"``/``"fsdp2"`` or an instance).
    """
    if precision != "auto":
        return precision
    sharded = is_model_parallel(strategy)
    if accelerator in ("auto", "gpu", "cuda", None) and torch.cuda.is_available():
        if torch.cuda.is_bf16_supported(including_emulation=False):
            chosen = "bf16-mixed"
        else:
            chosen = "32-true" if sharded else "16-mixed"
        cap = torch.cuda.get_device_capability(0)
        where = f"{torch.cuda.get_device_name(0)}, sm_{cap[0]}{cap[1]}"
    elif cpu_has_native_bf16():
        chosen, where = "bf16-mixed", "CPU with native bf16"
    else:
        chosen, where = cpu_default, "CPU"
    note = ""
    if chosen == "16-mixed":
        note = "; gradient clipping uses the non-fused AdamW (Lightning cannot clip a fused one under the grad scaler)"
    elif sharded and chosen == "32-true" and where != "CPU":
        note = "; ModelParallelStrategy refuses 16-mixed and this GPU has no bf16"
    _log_once(
        f"precision auto -> {chosen} ({where}, {'FSDP2' if sharded else 'strategy ' + _strategy_name(strategy)}){note}"
    )
    return chosen


REDUCED_PRECISIONS = ("bf16-mixed", "16-mixed", "bf16-true", "16-true")
"""Trainer precisions whose matmuls already run in 16 bits (autocast or 16-bit weights)."""


def set_matmul_precision(trainer_precision: Any, device: torch.device) -> bool:
    """Let the fp32 matmuls left in a reduced-precision run use TF32 (``"high"``); say whether it did.

    On a CUDA device with tensor cores (compute capability 8.0+, Ampere and newer) training in one
    of :data:`REDUCED_PRECISIONS` multiplies in bf16/fp16 already, so TF32 for the few fp32 matmuls
    autocast leaves (and the fp32 parts of a ``-true`` run) loses nothing that matters and frees
    the tensor cores for them; it also answers Lightning's tip to set it. ``32-true`` keeps
    ``"highest"``: exact fp32 is what that run asked for (and Lightning's tip stays, as the right
    advice there). A process whose precision is no longer ``"highest"`` was set by the user (or
    ``allow_tf32``) and is left alone. Logged once, on rank 0.
    """
    if device.type != "cuda" or str(trainer_precision) not in REDUCED_PRECISIONS:
        return False
    if torch.get_float32_matmul_precision() != "highest" or torch.cuda.get_device_capability(device) < (8, 0):
        return False
    torch.set_float32_matmul_precision("high")
    _log_once(
        f"float32 matmul precision -> high (TF32 on {torch.cuda.get_device_name(device)}: "
        f"{trainer_precision} already multiplies in 16 bits)"
    )
    return True


def is_model_parallel(strategy: Any) -> bool:
    """Is ``strategy`` FSDP2, i.e. Lightning's ``ModelParallelStrategy``: an instance (or a
    subclass's), a registered alias of such a class, or the name ``"fsdp2"`` itself?"""
    if strategy is None:
        return False
    from lightning.pytorch.strategies import ModelParallelStrategy, StrategyRegistry

    if isinstance(strategy, ModelParallelStrategy):
        return True
    if isinstance(strategy, type):
        return issubclass(strategy, ModelParallelStrategy)
    if not isinstance(strategy, str):
        return False
    if strategy.lower() in ("fsdp2", "model_parallel"):
        return True
    entry = StrategyRegistry[strategy] if strategy in StrategyRegistry else None  # .get() instantiates
    cls = entry.get("strategy") if isinstance(entry, dict) else None
    return isinstance(cls, type) and issubclass(cls, ModelParallelStrategy)


def _strategy_name(strategy: Any) -> str:
    if strategy is None or isinstance(strategy, str):
        return str(strategy or "auto")
    return type(strategy).__name__


def use_fused_adamw(
    requested: bool, params: Iterable[torch.Tensor], precision: Any, max_grad_norm: float
) -> bool:
    """Whether to build AdamW with ``fused=True``.

    Fused AdamW is one kernel per step instead of a dozen per parameter (measured 6x on CPU;
    0.41 -> 0.13 s a step for 135M parameters). It unscales the gradients inside its own step, so
    under a grad scaler (``16-mixed``) clipping, which needs unscaled gradients first, requires
    the plain AdamW. Without a scaler (``bf16-mixed``, ``32-true``, ``bf16-true``) the gradients
    are the true ones: ``PolicyModule.on_before_optimizer_step`` clips them directly (Lightning's
    own ``MixedPrecision.clip_gradients`` refuses every fused optimizer, bf16 included) and the
    fused kernel stays.
    """
    if not requested or not all(p.device.type in ("cpu", "cuda") for p in params):
        return False
    scaled = str(precision) in ("16-mixed", "16")
    return not (scaled and max_grad_norm > 0)


_LOGGED: set[str] = set()


def _log_once(message: str) -> None:
    """Log ``message`` once per process and only on global rank 0 (all ranks resolve alike)."""
    if message in _LOGGED or not _is_rank_zero():
        return
    _LOGGED.add(message)
    log.info(message)


def _is_rank_zero() -> bool:
    """Global rank 0, or no rank set yet (all ranks decide alike, one of them says so)."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return getattr(rank_zero_only, "rank", 0) == 0


def available_cpu_memory(
    meminfo: str = "/proc/meminfo",
    cgroup_root: str = "/sys/fs/cgroup",
    self_cgroup: str = "/proc/self/cgroup",
) -> int:
    """Bytes this process can still allocate without swapping: the kernel's ``MemAvailable``
    (free pages plus the page cache it can drop), capped by this process's memory cgroup's limit
    less its usage (a container's or a SLURM job's limit).

    Not ``MemFree``: after a while of file I/O the page cache holds most of a machine's memory and
    ``MemFree`` is a few hundred MB of 24 GiB. A hint read from it shrank with whatever ran before
    (a long test session), so the same run picked other micro-batches on another day. 8 GiB where
    neither can be read."""
    available: int | None = None
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            available = 8 * 2**30
    room = _cgroup_memory_room(Path(cgroup_root), Path(self_cgroup))
    return min(available, room) if room is not None else available


def _cgroup_memory_room(root: Path, self_cgroup: Path) -> int | None:
    """This process's memory cgroup's limit less its usage (v1 or v2), the reclaimable page cache
    (``inactive_file``) not counted as used, as ``docker stats`` counts it; None when unlimited or
    unreadable. A hierarchy whose path for this process is not mounted (a container without a
    cgroup namespace sees its own group at the mount's root) is read at its root."""
    from lit_codeRL.sandbox.cgroups import own_cgroup

    for controller, base, names in (
        (
            "memory",
            root / "memory",
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
        ),
        ("", root, ("memory.max", "memory.current", "inactive_file")),
    ):
        path = own_cgroup(controller, self_cgroup)
        if not path:
            continue
        for group in dict.fromkeys([base / path.lstrip("/"), base]):
            try:
                limit, usage = ((group / f).read_text().strip() for f in names[:2])
                stat = dict(row.split() for row in (group / "memory.stat").read_text().splitlines())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 2**60:  # v1 writes "unlimited" as a huge number
                return None
            used = int(usage) - int(stat.get(names[2], 0))
            return max(0, int(limit) - used)
    return None


def default_micro_batch_size(
    num_params: int,
    seq_len: int = 512,
    *,
    vocab_size: int | None = None,
    hidden_size: int | None = None,
    num_layers: int | None = None,
) -> int:
    """A device-memory-based hint for sequences per forward/backward chunk.

    Weights + grads + 2 Adam moments take 16 bytes/param; the rest of 60% of free memory goes to
    activations. Per token, with the architecture known: ~34 bytes per hidden unit per layer
    (the saved activations of a transformer block, Korthikanti et al. 2022) plus ~16 bytes per
    vocabulary entry (the kept logits in fp32, their log-softmax, its gradient, a half-precision
    copy): for SmolLM2-135M (30 x 576, 49k vocab) 1.4 MB a token, 450 MB a 328-token sequence. The
    vocabulary term is the one a parameter-count rule misses: it once allowed 64 such sequences
    and a code-game step outgrew 19 GiB. Without the architecture a cruder parameter-count rule
    applies. Conservative by design: a starting point a user overrides, not a guarantee; on GPUs
    under 16 GiB it is at most 4 (see ``platform``).
    """
    free = torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else available_cpu_memory()
    budget = free * 0.6 - 16 * num_params
    if vocab_size and hidden_size and num_layers:
        per_sequence = seq_len * (34 * hidden_size * num_layers + 16 * vocab_size)
    else:
        per_sequence = max(1, seq_len * num_params // 2_000)  # ~activation bytes per sequence
    hint = int(max(1, min(64, budget // per_sequence)))
    from lit_codeRL.policy.platform import micro_batch_cap

    cap = micro_batch_cap()  # small GPUs: free memory fragments, stay well under the estimate
    hint = min(hint, cap) if cap else hint
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


CPU_BF16_ENV = "LIT_CODERL_CPU_BF16"
"""``auto`` (default): detect native bf16 from the CPU flags; ``0``/``off``: treat this CPU as one
without it (to run, test or benchmark the AVX2 path on a machine that has AVX-512-BF16); ``1``/
``on``: treat it as native."""

_ISAS_WITHOUT_BF16 = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"}
"""``ONEDNN_MAX_CPU_ISA`` values that keep oneDNN off its bf16 instructions."""


def cpu_flags() -> set[str]:
    """The ``flags`` of the first CPU in ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.cache
def cpu_has_native_bf16() -> bool:
    """Does this CPU compute in bf16 natively (AVX-512-BF16 or AMX-BF16)? Without it oneDNN
    emulates bf16 and a bf16 matmul is slower than fp32 (4x on a 2-core AVX2 EPYC), so ``auto``
    keeps fp32. ``$LIT_CODERL_CPU_BF16`` overrides the detection (:data:`CPU_BF16_ENV`), and an
    ``ONEDNN_MAX_CPU_ISA`` below AVX512_CORE_BF16 (e.g. ``AVX2``) counts as no native bf16."""
    switch = os.environ.get(CPU_BF16_ENV, "auto").strip().lower()
    if switch in ("0", "off", "false", "no"):
        return False
    if switch in ("1", "on", "true", "yes"):
        return True
    if os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper() in _ISAS_WITHOUT_BF16:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


@functools.cache
def generation_dtype(setting: GenerationDtype | None, device_type: str) -> torch.dtype | None:
    """The dtype the generation engine samples in on ``device_type``; ``None``: the policy's own.

    ``auto`` is bf16 where the hardware has it natively (CUDA Ampere and newer; a CPU with
    AVX-512-BF16/AMX), else the policy's own dtype. Pure (no log): the engine asks at setup, while
    the model may still be on the CPU before Lightning moves it to the GPU, so a log here would
    announce a decision that is never used; :func:`log_generation_dtype` logs the one that is.
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
    elif device_type == "cpu":
        native = cpu_has_native_bf16()
    else:
        native = False
    return torch.bfloat16 if native else None


_GENERATION_LOGGED: set[tuple[GenerationDtype | None, str]] = set()


def log_generation_dtype(setting: GenerationDtype | None, device_type: str) -> None:
    """Log what ``engine.dtype: auto`` chose on ``device_type``, once per (setting, device type)
    and process, on rank 0. Called where generation first runs on a device, so the line names
    the device the samples really come from. An explicit dtype is the user's own words and is
    not repeated; an invalid one raises as in :func:`generation_dtype`."""
    chosen = generation_dtype(setting, device_type)
    key = (setting, device_type)
    if setting != "auto" or key in _GENERATION_LOGGED or not _is_rank_zero():
        return
    _GENERATION_LOGGED.add(key)
    if device_type == "cuda":
        where = torch.cuda.get_device_name() if torch.cuda.is_available() else "cuda"
    elif device_type == "cpu":
        where = "CPU (AVX-512-BF16/AMX)" if chosen is not None else "CPU"
    else:
        where = device_type
    log.info("engine dtype auto -> %s on %s", "bfloat16" if chosen else "the policy's own dtype", where)
