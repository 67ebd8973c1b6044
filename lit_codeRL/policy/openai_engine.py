"""The endpoint engine: any OpenAI-compatible server (vLLM's, llama.cpp's, a hosted one) by ``base_url``.

It speaks the :class:`~lit_codeRL.policy.engine.GenerationEngine` protocol, so ``lit-coderl
validate``, the evaluation callbacks and the rollout modules use it like the local engine:

* **Prompts go as token ids** to ``/v1/completions`` (the ids the chat template gave, exactly what
  the local engine would see: no re-tokenisation drift on the server), one request per sample,
  with ``max_tokens``, ``temperature``, ``top_p``, ``top_k`` and a ``seed`` drawn from the
  caller's generator (reproducible where the server honours seeds). Stop strings are not sent: a
  request with them is streamed and cut on our side over the exact ids, keeping the token that
  completes the stop (llama.cpp trims a stop's tokens from the ids and log-probs it returns).
* **Token ids and log-probs are captured where the server returns them**: vLLM's
  ``return_token_ids`` / ``token_ids``, llama.cpp's ``return_tokens`` / ``tokens``, and per-token
  log-probs from either the OpenAI ``logprobs.token_logprobs`` layout or llama.cpp's
  ``logprobs.content``. A server that returns both is usable for training (the trainer's
  importance weight corrects for whatever distribution the server's log-probs describe; lit-coderl
  does not push weights to a remote server, so a run trains against a fixed sampler unless the
  server is updated by other means). A server that does not return them gives completions by
  re-tokenising the text, marked inexact: fine for evaluation, refused for training with a
  one-line error (:meth:`OpenAIEngine.require_exact`).
* **Bounded concurrency** (``max_concurrency`` requests at once), a **per-request timeout**,
  **retries only when asked** (``retries``, on connection errors and 5xx replies; a timeout or a
  malformed reply is never silently retried), and one-line errors (:class:`EndpointError`) for an
  unreachable server, a timeout, an HTTP error or a reply without the fields it must have.

**Which log-probs.** The trainer's importance weight wants the log-prob of each token under the
distribution it was drawn from (temperature applied). llama.cpp gives it with
``post_sampling_probs`` (sent with every request; its default, the raw logits' softmax, ignores
the temperature). vLLM decides per server: start it with ``--logprobs-mode processed_logprobs``
(its default, ``raw_logprobs``, is before the temperature: TRL's issue 4159 measured ratios of 2.0
at T=0.6). ``top_p``/``top_k`` are sent as asked and ``min_p`` as 0 (servers filter by default:
llama.cpp's top_k 40, top_p 0.95, min_p 0.05); with filtering on, the server's log-probs are of the
filtered distribution, as the local engine's are not (see ``docs/architecture.md``).

Stdlib HTTP only (``urllib``): no client library to pin.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import Tensor

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.output import (
    GenerationOutput,
    completions_output,
    left_pad,
    request_seeds,
    unpadded_prompts,
)
from lit_codeRL.policy.sampling import SamplingParams

log = logging.getLogger("lit_codeRL")

T = TypeVar("T")


class EndpointError(ConfigError):
    """The server could not be used: unreachable, too slow, an HTTP error, or a malformed reply."""


@dataclass
class Sample:
    """One completion as the server returned it."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    exact: bool
    """Token ids and log-probs came from the server (not re-tokenised)."""


