"""OpenAI request bodies -> generation jobs, engine outputs -> OpenAI replies, and one-line 4xx errors.

Supported: ``/v1/chat/completions`` and ``/v1/completions`` with ``n``, ``temperature``,
``top_p``, ``top_k`` (vLLM's extension), ``max_tokens`` / ``max_completion_tokens``, ``stop``,
``logprobs`` (the chosen tokens' log-probs), ``seed``, ``stream`` (the whole reply in one SSE
chunk, then ``[DONE]``), ``tools`` where the chat template renders them (Hermes-style
``<tool_call>{json}</tool_call>`` replies are returned as ``tool_calls``). Anything that would
change what is sampled and is not implemented (penalties, logit bias, top-k alternatives of
log-probs, ``echo``, ``best_of``, structured output, images) is a 400 naming the field, never
silently ignored: a reply the client did not ask for is worse than an error it can read.
Every reply also carries the exact ids (``prompt_token_ids``, per choice ``token_ids``).
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from lit_codeRL.gateway.records import Choice
from lit_codeRL.policy.sampling import SamplingParams

MAX_ERROR_CHARS = 500
"""An error message's length at most: a message may quote what the client sent, and a 60 MiB
value quoted whole made a 50 MB reply, built and sent on the event loop."""


class APIError(Exception):
    """A request the gateway answers with ``status`` and an OpenAI-style error body; its message
    is one line of at most :data:`MAX_ERROR_CHARS` characters."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None):
        message = message[:MAX_ERROR_CHARS].replace("\r", " ").replace("\n", " ")
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
"""A JSON string token: from a quote to the next quote no backslash escapes (possessive, so a
string without its closing quote fails in one pass, never backtracks)."""


def json_values_at_most(raw: bytes, limit: int) -> int:
    """An upper bound of the values ``json.loads(raw)`` would build (or build before it fails):
    the commas and opening brackets outside strings, exact enough to compare with ``limit``.

    Counted before parsing because parsed JSON takes up to 25 times its size in memory. The
    count over the whole body is taken first (fast, one pass of ``bytes.count`` each); only a
    body over ``limit`` by that count has its strings taken out and is counted again, so an agent
    history of code, whose strings hold a comma every few characters, is not refused for its
    text. A string never closed stays in (its commas count: a bound from above still)."""
    count = raw.count(b",") + raw.count(b"{") + raw.count(b"[")
    if count <= limit:
        return count
    structure = _JSON_STRING.sub(b"0", raw)
    return structure.count(b",") + structure.count(b"{") + structure.count(b"[")


def error_line(message: str) -> str:
    """A multi-line error text (aiohttp's parser quotes the bad line and points at the byte under
    it) as one line: its lines stripped and joined, the pointer's line (only ``^``) left out."""
    lines = (line.strip() for line in message.splitlines())
    return " ".join(line for line in lines if line and line.strip("^ ")) or message.strip()


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: its repr, cut short before it is built (a huge
    string or list is not copied whole to be quoted)."""
    return reprlib.repr(value)


@dataclass
class ServeLimits:
    """Defaults and bounds of every request: ``lit-coderl serve`` flags (``gateway/cli.py``), and in
    training the run's sampling and ``env.harness`` settings (``rollout/harness.py``)."""

    max_tokens: int = 256
    """Completion length when a request names none."""
    max_tokens_limit: int = 4096
    """Largest ``max_tokens`` a request may ask for (larger: 400)."""
    max_context_tokens: int | None = None
    """Prompt + ``max_tokens`` at most (larger: 400 ``context_length_exceeded``); ``None``: no bound."""
    max_n: int = 16
    """Largest ``n``."""
    max_calls_per_episode: int | None = None
    """Calls one episode may make (past it: 404, which agent SDKs do not retry); ``None``: no bound.
    Calls being answered count, and a completions call counts once per prompt (one record each)."""
    max_inflight_per_episode: int = 8
    """Calls of one episode being answered at once (more: 429): one agent cannot flood the batch."""


