"""``load_problems(source, split)``: one entry point for every problem source."""

from __future__ import annotations

import json
from pathlib import Path

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.humaneval import load_humaneval
from lit_codeRL.problems.mbpp import HUB_ID, load_mbpp
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.seed_json import is_seed_json, load_seed_json

EMBEDDED_SPLITS = {"train": {"train"}, "eval": {"eval"}, "test": {"eval"}, "all": {"train", "eval"}}


def embedded_data_dir() -> Path:
    """The repository's ``data/`` folder (the package is used from a source checkout / editable install)."""
    return Path(__file__).resolve().parents[2] / "data"


def load_embedded(split: str = "train", path: str | Path | None = None) -> list[Problem]:
    """The project's own MBPP-style set (``data/coderl_basic/problems.jsonl``), split train / eval."""
    if split not in EMBEDDED_SPLITS:
        raise ConfigError(
            f"unknown split {split!r} for the embedded set; choose one of {sorted(EMBEDDED_SPLITS)}"
        )
    file = Path(path) if path else embedded_data_dir() / "coderl_basic" / "problems.jsonl"
    if not file.is_file():
        raise FileNotFoundError(f"embedded problem set not found: {file} (run from a lit-coderl checkout)")
    wanted = EMBEDDED_SPLITS[split]
    problems = []
    for line in file.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("split", "train") not in wanted:
            continue
        problems.append(
            Problem(
                task_id=row["task_id"],
                prompt=row["text"],
                entry_point=row.get("entry_point"),
                tests=tuple(row["test_list"]),
                setup_code=row.get("test_setup_code", ""),
                reference_solution=row.get("code"),
                difficulty=row.get("difficulty"),
                source="embedded",
                metadata={"split": row.get("split", "train")},
            )
        )
    return problems


def load_problems(source: str = "embedded", split: str = "train") -> list[Problem]:
    """Problems from ``source``: ``embedded``, ``mbpp`` / ``mbpp-sanitized`` (hub), ``humaneval``,
    a hub id, or a local MBPP file/dir, embedded-format ``.jsonl`` or seed-format ``.json``."""
    if source in ("embedded", "coderl_basic"):
        return load_embedded(split)
    if source == "humaneval":
        return load_humaneval()
    if source in ("mbpp", HUB_ID):
        return load_mbpp(HUB_ID, split)
    if source == "mbpp-sanitized":
        return load_mbpp(HUB_ID, split, variant="sanitized")
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".json" and is_seed_json(path):
        return load_seed_json(path)
    if path.is_file() and path.suffix == ".jsonl" and _is_embedded_format(path):
        return load_embedded(split, path)
    if path.is_file() and path.name.startswith("sanitized"):
        return load_mbpp(str(path), split, variant="sanitized")
    if path.exists() or source.startswith((".", "/", "~")) or path.suffix in {".json", ".jsonl", ".parquet"}:
        return load_mbpp(str(path), split)
    if "/" in source:  # a hub id in MBPP format
        return load_mbpp(source, split)
    raise ConfigError(
        f"unknown problem source {source!r}: use embedded, mbpp, mbpp-sanitized, humaneval, a hub id or a file path"
    )


def _is_embedded_format(path: Path) -> bool:
    with path.open() as f:
        first = f.readline()
    try:
        return isinstance(json.loads(first).get("task_id"), str)
    except (json.JSONDecodeError, AttributeError):
        return False
