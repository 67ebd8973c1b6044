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

Everything an agent sends is hostile: a bad request is a 4xx with a one-line message, never an
exception out of the server or the engine's owner. Bodies are parsed and tokenized off the event
loop (one at a time per episode), an episode's bodies being read or parsed hold ``max_body_mb``
together at most and a body ``max_json_values`` JSON values at most, a chat text longer than ``max_context_tokens`` x
``MAX_CHARS_PER_TOKEN`` characters is refused before tokenizing, an episode has at most
``max_inflight_per_episode`` calls being answered (429 past it) and ``max_calls_per_episode``
counts calls being answered too; a socket takes at most ``max_connections_per_socket``
connections and a connection idle (or a body unsent) for ``idle_timeout_s`` is closed; a client
that hangs up, or whose episode closes, has its queued call dropped before generation. A client
that half-closes after its requests still gets their replies, and one that leaves any reply
unread for ``write_timeout_s`` is cut off (:class:`_ClientConnection`); a compressed body is
refused (415), never inflated past the caps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import resource
import select
import socket
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

import torch
from aiohttp import web
from aiohttp.http_parser import RawRequestMessage

from lit_codeRL.gateway.batcher import GenerationJob, GenerationQueue
from lit_codeRL.gateway.records import CallRecord, Choice
from lit_codeRL.gateway.render import ChatRenderer, PreviousCall
from lit_codeRL.gateway.requests import (
    MAX_CHARS_PER_TOKEN,
    APIError,
    ParsedRequest,
    ServeLimits,
    chat_reply,
    check_tool_choice,
    check_tools,
    completion_prompts,
    completion_reply,
    error_line,
    flag,
    json_values_at_most,
    normalize_messages,
    sampling_of,
    shown,
    stream_chunks,
    text_chars,
)
from lit_codeRL.policy.sampling import SamplingParams

logger = logging.getLogger(__name__)


class _OneLineASecond(logging.Filter):
    """Lets one warning (or worse) a second through, as one line without its traceback, and
    counts the ones it drops on the next line it lets through; debug records pass untouched.

    Why: what the server logs about a request (aiohttp's "Error handling request" for a malformed
    one or a client that hung up, a body that fails validation, the loop's accept failures) is
    driven by an agent's traffic: unbounded, an agent writes into the trainer's log at its request
    rate (hundreds of tracebacks a second), past every quota of its sandbox."""

    def __init__(self, period_s: float = 1.0) -> None:
        super().__init__()
        self.period_s = period_s
        self._last = -float("inf")
        self._dropped = 0
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        with self._lock:
            now = time.monotonic()
            if now - self._last < self.period_s:
                self._dropped += 1
                return False
            self._last, dropped, self._dropped = now, self._dropped, 0
        msg = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            msg = f"{msg}: {record.exc_info[1]!r}"
        if dropped:
            msg = f"{msg} ({dropped} more not logged)"
        record.msg, record.args = msg[:500], None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


http_logger = logging.getLogger(f"{__name__}.http")
"""What the HTTP server logs about requests (aiohttp's own messages included): one line a second."""
http_logger.addFilter(_OneLineASecond())