MAX_CHARS_PER_TOKEN = 32
"""A generous bound on characters per token: a chat request whose text is longer than
``max_context_tokens`` times this is refused before it is tokenized (real text averages ~4)."""

GREEDY_BELOW = 1e-3
"""Temperatures below this sample greedily: dividing logits by 1e-300 overflows to NaN log-probs."""


@dataclass
class ParsedRequest:
    """A validated request, ready for the engine."""

    kind: str
    """``chat`` or ``completion``."""
    model: str
    prompts: list[list[int]]
    sampling: SamplingParams
    n: int = 1
    seed: int | None = None
    logprobs: bool = False
    stream: bool = False
    include_usage: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    continued: bool = False
    """The prompt was built on the previous call's sampled ids (``render.py``)."""


_UNSUPPORTED = {
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "repetition_penalty": 1,
    "logit_bias": None,
    "echo": False,
    "suffix": None,
    "response_format": None,
    "functions": None,
    "guided_json": None,
    "guided_regex": None,
    "min_tokens": 0,
}
"""Fields that change what is sampled, with the value that means "off" (accepted)."""

_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _number(body: dict[str, Any], name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise APIError(400, f"{name} must be a number in [{lo}, {hi}], got {shown(value)}", name)
    return float(value)


def _integer(body: dict[str, Any], name: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise APIError(400, f"{name} must be an integer in [{lo}, {hi}], got {shown(value)}", name)
    return value


def flag(body: dict[str, Any], name: str) -> bool:
    """A boolean field (absent or null: false). Anything else is a 400, not its truthiness:
    ``"stream": "false"`` streamed and ``"logprobs": "no"`` sent log-probs."""
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise APIError(400, f"{name} must be true or false, got {shown(value)}", name)
    return value


MAX_STOP_CHARS = 256
"""A request's stop string's length at most. Each generation step decodes a row's last tokens, as
many as the longest stop string has characters, to look for it there: a stop of 100,000
characters made every step decode each row's whole completion, on the engine every episode shares
(quadratic in ``max_tokens``: 39 s for 2,048 tokens of 16 rows against 14 s)."""


def _stops(value: Any) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops) or len(stops) > 16:
        raise APIError(400, "stop must be a non-empty string or a list of at most 16 of them", "stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        raise APIError(400, f"a stop string is longer than this server's {MAX_STOP_CHARS} characters", "stop")
    return list(stops)


def check_unsupported(body: dict[str, Any]) -> None:
    for name, off in _UNSUPPORTED.items():
        value = body.get(name)
        if (
            value is not None
            and value != off
            and value != {}
            and not (name == "response_format" and value == {"type": "text"})
        ):
            raise APIError(
                400, f"{name} is not supported by this server (it would change what is sampled)", name
            )
    best_of = body.get("best_of")
    if best_of is not None and best_of != body.get("n", 1):
        raise APIError(400, "best_of is not supported (use n)", "best_of")


def sampling_of(
    body: dict[str, Any], limits: ServeLimits, forced: SamplingParams | None
) -> tuple[SamplingParams, int, int | None]:
    """``(sampling, n, seed)`` of a request; ``forced`` (a training run's sampling) overrides the
    request's temperature and nucleus and caps its length (the trainer's log-probs assume it), and
    drops its seed."""
    check_unsupported(body)
    n = _integer(body, "n", 1, 1, limits.max_n) or 1
    seed = _integer(body, "seed", None, -(2**63), 2**64 - 1)
    # the newer name first; a null one is absent (``"max_completion_tokens": null`` beside
    # ``"max_tokens": 2`` generated the server's default length)
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    requested = body.get(name)
    cap = forced.max_new_tokens if forced is not None else limits.max_tokens_limit
    if requested is not None:
        if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
            raise APIError(400, f"{name} must be a positive integer, got {shown(requested)}", name)
        if forced is None and requested > cap:
            raise APIError(400, f"{name} {shown(requested)} exceeds this server's limit {cap}", name)
    max_new = min(requested or (forced.max_new_tokens if forced else limits.max_tokens), cap)
    stop = _stops(body.get("stop"))
    if forced is not None:
        sampling = SamplingParams(
            max_new_tokens=max_new,
            temperature=forced.temperature,
            top_p=forced.top_p,
            top_k=forced.top_k,
            stop=[*stop, *(s for s in forced.stop if s not in stop)],
        )
        # nor does a training run take the request's seed: an agent program that sends a fixed
        # one made every episode of a group sample the same reply (no advantage to learn from),
        # each call run alone, unbatched
        return sampling, n, None
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    sampling = SamplingParams(
        max_new_tokens=max_new,
        temperature=0.0 if temperature < GREEDY_BELOW else temperature,
        top_p=_number(body, "top_p", 1.0, 1e-6, 1.0),
        top_k=int(_integer(body, "top_k", 0, -1, 1 << 20) or 0) if body.get("top_k", 0) != -1 else 0,
        stop=stop,
    )
    return sampling, n, seed


def valid_text(text: str) -> str:
    """``text`` with lone surrogates (JSON ``"\\ud800"``: no character) replaced, so that no
    client string can make the tokenizer raise."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def normalize_messages(messages: Any, supports_tools: bool) -> list[dict[str, Any]]:
    """The request's messages with text content as strings and only the keys templates read."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list", "messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in _ROLES:
            raise APIError(400, f"messages[{i}] needs a role in {sorted(_ROLES)}", "messages")
        role = "system" if m["role"] == "developer" else m["role"]
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if (
                    not isinstance(part, dict)
                    or part.get("type") != "text"
                    or not isinstance(part.get("text"), str)
                ):
                    raise APIError(400, f"messages[{i}]: only text content parts are supported", "messages")
                parts.append(part["text"])
            content = "".join(parts)
        if content is not None and not isinstance(content, str):
            raise APIError(400, f"messages[{i}].content must be a string or text parts", "messages")
        msg: dict[str, Any] = {"role": role, "content": valid_text(content) if content is not None else ""}
        if m.get("tool_calls"):
            if not supports_tools:
                raise APIError(400, "this model's chat template does not render tool calls", "messages")
            if not isinstance(m["tool_calls"], list):
                raise APIError(400, f"messages[{i}].tool_calls must be a list", "messages")
            msg["tool_calls"] = [_template_tool_call(c, i) for c in m["tool_calls"]]
        for key in ("name", "tool_call_id"):
            if isinstance(m.get(key), str):
                msg[key] = m[key]
        if role == "tool" and not supports_tools:
            raise APIError(400, "this model's chat template does not render tool messages", "messages")
        out.append(msg)
    return out


def _template_tool_call(call: Any, i: int) -> dict[str, Any]:
    """A tool call as chat templates expect it (``arguments`` a dict, not a JSON string)."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise APIError(400, f"messages[{i}].tool_calls needs function.name", "messages")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as err:  # JSONDecodeError, a 5,000-digit integer, nesting
            raise APIError(
                400, f"messages[{i}].tool_calls arguments are not JSON: {err}", "messages"
            ) from None
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def check_tool_choice(body: dict[str, Any], tools: list[dict[str, Any]] | None) -> None:
    """``tool_choice`` and ``parallel_tool_calls`` constrain what is sampled, which this server
    does not do: only the values that constrain nothing pass ("auto", or "none" with no tools to
    call), anything else is a 400 naming the field (it was ignored: a forced call came back as text)."""
    choice = body.get("tool_choice")
    if choice not in (None, "auto") and not (choice == "none" and not tools):
        raise APIError(
            400, f"tool_choice {shown(choice)} is not supported (only \"auto\": it would change what is sampled)",
            "tool_choice",
        )  # fmt: skip
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise APIError(
            400, f"parallel_tool_calls must be true or false, got {shown(parallel)}", "parallel_tool_calls"
        )
    if parallel is False and tools:
        raise APIError(
            400,
            "parallel_tool_calls false is not supported (it would change what is sampled)",
            "parallel_tool_calls",
        )


def check_tools(tools: Any, supports_tools: bool) -> list[dict[str, Any]] | None:
    if tools is None or tools == []:
        return None
    if not supports_tools:
        raise APIError(400, "this model's chat template does not support tools", "tools")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" for t in tools
    ):
        raise APIError(400, "tools must be a list of {type: function, function: {...}}", "tools")
    return tools


def _token_ids(value: Any) -> bool:
    """``value`` is a non-empty list of token ids (``true`` is not the id 1)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
    )


def completion_prompts(prompt: Any, encode: Any, max_prompts: int | None = None) -> list[list[int]]:
    """A completions ``prompt``: a string, a list of strings, a list of ids or a list of id lists;
    more than ``max_prompts`` strings is a 400 before any is tokenized (1,000 prompts of 64K
    characters took a parser thread 28 s and 700 MB to reach the batch's 400, and stalled other
    episodes' calls ten seconds)."""
    if isinstance(prompt, str):
        return [encode(valid_text(prompt))]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            if max_prompts is not None and len(prompt) > max_prompts:
                raise APIError(
                    400, f"{len(prompt)} prompts exceed this server's {max_prompts} a call (its batch / n)", "prompt"
                )  # fmt: skip
            return [encode(valid_text(p)) for p in prompt]
        if _token_ids(prompt):
            return [list(prompt)]
        if all(_token_ids(p) for p in prompt):
            return [list(p) for p in prompt]
    raise APIError(400, "prompt must be a string, a list of strings, or token ids", "prompt")


def cut_at_stop(text: str, stops: list[str]) -> str:
    """The text up to the first stop string (the OpenAI API returns it without the stop)."""
    hits = [text.find(s) for s in stops if s in text]
    return text[: min(hits)] if hits else text


_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Hermes-style ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks of a reply:
    ``(content outside them or None, tool_calls)``; a block that is not such JSON stays text."""
    calls, kept = [], text
    for match in _TOOL_CALL.finditer(text):
        try:
            data = json.loads(match.group(1))
        except (ValueError, RecursionError):  # JSONDecodeError, a 5,000-digit integer, nesting
            continue  # the policy's text: a 500 lost the call before
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            continue
        args = data.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": data["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
        )
        kept = kept.replace(match.group(0), "", 1)
    if not calls:
        return text, []
    kept = kept.strip()
    return (kept or None), calls


def text_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """Characters of a normalized chat request's text (content, tool calls, tools), counted without
    tokenizing: what :data:`MAX_CHARS_PER_TOKEN` bounds."""
    chars = sum(len(m["content"]) for m in messages)
    for m in messages:
        if "tool_calls" in m:
            chars += len(json.dumps(m["tool_calls"], default=str))
    return chars + (len(json.dumps(tools, default=str)) if tools else 0)


def finite(logprob: float) -> float | None:
    """A log-prob as the reply writes it: ``null`` where it is not finite (a bare NaN is not JSON)."""
    return logprob if math.isfinite(logprob) else None


def finish_reason(engine_reason: str) -> str:
    return "length" if engine_reason == "length" else "stop"


def token_strings(tokenizer: Any, ids: list[int]) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def _byte_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2's ``bytes_to_unicode``), read backwards: the character a
    token string holds for each byte -> that byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTES = _byte_alphabet()
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def token_bytes(tokenizer: Any, ids: list[int], texts: list[str]) -> list[bytes]:
    """Each token's own bytes (the chat reply's ``logprobs.content[].bytes``): a byte-level BPE
    token read back through its alphabet, a SentencePiece byte token (``<0xE6>``) as its byte, any
    other as its text's UTF-8. A token that is part of a character decodes to U+FFFD alone, and
    its text's bytes joined gave ``'\ufffd\ufffd本'`` for ``'日本'``."""
    try:
        pieces = tokenizer.convert_ids_to_tokens(ids)
    except Exception:  # noqa: BLE001 - a tokenizer without the mapping: the texts' bytes
        pieces = [None] * len(ids)
    out = []
    for piece, text in zip(pieces, texts, strict=True):
        if isinstance(piece, str) and _BYTE_TOKEN.fullmatch(piece):
            out.append(bytes([int(piece[3:5], 16)]))
            continue
        in_alphabet = isinstance(piece, str) and all(c in _BYTES for c in piece)
        raw = bytes(_BYTES[c] for c in piece) if in_alphabet else b""
        # the alphabet's reading where it is the text's, or where the text is part of a character
        # (a SentencePiece piece "café" holds é as itself, not as a byte of the alphabet)
        if raw and ("\ufffd" in text or raw.decode("utf-8", "replace") == text):
            out.append(raw)
        else:
            out.append(text.encode("utf-8", "replace"))
    return out


