"""Shared fixtures: paths to the shared data and the (cached) real model."""

from __future__ import annotations

import os
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
