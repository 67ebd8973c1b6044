"""The gateway's HTTP server (aiohttp) and its episodes.

The server runs on an event loop in a daemon thread; generation runs wherever the engine's owner
calls :meth:`Gateway.pump` / :meth:`Gateway.serve_forever` (``batcher.py``). Routes:
``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``, and the same under
``/episodes/{key}/v1/...``.

Which episode a call belongs to: the unix socket it came in on (a harness episode gets a socket
of its own, bound into its sandbox: an agent cannot name another episode), else the ``{key}`` in
the path, else the API key (``Authorization: Bearer <key>``). With ``require_episode`` (a
training rollout) a call that names no open episode gets 404, which agent SDKs do not retry (429
and 5xx they do); after an episode closes its socket is gone and its key answers 404.

A call is recorded only once its reply has been written (a client that hung up before leaves no
record). A retry the client marks (``x-stainless-retry-count`` > 0) of the episode's last call
with the same body gets the stored reply again, unrecorded: the SDK timed out, the policy
sampled once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from aiohttp import web

from lit_codeRL.gateway.batcher import GenerationJob, GenerationQueue
from lit_codeRL.gateway.records import CallRecord, Choice
from lit_codeRL.gateway.render import ChatRenderer, PreviousCall
from lit_codeRL.gateway.requests import (
    APIError,
    ParsedRequest,
    ServeLimits,
    chat_reply,
    check_tools,
    completion_prompts,
    completion_reply,
    normalize_messages,
    sampling_of,
    stream_chunks,
)
from lit_codeRL.policy.sampling import SamplingParams

logger = logging.getLogger(__name__)


@dataclass
class EpisodeLog:
    """What the gateway keeps of one episode: its recorded calls and what the next call continues."""

    key: str
    calls: list[CallRecord] = field(default_factory=list)
    previous: PreviousCall | None = None
    closed: bool = False
    socket_path: str | None = None
    last_digest: str | None = None
    last_reply: bytes | None = None
    recorded: int = 0
    """Calls recorded so far (``lit-coderl serve --record`` writes ``calls`` out and empties it)."""
    requests: int = 0
    replayed_retries: int = 0
    errors: int = 0
    inflight: int = 0
    """Calls being answered. A call is recorded after its reply is flushed, so the client may
    have it (and its agent may have exited) a moment before the record exists: read ``calls``
    once this is 0 (:meth:`Gateway.settled`)."""


@dataclass
class GatewayConfig:
    """How the gateway answers."""

    served_name: str = "policy"
    """The model name ``/v1/models`` lists and replies carry (requests may name any)."""
    limits: ServeLimits = field(default_factory=ServeLimits)
    max_batch_rows: int = 64
    """Sequences per ``generate`` call at most."""
    batch_wait_ms: float = 5.0
    """How long the engine's owner waits for more requests to batch with the first one."""
    max_body_mb: int = 64
    """Largest request body (aiohttp's default of 1 MiB is smaller than a long agent history)."""
    require_episode: bool = False
    """Answer only calls of open episodes (404 otherwise)."""
    record_all: bool = False
    """``lit-coderl serve --record``: every key becomes an episode on its first call."""


