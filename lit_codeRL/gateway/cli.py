"""``lit-coderl serve``: the policy behind an OpenAI-compatible API.

    lit-coderl serve --model smollm2-135m-instruct --port 8000
    lit-coderl serve --checkpoint runs/grpo/version_0/checkpoints/last.ckpt --uds /tmp/policy.sock
    lit-coderl serve --model runs/grpo/version_0/hf_model --record calls/   # token-exact call log

Any harness that takes a ``--base_url`` then evaluates the checkpoint (``http://HOST:PORT/v1``).
With ``--record DIR`` every call is appended to ``DIR/calls.jsonl`` with its exact prompt and
sampled ids and log-probs, keyed by the episode (``/episodes/<key>/v1`` or the API key).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import Gateway, GatewayConfig

log = logging.getLogger("lit_codeRL")

_DRAIN_S = 30.0
"""On SIGTERM/SIGINT, how long calls already being answered may take to finish and be recorded."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lit-coderl serve", description="Serve a policy through an OpenAI-compatible API."
    )
    p.add_argument(
        "--model",
        default="smollm2-135m-instruct",
        help="model.name_or_path: a directory (a run's hf_model), a .gguf, a hub id, smollm2-135m-instruct or tiny-random",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="a lit-coderl training checkpoint (.ckpt): its model settings and weights",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one, printed)")
    p.add_argument("--uds", default=None, help="also listen on this unix socket")
    p.add_argument("--no-tcp", action="store_true", help="listen on --uds only")
    p.add_argument(
        "--served-name", default=None, help="the model name /v1/models lists (default: the model's)"
    )
    p.add_argument(
        "--max-tokens", type=int, default=256, help="completion length of a request that names none"
    )
    p.add_argument(
        "--max-tokens-limit", type=int, default=4096, help="largest max_tokens a request may ask for"
    )
    p.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="prompt + max_tokens at most (default: the model's positions)",
    )
    limits = ServeLimits()
    p.add_argument(
        "--max-n",
        type=_positive,
        default=limits.max_n,
        help="largest n (choices) a request may ask for (default %(default)s)",
    )
    p.add_argument(
        "--max-calls-per-episode",
        type=_positive,
        default=limits.max_calls_per_episode,
        help="with --record: calls one key may make, 404 past it (default: no bound)",
    )
    p.add_argument(
        "--max-inflight-per-episode",
        type=_positive,
        default=limits.max_inflight_per_episode,
        help="with --record: calls of one key being answered at once, 429 past it (default %(default)s)",
    )
    config = GatewayConfig()
    p.add_argument(
        "--max-body-mb",
        type=_positive,
        default=config.max_body_mb,
        help="largest request body in MiB, 413 past it; with --record also what one key's calls being "
        "read hold together, 429 past it (default %(default)s)",
    )
    p.add_argument(
        "--max-json-values",
        type=_positive,
        default=config.max_json_values,
        help="JSON values (commas and opening brackets outside strings) a request body may hold, 413 past it "
        "(default %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        type=_positive,
        default=config.max_connections_per_socket,
        help="connections the --uds socket holds open at once, more closed (default %(default)s)",
    )
    p.add_argument(
        "--max-total-connections",
        type=_positive,
        default=config.max_connections,
        help="connections open at once in all (TCP and --uds), more closed; at most half the open-file "
        "limit (default %(default)s)",
    )
    p.add_argument(
        "--idle-timeout-s",
        type=_seconds,
        default=config.idle_timeout_s,
        help="a connection that sends no request, or not all its body, this long is closed (default %(default)s)",
    )
    p.add_argument(
        "--write-timeout-s",
        type=_seconds,
        default=config.write_timeout_s,
        help="a reply the client does not read within this long is dropped, unrecorded (default %(default)s)",
    )
    p.add_argument(
        "--max-record-keys",
        type=_positive,
        default=config.max_record_keys,
        help="with --record: keys (episodes) kept at once, the least recently used idle one forgotten "
        "(default %(default)s)",
    )
    p.add_argument(
        "--parse-workers",
        type=_positive,
        default=config.parse_workers,
        help="threads that parse and tokenize request bodies (default %(default)s)",
    )
    p.add_argument("--max-batch", type=int, default=64, help="sequences per generate call")
    p.add_argument(
        "--batch-wait-ms", type=float, default=5.0, help="wait for more requests to batch with the first"
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "model", "float32", "bfloat16", "float16"],
        help="engine.dtype",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of unseeded requests' sampling")
    p.add_argument(
        "--record", default=None, help="append every call's exact ids and log-probs to DIR/calls.jsonl"
    )
    return p


