"""The vLLM engine: rollouts from vLLM colocated with training on each rank's GPU.

``engine.name: vllm`` (``pip install -e .[vllm]``; CUDA only). Each rank builds its own
``vllm.LLM`` in its own process (``distributed_executor_backend="external_launcher"``, the engine
core in-process, tensor parallel 1): the policy's data-parallel replicas sample their own prompts,
as the HF engine's do. What it does about the traps other frameworks fell into
(``shared/notes/ppo-engines-codegame.md``):

* **Weights are pushed, never reloaded.** The LLM is built from the policy's config with
  ``load_format="dummy"`` (random weights, nothing read from disk) and the policy's weights are
  pushed before the first sample; after every optimizer step :meth:`VLLMEngine.sync_weights`
  pushes them again: full tensors gathered from FSDP2 shards one at a time, LoRA merged into the
  pushed copy only (``policy/weights.py``), loaded through the model's own ``load_weights`` on
  the in-process worker (``LLM.apply_model``), then the prefix cache is reset (cached KV blocks
  were computed by the old weights). There is no path that reloads from disk (TRL issue 5312:
  a ``reload_weights`` after the push made every rollout come from the base weights).
  vLLM's 4-phase weight-transfer API (``init_weight_transfer_engine`` / ``start_weight_update`` /
  ``update_weights`` / ``finish_weight_update``) is for a trainer and an engine in different
  processes (CUDA IPC handles or NCCL); colocated in one process it would add an IPC round trip
  to what is a copy between two tensors on the same device, so it is not used here.
* **Pushes happen in ``sync_weights`` only, never inside ``generate``.** Under FSDP2 a push
  gathers shards, a collective every rank must reach the same number of times; ``generate`` is
  called a different number of times per rank (multi-turn episodes, the code game's predictor
  turns, refill rounds, evaluation shards), so a push there hangs the job (under DDP it is a full
  export per turn). ``generate`` on weights that are not the pushed policy's (before the first
  ``sync_weights``, or after a level-2 sleep with no push since) raises a one-line error instead.
* **Sleep at most once per training step.** With ``sleep_level`` 1 or 2 the training layer calls
  :meth:`VLLMEngine.sleep` once the step's rollouts are done (KV cache freed for the forward and
  backward; level 2 also discards the weights, level 1 offloads them to host memory); the
  optimizer step's ``sync_weights`` wakes the weights and pushes (``wake_up(["weights"])`` -> push,
  vLLM's documented order: waking a level-2 engine without a push samples garbage and raises
  nothing); the next ``generate`` wakes the KV cache (a local call, no collective).
* **Memory share**: ``gpu_memory_utilization`` defaults to 0.3 (TRL's colocated default): vLLM
  refuses to start when less than that share of the card is free, and the policy, reference,
  critic and optimizer state share it. The share is checked against the free memory when the
  engine is built, with a one-line error naming the largest share that would fit.
* **Log-probs the trainer can use.** ``logprobs_mode="processed_logprobs"``: the log-prob of the
  sampled token after the temperature (vLLM's default, ``raw_logprobs``, is before it: TRL issue
  4159 measured importance ratios of 2.0 at T=0.6). With ``top_p < 1`` or ``top_k > 0`` vLLM's
  processed log-probs are of the *filtered*, renormalised distribution while the trainer scores
  the unfiltered one: a warning says so once. The mismatch is logged every step as
  ``train/tis/logprob_diff`` and corrected by the trainer's truncated importance weight.
* **Exact token ids**: prompts go as token ids (``TokensPrompt``), completions come back as ids;
  nothing is re-tokenised. ``n`` samples per prompt with a seed drawn from the caller's
  generator; stop strings end a completion and stay in it, as with the HF engine.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.loading import is_quantized
from lit_codeRL.policy.output import (
    GenerationOutput,
    completions_output,
    left_pad,
    request_seeds,
    unpadded_prompts,
)
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.policy.weights import export_weights

log = logging.getLogger("lit_codeRL")

SUPPORTED_VLLM = (">=0.31", "<0.33")
"""The tested range (``pip install -e .[vllm]``): both pin torch 2.13.0, this project's torch."""

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def vllm_available() -> bool:
    """Whether ``vllm`` imports and a CUDA device is there (the engine runs on nothing else)."""
    if not torch.cuda.is_available():
        return False
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ConfigError(
            "engine.name vllm needs vLLM: pip install -e '.[vllm]' "
            f"(tested: vllm{','.join(SUPPORTED_VLLM)}); import failed: {err}"
        ) from None
    return vllm


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model under a PEFT wrapper (for its config)."""
    base = getattr(model, "get_base_model", None)
    return base() if callable(base) else model


class VLLMEngine:
    """Sampling from a colocated ``vllm.LLM`` (see the module docstring).

    Args:
        tokenizer: The policy's tokenizer.
        gpu_memory_utilization: Share of the GPU's memory vLLM may take for weights, activations
            and KV cache while it generates. vLLM refuses to start when less than this share is
            free; colocated, the policy, reference, critic and optimizer state hold the rest, so
            the default is TRL's 0.3, checked against the free memory at build time.
        max_model_len: Longest prompt + completion, in tokens.
        sleep_level: What :meth:`sleep` (once per training step, when its rollouts are done)
            frees: 0: nothing; 1: the KV cache, the weights offloaded to host memory; 2: both
            discarded (the least memory: ``sync_weights`` pushes full weights after every
            optimizer step anyway, and ``generate`` refuses discarded weights).
        dtype: ``auto`` (the policy's config dtype, bf16/fp16 on the GPU), ``model`` (the
            policy's own parameter dtype), or an explicit one.
        enforce_eager: No CUDA graphs (slower decode, faster start, less memory).
        seed: Base seed of the engine (per-request seeds come from the caller's generator).
        enable_prefix_caching: Reuse KV blocks of shared prompt prefixes (the ``n`` samples of a
            prompt, the turns of an episode); reset after every weight push.
        device: Where vLLM runs; ``None``: this rank's CUDA device (a one-line error without
            one). ``"cpu"`` only with vLLM's CPU build.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 2048,
        sleep_level: int = 0,
        dtype: str = "auto",
        enforce_eager: bool = False,
        seed: int = 0,
        enable_prefix_caching: bool = True,
        device: str | None = None,
    ) -> None:
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ConfigError(
                f"engine.gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        if sleep_level not in (0, 1, 2):
            raise ConfigError(f"engine.sleep_level must be 0, 1 or 2, got {sleep_level}")
        if max_model_len < 1:
            raise ConfigError(f"engine.max_model_len must be >= 1, got {max_model_len}")
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.sleep_level = sleep_level
        self.dtype_setting = dtype
        self.enforce_eager = enforce_eager
        self.seed = seed
        self.enable_prefix_caching = enable_prefix_caching
        self.device_setting = device
        self.device: torch.device | None = None
        self.llm: Any = None
        self._weights_asleep = False
        self._kv_asleep = False
        self._weights_current = False
        """The engine holds the weights of its last push (False before the first push and after a
        level-2 sleep, until the next ``sync_weights``)."""
        self._warned_filter = False
        self._config_dir: tempfile.TemporaryDirectory | None = None
        self.pushes = 0
        """Weight pushes so far (tests and logs)."""

    # ------------------------------------------------------------------ building
    def _vllm_dtype(self, model: torch.nn.Module) -> str:
        if self.dtype_setting == "model":
            dtype = next(model.parameters()).dtype
            return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
        return self.dtype_setting  # auto, float32, bfloat16, float16: vLLM's own names

    def _build(self, model: torch.nn.Module) -> None:
        """The LLM, from the policy's config and tokenizer only (``load_format="dummy"``): its
        weights come from :meth:`_push`, never from disk."""
        if is_quantized(model):
            raise ConfigError(
                "engine.name vllm with model.quantization is not supported (the pushed weights "
                "would be bitsandbytes' packed ones): use engine.name hf"
            )
        if self.device_setting is None:
            if not torch.cuda.is_available():
                raise ConfigError("engine.name vllm needs a CUDA GPU; on CPU use engine.name hf")
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device(self.device_setting)
        vllm = _import_vllm()
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            check_memory_share(self.gpu_memory_utilization, free, total)
        hf = _unwrap(model)
        self._config_dir = tempfile.TemporaryDirectory(prefix="lit_coderl_vllm_")
        path = Path(self._config_dir.name)
        hf.config.save_pretrained(path)
        generation_config = getattr(hf, "generation_config", None)
        if generation_config is not None:
            generation_config.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        # external_launcher: the engine core runs in this process on this rank's device, so the
        # weight push is an in-process copy; outside torchrun it still needs a rank's env
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        rank = int(os.environ.get("RANK", "0"))
        self.llm = vllm.LLM(
            model=str(path),
            tokenizer=str(path),
            load_format="dummy",
            dtype=self._vllm_dtype(model),
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.max_model_len,
            enable_sleep_mode=self.sleep_level > 0,
            enforce_eager=self.enforce_eager,
            enable_prefix_caching=self.enable_prefix_caching,
            logprobs_mode="processed_logprobs",
            distributed_executor_backend="external_launcher",
            tensor_parallel_size=1,
            seed=self.seed + rank,
        )
        log.info(
            "vLLM engine %s built on rank %d (gpu_memory_utilization %.2f, max_model_len %d, sleep level %d)",
            vllm.__version__,
            rank,
            self.gpu_memory_utilization,
            self.max_model_len,
            self.sleep_level,
        )

    # ------------------------------------------------------------------ weights
    def _push(self, model: torch.nn.Module) -> None:
        """Load ``model``'s current weights into the engine (every rank calls this: FSDP2 shards
        are all-gathered one parameter at a time, and streamed: one extra tensor in memory)."""
        dtype = None if self.dtype_setting in ("auto", "model") else _DTYPES.get(self.dtype_setting)
        device = self.device
        weights = ((name, t.to(device, non_blocking=True)) for name, t in export_weights(model, dtype))
        # apply_model runs the function on the in-process worker's model (external_launcher): the
        # generator is consumed there, no tensor is serialised
        self.llm.apply_model(lambda m: m.load_weights(weights=weights))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed by the old weights
        self._weights_current = True
        self.pushes += 1

    def _wake_weights(self) -> None:
        if self._weights_asleep:
            self.llm.wake_up(["weights"])
            self._weights_asleep = False

    def _wake_for_generate(self) -> None:
        """Weights, then the KV cache (vLLM's documented order); local calls, no collective. It
        never pushes (a collective under FSDP2, see the module docstring): weights that are not
        the last push's are refused in one line."""
        if self.llm is None:
            raise RuntimeError("vLLM engine: call sync_weights(model) on every rank before generate")
        if not self._weights_current:
            raise RuntimeError(
                "vLLM engine: the level-2 sleep discarded the weights and nothing pushed them since: "
                "call sync_weights(model) on every rank before generate"
            )
        self._wake_weights()
        if self._kv_asleep:
            self.llm.wake_up(["kv_cache"])
            self._kv_asleep = False

    def _sleep(self) -> None:
        if self.sleep_level == 0 or self._kv_asleep:
            return
        self.llm.sleep(level=self.sleep_level)
        self._weights_asleep = self._kv_asleep = True
        if self.sleep_level == 2:
            self._weights_current = False  # discarded: waking pushes before anything samples

    def sync_weights(self, model: torch.nn.Module) -> None:
        """After an optimizer step: sample from ``model``'s current weights from now on. Pushes
        at once (every rank must call it: gathering FSDP2 shards is a collective). A sleeping
        engine wakes its weights for the push and keeps its KV cache released until
        ``generate``."""
        if self.llm is None:
            self._build(model)
        self._weights_current = False
        self._wake_weights()
        self._push(model)

    def replicate(self, model: torch.nn.Module) -> None:
        """Before the policy is sharded: build the engine from the whole weights now (vLLM keeps
        its own full copy; later pushes gather the shards)."""
        self.sync_weights(model)

    def sleep(self) -> None:
        """The step's rollouts are done: free the engine's GPU memory for the training step
        (level ``sleep_level``; nothing at level 0, or when already asleep). The training layer
        calls it once per step; only ``sync_weights`` brings discarded weights back."""
        if self.llm is not None:
            self._sleep()

    # ------------------------------------------------------------------ the protocol
    def encode_prompts(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return left_pad(ids, self.pad_token_id)

    def pad_prompts(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        return left_pad(prompts, self.pad_token_id)

    def _sampling_params(self, sampling: SamplingParams, n: int, seed: int) -> Any:
        vllm = _import_vllm()
        greedy = sampling.temperature <= 0
        if not greedy and (sampling.top_p < 1.0 or sampling.top_k > 0) and not self._warned_filter:
            warnings.warn(
                "engine vllm with top_p < 1 or top_k > 0: vLLM's processed log-probs are of the "
                "filtered, renormalised distribution, the trainer's of the unfiltered one; the "
                "difference shows in train/tis/logprob_diff and the importance weight absorbs it",
                stacklevel=3,
            )
            self._warned_filter = True
        return vllm.SamplingParams(
            n=n,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy else max(sampling.top_k, 0),
            min_p=0.0,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-prob only
            seed=seed,
            skip_special_tokens=True,
        )

    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        sampling: SamplingParams,
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        on_finished: Callable[[list[int], list[list[int]], list[str]], None] | None = None,
    ) -> GenerationOutput:
        """``num_generations`` samples per prompt row, group-contiguous (vLLM's ``n``)."""
        self._wake_for_generate()
        from vllm.inputs import TokensPrompt

        prompts = unpadded_prompts(prompt_ids, prompt_mask)
        params = [
            self._sampling_params(sampling, num_generations, s)
            for s in request_seeds(generator, len(prompts))
        ]
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False
        )
        ids, logps, texts, reasons = [], [], [], []
        for request in outputs:
            completions = sorted(request.outputs, key=lambda c: c.index)
            if len(completions) != num_generations:
                raise RuntimeError(f"vLLM returned {len(completions)} completions, asked {num_generations}")
            for c in completions:
                tokens = list(c.token_ids)
                ids.append(tokens)
                logps.append(sampled_logprobs(tokens, c.logprobs))
                texts.append(c.text)
                reasons.append(finish_reason(c.finish_reason, c.stop_reason))
        if on_finished is not None:
            on_finished(list(range(len(ids))), ids, reasons)
        return completions_output(
            prompt_ids, prompt_mask, num_generations, ids, logps, texts, reasons, self.pad_token_id
        )

    def close(self) -> None:
        """Release the engine's GPU memory and its config directory (the training layer's
        ``teardown``); a later ``sync_weights`` builds a fresh one. Idempotent."""
        llm, self.llm = self.llm, None
        self._weights_current = self._weights_asleep = self._kv_asleep = False
        if llm is not None:
            # LLM.shutdown where the pinned vLLM has it (vllm PR 46023); otherwise the engine core's.
            # vLLM's distributed environment is not destroyed: under external_launcher it is the
            # trainer's own process group.
            shutdown = getattr(llm, "shutdown", None) or getattr(
                getattr(getattr(llm, "llm_engine", None), "engine_core", None), "shutdown", None
            )
            if callable(shutdown):
                shutdown()
            del llm
            gc.collect()
            if self.device is not None and self.device.type == "cuda":
                torch.cuda.empty_cache()
        if self._config_dir is not None:
            self._config_dir.cleanup()
            self._config_dir = None


def check_memory_share(share: float, free_bytes: int, total_bytes: int) -> None:
    """vLLM refuses to start when less than ``share`` of the card is free (the policy, reference,
    critic and any other engine hold the rest): say so first, in one line, with the largest share
    that would fit."""
    if share * total_bytes <= free_bytes:
        return
    fits = math.floor(100 * free_bytes / total_bytes) / 100
    gib = 2**30
    raise ConfigError(
        f"engine.gpu_memory_utilization {share:.2f} asks for {share * total_bytes / gib:.1f} GiB of "
        f"the GPU's {total_bytes / gib:.1f} GiB but only {free_bytes / gib:.1f} GiB are free: set it "
        f"to {fits:.2f} or less"
    )


def sampled_logprobs(token_ids: list[int], logprobs: Any) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position log-probs (a list of
    ``{token_id: Logprob}``, or the flat container of newer versions, indexable the same way)."""
    if logprobs is None:
        raise RuntimeError("vLLM returned no log-probs (SamplingParams.logprobs was not set)")
    if len(logprobs) != len(token_ids):
        raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(token_ids)} tokens")
    out = []
    for token, position in zip(token_ids, logprobs, strict=True):
        entry = position[token]
        out.append(float(entry.logprob if hasattr(entry, "logprob") else entry))
    return out


def finish_reason(reason: str | None, stop_reason: int | str | None) -> str:
    """Our finish reason from vLLM's: ``length`` (cut off), ``stop_string`` (a stop string ended
    it: ``stop_reason`` is the string), else ``stop`` (EOS or a stop token id)."""
    if reason == "length":
        return "length"
    if isinstance(stop_reason, str):
        return "stop_string"
    return "stop"


__all__ = [
    "SUPPORTED_VLLM",
    "VLLMEngine",
    "check_memory_share",
    "finish_reason",
    "sampled_logprobs",
    "vllm_available",
]
