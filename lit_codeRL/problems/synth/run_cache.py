"""Suite runs of a repository's synthesis, cached on disk: synthesizing it again (more tries, other
kinds, another ``--per-function``, more repositories beside it) runs no test it already ran.

A run is a pure function of the clean tree, the candidate's diff, the test modules, the
distributions the sandbox lets the tests import, the time limits and the trusted runner, so that
is the key: ``<cache>/repo-runs/<tree>/`` holds the clean baseline and one JSON file per candidate
run (its statuses, failure messages, verdict and times; the keep rule reads them again, so
changing ``--max-fail-to-pass`` needs no run). The limits come
from the cached baseline, so they match from one synthesis to the next. Entries are written
atomically; a file that does not read back is run again. Only runs that finished or met their
limit are cached: a sandbox failure or a run that left no record runs again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lit_codeRL.grading import repo as grading_repo
from lit_codeRL.problems.synth.cache_dir import cache_root

_FORMAT = 2
"""Bump when what a cached run means changes (2: a failure message pytest cut is read whole)."""


def _runner_digest() -> str:
    """The trusted runner and the files it imports: a change to any may change every status."""
    h = hashlib.sha256()
    for path in grading_repo.RUNNER_FILES:
        h.update(Path(path).read_bytes())
    return h.hexdigest()


def tree_dir(
    files: Mapping[str, str | bytes],
    modules: Sequence[str],
    toolchain: Sequence[str] = ("pytest",),
    root: Path | None = None,
) -> Path:
    """The cache directory of a clean tree run with ``modules`` in a sandbox whose toolchain (the
    distributions the tests can import, ``WorkspaceConfig.toolchain``) is ``toolchain``."""
    key = f"{_FORMAT}\0{_runner_digest()}\0{json.dumps(sorted(modules))}\0{json.dumps(sorted(toolchain))}"
    h = hashlib.sha256(key.encode())
    for path in sorted(files):
        content = files[path]
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        h.update(f"\0{path}\0{isinstance(content, bytes)}\0{len(data)}\0".encode())
        h.update(data)
    return (root or cache_root()) / "repo-runs" / h.hexdigest()[:32]


def run_path(directory: Path, diff: str, limits: tuple[float, float | None], attempt: int = 0) -> Path:
    """Where the run of ``diff`` within ``limits`` (wall, CPU seconds) is cached; ``attempt``: which
    run of it (a kept bug runs twice: ``validate.remeasure``)."""
    again = f"{attempt}\0" if attempt else ""  # the first run's key is as it was
    key = hashlib.sha256(
        f"{limits[0]!r}\0{limits[1]!r}\0{again}".encode() + diff.encode("utf-8", "surrogateescape")
    )
    return directory / "runs" / f"{base64.b32encode(key.digest()[:20]).decode().lower()}.json"


def load(path: Path | None) -> dict[str, Any] | None:
    """A cached entry (``None``: no cache, none yet, or one that does not read back)."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def store(path: Path | None, data: Mapping[str, Any]) -> None:
    """Write an entry atomically (``None``: no cache); a cache that cannot be written only costs
    the run again."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass
