"""Shared fixtures: paths to the shared data and the (cached) real model."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    """Under pytest-xdist, each of the N test processes gets cores/N torch threads, and so do the
    processes a test starts (CLI runs, DDP ranks): N processes each spinning cores threads of
    OpenMP on the same cores run far slower than N times one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (whole files per process), the order files are handed out in: files with
    a test that runs alone (:func:`_runs_alone`) last, and of the others those with a ``slow`` test
    first; within each group, files with more tests first (pytest-xdist's own order, a proxy for a
    file's length). The Makefile keeps this order (``--no-loadscope-reorder``).

    - A ``slow`` file started last runs alone at the end while the other process waits.
      pytest-xdist 3.5+ by default orders files by their number of tests alone, so files of one
      or two minutes-long tests went last: the MBPP recipe smoke (one 262 s test) ran alone at
      the end of the CI of 2026-11-29.
    - A test that runs alone waits for the other process's running test to end, minutes where
      that is a slow file's. With slow files first and the sandbox's files among the rest, one
      process waited 617 s for the host lock in all (the CI of 46a3b4c, 58 min). Last, they wait
      for the short tests of the last files, or for each other.
    """
    if not hasattr(config, "workerinput"):
        return
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    alone = {item.path for item in items if _runs_alone(item)}
    count: dict = {}
    for item in items:
        count[item.path] = count.get(item.path, 0) + 1
    first = {path: k for k, path in enumerate(count)}
    items.sort(
        key=lambda item: (item.path in alone, item.path not in slow, -count[item.path], first[item.path])
    )


HOST_CHECKS = ("leak_check", "clean_host")
"""Fixtures of tests that check the whole host afterwards: no process, ``/tmp`` entry, cgroup or
disk space the test made is left. Another test running meanwhile would leave its own."""
_host_lock: int | None = None
_host_gate: int | None = None
"""Taken before the lock by a test that runs alone while it waits, and briefly by every other test
before it takes the lock shared: a test that waits to run alone goes next. Without it, the other
process's next test could take the lock shared again each time its last one let go (``flock``
is not fair), and a test waiting to run alone waited behind a whole run of them."""
_holding_alone = False
"""This process holds the host lock exclusively from one test to the next (see below)."""
_lock_wait_s = 0.0


def _runs_alone(item) -> bool:
    return bool(item.get_closest_marker("host_exclusive")) or any(f in item.fixturenames for f in HOST_CHECKS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist, a test that checks the whole host (:data:`HOST_CHECKS`, or marked
    ``host_exclusive``, as are those that measure how the CPU is shared) runs alone: from its
    fixtures' setup to their teardown it holds a lock that every other test holds shared (module
    fixtures start and stop inside a test's protocol).

    A run of such tests in a row keeps the lock from one to the next. Released after each, it went
    to the other process's next test, and each of the 200 such tests waited for a whole test of
    the other process (CLI runs of 10-60 s) to end: minutes of one process idle per CI run. The
    time spent waiting is reported at the end (``host lock``)."""
    global _host_lock, _host_gate, _holding_alone, _lock_wait_s
    if not hasattr(item.config, "workerinput"):  # one process, or pytest run by a test
        yield
        return
    if _host_lock is None:
        path = Path(tempfile.gettempdir()) / f"pytest-host-{item.config.workerinput['testrunuid']}.lock"
        _host_lock = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        _host_gate = os.open(path.with_suffix(".gate"), os.O_RDWR | os.O_CREAT, 0o600)
    alone = _runs_alone(item)
    if not (alone and _holding_alone):
        t0 = time.monotonic()
        fcntl.flock(_host_gate, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(_host_lock, fcntl.LOCK_EX)
            fcntl.flock(_host_gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(_host_gate, fcntl.LOCK_UN)
            fcntl.flock(_host_lock, fcntl.LOCK_SH)
        _lock_wait_s += time.monotonic() - t0
    _holding_alone = alone and nextitem is not None and _runs_alone(nextitem)
    try:
        yield
    finally:
        if not _holding_alone:
            fcntl.flock(_host_lock, fcntl.LOCK_UN)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # a worker: its wait goes back to the controller
        session.config.workeroutput["host_lock_wait_s"] = _lock_wait_s


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest without xdist must still load this file
def pytest_testnodedown(node, error):
    waits = getattr(node.config, "_host_lock_waits", [])
    waits.append((node.gateway.id, float(getattr(node, "workeroutput", {}).get("host_lock_wait_s", 0.0))))
    node.config._host_lock_waits = waits


def pytest_terminal_summary(terminalreporter, config):
    waits = getattr(config, "_host_lock_waits", None)
    if waits:
        spent = ", ".join(f"{worker} {seconds:.0f} s" for worker, seconds in sorted(waits))
        terminalreporter.write_line(f"host lock: time test processes waited for it: {spent}")


def quiet_trainer(root, steps: int, **overrides):
    """A CPU ``Trainer`` for ``steps`` steps without logger, checkpoints, progress bar or summary
    (``overrides``: other ``Trainer`` arguments, e.g. callbacks)."""
    from lightning import Trainer

    quiet = dict(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    return Trainer(**{**quiet, **overrides})


def shared_dir() -> Path:
    """``$LIT_CODERL_SHARED`` or ``<repo>/../shared`` (where CI puts MBPP)."""
    return Path(os.environ.get("LIT_CODERL_SHARED", REPO.parent / "shared")).resolve()


@pytest.fixture(scope="session")
def mbpp_dir() -> Path:
    path = shared_dir() / "data" / "mbpp"
    if not (path / "mbpp.jsonl").is_file():
        pytest.skip(f"MBPP data not found under {path} (set LIT_CODERL_SHARED)")
    return path


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct as a plain model (converted once, then cached)."""
    from lit_codeRL.policy.loading import load_model

    return load_model()


@pytest.fixture(scope="session")
def tiny_model():
    from lit_codeRL.policy.loading import load_model

    return load_model(name_or_path="tiny-random")


@pytest.fixture(autouse=True)
def _restore_environment():
    """Put ``os.environ`` back after every test. An in-process ``Trainer.fit`` under a
    launcher-based strategy writes ``LOCAL_RANK``/``NODE_RANK``/``MASTER_*`` into the test
    process for good; a later 2-process CLI run inheriting ``LOCAL_RANK`` then believes its ranks
    are launched externally, never starts rank 1, and waits for it forever (seen in CI)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)
