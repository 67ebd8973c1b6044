"""MBPP (Austin et al. 2021): hub id or local ``.jsonl``/``.json``/``.parquet``, standard splits.

Two variants: ``full`` (``mbpp.jsonl``, 974 tasks, statement in ``text``) and ``sanitized``
(``sanitized-mbpp.json``, 427 hand-verified tasks, statement in ``prompt``, plus ``test_imports``).
Both use the paper's task-id ranges for their splits (full 10/500/90/374, sanitized 7/257/43/120
for prompt/test/validation/train).
"""

from __future__ import annotations

import ast
import builtins
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lit_codeRL import pyparse
from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.files import read_table_rows
from lit_codeRL.problems.record import Problem

HUB_ID = "google-research-datasets/mbpp"
"""The canonical hub dataset; its configs are ``full`` and ``sanitized``."""
# google-research/mbpp README: 11-510 test, 601-974 train, 511-600 validation, 1-10 prompt.
SPLITS: dict[str, tuple[int, int]] = {
    "test": (11, 510),
    "train": (601, 974),
    "validation": (511, 600),
    "prompt": (1, 10),
    "all": (1, 10**9),
}
SPLIT_ALIASES = {"eval": "test", "val": "validation", "valid": "validation", "dev": "validation"}
"""Other names accepted for a split (``eval`` is the held-out split elsewhere in lit-coderl)."""
FILES = {"full": "mbpp.jsonl", "sanitized": "sanitized-mbpp.json"}
"""Each variant's file name in a google-research style directory."""
LOCAL_HINT = "pass a local path such as ../shared/data/mbpp/mbpp.jsonl"

_ASSERT_CALL = re.compile(r"^\s*assert\s+(?:not\s+)?\(?\s*([A-Za-z_]\w*)\s*\(")


def canonical_split(split: str) -> str:
    """``split`` with aliases resolved; a ``ConfigError`` naming the valid ones otherwise."""
    name = SPLIT_ALIASES.get(split.strip().lower(), split.strip().lower())
    if name not in SPLITS:
        valid = ", ".join([*SPLITS, *SPLIT_ALIASES])
        raise ConfigError(f"unknown MBPP split {split!r}; choose one of {valid}")
    return name


def split_of(task_id: int) -> str | None:
    """The standard split holding an integer MBPP task id (``None`` outside every range)."""
    return next((n for n, (lo, hi) in SPLITS.items() if n != "all" and lo <= task_id <= hi), None)


def find_entry_point(tests: Iterable[str], code: str | None) -> str | None:
    """The function the tests call.

    First a name called in the first test that the reference code defines: sanitized and some
    full tests wrap the call (``assert set(f(x)) == ...``, ``assert int(f(5, 3)) == 35``). Then the
    first non-builtin ``assert name(`` of any test; then the first ``def`` of ``code``.
    """
    tests = list(tests)
    defined = _defined_names(code or "")
    for name in _called_names(tests[0]) if tests else []:
        if name in defined:
            return name
    for test in tests:
        match = _ASSERT_CALL.match(test)
        if match and not hasattr(builtins, match.group(1)):
            return match.group(1)
    return defined[0] if defined else None


def _defined_names(code: str) -> list[str]:
    try:
        body = pyparse.parse(code).body
    except SyntaxError:
        return re.findall(r"^def\s+([A-Za-z_]\w*)", code, flags=re.MULTILINE)
    return [n.name for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]


def _called_names(statement: str) -> list[str]:
    try:
        tree = pyparse.parse(statement)
    except SyntaxError:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    return [c.func.id for c in sorted(calls, key=lambda c: (c.lineno, c.col_offset))]


def _unix_lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _record(row: Mapping[str, Any], source: str) -> Problem:
    tests = [_unix_lines(str(t)) for t in row["test_list"]]
    setup = _unix_lines(row.get("test_setup_code") or "")
    imports = list(row.get("test_imports") or [])
    if imports:
        setup = "\n".join([*imports, setup]).strip()
    # MBPP's full variant stores code with Windows line ends; Python runs them, but logs and
    # prompts built from them (BC demonstrations, few-shot examples) read better normalized.
    code = _unix_lines(row.get("code") or "")
    task_id = int(row["task_id"])
    text = (row.get("text") or row.get("prompt") or "").strip()
    if not text:
        raise KeyError("text")
    return Problem(
        task_id=f"mbpp/{task_id}",
        prompt=text,
        entry_point=find_entry_point(tests, code),
        tests=tuple(tests),
        setup_code=setup,
        reference_solution=code,
        source=source,
        metadata={
            "mbpp_task_id": task_id,
            "split": split_of(task_id),
            "challenge_test_list": [t for t in (row.get("challenge_test_list") or []) if t],
        },
    )


