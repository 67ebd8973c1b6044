"""A stand-in for the ``vllm`` package with the semantics the engine has to get right, on CPU.

It is *not* vLLM: it exists to test what ``VLLMEngine`` does around vLLM (which weights it pushes
and when, the sleep/wake order, log-prob and finish-reason handling) where vLLM cannot run.
What it mimics, from vLLM 0.32's documentation and source:

* ``LLM(load_format="dummy")`` starts from random weights; ``apply_model(fn)`` runs ``fn`` on the
  model, whose ``load_weights(weights)`` takes ``(hf_name, tensor)`` pairs. As in vLLM's Llama and
  Qwen2, the model holds *fused* projections (``qkv_proj``, ``gate_up_proj``) and its
  ``load_weights`` fuses the HF names (``q_proj``... ``up_proj``) into them itself
  (``stacked_params_mapping``); an unknown name is a ``KeyError``, a wrong shape an error, a tied
  ``lm_head`` and ``rotary_emb.inv_freq`` are skipped;
* ``sleep(level=1)`` keeps the weights (offloaded), ``sleep(level=2)`` *discards* them: waking
  without a push samples from garbage and raises nothing; ``wake_up(tags)``; generating while
  any part is asleep is an error here (vLLM would fail or sample garbage); ``sleep`` resets the
  prefix cache first, as ``LLM.sleep`` does;
* prefix caching (``enable_prefix_caching``, vLLM's default): a prompt seen before reuses the
  KV computed then, *whatever the weights are now*, until ``reset_prefix_cache`` (here: the
  first token's logits per prompt, which is enough to sample stale tokens after a push without a
  reset);
* ``max_model_len``: a longer prompt is a ``ValueError``, a completion stops ("length") there;
* ``logprobs_mode="processed_logprobs"``: the sampled token's log-prob after the temperature and
  the ``top_k`` / ``top_p`` filters (of the filtered, renormalised distribution);
  ``SamplingParams(n, seed, stop, include_stop_str_in_output, logprobs=0)``; outputs with
  ``token_ids``, ``logprobs`` (a list of ``{token_id: Logprob}``), ``finish_reason`` ("stop" /
  "length") and ``stop_reason`` (the stop string, or ``None`` for EOS).
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch

__version__ = "0.32.0+fake"
CALLS: list[str] = []
"""Every engine-facing call, in order (tests read it)."""


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    max_tokens: int = 16
    stop: list[str] | None = None
    include_stop_str_in_output: bool = False
    logprobs: int | None = None
    seed: int | None = None
    skip_special_tokens: bool = True


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    stop_reason: str | int | None


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput] = field(default_factory=list)


def TokensPrompt(prompt_token_ids: list[int]) -> dict[str, Any]:  # noqa: N802 (vLLM's name)
    return {"prompt_token_ids": list(prompt_token_ids)}


STACKED_PARAMS = (("qkv_proj", ("q_proj", "k_proj", "v_proj")), ("gate_up_proj", ("gate_proj", "up_proj")))
"""vLLM's Llama/Qwen2 ``stacked_params_mapping``: fused parameter <- its HF shards, in order."""


class _Model:
    """The worker's model: an HF model built from the saved config, random weights, with vLLM's
    fused projections: each fused tensor is the one storage, the HF module's shards views of it."""

    def __init__(self, hf: torch.nn.Module) -> None:
        self.hf = hf
        self.tied = bool(getattr(hf.config, "tie_word_embeddings", False))
        self.params: dict[str, torch.Tensor] = {}
        self.shards: dict[str, tuple[str, slice]] = {}
        """HF name -> (fused name, rows of the fused tensor)."""
        fused_names = {shard for _, shards in STACKED_PARAMS for shard in shards}
        for prefix, module in hf.named_modules():
            for fused, shards in STACKED_PARAMS:
                if all(hasattr(module, shard) for shard in shards):
                    for kind in ("weight", "bias"):
                        self._fuse(module, prefix, fused, shards, kind)
        for name, param in hf.named_parameters():
            if name.rsplit(".", 2)[-2] not in fused_names:
                self.params[name] = param

    def _fuse(
        self, module: torch.nn.Module, prefix: str, fused: str, shards: tuple[str, ...], kind: str
    ) -> None:
        parts = [getattr(getattr(module, shard), kind) for shard in shards]
        if any(p is None for p in parts):
            return
        name = f"{prefix}.{fused}.{kind}"
        self.params[name] = storage = torch.cat([p.detach() for p in parts])
        row = 0
        for shard, part in zip(shards, parts, strict=True):
            rows = slice(row, row + part.shape[0])
            setattr(getattr(module, shard), kind, torch.nn.Parameter(storage[rows], requires_grad=False))
            self.shards[f"{prefix}.{shard}.{kind}"] = (name, rows)
            row = rows.stop

    def load_weights(self, weights) -> set[str]:
        CALLS.append("load_weights")
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                if "rotary_emb.inv_freq" in name or (self.tied and name == "lm_head.weight"):
                    continue
                if name in self.shards:
                    fused, rows = self.shards[name]
                    target = self.params[fused][rows]
                else:
                    fused, target = name, self.params[name]  # KeyError on a name vLLM lacks
                assert target.shape == tensor.shape, (
                    f"{name}: {tuple(tensor.shape)} into {tuple(target.shape)}"
                )
                target.copy_(tensor)
                loaded.add(fused)
        return loaded


