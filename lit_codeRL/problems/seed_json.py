"""The seed-style JSON format: ``[{function_name, docstring, test_cases: [[input, output], ...], starter_code}]``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.record import Problem


def _args(value: Any) -> str:
    # A list input holds positional arguments; anything else is the single argument.
    if isinstance(value, list):
        return ", ".join(repr(v) for v in value)
    return repr(value)


def seed_record(entry: dict[str, Any], source: str, index: int) -> Problem:
    missing = [k for k in ("function_name", "test_cases") if k not in entry]
    if missing:
        raise ConfigError(f"{source} entry {index}: missing key(s) {missing}")
    name = entry["function_name"]
    try:
        pairs = tuple((_args(case[0]), repr(case[1])) for case in entry["test_cases"])
    except (TypeError, IndexError, KeyError):
        raise ConfigError(f"{source} entry {index}: test_cases must be [[input, output], ...]") from None
    starter = entry.get("starter_code") or f"def {name}():"
    docstring = entry.get("docstring", "")
    return Problem(
        task_id=str(entry.get("id") or f"seed/{name}"),
        prompt=f"{docstring}\n\n{starter}".strip(),
        entry_point=name,
        io_pairs=pairs,
        reference_solution=entry.get("reference_solution") or entry.get("solution"),
        starter_code=starter,
        difficulty=entry.get("difficulty"),
        source=source,
        metadata={k: v for k, v in entry.items() if k not in {"test_cases", "docstring", "starter_code"}},
    )


def load_seed_json(path: str | Path) -> list[Problem]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"problem file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON ({err})") from None
    entries = data.get("problems", []) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a list of problems or {{'problems': [...]}}")
    return [seed_record(e, str(path), i) for i, e in enumerate(entries)]


def is_seed_json(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    entries = data.get("problems", []) if isinstance(data, dict) else data
    return bool(entries) and isinstance(entries[0], dict) and "function_name" in entries[0]
