"""Shared fixtures: paths to the shared data and the (cached) real model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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
