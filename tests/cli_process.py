"""The ``lit-coderl`` command as the tests run it: a subprocess of this interpreter, offline."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``lit-coderl *args`` from the repository root, its output captured, no hub access."""
    return subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )


def serve_url(proc: subprocess.Popen) -> str:
    """The base URL a started ``lit-coderl serve`` process prints once it listens."""
    line = ""
    while "lit-coderl serve:" not in line:
        line = proc.stdout.readline()
        assert line, "serve exited before listening"
    return line.split(" on ")[1].strip()
