"""The seed-style JSON format: ``[{function_name, docstring, test_cases: [[input, output], ...], starter_code}]``.

Also accepted: ``{"problems": [...]}``, a ``.jsonl`` file with one entry per line, test cases as
``{"input": ..., "output": ...}``, a dict input (keyword arguments), optional ``id``/``task_id``,
``difficulty``, ``reference_solution``/``solution``, extra assert strings in ``tests``, and a
``split`` field (then ``load_seed_json(path, split=...)`` filters by it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.signature import signature_from_tests

REQUIRED_KEYS = ("function_name", "test_cases")


def _args(value: Any) -> str:
    # A list input holds positional arguments, a dict keyword arguments; anything else is the
    # single argument (so a function of one list takes [[1, 2, 3]]).
    if isinstance(value, list):
        return ", ".join(repr(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v!r}" for k, v in value.items())
    return repr(value)


def _pair(case: Any) -> tuple[str, str]:
    if isinstance(case, dict):
        return _args(case["input"]), repr(case["output"])
    if not isinstance(case, list | tuple) or len(case) != 2:
        raise TypeError("a test case is [input, output]")
    return _args(case[0]), repr(case[1])


def seed_record(entry: Any, source: str, index: int) -> Problem:
    """One seed entry as a ``Problem``; a ``ConfigError`` naming ``source`` and ``index`` if malformed."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{source} entry {index}: expected an object, got {type(entry).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        raise ConfigError(
            f"{source} entry {index}: missing key(s) {missing} (seed entries need function_name, test_cases)"
        )
    name = entry["function_name"]
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"{source} entry {index}: function_name {name!r} is not a Python identifier")
    try:
        pairs = tuple(_pair(case) for case in entry["test_cases"])
    except (TypeError, IndexError, KeyError):
        raise ConfigError(
            f"{source} entry {index} ({name}): test_cases must be [[input, output], ...]"
        ) from None
    # Without a starter the signature comes from how the tests call the function, so its arity is right.
    starter = entry.get("starter_code") or signature_from_tests(name, pairs)[0]
    docstring = entry.get("docstring", "")
    return Problem(
        task_id=str(entry.get("id") or entry.get("task_id") or f"seed/{name}"),
        prompt=f"{docstring}\n\n{starter}".strip(),
        entry_point=name,
        tests=tuple(entry.get("tests") or ()),
        io_pairs=pairs,
        reference_solution=entry.get("reference_solution") or entry.get("solution"),
        starter_code=starter,
        difficulty=entry.get("difficulty"),
        source=source,
        metadata={k: v for k, v in entry.items() if k not in {"test_cases", "docstring", "starter_code"}},
    )


def _entries(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON ({err})") from None
    entries = data.get("problems") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a list of problems or {{'problems': [...]}}")
    return entries


def load_seed_json(path: str | Path, split: str | None = None) -> list[Problem]:
    """Problems of a seed-format file, in file order.

    ``split`` filters on the entries' ``split`` field when they have one (``test`` also matches
    ``eval``); a file without split fields is one split and is returned whole.
    """
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(
            f"problem file not found: {path} (relative paths resolve against {Path.cwd()})"
        )
    problems = [seed_record(e, str(path), i) for i, e in enumerate(_entries(path))]
    # Two entries for the same function (say two `add` variants) are legal; ids must still be
    # unique, since results and logs are keyed by them, so repeats get their entry index.
    seen: set[str] = set()
    for index, problem in enumerate(problems):
        if problem.task_id in seen:
            problems[index] = dataclasses.replace(problem, task_id=f"{problem.task_id}-{index}")
        seen.add(problems[index].task_id)
    splits = {p.metadata.get("split") for p in problems} - {None}
    if split is None or split == "all" or not splits:
        return problems
    wanted = {"test": "eval"}.get(split, split) if split not in splits else split
    if wanted not in splits:
        raise ConfigError(f"unknown split {split!r} for {path}; choose one of {sorted(splits) + ['all']}")
    return [p for p in problems if p.metadata.get("split") == wanted]


def is_seed_json(path: Path) -> bool:
    """Whether ``path`` holds seed-format entries (the first has ``function_name``)."""
    try:
        entries = _entries(path)
    except (OSError, ConfigError, UnicodeDecodeError):
        return False
    return bool(entries) and isinstance(entries[0], dict) and "function_name" in entries[0]
