"""Red team of the gateway's HTTP surface: what a hostile agent program can send on its socket.

Every try gets a defined HTTP error or reply, never an exception out of the server, a hang past
the episode's limits, memory past its caps or a wrong record. Raw sockets, not an HTTP client:
the bytes are the attack. Each class that was a hole names its fix in its docstring.
"""

from __future__ import annotations

import array
import fcntl
import gc
import gzip
import json
import os
import re
import select
import socket
import subprocess
import sys
import termios
import threading
import time
import weakref
from pathlib import Path

import pytest

from lit_codeRL.envs.harness import relay
from lit_codeRL.gateway.requests import MAX_ERROR_CHARS, ServeLimits
from lit_codeRL.gateway.server import Gateway, GatewayConfig

from .conftest import start_gateway
from .test_hostile import CHAT, _start_body, hi, post, raw_call, status_of, wait_for

STATUS = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


def request(body: bytes, extra: bytes = b"", path: bytes = CHAT.encode()) -> bytes:
    """A POST with ``body`` and its Content-Length (``extra``: more header lines)."""
    return (
        b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra
        + b"Content-Length: %d\r\n\r\n" % len(body) + body
    )  # fmt: skip


HI = json.dumps(hi()).encode()
CLOSE = b"Connection: close\r\n"


def connect(address: str | tuple[str, int], timeout_s: float) -> socket.socket:
    s = socket.socket(socket.AF_UNIX) if isinstance(address, str) else socket.socket()
    s.settimeout(timeout_s)
    s.connect(address)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything until the server closes (a reset counts as the end)."""
    out = b""
    try:
        while chunk := s.recv(1 << 16):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def exchange(address: str | tuple[str, int], raw: bytes, shut: bool = True, timeout_s: float = 20) -> bytes:
    """Send ``raw``, half-close (``shut``) and read until the server closes: socket.timeout
    (the test fails) if it never does."""
    s = connect(address, timeout_s)
    try:
        s.sendall(raw)
        if shut:
            s.shutdown(socket.SHUT_WR)
        return read_all(s)
    finally:
        s.close()


def statuses(reply: bytes) -> list[int]:
    return [int(code) for code in STATUS.findall(reply)]


def tcp(gateway: Gateway) -> tuple[str, int]:
    host, port = gateway.url.split("//")[1].split("/")[0].split(":")
    return host, int(port)


@pytest.fixture()
def loop_errors(served):
    """Errors the gateway's event loop reports (an exception no handler caught)."""
    gateway = served[0]
    seen: list[dict] = []
    original = gateway._loop_error
    gateway._loop.set_exception_handler(lambda loop, context: seen.append(context) or original(loop, context))
    yield seen
    gateway._loop.set_exception_handler(original)


# ---------------------------------------------------------------------------------- half-close