def chat_reply(
    request: ParsedRequest, choices: list[Choice], prompt_ids: list[int], tokenizer: Any
) -> dict[str, Any]:
    out = []
    for i, c in enumerate(choices):
        message: dict[str, Any] = {"role": "assistant", "content": c.text}
        reason = c.finish_reason
        if request.tools:
            content, calls = parse_tool_calls(c.text)
            if calls:
                message = {"role": "assistant", "content": content, "tool_calls": calls}
                reason = "tool_calls"
        logprobs = None
        if request.logprobs:
            texts = token_strings(tokenizer, c.token_ids)
            logprobs = {
                "content": [
                    {"token": t, "logprob": finite(lp), "bytes": list(b), "top_logprobs": []}
                    for t, lp, b in zip(
                        texts, c.logprobs, token_bytes(tokenizer, c.token_ids, texts), strict=True
                    )
                ]
            }
        out.append(
            {
                "index": i,
                "message": message,
                "finish_reason": reason,
                "logprobs": logprobs,
                "token_ids": c.token_ids,
            }
        )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": out,
        "usage": _usage([prompt_ids], choices),
        "prompt_token_ids": prompt_ids,
    }


def completion_reply(
    request: ParsedRequest, choices: list[Choice], prompts: list[list[int]], tokenizer: Any
) -> dict[str, Any]:
    out = []
    for i, c in enumerate(choices):
        logprobs = None
        if request.logprobs:
            tokens = token_strings(tokenizer, c.token_ids)
            offsets, pos = [], 0
            for t in tokens:
                offsets.append(pos)
                pos += len(t)
            logprobs = {
                "tokens": tokens,
                "token_logprobs": [finite(lp) for lp in c.logprobs],
                "top_logprobs": None,
                "text_offset": offsets,
            }
        out.append(
            {
                "index": i,
                "text": c.text,
                "finish_reason": c.finish_reason,
                "logprobs": logprobs,
                "token_ids": c.token_ids,
                "prompt_token_ids": prompts[i // request.n],
            }
        )
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": out,
        "usage": _usage(prompts, choices),
    }