def records(rows: list[Any], source: str, origin: str) -> list[Problem]:
    """``Problem`` per MBPP-format row; a malformed row is a ``ValueError`` naming ``origin`` + index."""
    problems = []
    for index, row in enumerate(rows):
        try:
            problems.append(_record(row, source))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(
                f"{origin}: entry {index} is not an MBPP row ({type(err).__name__}: {err}); "
                "it needs task_id (int), text or prompt, and test_list"
            ) from None
    return problems


def read_rows(path: Path) -> list[Any]:
    """Rows of a ``.jsonl``, ``.json`` (list, ``{"problems": [...]}`` or ``{"data": [...]}``) or ``.parquet``."""
    return read_table_rows(path, "MBPP", ("problems", "data"))


def resolve_local(path: Path, variant: str) -> list[Path]:
    """The data files of ``variant`` at ``path``: the file itself, or in a directory ``mbpp.jsonl`` /
    ``sanitized-mbpp.json`` (google-research layout) or ``<variant>/*.parquet`` (a hub snapshot)."""
    path = path.expanduser().resolve()
    if path.is_dir():
        candidate = path / FILES[variant]
        if candidate.is_file():
            return [candidate]
        parquet = sorted((path / variant).glob("*.parquet"))
        if parquet:
            return parquet
        raise FileNotFoundError(
            f"no MBPP {variant} data in directory {path}: expected {FILES[variant]} or {variant}/*.parquet"
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"MBPP file not found: {path} (relative paths resolve against {Path.cwd()}); {LOCAL_HINT}, "
            f"or a hub id such as {HUB_ID}"
        )
    return [path]


def looks_like_path(source: str) -> bool:
    """Whether ``source`` is meant as a local path (hub ids are ``owner/name``, no suffix)."""
    return (
        source.startswith((".", "/", "~"))
        or Path(source).suffix in {".jsonl", ".json", ".parquet"}
        or source.count("/") > 1
        or "\\" in source
    )


def load_mbpp(source: str = HUB_ID, split: str = "test", variant: str = "full") -> list[Problem]:
    """MBPP problems of ``split``, in task-id order.

    Args:
        source: A hub id (``"mbpp"`` is short for ``google-research-datasets/mbpp``; needs network
            or a warm HF cache), or a local ``.jsonl``/``.json``/``.parquet`` file or a directory
            (see :func:`resolve_local`). Relative paths resolve against the working directory.
        split: ``test`` (500), ``train`` (374), ``validation`` (90), ``prompt`` (10) or ``all``;
            ``eval`` means ``test``, ``val`` means ``validation``.
        variant: ``full`` (974 tasks) or ``sanitized`` (427); a local ``sanitized*`` file is
            always the sanitized variant.
    """
    split = canonical_split(split)
    if variant not in FILES:
        raise ConfigError(f"unknown MBPP variant {variant!r}; choose 'full' or 'sanitized'")
    source = local_override(source)
    path = Path(source).expanduser()
    if path.exists() or looks_like_path(source):
        files = resolve_local(path, variant)
        if files[0].name.startswith("sanitized"):
            variant = "sanitized"
        rows = [row for file in files for row in read_rows(file)]
        origin = str(files[0] if len(files) == 1 else files[0].parent)
    else:
        hub_id = HUB_ID if source.lower() == "mbpp" else source
        rows = _hub_rows(hub_id, variant)
        origin = hub_id
    low, high = SPLITS[split]
    problems = records(rows, f"mbpp:{origin}", origin)
    problems = [p for p in problems if low <= p.metadata["mbpp_task_id"] <= high]
    return sorted(problems, key=lambda p: p.metadata["mbpp_task_id"])


DATASET_PATH_ENV = "MBPP_DATASET_PATH"
"""Environment variable naming a local MBPP file or directory that stands in for the hub."""


def local_override(source: str) -> str:
    """``$MBPP_DATASET_PATH`` when ``source`` is the canonical hub dataset (``mbpp`` or
    ``google-research-datasets/mbpp``) and the variable is set, else ``source``.

    Why: one config (``configs/grpo_mbpp.yaml`` names the hub id) then runs unchanged on an
    offline cluster whose MBPP copy sits at a site-specific path; other hub ids and explicit
    paths are the user's deliberate choice and stay as given.
    """
    local = os.environ.get(DATASET_PATH_ENV, "").strip()
    if local and source.lower() in ("mbpp", HUB_ID.lower()):
        return local
    return source


def _hub_rows(hub_id: str, variant: str) -> list[dict[str, Any]]:
    # All hub splits are loaded and re-split by task id: the hub's train/test/validation/prompt
    # splits are exactly the paper's id ranges, and one code path serves hub and local files.
    try:
        from datasets import load_dataset

        data = load_dataset(hub_id, variant)
    except Exception as err:  # noqa: BLE001 - offline, unknown id, missing `datasets`: all end alike
        raise ConfigError(
            f"cannot load MBPP from hub id {hub_id} ({type(err).__name__}; offline?); {LOCAL_HINT}"
        ) from None
    return [dict(row) for split in data.values() for row in split]
