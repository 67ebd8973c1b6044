"""The generation-engine protocol: what rollouts and evaluation need from whatever samples tokens.

Nothing above ``policy/`` names a concrete engine: modules build one with :func:`make_engine`
from :class:`EngineSettings` (a config knob), rollouts and callbacks call the protocol only. The
HF engine (``policy/hf_engine.py``) samples from the live training module; the vLLM engine
(``policy/vllm_engine.py``) keeps its own copy of the weights and has them pushed in
``sync_weights`` after each optimizer step; the endpoint engine (``policy/openai_engine.py``)
samples from a server's weights.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from torch import Tensor

from lit_codeRL.policy.hf_engine import HFGenerationEngine
from lit_codeRL.policy.output import GenerationOutput
from lit_codeRL.policy.sampling import SamplingParams

__all__ = ["EngineSettings", "GenerationEngine", "GenerationOutput", "SamplingParams", "make_engine"]


@runtime_checkable
class GenerationEngine(Protocol):
    """Batched sampling that returns exact token ids, masks, sampling log-probs and finish reasons."""

    tokenizer: Any
    pad_token_id: int

    def encode_prompts(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        """Left-padded ``[B, P]`` ids and mask of already chat-templated prompt strings."""
        ...

    def pad_prompts(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Left-padded ``[B, P]`` ids and mask of prompts given as token ids (multi-turn contexts)."""
        ...

    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        sampling: SamplingParams,
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        on_finished: Callable[[list[int], list[list[int]], list[str]], None] | None = None,
    ) -> GenerationOutput:
        """``num_generations`` samples per prompt row, group-contiguous; see :class:`GenerationOutput`.

        ``on_finished(rows, token_ids, finish_reasons)`` may be called as rows end, before the call returns, so
        that grading overlaps generation."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the next ``generate`` sample from ``model``'s current weights."""
        ...

    def replicate(self, model: torch.nn.Module) -> None:
        """Keep a full copy of ``model``'s weights to sample from (called before it is sharded):
        ``sync_weights`` then refreshes the copy from the shards."""
        ...


