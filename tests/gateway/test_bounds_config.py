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

import yaml

from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings
from lit_codeRL.gateway.cli import parser, serve_limits
from lit_codeRL.gateway.requests import ServeLimits
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


def test_serve_help_lists_every_request_bound_with_its_doc():
    assert set(SERVE_FLAGS) == {f.name for f in dataclasses.fields(ServeLimits)}, "a bound without a flag"
    out = run_cli("serve", "--help", timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    text = " ".join(out.stdout.split())  # argparse wraps help lines
    for flag, doc in SERVE_FLAGS.values():
        assert f"{flag} {flag[2:].upper().replace('-', '_')} {doc}" in text, flag


def test_serve_flags_set_every_bound():
    args = parser().parse_args(
        ["--max-tokens", "7", "--max-tokens-limit", "70", "--max-context", "700", "--max-n", "3",
         "--max-calls-per-episode", "5", "--max-inflight-per-episode", "2"]
    )  # fmt: skip
    assert serve_limits(args, positions=2048) == ServeLimits(7, 70, 700, 3, 5, 2)
    assert serve_limits(parser().parse_args([]), positions=2048) == ServeLimits(max_context_tokens=2048)


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
         "--max-inflight-per-episode", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        url = serve_url(proc)
        status, text = post(url, hi(n=3, max_tokens=2), "too-many-choices")
        assert status == 400 and json.loads(text)["error"]["param"] == "n", text
        assert post(url, hi(n=2, max_tokens=2), "two-choices")[0] == 200
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
    files = "--model.env.harness.swe.workspace.max_open_files MAX_OPEN_FILES Per command (RLIMIT_NOFILE"
    assert files in help_text  # the agent program's open files (tests/envs/test_harness.py)
    out = run_cli(
        "fit", "--config", "configs/grpo_harness.yaml", "--model.init_args.env.harness.max_inflight_calls",
        "2", "--model.init_args.env.harness.max_n", "3", "--print_config=comments",
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
        limits = gateway.config.limits
        assert (limits.max_inflight_per_episode, limits.max_n, limits.max_calls_per_episode) == (2, 3, 200)
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