def _positive(text: str) -> int:
    """A count bound of at least 1: 0 would refuse every call, which is no server at all."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _seconds(text: str) -> float:
    """A time limit: more than 0 s (0 would close every connection before its first byte)."""
    value = float(text)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def gateway_config(args: argparse.Namespace, name: str, positions: int | None) -> GatewayConfig:
    """The gateway the flags describe; ``name``: the served model name."""
    return GatewayConfig(
        name,
        serve_limits(args, positions),
        args.max_batch,
        args.batch_wait_ms,
        max_body_mb=args.max_body_mb,
        max_json_values=args.max_json_values,
        record_all=args.record is not None,
        max_record_keys=args.max_record_keys,
        max_connections_per_socket=args.max_connections,
        max_connections=args.max_total_connections,
        idle_timeout_s=args.idle_timeout_s,
        write_timeout_s=args.write_timeout_s,
        parse_workers=args.parse_workers,
    )


def serve_limits(args: argparse.Namespace, positions: int | None) -> ServeLimits:
    """The request bounds the flags set; ``positions``: the model's, the default context bound."""
    return ServeLimits(
        max_tokens=args.max_tokens,
        max_tokens_limit=args.max_tokens_limit,
        max_context_tokens=args.max_context or positions,
        max_n=args.max_n,
        max_calls_per_episode=args.max_calls_per_episode,
        max_inflight_per_episode=args.max_inflight_per_episode,
    )


def command(argv: list[str]) -> None:
    args = parser().parse_args(argv)
    try:
        run(args)
    except ConfigError as err:
        print(f"lit-coderl serve: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def run(args: argparse.Namespace) -> None:
    from lit_codeRL.policy.engine import EngineSettings, make_engine
    from lit_codeRL.policy.loading import ModelSettings, embedded_ids, load_policy

    policy, tokenizer = load_policy(ModelSettings(name_or_path=args.model), args.checkpoint)
    policy.eval()
    if torch.cuda.is_available():
        policy.to("cuda")
    engine = make_engine(EngineSettings(name="hf", dtype=args.dtype), tokenizer, policy)
    positions = getattr(policy.config, "max_position_embeddings", None)
    name = args.served_name or Path(args.checkpoint or args.model).name
    gateway = Gateway(tokenizer, gateway_config(args, name, positions), vocab_size=embedded_ids(policy))
    gateway.start(
        host=None if args.no_tcp else args.host, port=None if args.no_tcp else args.port, uds=args.uds
    )
    where = " and ".join(x for x in (gateway.url, args.uds) if x)
    print(f"lit-coderl serve: {name} on {where}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    writer = _Recorder(gateway, Path(args.record)) if args.record else None
    generator = torch.Generator().manual_seed(args.seed)
    with torch.inference_mode():
        while not stop.is_set():
            gateway.queue.run_pending(engine, 0.2, generator)
            if writer is not None:
                writer.flush()
        # A call's record exists only after its reply is written: a client may have its reply (and
        # stop the server) before then. Answer and record what is in flight before leaving.
        deadline = time.monotonic() + _DRAIN_S
        while gateway.answering() and time.monotonic() < deadline:
            gateway.queue.run_pending(engine, 0.05, generator)
    gateway.stop()
    if writer is not None:
        writer.flush()


class _Recorder:
    """Moves each episode's recorded calls to ``calls.jsonl`` (a server that runs for days keeps
    only what the next call continues from in memory)."""

    def __init__(self, gateway: Gateway, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.gateway, self.path = gateway, out / "calls.jsonl"

    def flush(self) -> None:
        lines = []
        with self.gateway._lock:
            for episode in self.gateway.episodes.values():
                lines += [json.dumps(c.to_dict()) for c in episode.calls]
                episode.calls.clear()
        if lines:
            with self.path.open("a") as f:
                f.write("\n".join(lines) + "\n")
