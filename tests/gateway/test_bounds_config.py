"""Every request bound of the gateway (``ServeLimits``) is a knob a user can see and set: a
``lit-coderl serve`` flag with its help line, and for training the ``env.harness`` settings of a
``fit`` config (``--help``, ``--print_config``); what is set reaches the running server."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings
from lit_codeRL.gateway.cli import gateway_config, parser, serve_limits
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import GatewayConfig
from lit_codeRL.policy.engine import EngineSettings, SamplingParams, make_engine
from lit_codeRL.rollout.harness import HarnessRunner
from tests.cli_process import run_cli, serve_url

from .test_hostile import hi, raw_call, status_of, wait_for

REPO = Path(__file__).resolve().parents[2]

SERVE_FLAGS = {
    "max_tokens": ("--max-tokens", "completion length of a request that names none"),
    "max_tokens_limit": ("--max-tokens-limit", "largest max_tokens a request may ask for"),
    "max_context_tokens": ("--max-context", "prompt + max_tokens at most"),
    "max_n": ("--max-n", "largest n (choices) a request may ask for"),
    "max_calls_per_episode": (
        "--max-calls-per-episode",
        "with --record: calls one key may make, 404 past it",
    ),
    "max_inflight_per_episode": (
        "--max-inflight-per-episode",
        "with --record: calls of one key being answered at once",
    ),
}
"""Each ``ServeLimits`` field: its ``serve`` flag and (part of) the flag's help line."""

GATEWAY_FLAGS = {
    "max_body_mb": ("--max-body-mb", "largest request body in MiB, 413 past it; with --record also what one"),
    "max_json_values": (
        "--max-json-values",
        "JSON values (commas and opening brackets outside strings) a request body may hold",
    ),
    "max_connections_per_socket": ("--max-connections", "connections the --uds socket holds open at once"),
    "max_connections": (
        "--max-total-connections",
        "connections open at once in all (TCP and --uds), more closed",
    ),
    "idle_timeout_s": ("--idle-timeout-s", "a connection that sends no request, or not all its body,"),
    "write_timeout_s": ("--write-timeout-s", "a reply the client does not read within this long is dropped"),
    "max_record_keys": ("--max-record-keys", "with --record: keys (episodes) kept at once"),
    "parse_workers": ("--parse-workers", "threads that parse and tokenize request bodies"),
    "max_batch_rows": ("--max-batch", "sequences per generate call"),
    "batch_wait_ms": ("--batch-wait-ms", "wait for more requests to batch with the first"),
}
"""Each ``GatewayConfig`` field a user sets: its ``serve`` flag and (part of) its help line."""
GATEWAY_SET_OTHERWISE = {"served_name", "limits", "require_episode", "record_all"}
"""``--served-name``, the bounds above, and what ``--record`` and training decide."""


def test_serve_help_lists_every_request_bound_with_its_doc():
    assert set(SERVE_FLAGS) == {f.name for f in dataclasses.fields(ServeLimits)}, "a bound without a flag"
    out = run_cli("serve", "--help", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    text = " ".join(out.stdout.split())  # argparse wraps help lines
    fields = {f.name for f in dataclasses.fields(GatewayConfig)}
    assert set(GATEWAY_FLAGS) | GATEWAY_SET_OTHERWISE == fields, "a gateway setting without a flag"
    for flag, doc in [*SERVE_FLAGS.values(), *GATEWAY_FLAGS.values()]:
        assert f"{flag} {flag[2:].upper().replace('-', '_')} {doc}" in text, flag


def test_serve_flags_set_every_bound():
    args = parser().parse_args(
        ["--max-tokens", "7", "--max-tokens-limit", "70", "--max-context", "700", "--max-n", "3",
         "--max-calls-per-episode", "5", "--max-inflight-per-episode", "2"]
    )  # fmt: skip
    assert serve_limits(args, positions=2048) == ServeLimits(7, 70, 700, 3, 5, 2)
    assert serve_limits(parser().parse_args([]), positions=2048) == ServeLimits(max_context_tokens=2048)
    args = parser().parse_args(
        ["--max-body-mb", "2", "--max-json-values", "11", "--max-connections", "3", "--idle-timeout-s", "4.5", "--write-timeout-s", "6",
         "--max-record-keys", "7", "--parse-workers", "8", "--max-batch", "9", "--batch-wait-ms", "10",
         "--record", "somewhere", "--max-total-connections", "12"]
    )  # fmt: skip
    config = gateway_config(args, "served", positions=2048)
    assert {name: getattr(config, name) for name in GATEWAY_FLAGS} == {
        "max_body_mb": 2, "max_json_values": 11, "max_connections_per_socket": 3, "idle_timeout_s": 4.5, "write_timeout_s": 6.0,
        "max_record_keys": 7, "parse_workers": 8, "max_batch_rows": 9, "batch_wait_ms": 10.0,
        "max_connections": 12,
    }  # fmt: skip
    assert (config.served_name, config.record_all) == ("served", True)
    assert gateway_config(parser().parse_args([]), "served", 2048) == GatewayConfig(
        "served", ServeLimits(max_context_tokens=2048)
    )
    for bad in (["--max-body-mb", "0"], ["--idle-timeout-s", "0"], ["--write-timeout-s", "nan"]):
        with pytest.raises(SystemExit):
            parser().parse_args(bad)


def post(url: str, body: dict, key: str) -> tuple[int, str]:
    host, port = url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(), headers=headers)
    r = conn.getresponse()
    return r.status, r.read().decode()


