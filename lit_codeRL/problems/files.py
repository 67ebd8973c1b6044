"""Where task files are and how their rows are read: the repository's ``data/`` folder
(:func:`embedded_data_dir`) and rows of ``.jsonl``, ``.json`` (a list, or a mapping holding one)
or ``.parquet`` files.

Shared by every loader (MBPP, SWE, debugging tasks, the registry): one reader, one set of errors
naming the file and line.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError

_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def name_chars(text: str) -> str:
    """``text`` in a file name's characters (``A-Za-z0-9._-``), each run of others one ``_``: task
    ids and repository names become cache directories, bundles and git refs."""
    return _NOT_NAME_CHARS.sub("_", text)


EMBEDDED_FILE = Path("coderl_basic") / "problems.jsonl"
"""The project's own MBPP-style set, relative to the data directory."""


def embedded_data_dir() -> Path:
    """The repository's ``data/`` folder.

    ``data/`` sits at the repository root, beside the package, so this expects a source checkout
    or an editable install (``pip install -e .``). A wheel that ships the files as package data
    under ``lit_codeRL/_data`` is found as well.
    """
    checkout = Path(__file__).resolve().parents[2] / "data"
    if (checkout / EMBEDDED_FILE).is_file():
        return checkout
    packaged = Path(str(importlib.resources.files("lit_codeRL") / "_data"))
    return packaged if (packaged / EMBEDDED_FILE).is_file() else checkout


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