def _peer_closed_both_ways(transport: asyncio.BaseTransport) -> bool:
    """The peer of a unix socket closed it, not just its sending side (the kernel reports a hang-up
    only then; a TCP peer's close and half-close look alike: both are a FIN)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return any(events & select.POLLHUP for _, events in poller.poll(0))


SHUTDOWN_TIMEOUT_S = 5.0
"""At :meth:`Gateway.stop`, how long a reply still being written may take before its connection closes."""


class _ClientConnection(web.RequestHandler):
    """aiohttp's connection handler, with two changes for clients that stop half-way.

    A client that shuts down its sending side (``shutdown(SHUT_WR)``, ``curl``'s or the harness
    relay's half-close) after its requests still gets every reply, then the connection closes.
    aiohttp closes the transport at EOF, cancelling the request being answered, so such a client
    got no reply at all (the harness relay passes an agent's half-close on). Here the transport
    stays half-open while a request is being answered or waits in the pipeline, and the last of
    them is answered with keep-alive off. A body that EOF cut short is a 400 at once, never waited
    for. A connection with nothing left to answer, or whose unix-socket peer closed both ways (an
    agent killed: its call is dropped before generation), closes at once as before.

    A connection whose replies stay unread (its transport's buffer full) for ``write_timeout_s``
    is aborted: aiohttp waits forever to write the replies it writes itself (``/v1/models``,
    errors, its parser's 400s), so a client that pipelined requests and never read held its
    connection past the idle timeout and past its episode's close."""

    __slots__ = ("_last_payload", "_write_timeout_s", "_unread_timer")

    def __init__(self, *args: Any, write_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._last_payload: Any = None
        """The body of the last request parsed: the only one EOF can cut short."""
        self._write_timeout_s = write_timeout_s
        self._unread_timer: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()
        self._unread_timer = self._loop.call_later(self._write_timeout_s, self._abort_unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_unread_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_unread_timer()
        super().connection_lost(exc)

    def _stop_unread_timer(self) -> None:
        if self._unread_timer is not None:
            self._unread_timer.cancel()
            self._unread_timer = None

    def _abort_unread(self) -> None:
        self._unread_timer = None
        if self.transport is not None:
            self.transport.abort()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """aiohttp's reply to a request its parser refused (and to a handler's uncaught exception)
        as every other error of the gateway: an OpenAI-style JSON body, its message one line.
        aiohttp's own is plain text over several lines, the request's bytes quoted under a caret
        (``Invalid method encountered:\\n\\n  b'GARBAGE'\\n     ^``), which a client of the OpenAI
        API shows as it came, or fails to read as JSON. aiohttp's handler still logs it (one line
        a second, :data:`http_logger`) and refuses to reply once a reply has begun."""
        super().handle_error(request, status, exc, message)
        if status >= 500 or not message:  # a server fault: no detail (aiohttp's has a traceback in debug)
            message = _phrase(status)
        response = web.json_response(APIError(status, error_line(message)).body(), status=status)
        response.force_close()
        return response

    async def finish_response(
        self, request: Any, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        """aiohttp's own HTTP errors (its router's: an unknown path 404, a wrong method 405 with
        its ``Allow``) as the gateway's others, OpenAI-style JSON, not plain ``404: Not Found``.
        Here and not in a middleware: with one, aiohttp keeps every handler chain it builds in a
        module-wide cache of 1,024, and each held its gateway (its episodes' logs) after ``stop``."""
        if isinstance(resp, web.HTTPException) and resp.status >= 400:
            headers = {"Allow": resp.headers["Allow"]} if "Allow" in resp.headers else None
            error = APIError(resp.status, f"{resp.reason}: {request.method} {shown(request.path)}")
            resp = web.json_response(error.body(), status=resp.status, headers=headers)
        return await super().finish_response(request, resp, start_time)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._messages:
            return
        message, payload = self._messages[-1]
        if isinstance(message, RawRequestMessage):
            self._last_payload = payload
        else:  # the parser failed, maybe inside the last body: none of its rest will come
            self._loop.call_soon(self._end_body, "the request body is malformed")

    def eof_received(self) -> bool:
        idle = self._waiter is not None and not self._waiter.done() and not self._messages
        if idle or (self.transport is not None and _peer_closed_both_ways(self.transport)):
            return False  # nothing to answer, or nobody to answer it to: the transport closes
        self._lingering_time = 0.0  # no more bytes of an unread body will come to drain
        if self._messages:
            message, payload = self._messages[-1]
            if isinstance(message, RawRequestMessage):  # (a parse error's reply closes anyway)
                self._messages[-1] = (message._replace(should_close=True), payload)
        else:
            self.close()  # the request being answered is the last: close after its reply
        self._loop.call_soon(
            self._end_body, "the request body ended before its declared length (the client closed its side)"
        )
        return True

    def _end_body(self, why: str) -> None:
        """End the last request's body, if it is still arriving (none of its rest will): a 400
        saying ``why`` for a handler that reads it (its request being answered or queued); just
        ended for aiohttp's drain of a body its handler left unread. Called a turn late: Python
        3.11 starts a handler's task a turn after it pops the request, and that handler must
        count as reading."""
        payload, request = self._last_payload, self._current_request
        if payload is None or payload.is_eof() or payload.exception() is not None:
            return
        if (request is not None and request.content is payload) or any(
            p is payload for _, p in self._messages
        ):
            payload.set_exception(APIError(400, why))
        else:
            payload.feed_eof()


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"HTTP {status}"


class _Server(web.Server):
    """aiohttp's low-level server whose connections are :class:`_ClientConnection` s."""

    write_timeout_s: float = 60.0

    def __call__(self) -> web.RequestHandler:
        return _ClientConnection(self, loop=self._loop, write_timeout_s=self.write_timeout_s, **self._kwargs)


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
    reserved: int = 0
    """Records the calls now being generated will add (the call cap counts them)."""
    failure: str | None = None
    """Why the gateway could not close it cleanly (its episode is then invalid: ``gateway_error``)."""
    frozen: bool = False
    """Its reader gave up waiting (:meth:`Gateway.freeze`): nothing more is recorded."""
    jobs: set[GenerationJob] = field(default_factory=set)
    """Its calls waiting for the engine (cancelled when it closes)."""
    parse_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One body of the episode parsed at a time: a flood of huge bodies holds one parser thread."""
    body_bytes: int = 0
    """Bytes of its request bodies being read or waiting for their parse (``max_body_mb`` at most)."""


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
    """Largest request body (aiohttp's default of 1 MiB is smaller than a long agent history), 413
    past it; also what an episode's bodies being read or parsed hold together at most (429 past
    it; a body sent without ``Content-Length`` counts as this much while it is read)."""
    max_json_values: int = 1_000_000
    """JSON values a body may hold (counted before parsing as its commas and opening brackets
    outside strings, a bound from above: ``requests.json_values_at_most``), 413 past it: parsed, a
    value takes up to ~70 bytes, so 64 MiB of ``{},`` would take 1.6 GB of the trainer's memory,
    while a string's text costs about its size whatever commas it holds."""
    require_episode: bool = False
    """Answer only calls of open episodes (404 otherwise)."""
    record_all: bool = False
    """``lit-coderl serve --record``: every key becomes an episode on its first call."""
    max_record_keys: int = 1024
    """With ``record_all``: episodes (keys) kept at most; the least recently used idle one is forgotten."""
    max_connections_per_socket: int = 32
    """Open connections an episode's unix socket accepts at once (more are closed at once)."""
    max_connections: int = 4096
    """Open connections in all (every episode's socket, and TCP) at once; more are closed at once.
    Each holds one of the trainer's file descriptors: past its limit every ``accept`` fails
    (``EMFILE``, which asyncio retries in a loop) and so does every file the trainer opens (a
    checkpoint). At most half the process's open-file limit, which ``start`` raises to the hard
    limit."""
    idle_timeout_s: float = 30.0
    """A connection that sends no request (or not all of its body) for this long is closed."""
    write_timeout_s: float = 60.0
    """A reply the client does not read within this long is dropped (the call is not recorded)."""
    parse_workers: int = 4
    """Threads that parse and tokenize bodies (off the event loop)."""


def _open_file_limit() -> int:
    """The process's open-file limit, its soft limit first raised to the hard one (1,024 by
    default in many shells: 32 episodes' 32 connections each exhausted it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # a hard limit the kernel caps lower (nr_open): keep the soft one
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


class Gateway:
    """The OpenAI-compatible server in front of one tokenizer's policy (see the module docstring).

    Args:
        tokenizer: The policy's tokenizer (its chat template renders chat requests).
        config: Names, limits and batching.
        forced_sampling: A training run's sampling: it replaces each request's temperature and
            nucleus and caps its length (the trainer's log-probs assume it); ``None``: the request's.
        vocab_size: How many ids the model embeds (``policy.loading.embedded_ids``), when fewer
            than the tokenizer holds: a prompt with an id past it is a 400 of its own request,
            never an exception of the batch every episode's calls share. ``None``: the tokenizer's.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: GatewayConfig | None = None,
        forced_sampling: SamplingParams | None = None,
        vocab_size: int | None = None,
    ) -> None:
        self.tokenizer, self.config = tokenizer, config or GatewayConfig()
        self.vocab = min(len(tokenizer), vocab_size or len(tokenizer))
        self.forced_sampling = forced_sampling
        self.renderer = ChatRenderer(tokenizer)
        self.queue = GenerationQueue(self.config.max_batch_rows, self.config.batch_wait_ms / 1000)
        self.policy_version = 0
        self.episodes: dict[str, EpisodeLog] = {}
        self._closed: OrderedDict[str, EpisodeLog] = OrderedDict()
        """Recently closed episodes, so that closing one again hands back the same log."""
        self._by_socket: dict[str, str] = {}
        self._listening_uds: set[str] = set()  # ``start(uds=...)``: every other unix socket is an episode's
        self._socket_conns: dict[str, int] = {}
        self._conns = 0
        self._max_conns = self.config.max_connections
        self._conn_socket: dict[int, str] = {}
        self._pool = ThreadPoolExecutor(max(1, self.config.parse_workers), thread_name_prefix="lcrl-gw-parse")
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
        self._max_conns = min(self.config.max_connections, _open_file_limit() // 2)
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._loop.set_exception_handler(self._loop_error)
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="lcrl-gateway", daemon=True)
        self._thread.start()
        ready.wait()
        self._call(self._setup())
        if host is not None or port is not None:
            self.url = self._call(self._listen_tcp(host or "127.0.0.1", port or 0))
        if uds is not None:
            self._listening_uds.add(uds)
            self._call(self._add_site(uds))
        return self

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The loop's errors (accept failing with no file descriptors left: once per connection
        attempt) logged one line a second at most (:data:`http_logger`), not a traceback each."""
        err = context.get("exception")
        http_logger.warning("gateway event loop: %s %s", context.get("message"), repr(err) if err else "")

    def _call(self, coro: Any, timeout: float = 30.0) -> Any:
        assert self._loop is not None, "Gateway.start() first"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _setup(self) -> None:
        app = web.Application(client_max_size=self.config.max_body_mb << 20)
        for prefix in ("", "/episodes/{key}"):
            app.router.add_get(prefix + "/v1/models", self._models)
            app.router.add_post(prefix + "/v1/chat/completions", self._chat)
            app.router.add_post(prefix + "/v1/completions", self._completions)
        # handler_cancellation: a client that hangs up cancels its handler, and so its queued job;
        # keepalive_timeout also closes a connection that never completes a request
        self._runner = web.AppRunner(
            app,
            access_log=None,
            logger=http_logger,
            handle_signals=False,
            handler_cancellation=True,
            keepalive_timeout=self.config.idle_timeout_s,
            auto_decompress=False,  # a compressed body is refused (415), never inflated past the caps
            # at stop, a reply still being written gets this long, then its connection is closed
            # (aiohttp's 60 s outlasted stop's own wait for the cleanup, which then raised)
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        )
        await self._runner.setup()
        server = self._runner.server
        assert server is not None
        # aiohttp builds its Server inside AppRunner and has no option for the handler class
        server.__class__ = _Server
        server.write_timeout_s = self.config.write_timeout_s
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._conns += 1
            if self._conns > self._max_conns:  # every socket's connections hold the trainer's descriptors
                transport.abort()
            name = transport.get_extra_info("sockname")
            if isinstance(name, str) and name:  # an episode's unix socket
                self._conn_socket[id(handler)] = name
                self._socket_conns[name] = self._socket_conns.get(name, 0) + 1
                if self._socket_conns[name] > self.config.max_connections_per_socket:
                    transport.abort()

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            lost(handler, exc)
            self._conns -= 1
            name = self._conn_socket.pop(id(handler), None)
            if name is not None:
                self._socket_conns[name] -= 1
                if not self._socket_conns[name]:
                    del self._socket_conns[name]

        server.connection_made, server.connection_lost = connection_made, connection_lost  # type: ignore[method-assign]

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
        Path(path).unlink(missing_ok=True)  # a new connect fails at once
        if site is not None:
            # Stop accepting, then let connections already accepted attach before the server
            # closes: Python 3.11 leaves one that attaches after close open and unanswered
            # until the garbage collector finds it (the client hangs).
            server = site._server
            for sock in server.sockets if server is not None else []:
                asyncio.get_running_loop().remove_reader(sock.fileno())
            for _ in range(3):
                await asyncio.sleep(0)
            await site.stop()
        # connections already accepted on it: idle ones close now (a request in progress is
        # answered first), rather than waiting out the idle timeout unanswered
        server = self._runner.server if self._runner is not None else None
        for handler in server.connections if server is not None else []:
            if self._conn_socket.get(id(handler)) == path:
                if handler._unread_timer is not None and handler.transport is not None:
                    # its replies stay unread (writing paused): nobody to answer; what it sent
                    # and the gateway has not read (file descriptors too) goes with it now
                    handler.transport.abort()
                else:  # (aiohttp's close() alone leaves an idle connection's transport open)
                    handler.close() if handler._request_in_progress else handler.force_close()

    def stop(self) -> None:
        """Close every site and the loop (idempotent)."""
        if self._loop is None:
            return
        if self._runner is not None:
            try:
                self._call(self._runner.cleanup(), timeout=SHUTDOWN_TIMEOUT_S + 25.0)
            except Exception as err:  # noqa: BLE001 - stopping must not fail a run's teardown
                logger.warning("gateway: stopping its server: %s", repr(err))
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop = None
        self._pool.shutdown(wait=False, cancel_futures=True)

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
        calls still waiting for the engine are dropped (404), calls being generated or written
        still finish and are recorded (:meth:`settled`). Closing it again hands back the same log
        until it is frozen; this never raises for a key once opened and not frozen (a socket that
        will not close is logged)."""
        with self._lock:
            log = self.episodes.pop(key, None)
            if log is None:
                return self._closed[key]  # KeyError only for a key never opened (a caller's bug)
            log.closed = True
            self._closed[key] = log
            while len(self._closed) > 4096:
                self._closed.popitem(last=False)
            if log.socket_path is not None:
                self._by_socket.pop(log.socket_path, None)
            jobs, log.jobs = list(log.jobs), set()
        for job in jobs:
            job.future.cancel()  # only those not yet in a batch: their handlers answer 404
        if log.socket_path is not None:
            try:
                self._call(self._remove_site(log.socket_path), timeout=10.0)
            except Exception as err:  # noqa: BLE001 - the socket is unmapped already: calls on it get 404
                logger.warning("gateway: closing episode %s's socket: %s", key, repr(err))
                Path(log.socket_path).unlink(missing_ok=True)
        return log

    def freeze(self, log: EpisodeLog) -> EpisodeLog:
        """Record nothing more for ``log`` (its reader stops waiting for calls still being answered:
        a client that does not read its reply must not hold up the training step), and hand it
        over: the gateway keeps nothing of a frozen closed episode. (It kept the last 4,096 closed
        logs, each every call's prompt and sampled ids, log-probs, last history and reply: up to
        200 calls of a whole context a sample, gigabytes a training step, never freed.)"""
        with self._lock:
            log.frozen = True
            if log.closed and self._closed.get(log.key) is log:
                del self._closed[log.key]
        return log

    def _episode(self, request: web.Request) -> EpisodeLog | None:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        with self._lock:
            if isinstance(sockname, str) and sockname in self._by_socket:
                return self.episodes.get(self._by_socket[sockname])
            if isinstance(sockname, str) and sockname and sockname not in self._listening_uds:
                # an episode's socket, unmapped while its episode closes (a connection accepted
                # before): the call is that episode's or none, never routed by the key it names
                raise APIError(
                    404,
                    "no open episode for this call (it ended, or the key is unknown)",
                    code="episode_closed",
                )
            key = request.match_info.get("key")
            if key is None:
                auth = request.headers.get("Authorization", "")
                key = auth[7:].strip() if auth.startswith("Bearer ") else None
            if key and key in self.episodes:
                return self.episodes[key]
            if key and self.config.record_all:
                self.episodes[key] = EpisodeLog(key)
                self._forget_idle_keys()
                return self.episodes[key]
        if self.config.require_episode:
            raise APIError(
                404, "no open episode for this call (it ended, or the key is unknown)", code="episode_closed"
            )
        return None

    def _forget_idle_keys(self) -> None:
        """``--record``: keep at most ``max_record_keys`` episodes (an invented key per call must
        not grow memory forever); forget the least recently used ones that hold nothing unwritten.
        Called with the lock held."""
        excess = len(self.episodes) - self.config.max_record_keys
        for key in [k for k, log in self.episodes.items() if log.socket_path is None]:
            if excess <= 0:
                break
            log = self.episodes[key]
            if not log.calls and not log.inflight:
                del self.episodes[key]
                excess -= 1

    def _admit(self, log: EpisodeLog) -> None:
        """Count a call of ``log`` as being answered, or refuse it (closed: 404; too many: 429)."""
        with self._lock:
            if log.closed:
                raise APIError(404, "no open episode for this call (it ended)", code="episode_closed")
            limit = self.config.limits.max_inflight_per_episode
            if log.inflight >= limit:
                log.errors += 1
                raise APIError(
                    429, f"this episode has {limit} calls being answered already", code="too_many_calls"
                )
            log.inflight += 1
            if self.config.record_all:  # most recently used last (``_forget_idle_keys``)
                self.episodes[log.key] = self.episodes.pop(log.key, log)

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
        admitted = False
        try:
            log = self._episode(request)
            if log is not None:
                self._admit(log)
                admitted = True
            return await self._answer_for(request, kind, log)
        except APIError as err:
            return web.json_response(err.body(), status=err.status)
        except ConnectionResetError:
            # the client left (hung up, or did not read its reply): nothing to answer, nothing to
            # log (aiohttp would log a traceback for the exception, at the client's request rate)
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=499, text="client closed the connection")
        finally:
            if admitted:
                assert log is not None
                with self._lock:
                    log.inflight -= 1

    async def _answer_for(
        self, request: web.Request, kind: str, log: EpisodeLog | None
    ) -> web.StreamResponse:
        parsed: ParsedRequest | None = None
        try:
            encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                # the caps count bytes as sent: 1 MiB of gzip inflates to 1 GiB
                raise APIError(
                    415, f"Content-Encoding {encoding[:40]!r} is not accepted: send the body uncompressed"
                )
            # the body's share of the episode's cap, ``held[0]`` bytes: released when the handler
            # is done with the body, or, once its parse started, when the parse is (a client that
            # hangs up mid-parse does not free a share a parser thread still holds the body of)
            held = [self._hold_body(log, request.content_length)]
            try:
                try:
                    raw = await asyncio.wait_for(request.read(), self.config.idle_timeout_s)
                except TimeoutError:
                    raise APIError(
                        408, f"the body did not arrive within {self.config.idle_timeout_s:g} s"
                    ) from None
                digest = hashlib.sha256(raw).hexdigest()
                if log is not None:
                    log.requests += 1
                    self._check_cap(log, 1)
                    retry = request.headers.get("x-stainless-retry-count", "0")
                    if retry not in ("", "0") and digest == log.last_digest and log.last_reply is not None:
                        log.replayed_retries += 1
                        return web.Response(body=log.last_reply, content_type="application/json")
                parsed = await self._parse_off_loop(raw, kind, log, held)
                del raw
            finally:
                self._release_body(log, held[0])
            rows = len(parsed.prompts) * parsed.n
            if rows > self.config.max_batch_rows:
                raise APIError(
                    400, f"{rows} sequences (prompts x n) exceed this server's batch of {self.config.max_batch_rows}",
                    "n",
                )  # fmt: skip
            job = GenerationJob(
                parsed.prompts, parsed.sampling, parsed.n, parsed.seed, log.key if log else None
            )
            if log is not None:
                with self._lock:
                    if log.closed:  # closed while this body was parsed: its jobs were cancelled already
                        raise APIError(404, "no open episode for this call (it ended)", code="episode_closed")
                    self._check_cap(log, len(parsed.prompts))
                    log.reserved += len(parsed.prompts)
                    log.jobs.add(job)
            try:
                t0 = time.perf_counter()
                choices = await self._generate(job, log)
                wall = time.perf_counter() - t0
                if kind == "chat":
                    reply = chat_reply(parsed, choices, parsed.prompts[0], self.tokenizer)
                else:
                    reply = completion_reply(parsed, choices, parsed.prompts, self.tokenizer)
                try:
                    response = await asyncio.wait_for(
                        self._write(request, reply, parsed), self.config.write_timeout_s
                    )
                except TimeoutError:
                    if request.transport is not None:
                        request.transport.abort()
                    raise ConnectionResetError("the client did not read its reply") from None
                if log is not None:
                    self._record(log, parsed, choices, wall, digest, response)
            finally:
                if log is not None:
                    with self._lock:
                        log.reserved -= len(parsed.prompts)
                        log.jobs.discard(job)
        except APIError as err:
            if log is not None:
                log.errors += 1
            return web.json_response(err.body(), status=err.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise  # the client left: nothing is recorded
        return response[0]

    def _hold_body(self, log: EpisodeLog | None, declared: int | None) -> int:
        """Count a body of ``declared`` bytes (unknown: the largest allowed) against its episode's
        share, ``max_body_mb`` for all its calls being read or parsed: 413 for a body over the
        limit, 429 while the episode's other bodies hold too much. Returns the bytes held."""
        limit = self.config.max_body_mb << 20
        if declared is not None and declared > limit:
            raise APIError(
                413, f"the body is {declared} bytes, over this server's {self.config.max_body_mb} MiB"
            )
        if log is None:
            return 0
        size = limit if declared is None else declared
        with self._lock:
            if log.body_bytes + size > limit:
                raise APIError(
                    429,
                    f"this episode's calls hold {log.body_bytes} bytes of request bodies already "
                    f"({self.config.max_body_mb} MiB at most together)",
                    code="too_many_calls",
                )
            log.body_bytes += size
        return size

    def _release_body(self, log: EpisodeLog | None, held: int) -> None:
        if log is not None and held:
            with self._lock:
                log.body_bytes -= held

    async def _parse_off_loop(
        self, raw: bytes, kind: str, log: EpisodeLog | None, held: list[int] | None = None
    ) -> ParsedRequest:
        """``raw`` parsed and tokenized in a parser thread: a huge body must not stall other
        calls. The episode's lock is held until the parse ends, even if its client hangs up
        meanwhile: an episode never occupies more than one parser thread. So is the body's share
        ``held[0]`` (taken over from the caller, which finds 0 there once the parse started)."""
        loop = asyncio.get_running_loop()
        if log is not None:
            await log.parse_lock.acquire()
        try:
            future = loop.run_in_executor(self._pool, self._parse_raw, raw, kind, log)
        except BaseException:
            if log is not None:
                log.parse_lock.release()
            raise
        if log is not None:
            lock, share = log.parse_lock, (held[0] if held else 0)
            if held:
                held[0] = 0

            def done(_: object) -> None:
                lock.release()
                self._release_body(log, share)

            future.add_done_callback(done)
        return await asyncio.shield(future)

    def _check_cap(self, log: EpisodeLog, calls: int) -> None:
        """404 when ``calls`` more would pass the episode's call cap (calls being answered count)."""
        cap = self.config.limits.max_calls_per_episode
        if cap is not None and log.recorded + log.reserved + calls > cap:
            raise APIError(404, f"this episode made its {cap} calls", code="episode_call_limit")

    async def _generate(self, job: GenerationJob, log: EpisodeLog | None) -> list[Choice]:
        try:
            return await asyncio.wrap_future(self.queue.submit(job))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if job.future.cancelled() and task is not None and not task.cancelling():
                # the job was dropped (its episode closed), not this handler: answer
                raise APIError(
                    404, "no open episode for this call (it ended)", code="episode_closed"
                ) from None
            raise
        except Exception as err:  # noqa: BLE001 - the engine failed on this batch
            raise APIError(500, f"generation failed: {type(err).__name__}: {err}") from None

    def _parse_raw(self, raw: bytes, kind: str, log: EpisodeLog | None) -> ParsedRequest:
        """The body as a validated request (in a parser thread); anything unexpected is a 400."""
        values = json_values_at_most(raw, self.config.max_json_values)
        if values > self.config.max_json_values:
            raise APIError(
                413,
                f"the body holds up to {values} JSON values, over this server's {self.config.max_json_values}",
            )
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError):  # bad JSON, deep nesting, huge ints
            raise APIError(
                400, "the body is not JSON (or nests too deep, or has a number too long)"
            ) from None
        if not isinstance(body, dict):
            raise APIError(400, "the body must be a JSON object")
        try:
            return self._parse(body, kind, log)
        except APIError:
            raise
        except Exception as err:  # noqa: BLE001 - validation missed a shape: still the client's error
            http_logger.warning("gateway: unreadable %s request: %s", kind, repr(err)[:200])
            raise APIError(400, f"the request could not be read ({type(err).__name__})") from None

    def _parse(self, body: dict[str, Any], kind: str, log: EpisodeLog | None) -> ParsedRequest:
        limits = self.config.limits
        sampling, n, seed = sampling_of(body, limits, self.forced_sampling)
        model = body.get("model") if isinstance(body.get("model"), str) else self.config.served_name
        stream = flag(body, "stream")
        options = body.get("stream_options") or {}
        if not isinstance(options, dict):
            raise APIError(400, "stream_options must be an object", "stream_options")
        include_usage = flag(options, "include_usage")
        if kind == "chat":
            if body.get("top_logprobs"):
                raise APIError(
                    400, "top_logprobs is not supported: only the chosen tokens' log-probs", "top_logprobs"
                )
            tools = check_tools(body.get("tools"), self.renderer.supports_tools)
            check_tool_choice(body, tools)
            messages = normalize_messages(body.get("messages"), self.renderer.supports_tools)
            chars = text_chars(messages, tools)
            if (
                limits.max_context_tokens is not None
                and chars > limits.max_context_tokens * MAX_CHARS_PER_TOKEN
            ):
                # refused before tokenizing: tokenizing 16 MB takes minutes and gigabytes
                raise APIError(
                    400, f"{chars} characters of messages exceed the context limit {limits.max_context_tokens}"
                    " tokens", "messages", code="context_length_exceeded",
                )  # fmt: skip
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
            logprobs = flag(body, "logprobs")
        else:
            logprobs_n = body.get("logprobs")
            # 0 (or a bool) asks for the chosen tokens' log-probs; ``1 in (0, True)`` holds, and a
            # 1 (one top alternative) came back as the chosen tokens'
            if not (
                logprobs_n is None
                or isinstance(logprobs_n, bool)
                or (type(logprobs_n) is int and logprobs_n == 0)
            ):
                raise APIError(
                    400,
                    "logprobs > 0 (top alternatives) is not supported: send 0 for the chosen tokens'",
                    "logprobs",
                )
            bound = limits.max_context_tokens

            def encode(text: str) -> list[int]:
                if bound is not None and len(text) > bound * MAX_CHARS_PER_TOKEN:  # before tokenizing
                    raise APIError(
                        400, f"{len(text)} characters of prompt exceed the context limit {bound} tokens",
                        "prompt", code="context_length_exceeded",
                    )  # fmt: skip
                return self.tokenizer(text, add_special_tokens=False)["input_ids"]

            prompts = completion_prompts(body.get("prompt"), encode, max(1, self.config.max_batch_rows // n))
            messages, tools, continued = [], None, False
            logprobs = logprobs_n is not None and logprobs_n is not False
        vocab = self.vocab
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
            if log.frozen:  # its reader stopped waiting: a record now would race its rows
                return
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