def _usage(prompts: list[list[int]], choices: list[Choice]) -> dict[str, int]:
    prompt = sum(len(p) for p in prompts)
    completion = sum(len(c.token_ids) for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def stream_chunks(reply: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """A finished reply as SSE chunks: per choice its whole content in one delta, then its finish
    reason (the gateway samples a call to the end before answering; clients that ask for a
    stream still get a valid one)."""
    chat = reply["object"] == "chat.completion"
    base = {"id": reply["id"], "created": reply["created"], "model": reply["model"]}
    chunks = []
    for c in reply["choices"]:
        if chat:
            delta = {k: v for k, v in c["message"].items() if v is not None}
            first = {"index": c["index"], "delta": delta, "finish_reason": None, "logprobs": c["logprobs"]}
            last = {"index": c["index"], "delta": {}, "finish_reason": c["finish_reason"]}
        else:
            first = {"index": c["index"], "text": c["text"], "finish_reason": None, "logprobs": c["logprobs"]}
            last = {"index": c["index"], "text": "", "finish_reason": c["finish_reason"]}
        kind = "chat.completion.chunk" if chat else "text_completion"
        chunks += [{**base, "object": kind, "choices": [first]}, {**base, "object": kind, "choices": [last]}]
    if include_usage:
        kind = "chat.completion.chunk" if chat else "text_completion"
        chunks.append({**base, "object": kind, "choices": [], "usage": reply["usage"]})
    return chunks