class Gateway:
    """The OpenAI-compatible server in front of one tokenizer's policy (see the module docstring).

    Args:
        tokenizer: The policy's tokenizer (its chat template renders chat requests).
        config: Names, limits and batching.
        forced_sampling: A training run's sampling: it replaces each request's temperature and
            nucleus and caps its length (the trainer's log-probs assume it); ``None``: the request's.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: GatewayConfig | None = None,
        forced_sampling: SamplingParams | None = None,
    ) -> None:
        self.tokenizer, self.config = tokenizer, config or GatewayConfig()
        self.forced_sampling = forced_sampling
        self.renderer = ChatRenderer(tokenizer)
        self.queue = GenerationQueue(self.config.max_batch_rows, self.config.batch_wait_ms / 1000)
        self.policy_version = 0
        self.episodes: dict[str, EpisodeLog] = {}
        self._by_socket: dict[str, str] = {}
        self._sites: dict[str, web.BaseSite] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None
        """``http://host:port/v1`` once listening on TCP."""

    # ------------------------------------------------------------------ lifecycle
    def start(self, host: str | None = None, port: int | None = None, uds: str | None = None) -> Gateway:
        """Start the event loop thread; listen on ``host:port`` (port 0: a free one) and/or ``uds``."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="lcrl-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        self._call(self._setup())
        if host is not None or port is not None:
            self.url = self._call(self._listen_tcp(host or "127.0.0.1", port or 0))
        if uds is not None:
            self._call(self._add_site(uds))
        return self

    def _call(self, coro: Any, timeout: float = 30.0) -> Any:
        assert self._loop is not None, "Gateway.start() first"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _setup(self) -> None:
        app = web.Application(client_max_size=self.config.max_body_mb << 20)
        for prefix in ("", "/episodes/{key}"):
            app.router.add_get(prefix + "/v1/models", self._models)
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()

    async def _listen_tcp(self, host: str, port: int) -> str:
        assert self._runner is not None
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        return f"http://{bound[0]}:{bound[1]}/v1"

    async def _add_site(self, path: str) -> None:
        assert self._runner is not None
        site = web.UnixSite(self._runner, path)
        await site.start()
        self._sites[path] = site

    async def _remove_site(self, path: str) -> None:
        site = self._sites.pop(path, None)
        if site is not None:
            await site.stop()
        Path(path).unlink(missing_ok=True)

    def stop(self) -> None:
        """Close every site and the loop (idempotent)."""
        if self._loop is None:
            return
        if self._runner is not None:
            self._call(self._runner.cleanup())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None

    # ------------------------------------------------------------------ episodes
    def open_episode(self, key: str | None = None, socket_path: str | None = None) -> str:
        """Start recording an episode; with ``socket_path`` it gets a unix socket of its own."""
        key = key or uuid.uuid4().hex
        log = EpisodeLog(key, socket_path=socket_path)
        with self._lock:
            self.episodes[key] = log
            if socket_path is not None:
                self._by_socket[socket_path] = key
        if socket_path is not None:
            self._call(self._add_site(socket_path))
        return key

    def answering(self) -> int:
        """Calls of any episode still being answered (their records do not exist yet)."""
        with self._lock:
            return sum(log.inflight for log in self.episodes.values())

    def settled(self, log: EpisodeLog) -> bool:
        """No call of the episode is still being answered: its ``calls`` are final once closed."""
        with self._lock:
            return log.inflight == 0

    def wait_settled(self, log: EpisodeLog, timeout_s: float = 30.0) -> EpisodeLog:
        """Block until :meth:`settled` (for callers that do not drive the engine: a call still
        waiting for generation needs the engine's owner to run)."""
        deadline = time.monotonic() + timeout_s
        while not self.settled(log) and time.monotonic() < deadline:
            time.sleep(0.005)
        return log

    def close_episode(self, key: str) -> EpisodeLog:
        """Stop answering the episode (its socket removed, its key 404) and hand back its log;
        calls already being answered still finish and are recorded (:meth:`settled`)."""
        with self._lock:
            log = self.episodes.pop(key)
            log.closed = True
            if log.socket_path is not None:
                self._by_socket.pop(log.socket_path, None)
        if log.socket_path is not None:
            self._call(self._remove_site(log.socket_path))
        return log

    def _episode(self, request: web.Request) -> EpisodeLog | None:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        with self._lock:
            if isinstance(sockname, str) and sockname in self._by_socket:
                return self.episodes.get(self._by_socket[sockname])
            key = request.match_info.get("key")
            if key is None:
                auth = request.headers.get("Authorization", "")
                key = auth[7:].strip() if auth.startswith("Bearer ") else None
            if key and key in self.episodes:
                return self.episodes[key]
            if key and self.config.record_all:
                self.episodes[key] = EpisodeLog(key)
                return self.episodes[key]
        if self.config.require_episode:
            raise APIError(
                404, "no open episode for this call (it ended, or the key is unknown)", code="episode_closed"
            )
        return None

    # ------------------------------------------------------------------ generation
    def pump(self, engine: Any, until: Callable[[], bool], generator: torch.Generator | None = None) -> None:
        """Run the engine for queued requests until ``until()`` is true (the engine owner's loop)."""
        while not until():
            self.queue.run_pending(engine, 0.05, generator)
        while self.queue.run_pending(engine, 0.0, generator):  # answer what is left in flight
            pass

    def serve_forever(self, engine: Any, generator: torch.Generator | None = None) -> None:
        self.pump(engine, lambda: False, generator)

    # ------------------------------------------------------------------ routes
    async def _models(self, request: web.Request) -> web.Response:
        try:
            self._episode(request)
        except APIError as err:
            return web.json_response(err.body(), status=err.status)
        model = {"id": self.config.served_name, "object": "model", "created": 0, "owned_by": "lit-coderl"}
        return web.json_response({"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "chat")

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "completion")

    async def _answer(self, request: web.Request, kind: str) -> web.StreamResponse:
        log: EpisodeLog | None = None
        try:
            log = self._episode(request)
            if log is not None:
                with self._lock:
                    log.inflight += 1
            return await self._answer_for(request, kind, log)
        except APIError as err:
            return web.json_response(err.body(), status=err.status)
        finally:
            if log is not None:
                with self._lock:
                    log.inflight -= 1

    async def _answer_for(
        self, request: web.Request, kind: str, log: EpisodeLog | None
    ) -> web.StreamResponse:
        try:
            raw = await request.read()
            digest = hashlib.sha256(raw).hexdigest()
            if log is not None:
                log.requests += 1
                cap = self.config.limits.max_calls_per_episode
                if cap is not None and log.recorded >= cap:
                    raise APIError(404, f"this episode made its {cap} calls", code="episode_call_limit")
                retry = request.headers.get("x-stainless-retry-count", "0")
                if retry not in ("", "0") and digest == log.last_digest and log.last_reply is not None:
                    log.replayed_retries += 1
                    return web.Response(body=log.last_reply, content_type="application/json")
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise APIError(400, "the body is not JSON") from None
            if not isinstance(body, dict):
                raise APIError(400, "the body must be a JSON object")
            parsed = self._parse(body, kind, log)
            t0 = time.perf_counter()
            job = GenerationJob(parsed.prompts, parsed.sampling, parsed.n, parsed.seed)
            try:
                choices: list[Choice] = await asyncio.wrap_future(self.queue.submit(job))
            except Exception as err:  # noqa: BLE001 - the engine failed on this batch
                raise APIError(500, f"generation failed: {type(err).__name__}: {err}") from None
            wall = time.perf_counter() - t0
            if kind == "chat":
                reply = chat_reply(parsed, choices, parsed.prompts[0], self.tokenizer)
            else:
                reply = completion_reply(parsed, choices, parsed.prompts, self.tokenizer)
            response = await self._write(request, reply, parsed)
        except APIError as err:
            if log is not None:
                log.errors += 1
            return web.json_response(err.body(), status=err.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise  # the client left: nothing is recorded
        if log is not None:
            self._record(log, parsed, choices, wall, digest, response)
        return response[0]

    def _parse(self, body: dict[str, Any], kind: str, log: EpisodeLog | None) -> ParsedRequest:
        limits = self.config.limits
        sampling, n, seed = sampling_of(body, limits, self.forced_sampling)
        model = body.get("model") if isinstance(body.get("model"), str) else self.config.served_name
        stream = bool(body.get("stream", False))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage", False))
        if kind == "chat":
            if body.get("top_logprobs"):
                raise APIError(
                    400, "top_logprobs is not supported: only the chosen tokens' log-probs", "top_logprobs"
                )
            tools = check_tools(body.get("tools"), self.renderer.supports_tools)
            messages = normalize_messages(body.get("messages"), self.renderer.supports_tools)
            ids = self.renderer.continuation(log.previous if log else None, messages, tools)
            continued = ids is not None
            if ids is None:
                try:
                    ids = self.renderer.render(messages, tools)
                except Exception as err:  # noqa: BLE001 - a template that rejects the conversation
                    raise APIError(
                        400, f"the chat template cannot render these messages: {err}", "messages"
                    ) from None
            prompts = [ids]
            logprobs = bool(body.get("logprobs", False))
        else:
            logprobs_n = body.get("logprobs")
            if logprobs_n not in (None, 0, False, True) and logprobs_n != 0:
                raise APIError(
                    400,
                    "logprobs > 0 (top alternatives) is not supported: send 0 for the chosen tokens'",
                    "logprobs",
                )
            encode = lambda text: self.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
            prompts = completion_prompts(body.get("prompt"), encode)
            messages, tools, continued = [], None, False
            logprobs = logprobs_n is not None and logprobs_n is not False
        vocab = len(self.tokenizer)
        for p in prompts:
            if not p:
                raise APIError(400, "the prompt is empty", "prompt")
            if max(p) >= vocab:
                raise APIError(400, f"token id {max(p)} is outside the vocabulary ({vocab})", "prompt")
            if (
                limits.max_context_tokens is not None
                and len(p) + sampling.max_new_tokens > limits.max_context_tokens
            ):
                raise APIError(
                    400,
                    f"{len(p)} prompt tokens + max_tokens {sampling.max_new_tokens} exceed the context "
                    f"limit {limits.max_context_tokens}",
                    "messages" if kind == "chat" else "prompt",
                    code="context_length_exceeded",
                )
        return ParsedRequest(
            kind,
            model,
            prompts,
            sampling,
            n,
            seed,
            logprobs,
            stream,
            include_usage,
            messages,
            tools,
            continued,
        )

    async def _write(
        self, request: web.Request, reply: dict[str, Any], parsed: ParsedRequest
    ) -> tuple[web.StreamResponse, bytes]:
        """Send the reply (as SSE when asked) and return it once it is flushed."""
        body = json.dumps(reply).encode()
        if not parsed.stream:
            response = web.Response(body=body, content_type="application/json")
            await response.prepare(request)
            await response.write_eof()
            return response, body
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for chunk in stream_chunks(reply, parsed.include_usage):
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response, body

    def _record(
        self,
        log: EpisodeLog,
        parsed: ParsedRequest,
        choices: list[Choice],
        wall: float,
        digest: str,
        response: tuple[web.StreamResponse, bytes],
    ) -> None:
        with self._lock:
            for i, prompt in enumerate(parsed.prompts):
                log.calls.append(
                    CallRecord(
                        episode=log.key,
                        index=log.recorded,
                        kind=parsed.kind,
                        prompt_ids=prompt,
                        choices=choices[i * parsed.n : (i + 1) * parsed.n],
                        continued=parsed.continued,
                        policy_version=self.policy_version,
                        wall_s=round(wall, 4),
                    )
                )
                log.recorded += 1
            log.last_digest, log.last_reply = digest, None if parsed.stream else response[1]
            if parsed.kind == "chat":
                first = choices[0]
                log.previous = PreviousCall(
                    parsed.messages, parsed.tools, parsed.prompts[0], first.token_ids, first.text
                )
