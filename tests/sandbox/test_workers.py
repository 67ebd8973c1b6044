"""How many sandbox workers ``workers: 0`` starts: the cores this process may use, one left for
the decode loop and trainer, at most ``WORKERS_CAP``; an explicit ``workers`` wins."""

from __future__ import annotations

import os

import pytest

from lit_codeRL.sandbox import config
from lit_codeRL.sandbox.config import WORKERS_CAP, SandboxConfig, default_workers


@pytest.mark.parametrize(
    ("affinity", "machine", "expected"),
    [
        (16, 16, 8),  # a 16-core GPU box: capped, no longer 16
        (4, 64, 3),  # a SLURM job given 4 of 64 cores: the affinity counts, not the machine
        (2, 2, 1),  # the 2-core CI runner: one for the trainer, one for the sandbox
        (1, 1, 1),  # never 0
        (9, 9, 8),
    ],
)
def test_default_follows_the_usable_cores(monkeypatch, affinity, machine, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: machine)
    assert WORKERS_CAP == 8
    assert default_workers() == expected
    assert SandboxConfig().worker_count() == expected
    assert SandboxConfig(workers=12).worker_count() == 12  # the knob wins


def test_without_affinity_the_cpu_count_counts(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS has none
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert config.usable_cores() == 6
    assert default_workers() == 5


def test_the_pool_uses_the_rule(monkeypatch):
    """``Sandbox`` sizes itself by the config's rule (a local pool: it starts real workers)."""
    from lit_codeRL.sandbox import make_sandbox

    monkeypatch.setattr(config, "usable_cores", lambda: 5)
    with make_sandbox(backend="local", timeout_s=2.0) as sb:
        assert sb.workers == 4  # not this machine's CPU count
