"""A gateway over the tiny random policy, its engine driven by a background thread (as
``lit-coderl serve``'s main loop drives it)."""

from __future__ import annotations

import threading

import pytest
import torch

from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import Gateway, GatewayConfig
from lit_codeRL.policy.engine import EngineSettings, make_engine
from lit_codeRL.policy.loading import ModelSettings, embedded_ids, load_model


@pytest.fixture(scope="module")
def tiny_policy():
    torch.manual_seed(0)
    policy, tokenizer = load_model(ModelSettings(name_or_path="tiny-random"))
    policy.eval()
    return policy, tokenizer


def start_gateway(policy, tokenizer, config: GatewayConfig | None = None, forced=None):
    engine = make_engine(EngineSettings(name="hf", dtype="model"), tokenizer, policy)
    config = config or GatewayConfig("tiny", ServeLimits(max_tokens=24))
    gateway = Gateway(tokenizer, config, forced, vocab_size=embedded_ids(policy))
    gateway.start(port=0)
    stop = threading.Event()

    def drive() -> None:
        generator = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            gateway.pump(engine, stop.is_set, generator)

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join(timeout=30)
        gateway.stop()

    return gateway, engine, close


@pytest.fixture(scope="module")
def served(tiny_policy):
    policy, tokenizer = tiny_policy
    gateway, engine, close = start_gateway(policy, tokenizer)
    yield gateway, policy, tokenizer
    close()