def _processed_logprobs(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Log-probs after the temperature, then top-k, then top-p (vLLM's order), renormalised over
    the tokens left: what ``processed_logprobs`` returns."""
    scaled = logits / p.temperature
    if 0 < p.top_k < scaled.numel():
        kth = scaled.topk(p.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if p.top_p < 1.0:
        probs, order = torch.softmax(scaled, -1).sort(descending=True)
        outside = probs.cumsum(-1) - probs > p.top_p  # the smallest set reaching top_p stays
        scaled = scaled.masked_fill(torch.zeros_like(outside).scatter(0, order, outside), float("-inf"))
    return torch.log_softmax(scaled, -1)


class LLM:
    def __init__(self, model: str, tokenizer: str, load_format: str = "auto", **kwargs: Any) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        assert load_format == "dummy", "the engine must never load weights from disk"
        assert kwargs.get("logprobs_mode") == "processed_logprobs"
        self.kwargs = kwargs
        self.max_model_len = int(kwargs.get("max_model_len", 2048))
        self.prefix_cache: dict[tuple[int, ...], torch.Tensor] = {}
        torch.manual_seed(1234)
        self.model = _Model(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model)).eval())
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.sleeping: set[str] = set()
        CALLS.append("init")

    def apply_model(self, fn):
        assert "weights" not in self.sleeping, "pushing into sleeping weights"
        return [fn(self.model)]

    def shutdown(self) -> None:
        CALLS.append("shutdown")
        self.model = None  # a shut-down engine has no worker

    def reset_prefix_cache(self) -> bool:
        CALLS.append("reset_prefix_cache")
        self.prefix_cache.clear()
        return True

    def sleep(self, level: int = 1) -> None:
        assert self.kwargs.get("enable_sleep_mode"), "sleep needs enable_sleep_mode"
        CALLS.append(f"sleep({level})")
        self.prefix_cache.clear()  # LLM.sleep resets it first
        if level == 2:
            with torch.no_grad():
                for p in self.model.params.values():
                    p.fill_(float("nan"))  # discarded: garbage until weights are pushed
        self.sleeping = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> bool:
        tags = tags or ["weights", "kv_cache"]
        for tag in tags:
            assert tag in self.sleeping, f"wake_up({tag!r}) of a part that is awake"
            self.sleeping.discard(tag)
        CALLS.append(f"wake_up({','.join(tags)})")
        return not self.sleeping

    @torch.no_grad()
    def generate(self, prompts, params, use_tqdm: bool = False) -> list[RequestOutput]:
        assert not self.sleeping, f"generate while {self.sleeping} asleep"
        CALLS.append("generate")
        params = params if isinstance(params, list) else [params] * len(prompts)
        eos = self.tokenizer.eos_token_id
        outs = []
        for prompt, p in zip(prompts, params, strict=True):
            request = RequestOutput()
            gen = torch.Generator().manual_seed(p.seed or 0)
            key = tuple(prompt["prompt_token_ids"])
            if len(key) > self.max_model_len:
                raise ValueError(
                    f"The decoder prompt (length {len(key)}) is longer than the maximum model length "
                    f"of {self.max_model_len}."
                )
            for index in range(p.n):
                ids = list(key)
                tokens, logps = [], []
                reason, stop_reason = "length", None
                for _ in range(min(p.max_tokens, self.max_model_len - len(key))):
                    logits = self._logits(ids, key)
                    if p.temperature <= 0:
                        token = int(logits.argmax())
                        logp = float(torch.log_softmax(logits, -1)[token])
                    else:
                        processed = _processed_logprobs(logits, p)
                        token = int(torch.multinomial(processed.exp(), 1, generator=gen))
                        logp = float(processed[token])
                    ids.append(token)
                    tokens.append(token)
                    logps.append({token: Logprob(logp)})
                    if token == eos:
                        reason = "stop"
                        break
                    text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                    hit = next((s for s in p.stop or [] if s in text), None)
                    if hit is not None:
                        reason, stop_reason = "stop", hit
                        break
                text = self.tokenizer.decode(tokens, skip_special_tokens=True)
                request.outputs.append(CompletionOutput(index, text, tokens, logps, reason, stop_reason))
            outs.append(request)
        return outs

    def _logits(self, ids: list[int], prompt: tuple[int, ...]) -> torch.Tensor:
        """The next token's logits; the prompt's come from the prefix cache when it holds them."""
        caching = self.kwargs.get("enable_prefix_caching", True)
        if caching and len(ids) == len(prompt) and prompt in self.prefix_cache:
            return self.prefix_cache[prompt]
        logits = self.model.hf(input_ids=torch.tensor([ids])).logits[0, -1].float()
        if caching and len(ids) == len(prompt):
            self.prefix_cache[prompt] = logits
        return logits


def install() -> types.ModuleType:
    """Put this module in ``sys.modules`` as ``vllm`` (with ``vllm.inputs``)."""
    module = sys.modules[__name__]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt
    sys.modules["vllm"] = module
    sys.modules["vllm.inputs"] = inputs
    module.inputs = inputs
    CALLS.clear()
    return module


def uninstall() -> None:
    sys.modules.pop("vllm", None)
    sys.modules.pop("vllm.inputs", None)
