"""Rows of a task file: ``.jsonl``, ``.json`` (a list, or a mapping holding one) or ``.parquet``.

Shared by the MBPP and SWE loaders: one reader, one set of errors naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError


def read_table_rows(path: Path, what: str, list_keys: tuple[str, ...]) -> list[Any]:
    """The rows of ``path``; a ``.json`` mapping holds them under the first of ``list_keys`` it has.
    ``what`` names the kind of file in errors (``MBPP``, ``SWE task``)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ConfigError(f"reading {path} needs pyarrow: pip install pyarrow") from err
        return pq.read_table(path).to_pylist()
    if path.suffix not in (".jsonl", ".json"):
        raise ConfigError(
            f"unsupported {what} file type {path.suffix!r} ({path}); use .jsonl, .json or .parquet"
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        rows = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{path}: line {line_no} is not valid JSON ({err.msg})") from None
        return rows
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from None
    if isinstance(data, dict):
        data = next((data[k] for k in list_keys if k in data), None)
    if not isinstance(data, list):
        keys = " or ".join(f"{{{k!r}: [...]}}" for k in list_keys)
        raise ConfigError(f"{path}: expected a JSON list of rows or {keys}")
    return data
