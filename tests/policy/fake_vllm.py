"""A stand-in for the ``vllm`` package with the semantics the engine has to get right, on CPU.

It is *not* vLLM: it exists to test what ``VLLMEngine`` does around vLLM (which weights it pushes
and when, the sleep/wake order, log-prob and finish-reason handling) where vLLM cannot run.
What it mimics, from vLLM 0.32's documentation and source:

* ``LLM(load_format="dummy")`` starts from random weights; ``apply_model(fn)`` runs ``fn`` on the
  model, whose ``load_weights(weights)`` takes ``(hf_name, tensor)`` pairs;
* ``sleep(level=1)`` keeps the weights (offloaded), ``sleep(level=2)`` *discards* them: waking
  without a push samples from garbage and raises nothing; ``wake_up(tags)``; generating while
  any part is asleep is an error here (vLLM would fail or sample garbage);
* ``logprobs_mode="processed_logprobs"``: the sampled token's log-prob after the temperature;
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


class _Model:
    """The worker's model: an HF model built from the saved config, random weights."""

    def __init__(self, hf: torch.nn.Module) -> None:
        self.hf = hf

    def load_weights(self, weights) -> set[str]:
        CALLS.append("load_weights")
        params = dict(self.hf.named_parameters())
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                params[name].copy_(tensor)
                loaded.add(name)
        return loaded


class LLM:
    def __init__(self, model: str, tokenizer: str, load_format: str = "auto", **kwargs: Any) -> None:
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        assert load_format == "dummy", "the engine must never load weights from disk"
        assert kwargs.get("logprobs_mode") == "processed_logprobs"
        self.kwargs = kwargs
        torch.manual_seed(1234)
        self.model = _Model(AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model)).eval())
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        self.sleeping: set[str] = set()
        CALLS.append("init")

    def apply_model(self, fn):
        assert "weights" not in self.sleeping, "pushing into sleeping weights"
        return [fn(self.model)]

    def reset_prefix_cache(self) -> bool:
        CALLS.append("reset_prefix_cache")
        return True

    def sleep(self, level: int = 1) -> None:
        assert self.kwargs.get("enable_sleep_mode"), "sleep needs enable_sleep_mode"
        CALLS.append(f"sleep({level})")
        if level == 2:
            with torch.no_grad():
                for p in self.model.hf.parameters():
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
            for index in range(p.n):
                ids = list(prompt["prompt_token_ids"])
                tokens, logps = [], []
                reason, stop_reason = "length", None
                for _ in range(p.max_tokens):
                    logits = self.model.hf(input_ids=torch.tensor([ids])).logits[0, -1].float()
                    if p.temperature <= 0:
                        token = int(logits.argmax())
                        logp = float(torch.log_softmax(logits, -1)[token])
                    else:
                        scaled = torch.log_softmax(logits / p.temperature, -1)
                        token = int(torch.multinomial(scaled.exp(), 1, generator=gen))
                        logp = float(scaled[token])  # processed: after the temperature
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
