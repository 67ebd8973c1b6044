"""Where synthesized tasks and played reference trajectories are cached (stdlib only: a BC run
that reads its cache imports nothing of the synthesis itself)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "LIT_CODERL_SYNTH_CACHE"
DEFAULT_CACHE = Path("~") / ".cache" / "lit-coderl" / "synth"


def cache_root() -> Path:
    """``$LIT_CODERL_SYNTH_CACHE``, else ``~/.cache/lit-coderl/synth``."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser().resolve()
