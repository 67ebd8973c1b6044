"""What kind of machine this run is on, and the defaults that follow from it.

Clusters differ in ways a config file should not have to spell out: compute nodes often have no
internet (the hub, W&B and the MBPP hub dataset are unreachable, and every attempt costs a
timeout), GPUs range from 16 GiB T4s to 141 GiB H200s, and data sits at a site-specific path.
:func:`detect` looks once per process, :func:`apply_environment` turns the findings into
environment variables the libraries read (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE``,
``WANDB_MODE``, ``MBPP_DATASET_PATH``), and :func:`describe` is the compact block the CLI logs
on rank 0 at the start of ``fit``.

Rules (each one only fills in what the user left unset):

* offline (``HF_HUB_OFFLINE=1``, or huggingface.co does not answer within ~1.5 s): set
  ``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1`` so models load from the local cache (or the
  embedded SmolLM2) without retries, ``WANDB_MODE=offline`` so a W&B logger writes locally, and
  ``MBPP_DATASET_PATH`` to a local MBPP copy when one is found;
* a GPU under 16 GiB: micro-batch hint at most :data:`SMALL_GPU_MICRO_BATCH` sequences and MBPP
  evaluation in batches of :data:`SMALL_GPU_EVAL_BATCH`;
* ``MBPP_EVAL_NUM_QUESTIONS``: how many MBPP questions ``MBPPEvalCallback`` evaluates;
* ``MBPP_DATASET_PATH``: the local MBPP file/dir that replaces the hub id
  ``google-research-datasets/mbpp`` (``mbpp``) in problem loaders and the callback.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable, MutableMapping
from pathlib import Path

from lit_codeRL.problems.mbpp import DATASET_PATH_ENV

log = logging.getLogger("lit_codeRL")

HUB_HOST = "huggingface.co"
"""The host whose reachability decides online vs offline."""
PROBE_TIMEOUT_S = 1.5
"""Upper bound on the reachability probe (DNS lookup included): paid once per process start."""
SMALL_GPU_GIB = 16.0
"""GPUs with less memory than this (T4: 15 GiB usable) get the conservative batch defaults."""
SMALL_GPU_MICRO_BATCH = 4
"""Largest micro-batch hint (sequences per forward/backward) on a small GPU."""
SMALL_GPU_EVAL_BATCH = 4
"""``MBPPEvalCallback`` prompts generated together on a small GPU (when its batch_size is unset)."""
DEFAULT_EVAL_BATCH = 16
"""``MBPPEvalCallback`` prompts generated together elsewhere (when its batch_size is unset)."""
EVAL_QUESTIONS_ENV = "MBPP_EVAL_NUM_QUESTIONS"
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@dataclasses.dataclass(frozen=True)
class Platform:
    """The findings of :func:`detect` (all plain values, so it logs and compares easily)."""

    offline: bool
    """No hub access: models and datasets must come from local files and caches."""
    offline_reason: str
    """Why ``offline`` (or online) was decided: an env var, a probe result or a proxy."""
    gpu_name: str | None
    """CUDA device 0's name; ``None`` without CUDA."""
    gpu_memory_gib: float | None
    """CUDA device 0's total memory in GiB; ``None`` without CUDA."""
    mbpp_path: str | None
    """The local MBPP copy that replaces the hub id (``MBPP_DATASET_PATH`` or one found offline)."""
    eval_questions: int | None
    """``MBPP_EVAL_NUM_QUESTIONS``: MBPP questions the eval callback uses (``None``: its own limit)."""
    env_set: tuple[tuple[str, str], ...] = ()
    """Environment variables :func:`apply_environment` set (name, value)."""

    @property
    def small_gpu(self) -> bool:
        """A GPU with less than :data:`SMALL_GPU_GIB` of memory."""
        return self.gpu_memory_gib is not None and self.gpu_memory_gib < SMALL_GPU_GIB