@dataclass
class EngineSettings:
    """Which engine samples rollouts and evaluation completions."""

    name: Literal["hf", "openai", "vllm"] = "hf"
    """``hf``: batched KV-cached sampling from the training module itself (CPU and GPU).
    ``openai``: an OpenAI-compatible server at ``base_url`` (vLLM's, llama.cpp's, a hosted one):
    prompts sent as token ids, token ids and log-probs kept where the server returns them
    (``policy/openai_engine.py``); evaluation, or training against the server's fixed weights.
    ``vllm``: vLLM colocated with training on each rank's GPU, weights pushed after every
    optimizer step (``policy/vllm_engine.py``; ``pip install -e .[vllm]``, CUDA only)."""
    base_url: str | None = None
    """``openai``: the server's root URL, e.g. ``http://127.0.0.1:8000/v1``."""
    served_model: str | None = None
    """``openai``: the model name to request; ``None``: the first one the server lists."""
    api_key_env: str = "OPENAI_API_KEY"
    """``openai``: the environment variable holding the API key (unset: no key sent)."""
    max_concurrency: int = 8
    """``openai``: requests in flight at once."""
    timeout_s: float = 300.0
    """``openai``: time limit of one request; past it, a one-line error (no silent retry)."""
    retries: int = 0
    """``openai``: retries of a request after a connection error or a 5xx reply (0: none)."""
    gpu_memory_utilization: float = 0.3
    """``vllm``: share of the GPU's memory vLLM may take while it generates (weights, activations,
    KV cache), per engine (a code game's frozen opponent builds a second one). vLLM refuses to
    start when less than this share is free, and the policy, reference, critic and optimizer
    state share the card: 0.3 is TRL's colocated default. Checked against the free memory when
    the engine is built: too high is a one-line error naming the largest share that fits."""
    max_model_len: int = 2048
    """``vllm``: longest prompt + completion in tokens; ``env.max_context_tokens`` must fit in it
    (checked at setup; unset, it becomes this)."""
    sleep_level: Literal[0, 1, 2] = 2
    """``vllm``: once per training step, when its rollouts are done, the engine sleeps so that
    training has the GPU: 2 discards its weights and KV cache (the policy's weights are pushed
    after every optimizer step anyway), 1 offloads the weights to host memory, 0 never sleeps.
    Weights are pushed only after optimizer steps (``sync_weights``, where every rank is), never
    inside a rollout; a frozen opponent's engine sleeps at level 1 at most (its weights are
    pushed once)."""
    enforce_eager: bool = False
    """``vllm``: no CUDA graphs (faster start, less memory, slower decode)."""
    cpu_decode_threads: int | None = None
    """Torch threads for the token-by-token decode loop on CPU (prefill and training keep all
    threads); ``None`` keeps torch's setting. On a quiet 2-core box all threads decode fastest;
    one thread helps when the sandbox or other jobs saturate the cores."""
    dtype: Literal["auto", "model", "float32", "bfloat16", "float16"] = "auto"
    """Precision the engine samples in. ``auto``: bf16 where the hardware computes in it natively
    (a CPU with AVX-512-BF16/AMX, an Ampere+ GPU; detected and logged), else the policy's own.
    ``model``: the policy's own dtype, sampling from the live module (sampler and trainer
    log-probs then agree to float rounding). Another dtype than the policy's samples from a
    replica refreshed after every optimizer step; the trainer's truncated importance weight
    (``tis_cap``) corrects what the lower precision changes in the sampled distribution."""
    fast_decode: bool = True
    """``hf``: sample Llama-family models (Llama, SmolLM2, Qwen2) through a lean forward: the same
    math in about half the tensor operations per layer, which is what bounds a small model's
    decode step (``policy/fast_decode.py``); on a GPU its decode steps run over static buffers
    (``cuda_graphs``). Off: transformers' forward."""
    prefix_cache_mib: float = 1024.0
    """``hf`` with ``fast_decode`` on a CPU: memory (MiB) for the keys/values of finished rows,
    reused when a later prompt extends one, so that a multi-turn episode's next turn prefills
    only the observation, not its whole history again (``policy/prefix_cache.py``; the oldest
    entries dropped first). 0: off."""
    cuda_graphs: bool = True
    """``hf`` with ``fast_decode`` on a GPU: replay each decode step as a CUDA graph captured per
    batch bucket (``policy/graph_decode.py``): one launch a token instead of ~500. Off: the same
    steps run eagerly (identical tokens and log-probs, slower)."""


def make_engine(settings: EngineSettings, tokenizer: Any, model: torch.nn.Module) -> GenerationEngine:
    """The engine ``settings`` names, ready to sample from ``model`` (``openai``: from the server,
    whose weights are its own)."""
    if settings.name == "openai":
        from lit_codeRL.errors import ConfigError
        from lit_codeRL.policy.openai_engine import OpenAIEngine

        if not settings.base_url:
            raise ConfigError("engine.name openai needs engine.base_url (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIEngine(
            tokenizer,
            settings.base_url,
            model=settings.served_model,
            api_key_env=settings.api_key_env,
            max_concurrency=settings.max_concurrency,
            timeout_s=settings.timeout_s,
            retries=settings.retries,
        )
    if settings.name == "vllm":
        from lit_codeRL.policy.vllm_engine import VLLMEngine

        return VLLMEngine(
            tokenizer,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            sleep_level=settings.sleep_level,
            dtype=settings.dtype,
            enforce_eager=settings.enforce_eager,
        )
    if settings.name == "hf":
        return HFGenerationEngine(
            tokenizer,
            model=model,
            cpu_decode_threads=settings.cpu_decode_threads,
            dtype=settings.dtype,
            fast_decode=settings.fast_decode,
            cuda_graphs=settings.cuda_graphs,
            prefix_cache_mib=settings.prefix_cache_mib,
        )
    from lit_codeRL.errors import ConfigError

    raise ConfigError(f"unknown generation engine {settings.name!r}; available: hf, openai, vllm")