def test_serve_flags_reach_the_running_server(tmp_path):
    """The real ``lit-coderl serve`` process, each bound set lower than its default: ``n`` past
    ``--max-n`` is a 400; with ``--record`` (every key an episode) a key's concurrent calls past
    ``--max-inflight-per-episode`` get 429 and its calls past ``--max-calls-per-episode`` 404."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "lit_codeRL.cli", "serve", "--model", "tiny-random", "--port", "0",
         "--dtype", "model", "--record", str(tmp_path), "--max-n", "2", "--max-calls-per-episode", "2",
         "--max-inflight-per-episode", "1", "--max-body-mb", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        url = serve_url(proc)
        status, text = post(url, hi(n=3, max_tokens=2), "too-many-choices")
        assert status == 400 and json.loads(text)["error"]["param"] == "n", text
        assert post(url, hi(n=2, max_tokens=2), "two-choices")[0] == 200
        big = hi(max_tokens=2)
        big["messages"][0]["content"] = "x" * (3 << 19)  # 1.5 MiB: past --max-body-mb 1
        assert post(url, big, "big-body")[0] == 413
        # four at once (the engine's owner picks up work every 0.2 s): one is answered, three refused
        with ThreadPoolExecutor(4) as pool:
            burst = sorted(
                s for s, _ in pool.map(lambda i: post(url, hi(i, max_tokens=32), "burst"), range(4))
            )
        assert burst == [200, 429, 429, 429], burst
        capped = [post(url, hi(i, max_tokens=2), "capped")[0] for i in range(3)]
        assert capped == [200, 200, 404], capped
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_fit_config_sets_the_harness_gateways_bounds(tiny_policy, tmp_path):
    """``env.harness.max_inflight_calls``, ``max_n`` (and the workspace's ``max_open_files``) are in
    ``fit``'s help, the first two in its printed config with their docs; the printed config, made
    into the harness env, gives the training gateway those bounds, and its server enforces them."""
    out = run_cli("fit", "--model.help", "GRPOModule")
    assert out.returncode == 0, out.stderr[-2000:]
    help_text = " ".join(out.stdout.split())
    assert "--model.env.harness.max_inflight_calls MAX_INFLIGHT_CALLS Calls of one episode" in help_text
    assert "--model.env.harness.max_n MAX_N Largest ``n`` (choices per call)" in help_text
    assert (
        "--model.env.harness.train_choices {chosen,all} Which choices of an ``n`` > 1 call are trained"
        in help_text
    )
    for knob, doc in (
        ("max_body_mb", "Largest request body an agent may send, in MiB"),
        ("max_connections", "Connections one episode's socket holds open at once"),
        ("idle_timeout_s", "A connection of the agent's that sends no request"),
        ("write_timeout_s", "A reply the agent does not read within this long is dropped"),
    ):
        assert f"--model.env.harness.{knob} {knob.upper()} {doc}" in help_text, knob
    files = "--model.env.harness.swe.workspace.max_open_files MAX_OPEN_FILES Per command (RLIMIT_NOFILE"
    assert files in help_text  # the agent program's open files (tests/envs/test_harness.py)
    out = run_cli(
        "fit", "--config", "configs/grpo_harness.yaml", "--model.init_args.env.harness.max_inflight_calls",
        "2", "--model.init_args.env.harness.max_n", "3", "--model.init_args.env.harness.max_body_mb", "5",
        "--model.init_args.env.harness.max_connections", "6", "--model.init_args.env.harness.idle_timeout_s",
        "7.5", "--model.init_args.env.harness.write_timeout_s", "8",
        "--model.init_args.env.harness.train_choices", "all", "--print_config=comments",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "max_inflight_calls: 2")
    assert "# Calls of one episode the gateway answers at once" in lines[at - 1], lines[at - 2 : at + 1]
    harness = yaml.safe_load(out.stdout)["model"]["init_args"]["env"]["harness"]
    harness["swe"]["repo_cache"] = str(tmp_path / "repos")
    policy, tokenizer = tiny_policy
    engine = make_engine(EngineSettings(name="hf", dtype="model"), tokenizer, policy)
    runner = HarnessRunner(engine, HarnessEnv(HarnessSettings(**harness)), SamplingParams(max_new_tokens=4))
    gateway = runner.gateway
    try:
        limits, config = gateway.config.limits, gateway.config
        assert (limits.max_inflight_per_episode, limits.max_n, limits.max_calls_per_episode) == (2, 3, 200)
        set_here = (config.max_body_mb, config.max_connections_per_socket, config.idle_timeout_s)
        assert set_here + (config.write_timeout_s,) == (5, 6, 7.5, 8.0)
        assert runner.env.settings.train_choices == "all"  # the rows' layout (tests/gateway/test_records.py)
        sock = str(tmp_path / "episode.sock")
        key = gateway.open_episode(socket_path=sock)
        too_many = raw_call(sock, hi(n=4), timeout_s=10)  # answered at once, before any engine runs
        assert status_of(too_many) == 400
        # nobody runs the engine: calls that cannot batch together stay in flight, the rest get 429
        socks = [raw_call(sock, hi(i, stop=[f"zz{i}"])) for i in range(5)]
        log = gateway.episodes[key]
        # the n=4 call and three of the five refused, two in flight: waited for, since a call can
        # count as received while it is still parsed (a loaded machine showed 2 in flight, 3 refused)
        assert wait_for(lambda: log.inflight == 2 and log.errors == 4), (log.inflight, log.errors)
        assert log.requests + log.errors >= 6
        for s in [too_many, *socks]:
            s.close()
    finally:
        runner.close()