def hub_reachable(host: str = HUB_HOST, port: int = 443, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Can a TCP connection to ``host:port`` be opened within ``timeout_s`` (DNS included)?

    The lookup runs in a daemon thread because ``getaddrinfo`` has no timeout of its own: on a
    node without a resolver it can block for tens of seconds.
    """
    answer: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                answer.append(True)
        except OSError:
            answer.append(False)

    thread = threading.Thread(target=probe, name="hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(answer and answer[0])


def _offline(environ: MutableMapping[str, str], probe: Callable[[], bool]) -> tuple[bool, str]:
    flag = environ.get("HF_HUB_OFFLINE", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True, "HF_HUB_OFFLINE=1"
    if flag in ("0", "false", "no", "off"):
        return False, "HF_HUB_OFFLINE=0"
    if any(environ.get(name) for name in _PROXY_VARS):
        # A direct socket says nothing about a proxied network; trust the proxy.
        return False, "proxy configured"
    if probe():
        return False, f"{HUB_HOST} reachable"
    return True, f"{HUB_HOST} unreachable"


def _cuda() -> tuple[str | None, float | None]:
    import torch

    if not torch.cuda.is_available():
        return None, None
    props = torch.cuda.get_device_properties(0)
    return torch.cuda.get_device_name(0), props.total_memory / 2**30


def local_mbpp_candidates(environ: MutableMapping[str, str]) -> list[Path]:
    """Where a local MBPP copy is looked for offline: ``$LIT_CODERL_SHARED/data/mbpp``, then
    ``data/mbpp`` and ``../shared/data/mbpp`` under the working directory."""
    found = []
    if environ.get("LIT_CODERL_SHARED"):
        found.append(Path(environ["LIT_CODERL_SHARED"]) / "data" / "mbpp")
    found += [Path("data/mbpp"), Path("../shared/data/mbpp")]
    return found


def eval_questions(environ: MutableMapping[str, str] | None = None) -> int | None:
    """``MBPP_EVAL_NUM_QUESTIONS`` as a positive int, ``None`` when unset; a ``ConfigError``
    names the variable when it is not one."""
    environ = os.environ if environ is None else environ
    raw = environ.get(EVAL_QUESTIONS_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        from lit_codeRL.errors import ConfigError

        raise ConfigError(f"{EVAL_QUESTIONS_ENV}={raw!r}: expected a positive number of questions")
    return value


def detect(
    probe: Callable[[], bool] = hub_reachable, environ: MutableMapping[str, str] | None = None
) -> Platform:
    """Look at the environment, the GPU and (only if the env does not say) the network.

    ``probe`` answers "is the hub reachable?"; tests pass a function instead of touching the
    network.
    """
    environ = os.environ if environ is None else environ
    offline, reason = _offline(environ, probe)
    gpu_name, gpu_gib = _cuda()
    mbpp = environ.get(DATASET_PATH_ENV) or None
    if mbpp is None and offline:
        mbpp = next(
            (str(p.resolve()) for p in local_mbpp_candidates(environ) if (p / "mbpp.jsonl").is_file()), None
        )
    return Platform(offline, reason, gpu_name, gpu_gib, mbpp, eval_questions(environ))


def apply_environment(platform: Platform, environ: MutableMapping[str, str] | None = None) -> Platform:
    """Set the variables that follow from ``platform`` where the user has not; returns
    ``platform`` with ``env_set`` listing them. Call before models, datasets or loggers load."""
    environ = os.environ if environ is None else environ
    wanted: dict[str, str] = {}
    if platform.offline:
        wanted |= {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline"}
    if platform.mbpp_path:
        wanted[DATASET_PATH_ENV] = platform.mbpp_path
    changed = tuple((k, v) for k, v in wanted.items() if k not in environ)
    for key, value in changed:
        environ[key] = value
    if platform.offline and environ is os.environ and "huggingface_hub" in sys.modules:
        # huggingface_hub reads HF_HUB_OFFLINE once, at import (Lightning imports it early);
        # without this every hub call still tries the network and waits for its timeout.
        sys.modules["huggingface_hub"].constants.HF_HUB_OFFLINE = True
    return dataclasses.replace(platform, env_set=changed)


_CURRENT: Platform | None = None


def current(probe: Callable[[], bool] = hub_reachable, apply: bool = True) -> Platform:
    """This process's platform: detected on the first call (and, with ``apply``, written into
    ``os.environ`` by :func:`apply_environment`), then remembered. ``lit-coderl``'s ``main``
    applies it; a library caller that only wants the findings passes ``apply=False``."""
    global _CURRENT
    if _CURRENT is None:
        found = detect(probe)
        _CURRENT = apply_environment(found) if apply else found
    return _CURRENT


def reset() -> None:
    """Forget the remembered platform (tests; a changed environment)."""
    global _CURRENT
    _CURRENT = None


def micro_batch_cap() -> int | None:
    """The largest micro-batch hint this platform allows (``None``: no cap)."""
    _, gib = _cuda()
    return SMALL_GPU_MICRO_BATCH if gib is not None and gib < SMALL_GPU_GIB else None


def eval_batch_size() -> int:
    """Default prompts per generation batch for evaluation callbacks."""
    _, gib = _cuda()
    return SMALL_GPU_EVAL_BATCH if gib is not None and gib < SMALL_GPU_GIB else DEFAULT_EVAL_BATCH


def describe(platform: Platform, trainer_line: str | None = None) -> str:
    """The compact multi-line block logged at the start of ``fit``."""
    hub = f"{'offline' if platform.offline else 'online'} ({platform.offline_reason})"
    if platform.offline:
        hub += "; models from the HF cache or the embedded smollm2-135m-instruct"
    if platform.gpu_name is None:
        device = "CPU"
    else:
        device = f"{platform.gpu_name}, {platform.gpu_memory_gib:.0f} GiB"
        if platform.small_gpu:
            device += (
                f" (small: micro-batch hint <= {SMALL_GPU_MICRO_BATCH}, eval batch {SMALL_GPU_EVAL_BATCH})"
            )
    lines = [f"hub: {hub}", f"device: {device}"]
    if trainer_line:
        lines.append(f"trainer: {trainer_line}")
    data = [f"MBPP from {platform.mbpp_path}"] if platform.mbpp_path else []
    if platform.eval_questions is not None:
        data.append(f"{EVAL_QUESTIONS_ENV}={platform.eval_questions}")
    if data:
        lines.append("data: " + ", ".join(data))
    if platform.env_set:
        lines.append("set: " + " ".join(f"{k}={v}" for k, v in platform.env_set))
    return "platform\n" + "\n".join(f"  {line}" for line in lines)