class OpenAIEngine:
    """Completions from an OpenAI-compatible server (see the module docstring).

    Args:
        tokenizer: The policy's tokenizer (prompt ids, decoding, re-tokenising inexact replies).
        base_url: The server's root, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` added if missing).
        model: The model name to ask for; ``None``: the first one ``/v1/models`` lists.
        api_key_env: Environment variable holding the bearer token (unset: no header).
        max_concurrency: Requests in flight at once.
        timeout_s: Time limit of one request.
        retries: Attempts after the first on connection errors and 5xx replies (0: none).
    """

    def __init__(
        self,
        tokenizer: Any,
        base_url: str,
        model: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout_s: float = 300.0,
        retries: int = 0,
    ) -> None:
        if max_concurrency < 1 or timeout_s <= 0 or retries < 0:
            raise ConfigError("engine: max_concurrency >= 1, timeout_s > 0 and retries >= 0 are needed")
        self.tokenizer = tokenizer
        root = base_url.rstrip("/")
        self.base_url = root if root.endswith("/v1") else root + "/v1"
        self.api_key = os.environ.get(api_key_env) or None
        self.max_concurrency, self.timeout_s, self.retries = max_concurrency, timeout_s, retries
        eos = tokenizer.eos_token_id
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.model = model or self._first_model()
        self.exact: bool | None = None
        """Whether the server returned token ids and log-probs (known after the first request)."""
        self.training = False
        """Set by :meth:`check_for_training`: from then on an inexact sample is an error, never a
        sample with log-prob 0 that the trainer would weigh as if the sampler had drawn it."""

    # ------------------------------------------------------------------ HTTP
    def _call(self, path: str, body: dict[str, Any] | None, read: Callable[[Any], T]) -> T:
        """``read(response)`` of one request, with the retries and one-line errors of the module
        docstring (a timeout while reading counts as a timeout)."""
        url = f"{self.base_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        too_slow = f"{url}: no reply within {self.timeout_s:g} s (engine.timeout_s)"
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(
                url, data=data, headers=headers, method="POST" if data else "GET"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return read(response)
            except urllib.error.HTTPError as err:
                detail = err.read()[:300].decode(errors="replace")
                if err.code >= 500 and attempt < self.retries:
                    time.sleep(min(2.0**attempt, 10.0))
                    continue
                raise EndpointError(f"{url}: HTTP {err.code} {err.reason}: {detail}") from None
            except TimeoutError:
                raise EndpointError(too_slow) from None
            except urllib.error.URLError as err:
                if isinstance(err.reason, TimeoutError):
                    raise EndpointError(too_slow) from None
                if attempt < self.retries:
                    time.sleep(min(2.0**attempt, 10.0))
                    continue
                raise EndpointError(f"cannot reach the server at {self.base_url}: {err.reason}") from None
            except (ConnectionError, OSError) as err:
                if attempt < self.retries:
                    time.sleep(min(2.0**attempt, 10.0))
                    continue
                raise EndpointError(f"cannot reach the server at {self.base_url}: {err}") from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return _json_object(f"{self.base_url}{path}", self._call(path, body, lambda r: r.read()))

    def _first_model(self) -> str:
        reply = self._request("/models")
        models = reply.get("data")
        if (
            not isinstance(models, list)
            or not models
            or not isinstance(models[0], dict)
            or "id" not in models[0]
        ):
            raise EndpointError(f"{self.base_url}/models lists no model: {json.dumps(reply)[:200]}")
        return str(models[0]["id"])

    # ------------------------------------------------------------------ the protocol
    def encode_prompts(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return left_pad(ids, self.pad_token_id)

    def pad_prompts(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        return left_pad(prompts, self.pad_token_id)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Nothing to do: the server holds its own weights (see the module docstring)."""

    def replicate(self, model: torch.nn.Module) -> None:
        """Nothing to do: the server holds its own weights."""

    def check_for_training(self) -> None:
        """Before a training run: one 1-token request tells whether the server returns token ids
        and log-probs; a one-line error when it does not (:meth:`require_exact`)."""
        if self.exact is None:
            probe = self.tokenizer("def f():", add_special_tokens=False)["input_ids"]
            self.exact = self._sample(probe, SamplingParams(max_new_tokens=1, temperature=1.0), 0).exact
        self.require_exact("training")
        self.training = True

    def require_exact(self, what: str = "training") -> None:
        """Refuse ``what`` in one line when the server gives no token ids and log-probs."""
        if self.exact is False:
            raise ConfigError(
                f"engine openai: the server at {self.base_url} returns no token ids and log-probs, so "
                f"its completions are re-tokenised text: fine for evaluation, not for {what}"
            )

    def _body(self, prompt: list[int], sampling: SamplingParams, seed: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "logprobs": 1,
            "seed": seed,
            "return_token_ids": True,  # vLLM
            "return_tokens": True,  # llama.cpp
            # llama.cpp: log-probs of the distribution the token was drawn from (temperature
            # applied), not of the raw logits, as the engine contract wants
            "post_sampling_probs": True,
        }
        if sampling.temperature > 0:
            # Always sent: servers filter by default where we do not (llama.cpp: top_k 40,
            # top_p 0.95, min_p 0.05), and the trainer assumes the distribution we asked for.
            body["top_p"] = sampling.top_p
            body["top_k"] = sampling.top_k if sampling.top_k > 0 else -1  # -1: off (vLLM, llama.cpp)
            body["min_p"] = 0.0
        if sampling.stop:
            # Not sent as ``stop``: llama.cpp trims the stop string's tokens from the ids and
            # log-probs it returns (a turn would lose its ``</execute>``). We stream instead, cut
            # on our side over the exact ids, and close the stream, which ends the generation.
            body["stream"] = True
        return body

    def _sample(self, prompt: list[int], sampling: SamplingParams, seed: int) -> Sample:
        body = self._body(prompt, sampling, seed)
        reply = self._call("/completions", body, lambda r: self._read(r, sampling.stop))
        if reply.cut is not None:
            return self._cut_at_stop(reply, sampling.stop)
        reason = "length" if reply.finish_reason == "length" else "stop"
        if reply.ids is None or reply.logprobs is None or len(reply.ids) != len(reply.logprobs):
            ids = self.tokenizer(reply.text, add_special_tokens=False)["input_ids"]
            return Sample(reply.text, ids, [0.0] * len(ids), reason, exact=False)
        return Sample(reply.text, reply.ids, reply.logprobs, reason, exact=True)

    def _cut_at_stop(self, reply: _Reply, stops: list[str]) -> Sample:
        """The sample up to and including the token that completes the first stop string; a
        one-line error when the server's text holds a stop its token ids do not."""
        exact = reply.ids is not None and reply.logprobs is not None and len(reply.ids) == len(reply.logprobs)
        if not exact:  # text only: cut the text, re-tokenise (evaluation)
            text = reply.text[: reply.cut]
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return Sample(text, ids, [0.0] * len(ids), "stop_string", exact=False)
        assert reply.ids is not None and reply.logprobs is not None
        end = stop_token_end(self.tokenizer, reply.ids, stops)
        if end is None:
            raise EndpointError(
                f"{self.base_url}/completions: the text ends a stop string ({stops}) that its token "
                f"ids do not decode to: refusing a sample whose ids lost the stop"
            )
        ids = reply.ids[:end]
        return Sample(self.tokenizer.decode(ids), ids, reply.logprobs[:end], "stop_string", exact=True)

    def _read(self, response: Any, stops: list[str]) -> _Reply:
        """A whole reply, or a streamed one read until its text holds a stop string (then the
        connection closes: llama.cpp and vLLM stop generating for a client that left)."""
        url = f"{self.base_url}/completions"
        if "text/event-stream" not in (response.headers.get("Content-Type") or ""):
            # not streamed (a server that ignores ``stream``): one reply, cut the same way
            reply = _Reply()
            reply.add(*_first_choice(url, _json_object(url, response.read())))
            reply.find_stop(stops)
            return reply
        reply = _Reply()
        for line in response:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # SSE comments, blank separators
            data = line[len(b"data:") :].strip()
            if data == b"[DONE]":
                break
            reply.add(*_first_choice(url, _json_object(url, data)))
            if reply.find_stop(stops):
                break
        return reply

    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        sampling: SamplingParams,
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        on_finished: Callable[[list[int], list[list[int]], list[str]], None] | None = None,
    ) -> GenerationOutput:
        """``num_generations`` completions per prompt row, group-contiguous, one request each."""
        requests = [p for p in unpadded_prompts(prompt_ids, prompt_mask) for _ in range(num_generations)]
        jobs = list(zip(requests, request_seeds(generator, len(requests)), strict=True))
        with ThreadPoolExecutor(min(self.max_concurrency, max(1, len(jobs)))) as pool:
            samples = list(pool.map(lambda job: self._sample(job[0], sampling, job[1]), jobs))
        exact = all(s.exact for s in samples)
        if self.training and not exact:
            raise EndpointError(
                f"engine openai: during training {self.base_url} replied without token ids or "
                f"log-probs ({sum(not s.exact for s in samples)} of {len(samples)} samples): refused"
            )
        if self.exact is None or not exact:
            if self.exact is None and not exact:
                log.warning(
                    "engine openai: %s returns no token ids/log-probs: evaluation only", self.base_url
                )
            self.exact = exact
        reasons = [s.finish_reason for s in samples]
        if on_finished is not None:
            on_finished(list(range(len(samples))), [s.token_ids for s in samples], reasons)
        return completions_output(
            prompt_ids,
            prompt_mask,
            num_generations,
            [s.token_ids for s in samples],
            [s.logprobs for s in samples],
            [s.text for s in samples],
            reasons,
            self.pad_token_id,
        )


class _Reply:
    """A completion put together from one reply or the chunks of a streamed one."""

    def __init__(self) -> None:
        self.text = ""
        self.ids: list[int] | None = []
        self.logprobs: list[float] | None = []
        self.finish_reason: str | None = None
        self.cut: int | None = None
        """Where the text ends with the first stop string (``None``: no stop seen)."""

    def add(self, choice: dict[str, Any], event: dict[str, Any]) -> None:
        text = choice.get("text")
        ids, logprobs = _token_ids(choice, event), _token_logprobs(choice.get("logprobs"))
        if text == "" and ids is None and logprobs is None:
            pass  # a stream's last chunk: only the finish reason
        else:
            self.text += text
            self.ids = self.ids + ids if self.ids is not None and ids is not None else None
            if self.logprobs is not None and logprobs is not None:
                self.logprobs = self.logprobs + logprobs
            else:
                self.logprobs = None
        self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def find_stop(self, stops: list[str]) -> bool:
        """Whether the text holds one of ``stops`` (then :attr:`cut` is set)."""
        hits = [i + len(s) for s in stops if (i := self.text.find(s)) >= 0]
        self.cut = min(hits) if hits else None
        return self.cut is not None


def stop_token_end(tokenizer: Any, ids: list[int], stops: list[str]) -> int | None:
    """The length of the shortest prefix of ``ids`` whose decoding holds one of ``stops`` (the
    token that completes the stop kept, as the local engine keeps it), ``None`` if none does."""
    window = max(len(s) for s in stops) + 1  # n characters span at most n + 1 tokens
    for end in range(1, len(ids) + 1):
        tail = tokenizer.decode(ids[max(0, end - window) : end])
        if any(s in tail for s in stops):
            return end
    return None


def _json_object(url: str, raw: bytes) -> dict[str, Any]:
    try:
        reply = json.loads(raw)
    except json.JSONDecodeError:
        raise EndpointError(f"{url}: the reply is not JSON: {raw[:200]!r}") from None
    if not isinstance(reply, dict):
        raise EndpointError(f"{url}: the reply is not a JSON object: {raw[:200]!r}")
    return reply


def _first_choice(url: str, reply: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(choice, reply)``: the first choice, with text, or a one-line error."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EndpointError(f"{url}: a reply without choices: {json.dumps(reply)[:200]}")
    if not isinstance(choices[0].get("text"), str):
        raise EndpointError(f"{url}: a choice without text: {json.dumps(choices[0])[:200]}")
    return choices[0], reply


def _token_ids(choice: dict[str, Any], reply: dict[str, Any]) -> list[int] | None:
    """vLLM's ``token_ids``, llama.cpp's ``tokens``, or the ``id`` of each ``logprobs.content``
    item (llama.cpp's current layout)."""
    content = (
        (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    )
    from_content = (
        [item.get("id") for item in content if isinstance(item, dict)] if isinstance(content, list) else None
    )
    for value in (choice.get("token_ids"), choice.get("tokens"), reply.get("tokens"), from_content):
        if (
            isinstance(value, list)
            and value
            and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
        ):
            return list(value)
    return None


def _token_logprobs(logprobs: Any) -> list[float] | None:
    """Per-token log-probs from the OpenAI layout (``token_logprobs``) or llama.cpp's
    (``content: [{logprob}]``, or ``[{prob}]`` with ``post_sampling_probs``)."""
    if not isinstance(logprobs, dict):
        return None
    values = logprobs.get("token_logprobs")
    if values is None and isinstance(logprobs.get("content"), list):
        values = [_content_logprob(item) for item in logprobs["content"]]
    if not isinstance(values, list) or not all(
        isinstance(v, (int, float)) and math.isfinite(v) for v in values
    ):
        return None
    return [float(v) for v in values]


def _content_logprob(item: Any) -> float | None:
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("logprob"), (int, float)):
        return float(item["logprob"])
    prob = item.get("prob")
    if isinstance(prob, (int, float)) and 0.0 < prob <= 1.0:
        return math.log(prob)
    return None