def test_a_half_closed_client_gets_every_reply_then_eof(served, loop_errors):
    """Hole (fixed): a client that shuts down its sending side after a full request (curl, a
    raw-socket program, the harness relay passing an agent's half-close on) got no reply:
    aiohttp closed the connection at EOF and cancelled the call. Now every request it sent is
    answered, pipelined ones too, and then the connection closes (`_ClientConnection`)."""
    gateway = served[0]
    address = tcp(gateway)
    models = exchange(address, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert statuses(models) == [200] and b'"tiny"' in models
    assert statuses(exchange(address, request(HI))) == [200]
    three = exchange(address, request(HI) * 2 + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
    assert statuses(three) == [200, 200, 200]
    assert exchange(address, b"") == b""  # nothing sent: closed at once, as before
    assert loop_errors == []


def test_a_half_closed_call_through_the_relay_is_answered_and_recorded(tiny_policy, tmp_path):
    """The agent's real path: TCP to the sandbox's relay, which passes its half-close on to the
    episode's unix socket. The reply comes back and the call is recorded once."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    sock = str(tmp_path / "ep.sock")
    key = gateway.open_episode(socket_path=sock)
    with socket.socket() as probe:  # a free port for the relay
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", relay.__file__, sock, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert statuses(exchange(("127.0.0.1", port), request(HI))) == [200]
        log = gateway.wait_settled(gateway.close_episode(key))
        assert len(log.calls) == 1
    finally:
        proc.terminate()
        proc.wait(10)
        close()


def test_a_body_cut_short_by_a_half_close_is_a_400_at_once(tiny_policy, tmp_path):
    """A body that EOF cut short (fewer bytes than its Content-Length, a chunked body without its
    last chunk) is a 400 at once and frees the episode's body share; it used to be waited for
    until the idle timeout (30 s) while the share blocked the episode's other calls (429)."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        sock = str(tmp_path / "ep.sock")
        log = gateway.episodes[gateway.open_episode(socket_path=sock)]
        for length in (len(HI) + 50, None):  # declared longer than sent; chunked, unfinished
            s = _start_body(sock, length, HI)
            t0 = time.monotonic()
            s.shutdown(socket.SHUT_WR)
            reply = read_all(s)
            assert statuses(reply) == [400] and b"ended before" in reply, reply[-200:]
            assert time.monotonic() - t0 < 5
            assert wait_for(lambda: log.body_bytes == 0)
        assert status_of(raw_call(sock, hi())) == 200
    finally:
        close()


# ---------------------------------------------------------------------------------- malformed HTTP

CHUNKED = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
MALFORMED_HTTP = {
    "bad request line": b"GARBAGE\r\n\r\n",
    "huge header": b"GET /v1/models HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n",
    "many headers": b"GET /v1/models HTTP/1.1\r\n"
    + b"".join(b"X%d: y\r\n" % i for i in range(300))
    + b"\r\n",
    "duplicate Content-Length": request(HI, b"Content-Length: 3\r\n"),
    "Content-Length and chunked": request(HI, b"Transfer-Encoding: chunked\r\n"),
    "negative Content-Length": request(HI).replace(b"Content-Length: %d" % len(HI), b"Content-Length: -5"),
    "Content-Length overflow": request(HI).replace(
        b"Content-Length: %d" % len(HI), b"Content-Length: 9" * 30
    ),
    "bad chunk size": CHUNKED + b"zz\r\n" + HI + b"\r\n0\r\n\r\n",
    "chunk size overflow": CHUNKED + b"f" * 30 + b"\r\n" + HI + b"\r\n0\r\n\r\n",
    "NUL in the path": request(HI, path=b"/v1/chat/completions\x00"),
    "HTTP/2 preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "a request after Connection: close": request(HI, b"Connection: close\r\n") + request(HI),
}


def error_of(reply: bytes) -> dict:
    """The OpenAI-style error body of one raw HTTP reply, checked to be one line of JSON."""
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), reply[:300]
    assert b"\n" not in body.strip(), body
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and "\n" not in error["message"], error
    assert 0 < len(error["message"]) <= MAX_ERROR_CHARS, error
    return error


@pytest.mark.parametrize("raw", MALFORMED_HTTP.values(), ids=MALFORMED_HTTP.keys())
def test_malformed_http_is_a_4xx_and_the_connection_closes(served, loop_errors, raw):
    """aiohttp's parser answers these 400 and closes: no handler runs. Hole (fixed): its reply
    was aiohttp's plain text over several lines, the request's bytes quoted under a caret
    (``Invalid method encountered:\\n\\n  b'GARBAGE'\\n     ^``), where every other error of
    the gateway is an OpenAI-style JSON body of one line, the one an OpenAI client reads; now it is
    that body too (``_ClientConnection.handle_error``)."""
    for shut in (True, False):
        reply = exchange(tcp(served[0]), raw, shut=shut)
        assert [s // 100 for s in statuses(reply)] == [4], reply[:300]
        assert error_of(reply)["type"] == "invalid_request_error"
    assert statuses(exchange(tcp(served[0]), request(HI))) == [200]
    assert loop_errors == []


def test_a_request_line_the_parser_refuses_is_named_in_one_line(served):
    error = error_of(exchange(tcp(served[0]), MALFORMED_HTTP["bad request line"]))
    assert error["message"] == "Invalid method encountered: b'GARBAGE'", error  # the caret's line left out


def test_a_stopped_gateway_is_freed_with_its_episodes(tiny_policy):
    """Nothing outlives ``stop``: a middleware (the first way these errors were made JSON) has
    aiohttp keep every handler chain it builds in a module-wide cache of 1,024, each holding its
    gateway and every episode's log, one per run in a process that trains many."""
    policy, tokenizer = tiny_policy
    gateway, engine, close = start_gateway(
        policy, tokenizer, GatewayConfig("tiny", ServeLimits(max_tokens=2))
    )
    key = gateway.open_episode()
    for raw in (request(HI, b"Authorization: Bearer %s\r\n" % key.encode()), b"GET /v1/x HTTP/1.1\r\n\r\n"):
        exchange(tcp(gateway), raw)
    assert gateway.episodes[key].calls
    freed = weakref.ref(gateway)
    close()
    del gateway, engine, close
    gc.collect()
    assert freed() is None, [type(r).__name__ for r in gc.get_referrers(freed())]


def test_a_handlers_uncaught_exception_is_a_json_500_without_its_detail(tiny_policy, monkeypatch):
    """A fault of the gateway's own (an exception no handler caught) is a 500 in the same JSON
    body, saying no more than its status: the exception's text is the server's business."""

    async def broken(self, request):
        raise RuntimeError("/secret/path\nsecond line")

    monkeypatch.setattr(Gateway, "_models", broken)
    policy, tokenizer = tiny_policy
    gateway, _, close = start_gateway(policy, tokenizer)
    try:
        reply = exchange(tcp(gateway), b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert statuses(reply) == [500], reply[:300]
        assert error_of(reply) == {
            "message": "Internal Server Error",
            "type": "server_error",
            "param": None,
            "code": None,
        }
        assert statuses(exchange(tcp(gateway), request(HI))) == [200]
    finally:
        close()


@pytest.mark.parametrize(
    ("raw", "status", "allow"),
    [
        (b"GET /v1/nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, None),
        (b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 405, b"POST"),
        (request(HI, path=b"/v1/models"), 405, b"GET,HEAD"),
        (request(HI, path=b"/v1/chat/completions/%0a%0d" + b"x" * 2000), 404, None),
    ],
    ids=["unknown path", "GET of a POST route", "POST of a GET route", "a long path with line breaks"],
)
def test_an_unknown_path_or_method_is_a_json_error(served, raw, status, allow):
    """Hole (fixed): aiohttp's router answered an unknown path or method in plain text (``404: Not
    Found``); an OpenAI client that reads the error's message got none. Now the same status, with
    its ``Allow`` header, and the OpenAI-style body naming the method and path (quoted, cut short)."""
    reply = exchange(tcp(served[0]), raw)
    assert statuses(reply) == [status], reply[:300]
    error = error_of(reply)
    assert error["message"].startswith(("Not Found: ", "Method Not Allowed: ")), error
    if allow is not None:
        assert b"\r\nAllow: " + allow + b"\r\n" in reply.partition(b"\r\n\r\n")[0], reply[:300]
    assert statuses(exchange(tcp(served[0]), request(HI))) == [200]


def test_chunked_trailers_and_pipelining_are_answered(served):
    trailer = CHUNKED + b"%x\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n" % (len(HI), HI)
    assert statuses(exchange(tcp(served[0]), trailer)) == [200]
    s = connect(tcp(served[0]), 20)  # pipelined on a keep-alive connection, no half-close
    s.sendall(request(HI) * 3)
    reply = b""
    while len(statuses(reply)) < 3 or not reply.rstrip().endswith(b"}"):
        reply += s.recv(1 << 16)
    s.close()
    assert statuses(reply) == [200, 200, 200]


def test_a_parse_error_inside_a_body_ends_that_body_at_once(tiny_policy, tmp_path):
    """Hole (fixed): a chunked body whose later chunk is malformed (or its trailers too many)
    left the request being answered waiting for the rest of its body until the idle timeout (its
    episode's body share held all that time: its other calls 429). The parser's failure now ends
    that body: a 400 at once."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True, idle_timeout_s=30)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        sock = str(tmp_path / "ep.sock")
        log = gateway.episodes[gateway.open_episode(socket_path=sock)]
        for garbage in (b"zz\r\n", b"0\r\n" + b"".join(b"X%d: y\r\n" % i for i in range(300)) + b"\r\n"):
            s = _start_body(sock, None, HI[:10])
            assert wait_for(lambda: log.body_bytes > 0)  # the handler reads the body
            t0 = time.monotonic()
            s.sendall(garbage)
            reply = read_all(s)
            assert time.monotonic() - t0 < 5, reply
            assert statuses(reply)[0] == 400 and b"malformed" in reply, reply
            assert wait_for(lambda: log.body_bytes == 0)
    finally:
        close()


def test_a_trickling_client_is_cut_off_at_the_idle_timeout(tiny_policy):
    """Slowloris: headers or a body sent a byte at a time hold a connection for the idle timeout
    at most (headers: closed; body: 408), however steadily the bytes trickle."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), idle_timeout_s=1.0)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        for raw in (b"GET /v1/models HTTP/1.1\r\n" + b"X: y\r\n" * 100, request(HI)[:-10]):
            s = connect(tcp(gateway), 10)
            t0 = time.monotonic()
            try:
                for byte in raw:
                    s.send(bytes([byte]))
                    time.sleep(0.05)
                    if time.monotonic() - t0 > 4:
                        break
                reply = read_all(s)
            except (BrokenPipeError, ConnectionResetError):
                reply = b""
            assert time.monotonic() - t0 < 4
            assert statuses(reply) in ([], [408]), reply
            s.close()
    finally:
        close()


def test_a_compressed_body_is_refused_not_inflated(served, loop_errors):
    """Hole (fixed): aiohttp inflated a ``Content-Encoding: gzip`` body, while the body caps count
    the bytes sent: 50 KB of gzip held up to ``max_body_mb`` each, ``max_inflight`` of them at once
    (8x the episode's share), inflated on the event loop. Now: 415, nothing inflated."""
    bomb = gzip.compress(b'{"messages": [{"role": "user", "content": "' + b"a" * (20 << 20) + b'"}]}')
    for body in (gzip.compress(HI), bomb):
        reply = exchange(tcp(served[0]), request(body, b"Content-Encoding: gzip\r\n" + CLOSE), shut=False)
        assert statuses(reply) == [415] and b"Content-Encoding" in reply, reply[-300:]
    identity = request(HI, b"Content-Encoding: identity\r\n" + CLOSE)
    assert statuses(exchange(tcp(served[0]), identity, shut=False)) == [200]
    assert loop_errors == []


# ---------------------------------------------------------------------------------- bodies

WRONG_TYPES = {
    "stream as a string": hi(stream="false"),
    "stream as a list": hi(stream=[1]),
    "logprobs as a string": hi(logprobs="no"),
    "logprobs as a number": hi(logprobs=5),
    "include_usage as a string": hi(stream=True, stream_options={"include_usage": "no"}),
    "tool_choice as a number": hi(tool_choice=5),
    "tool_choice required": hi(tool_choice="required"),
    "tool_choice naming a function": hi(tool_choice={"type": "function", "function": {"name": "f"}}),
    "parallel_tool_calls as a string": hi(parallel_tool_calls="no"),
    "messages as an object": {"messages": {"role": "user", "content": "x"}},
    "no messages": {"messages": []},
    "a null message": {"messages": [None]},
    "an unknown role": {"messages": [{"role": "function", "content": "x"}]},
    "content as a number": {"messages": [{"role": "user", "content": 5}]},
    "a content part that is not text": {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
    "a text part that is not a string": {"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]},
    "tools as a string": hi(tools="x"),
    "stop as a number": hi(stop=5),
    "stop as nested lists": hi(stop=[["a"]]),
    "a stop string of 100,000 characters": hi(stop=["\x07" * 100_000]),
    "n as a string": hi(n="2"),
    "n as a float": hi(n=2.0),
    "max_tokens as a float": hi(max_tokens=5.0),
    "max_tokens huge": hi(max_tokens=10**4000),
    "temperature as a string": hi(temperature="1"),
    "seed as a float": hi(seed=1.5),
    "a tool call replayed on a template without tools": {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "never-issued", "function": {"name": "f"}}]},
            {"role": "tool", "tool_call_id": "never-issued", "content": "r"},
        ]
    },
}  # fmt: skip
RAW_BODIES = {
    "not UTF-8": b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}',
    "NaN": b'{"temperature": NaN, "messages": [{"role": "user", "content": "x"}]}',
    "Infinity": b'{"top_p": Infinity, "messages": [{"role": "user", "content": "x"}]}',
    "-Infinity": b'{"seed": -Infinity, "messages": [{"role": "user", "content": "x"}]}',
    "a 5,000-digit number": b'{"n": ' + b"9" * 5000 + b', "messages": [{"role": "user", "content": "x"}]}',
    "empty": b"",
    "an array": b"[1]",
}


@pytest.mark.parametrize(
    "body",
    [json.dumps(b).encode() for b in WRONG_TYPES.values()] + list(RAW_BODIES.values()),
    ids=[*WRONG_TYPES, *RAW_BODIES],
)
def test_a_field_of_the_wrong_type_is_a_one_line_400(served, body):
    """Hole (fixed) for stream / logprobs / include_usage / tool_choice / parallel_tool_calls: a
    value of the wrong type was read for its truthiness (``"stream": "false"`` streamed, ``"logprobs":
    "no"`` sent log-probs) or ignored (``tool_choice: "required"`` came back as plain text)."""
    status, text = post(served[0], body)
    assert status == 400, text[:300]
    message = json.loads(text)["error"]["message"]
    assert message and "\n" not in message


def test_completions_logprobs_one_asks_for_alternatives_and_is_refused(served):
    """Hole (fixed): ``1 in (0, True)`` holds, so ``"logprobs": 1`` (one top alternative a token)
    was answered with the chosen tokens' log-probs and no alternatives; 0 and ``true`` still are."""
    status, text = post(served[0], {"prompt": "hi", "max_tokens": 2, "logprobs": 1}, "/v1/completions")
    assert status == 400 and json.loads(text)["error"]["param"] == "logprobs", text
    for chosen in (0, True):
        status, text = post(
            served[0], {"prompt": "hi", "max_tokens": 2, "logprobs": chosen}, "/v1/completions"
        )
        assert status == 200 and len(json.loads(text)["choices"][0]["logprobs"]["token_logprobs"]) >= 1


def test_a_null_max_completion_tokens_leaves_max_tokens_in_force(served):
    """Hole (fixed): ``"max_completion_tokens": null`` beside ``"max_tokens": 2`` hid the second,
    and the call generated the server's default length (24 here)."""
    body = hi(temperature=1.0, max_tokens=2, max_completion_tokens=None, seed=3)
    status, text = post(served[0], body)
    assert status == 200 and len(json.loads(text)["choices"][0]["token_ids"]) <= 2, text[:300]


def test_more_prompts_than_the_batch_are_refused_before_any_is_tokenized(served, monkeypatch):
    """Hole (fixed): a completions call's prompts were all tokenized before the batch's bound
    (prompts x n) refused them: 1,000 prompts of 64K characters (62.5 MiB, under the body cap)
    held a parser thread 28 s and 700 MB, and stalled other episodes' calls 10 s."""
    gateway, _, tokenizer = served
    calls = []

    class Counting:
        def __call__(self, *args, **kwargs):
            calls.append(1)
            return tokenizer(*args, **kwargs)

        def __getattr__(self, name):
            return getattr(tokenizer, name)

    monkeypatch.setattr(gateway, "tokenizer", Counting())
    rows = gateway.config.max_batch_rows
    status, text = post(gateway, {"prompt": ["x" * 1000] * (rows + 1), "max_tokens": 2}, "/v1/completions")
    assert status == 400 and json.loads(text)["error"]["param"] == "prompt" and calls == [], text
    status, text = post(
        gateway, {"prompt": ["x"] * (rows // 2 + 1), "n": 2, "max_tokens": 2}, "/v1/completions"
    )
    assert status == 400 and calls == [], text
    status, text = post(gateway, {"prompt": ["x", "y"], "max_tokens": 2}, "/v1/completions")
    assert status == 200 and len(json.loads(text)["choices"]) == 2 and len(calls) == 2


def test_token_ids_are_not_booleans(served):
    status, text = post(served[0], {"prompt": [[True, False]], "max_tokens": 2}, "/v1/completions")
    assert status == 400 and "prompt" in text


def test_odd_but_valid_bodies_are_answered(served):
    """Lone surrogates anywhere (content, name, stop, model, a key), duplicate keys, tool_choice
    that constrains nothing: 200, and the reply is strict JSON."""
    lone = {"role": "user", "content": "\ud800", "name": "\udfff"}
    surrogates = {"messages": [lone], "stop": ["\udfff"], "model": "\ud800", "\ud800": 1, "max_tokens": 2}
    bodies = [
        json.dumps(surrogates).encode(),  # (escaped: json.dumps writes lone surrogates as \\uXXXX)
        b'{"messages": 5, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}',
        json.dumps(hi(tool_choice="auto", stream=False, logprobs=None)).encode(),
        json.dumps(hi(tool_choice="none", parallel_tool_calls=True)).encode(),
    ]
    for body in bodies:
        status, text = post(served[0], body)
        assert status == 200, text[:300]
        json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in the reply"))


def test_a_huge_value_is_not_quoted_whole_in_its_error(served):
    """Hole (fixed): an error quoted the client's value whole: ``"temperature": <10 MiB string>``
    came back as a 50 MB one-line error, built and sent on the event loop (215 MB more memory,
    every episode's calls stalled meanwhile). Now every message is at most MAX_ERROR_CHARS."""
    for field in ("temperature", "n", "max_tokens"):
        status, text = post(served[0], hi(**{field: "\x01" * (4 << 20)}))
        assert status == 400 and len(text) < MAX_ERROR_CHARS + 200, (field, len(text))


# ---------------------------------------------------------------------------------- streaming, caps, ended


def test_a_stream_whose_client_hangs_up_is_dropped_and_the_episode_goes_on(tiny_policy, tmp_path):
    """Streaming calls whose client hangs up after the first bytes of the stream leave at most
    their own records (a call is recorded once its reply is flushed); the episode's next call is
    answered, and nothing leaks (calls being answered, body share). (A client that leaves before
    its reply is dropped before generation: test_hostile's dead-client test.)"""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=4), require_episode=True)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        sock = str(tmp_path / "ep.sock")
        key = gateway.open_episode(socket_path=sock)
        log = gateway.episodes[key]
        for _ in range(3):
            s = raw_call(sock, hi(stream=True, n=4, logprobs=True))
            s.recv(64)  # the first bytes of the stream
            s.close()
        assert wait_for(lambda: gateway.settled(log))
        reply = exchange(sock, request(json.dumps(hi(stream=True)).encode(), CLOSE), shut=False)
        assert statuses(reply) == [200] and reply.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        log = gateway.wait_settled(gateway.close_episode(key))
        assert len(log.calls) <= 4 and log.body_bytes == 0 and log.inflight == 0
        assert all(len(c.choices) == 4 for c in log.calls[:-1]) and len(log.calls[-1].choices) == 1
    finally:
        close()


def test_connections_over_the_cap_with_calls_in_flight_leave_no_count_behind(tiny_policy, tmp_path):
    """40 connections at once on an episode's socket, each sending a call: the ones past the cap
    are closed, the calls past the in-flight bound are 429, the rest 200; afterwards the socket's
    connection count and the episode's calls being answered are back to 0."""
    policy, tokenizer = tiny_policy
    limits = ServeLimits(max_tokens=2, max_inflight_per_episode=2)
    config = GatewayConfig("tiny", limits, require_episode=True, max_connections_per_socket=4)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        sock = str(tmp_path / "ep.sock")
        key = gateway.open_episode(socket_path=sock)
        got: list[int] = []

        def call(i: int) -> None:
            try:
                reply = exchange(sock, request(json.dumps(hi(i)).encode(), CLOSE), shut=False, timeout_s=30)
                got.append(statuses(reply)[0])
            except (OSError, IndexError):
                got.append(0)  # closed past the cap

        threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(got) == 40 and set(got) <= {0, 200, 429} and got.count(200) >= 1
        log = gateway.episodes[key]
        assert wait_for(lambda: gateway.settled(log) and not gateway._socket_conns)
        assert len(gateway.wait_settled(gateway.close_episode(key)).calls) == got.count(200)
    finally:
        close()


def test_a_client_that_never_reads_its_replies_is_cut_off(tiny_policy, tmp_path):
    """Hole (fixed): replies aiohttp writes itself (``/v1/models``, errors) had no write timeout: a
    client that pipelined requests and never read held its connection forever, past the idle
    timeout and past its episode's close. Now it is aborted after ``write_timeout_s``."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True, write_timeout_s=1.0)
    gateway = Gateway(tokenizer, config).start()
    try:
        sock = str(tmp_path / "ep.sock")
        gateway.open_episode(socket_path=sock)
        s = connect(sock, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            while True:  # until the server stops reading: its replies fill both buffers
                s.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        # a server already past its write timeout (a loaded machine) has aborted the connection
        except (TimeoutError, BlockingIOError, BrokenPipeError, ConnectionResetError):
            pass
        assert wait_for(lambda: not gateway._socket_conns, timeout_s=15)  # 1 s, on a loaded machine more
        s.close()
    finally:
        gateway.stop()


def test_calls_after_the_episode_ended_get_404_or_eof_at_once(tiny_policy, tmp_path):
    """After close: its key answers 404; a connection opened before, sending then half-closing,
    gets a 404 or EOF at once; its socket path is gone."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True)
    gateway, _, close = start_gateway(policy, tokenizer, config)
    try:
        sock = str(tmp_path / "ep.sock")
        key = gateway.open_episode(socket_path=sock)
        early = connect(sock, 10)
        assert wait_for(lambda: sum(gateway._socket_conns.values()) == 1)
        gateway.close_episode(key)
        t0 = time.monotonic()
        try:
            early.sendall(request(HI))
            early.shutdown(socket.SHUT_WR)
            assert statuses(read_all(early)) in ([], [404])
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert time.monotonic() - t0 < 5 and not Path(sock).exists()
        status, text = post(gateway, hi(), key=key)
        assert status == 404 and "episode_closed" in text
    finally:
        close()


def test_descriptors_sent_into_an_unread_connection_are_let_go_when_its_episode_closes(tiny_policy, tmp_path):
    """Hole (fixed): a client that pipelines requests without reading their replies until the
    gateway stops reading its socket, then sends file descriptors (SCM_RIGHTS: its socket itself,
    so that its own exit closes nothing, and a pipe's write end, the harness agent's output) had
    them held in the gateway's process past its episode's close, until the write timeout (60 s):
    a workspace command's output pipe never reached EOF, and ``Gateway.stop`` waited on the
    connection past its own 30 s and raised ``TimeoutError`` out of the runner's teardown. Now
    closing the episode aborts a connection whose replies stay unread, dropping what it sent."""
    policy, tokenizer = tiny_policy
    config = GatewayConfig("tiny", ServeLimits(max_tokens=2), require_episode=True, write_timeout_s=120.0)
    gateway = Gateway(tokenizer, config).start()
    sock = str(tmp_path / "ep.sock")
    key = gateway.open_episode(socket_path=sock)
    r, w = os.pipe()
    try:
        s = connect(sock, 1)
        s.setblocking(False)
        queued = array.array("i", [0])
        for _ in range(2000):  # until the gateway stops reading: its unread replies fill the buffers
            s.send(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" * 20)
            time.sleep(0.3)
            fcntl.ioctl(s, termios.TIOCOUTQ, queued)
            if queued[0]:
                break
        s.setblocking(True)
        s.sendmsg([b" "], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w, s.fileno()]))])
        os.close(w)
        s.close()
        assert not select.select([r], [], [], 1)[0]  # the gateway's process holds the write end
        gateway.close_episode(key)
        assert select.select([r], [], [], 5)[0] and os.read(r, 1) == b""  # EOF: let go
    finally:
        os.close(r)
        t0 = time.monotonic()
        gateway.stop()
        assert time.monotonic() - t0 < 10
