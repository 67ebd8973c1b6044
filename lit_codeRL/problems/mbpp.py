"""MBPP (Austin et al. 2021): hub id or local ``.jsonl``/``.json``/``.parquet``, standard splits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.record import Problem

HUB_ID = "google-research-datasets/mbpp"
# google-research/mbpp README: 11-510 test, 601-974 train, 511-600 validation, 1-10 prompt.
SPLITS: dict[str, tuple[int, int]] = {
    "test": (11, 510),
    "train": (601, 974),
    "validation": (511, 600),
    "prompt": (1, 10),
    "all": (1, 10**9),
}
FILES = {"full": "mbpp.jsonl", "sanitized": "sanitized-mbpp.json"}


def _entry_point(tests: list[str], code: str) -> str | None:
    for test in tests:
        match = re.search(
            r"assert\s+(?:not\s+)?\(?\s*(?:set\()?(?:math\.isclose\()?([A-Za-z_]\w*)\s*\(", test
        )
        if match and match.group(1) not in {
            "set",
            "sorted",
            "round",
            "abs",
            "math",
            "len",
            "str",
            "list",
            "tuple",
        }:
            return match.group(1)
    match = re.search(r"^def\s+([A-Za-z_]\w*)", code or "", re.M)
    return match.group(1) if match else None


def _record(row: dict[str, Any], source: str) -> Problem:
    tests = list(row["test_list"])
    setup = row.get("test_setup_code") or ""
    imports = row.get("test_imports") or []
    if imports:
        setup = "\n".join([*imports, setup]).strip()
    code = row.get("code") or ""
    task_id = int(row["task_id"])
    return Problem(
        task_id=f"mbpp/{task_id}",
        prompt=(row.get("text") or row.get("prompt") or "").strip(),
        entry_point=_entry_point(tests, code),
        tests=tuple(tests),
        setup_code=setup,
        reference_solution=code,
        source=source,
        metadata={"mbpp_task_id": task_id, "challenge_test_list": list(row.get("challenge_test_list") or [])},
    )


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        return data if isinstance(data, list) else data.get("problems", data.get("data", []))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    raise ConfigError(f"unsupported MBPP file type {path.suffix!r} ({path}); use .jsonl, .json or .parquet")


def resolve_local(path: Path, variant: str) -> Path:
    """A file, or a directory holding ``mbpp.jsonl`` / ``sanitized-mbpp.json``."""
    if path.is_dir():
        candidate = path / FILES[variant]
        if not candidate.is_file():
            raise FileNotFoundError(f"no {FILES[variant]} in MBPP directory {path}")
        return candidate
    if not path.is_file():
        raise FileNotFoundError(f"MBPP file not found: {path} (pass a local mbpp.jsonl or a hub id)")
    return path


def load_mbpp(source: str = HUB_ID, split: str = "test", variant: str = "full") -> list[Problem]:
    """MBPP problems of ``split`` (test/train/validation/prompt/all), ``variant`` full (974) or sanitized (427)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown MBPP split {split!r}; choose one of {sorted(SPLITS)}")
    if variant not in FILES:
        raise ConfigError(f"unknown MBPP variant {variant!r}; choose 'full' or 'sanitized'")
    path = Path(source).expanduser()
    if path.exists() or path.suffix in {".jsonl", ".json", ".parquet"} or source.startswith((".", "/", "~")):
        file = resolve_local(path, variant)
        if file.name.startswith("sanitized"):
            variant = "sanitized"
        rows = _read_rows(file)
        origin = str(file)
    else:
        rows = _hub_rows(source, variant)
        origin = source
    low, high = SPLITS[split]
    problems = [_record(r, f"mbpp:{origin}") for r in rows if low <= int(r["task_id"]) <= high]
    return sorted(problems, key=lambda p: p.metadata["mbpp_task_id"])


def _hub_rows(hub_id: str, variant: str) -> list[dict[str, Any]]:
    try:
        from datasets import load_dataset

        data = load_dataset(hub_id, variant)
    except Exception as err:  # offline, unknown id, missing `datasets`
        raise ConfigError(
            f"cannot load MBPP from hub id {hub_id!r} ({type(err).__name__}; offline?); "
            "pass a local path such as ../shared/data/mbpp/mbpp.jsonl"
        ) from None
    return [row for split in data.values() for row in split]
