"""Reading debugging tasks from rows: the shipped tasks, SWE-PDB-style debugging rows
(``files: [{path, content}]``) and KodCode rows (``question``, ``solution``, ``test``), in
``.jsonl``/``.json``/``.parquet`` files or directories of them."""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.debug_task import (
    DEFAULT_TEST_COMMAND,
    DebugTask,
    _canonical_split,
    _is_test_module,
    _is_test_path,
)
from lit_codeRL.problems.files import embedded_data_dir, read_table_rows
from lit_codeRL.problems.kodcode_stub import kodcode_stub
from lit_codeRL.problems.swe import row_node_ids, row_test_deps
from lit_codeRL.problems.test_names import misnamed_test_modules, protected_name

EMBEDDED_FILE = Path("debug") / "tasks.jsonl"
"""The shipped tasks, relative to the data directory (``data/`` in a checkout)."""
EMBEDDED_NAMES = ("embedded", "debug")
KODCODE_SOLUTION = "solution.py"
KODCODE_TEST = "test_solution.py"
_DEBUG_ROW_FIELDS = (
    "task_name",
    "id",
    "files",
    "fix",
    "hidden_files",
    "entry_point",
    "entrypoint",
    "description",
    "question",
)
_GRADED_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
"""Optional: the node ids a debugging row is graded on (``DebugTask.fail_to_pass``)."""
_KODCODE_FIELDS = ("question", "solution", "test", "test_code", "test_info")


def embedded_tasks_file() -> Path:
    """``data/debug/tasks.jsonl`` in the data directory that :mod:`registry` uses."""
    return embedded_data_dir() / EMBEDDED_FILE


def load_debug_tasks(
    source: str = "embedded", split: str | None = None, limit: int | None = None
) -> list[DebugTask]:
    """Debugging tasks of ``split`` from ``source``, in file order.

    Args:
        source: ``embedded``/``debug`` (the shipped tasks), ``mbpp:<MBPP location>`` (see
            ``split``), a ``.jsonl``/``.json``/``.parquet``
            file (parquet needs pyarrow), or a directory of such files (read in name order). Rows
            are debugging rows (``files``) or KodCode rows (``question``, ``solution``, ``test``).
        split: ``train``, ``eval`` (``test``, ``validation``, ``val``, ``dev`` mean ``eval``),
            ``all`` or ``None`` for every row. Rows without a ``split`` field belong to every split.
            For ``mbpp:<MBPP file, directory or hub id>`` (single-file tasks made at run time
            from MBPP's reference solutions, ``problems/synth/mbpp.py``; ``?per_problem=3`` for
            three bugs a problem, with ``tries``, ``seed`` and ``held_out``, the hidden checks a task
            gets, ``problems/synth/held_out.py``) MBPP's own splits: ``train``,
            ``test`` (``eval``), ``validation``, ``all``.
        limit: Keep the first ``limit`` tasks.

    Raises:
        ConfigError: a missing source, a malformed row (naming the file, the row and the field),
            a repeated task id, or a split no row has.
    """
    where = source.partition("?")[0]
    if where == "mbpp" or where.startswith("mbpp:"):
        return _mbpp_tasks(source, split, limit)
    wanted = _canonical_split(split) if split is not None else None
    files = _source_files(source)
    tasks: list[DebugTask] = []
    seen: dict[str, str] = {}
    splits: set[str] = set()
    for file in files:
        for index, raw in enumerate(read_table_rows(file, "debug task", ("data", "tasks", "rows"))):
            where = f"{file}: row {index}"
            row = _merged_row(raw, where)
            row_split = row.get("split")
            if row_split is not None:
                if not isinstance(row_split, str) or not row_split.strip():
                    raise ConfigError(f"{where}: field split must be a non-empty string, got {row_split!r}")
                row_split = _canonical_split(row_split)
                splits.add(row_split)
                if wanted is not None and row_split != wanted:
                    continue
            task = task_from_row(row, where, row_split or wanted or "train")
            if task.task_id in seen:
                raise ConfigError(f"{where}: task id {task.task_id!r} repeats {seen[task.task_id]}")
            seen[task.task_id] = where
            tasks.append(task)
            if limit is not None and len(tasks) >= limit:
                return tasks
    if wanted is not None and not tasks and splits and wanted not in splits:
        raise ConfigError(f"{source}: no split {split!r}; its rows have splits {sorted(splits)} (or use all)")
    return tasks


MBPP_BUG_OPTIONS = ("per_problem", "tries", "seed", "held_out")
"""``mbpp:<path>?per_problem=3&tries=12&seed=1&held_out=5``: fields of ``MBPPBugSettings``."""


def _mbpp_tasks(source: str, split: str | None, limit: int | None) -> list[DebugTask]:
    """Tasks made at run time from MBPP's reference solutions (``problems/synth/mbpp.py``), of
    MBPP's own split (``train``, ``test``/``eval``, ``validation``, ``all``); options after ``?``
    set how many bugs a problem gets (``per_problem``), of how many candidates (``tries``), in
    which order (``seed``)."""
    from lit_codeRL.problems.mbpp import canonical_split
    from lit_codeRL.problems.synth.mbpp import MBPPBugSettings, mbpp_bug_rows, mbpp_split_of

    where, _, query = source.partition("?")
    options: dict[str, int] = {}
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        if (
            key not in MBPP_BUG_OPTIONS
            or not value.isdigit()
            or int(value) < (key in ("per_problem", "tries"))
        ):
            raise ConfigError(
                f"debug:{source}: {part!r} is not an option; give per_problem=N and tries=N (N >= 1), "
                "seed=N or held_out=N (N >= 0), joined by '&'"
            )
        options[key] = int(value)
    settings = MBPPBugSettings(**options)
    if settings.tries < settings.per_problem:
        raise ConfigError(f"debug:{source}: tries ({settings.tries}) < per_problem ({settings.per_problem})")
    # every split from one screening (cached): a later run of another split costs nothing
    rows, _ = mbpp_bug_rows(where, "all", settings)
    wanted = canonical_split(split or "all")
    rows = [row for row in rows if wanted in ("all", mbpp_split_of(row["extra_info"]["mbpp_task_id"]))]
    tasks = [task_from_row(row, f"{source}: {row['task_name']}", row["split"]) for row in rows]
    return tasks[:limit] if limit is not None else tasks


def task_from_row(row: Mapping[str, Any], where: str = "row", split: str = "train") -> DebugTask:
    """One task from a debugging row (``files``) or a KodCode row (``question``/``solution``/``test``).

    ``where`` names the row in errors; ``split`` is used when the row has no ``split`` field."""
    row = _merged_row(row, where)
    try:
        if "files" in row:
            return _from_debug_row(row, where, split)
        if any(name in row for name in _KODCODE_FIELDS):
            return _from_kodcode_row(row, where, split)
    except ConfigError as err:
        message = str(err)
        raise ConfigError(message if message.startswith(where) else f"{where}: {message}") from None
    raise ConfigError(
        f"{where}: neither a debugging row (files: [{{path, content}}], task_name) nor a KodCode row "
        f"(question, solution, test); it has {sorted(row)[:12]}"
    )


def _source_files(source: str) -> list[Path]:
    if source in EMBEDDED_NAMES:
        file = embedded_tasks_file()
        if not file.is_file():
            raise ConfigError(
                f"embedded debug tasks not found: {file} (run from a lit-coderl checkout or install it "
                "with pip install -e .; python scripts/make_debug_tasks.py rebuilds them)"
            )
        return [file]
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(
            p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json", ".parquet")
        )
        if not files:
            raise ConfigError(f"{path}: no .jsonl, .json or .parquet file of debug tasks in this directory")
        return files
    if not path.is_file():
        raise ConfigError(
            f"debug task source not found: {path.resolve()} (relative paths resolve against {Path.cwd()}); "
            "pass embedded, a .jsonl/.json/.parquet file or a directory of them"
        )
    return [path]


def _merged_row(row: Any, where: str) -> dict[str, Any]:
    """The row with the keys of its nested ``extra_info`` merged in (the row's own keys win)."""
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: not an object ({type(row).__name__})")
    extra = row.get("extra_info")
    if extra is None:
        return dict(row)
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: field extra_info is a string but not a JSON object") from None
    if not isinstance(extra, Mapping):
        raise ConfigError(f"{where}: field extra_info must be an object, got {type(extra).__name__}")
    return {**extra, **{key: value for key, value in row.items() if key != "extra_info"}}


def _from_debug_row(row: Mapping[str, Any], where: str, split: str) -> DebugTask:
    task_id = _first(row, ("task_name", "id"))
    if task_id is None or not str(task_id).strip():
        raise ConfigError(f"{where}: missing field task_name (or id)")
    files = _file_list(row["files"], "files", where)
    fix = _file_list(row["fix"], "fix", where) if row.get("fix") is not None else None
    hidden = (
        _file_list(row["hidden_files"], "hidden_files", where) if row.get("hidden_files") is not None else {}
    )
    entry_point = _optional_str(row, ("entry_point", "entrypoint"), where)
    description = _optional_str(row, ("description", "question"), where)
    files, entry_point, renamed = _protect_tests(files, entry_point, where)
    graded = _graded(row, renamed, where)
    if fix is not None and renamed:
        fix = {renamed.get(path, path): content for path, content in fix.items()}
    if description is None:
        modules = sorted(path for path in files if _is_test_path(path) and _is_test_module(path))
        description = f"Some tests in {', '.join(modules)} fail. Fix the program so that every test passes."
    metadata = {
        key: value
        for key, value in row.items()
        if key not in (*_DEBUG_ROW_FIELDS, "difficulty", "split", "test_deps", *_GRADED_FIELDS)
    }
    if renamed:
        metadata["renamed_tests"] = renamed
    return DebugTask(
        task_id=str(task_id).strip(),
        description=description,
        files=files,
        fix=fix,
        entry_point=entry_point or "",
        difficulty=_optional_str(row, ("difficulty",), where),
        split=split,
        test_deps=row_test_deps(row.get("test_deps"), where),
        fail_to_pass=graded[0],
        pass_to_pass=graded[1],
        metadata=metadata,
        hidden_files=hidden,
    )


def _graded(row: Mapping[str, Any], renamed: Mapping[str, str], where: str) -> tuple[tuple[str, ...], ...]:
    """The row's ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` node ids (SWE rows' fields; optional), their
    files renamed as the row's test files were."""
    ids = tuple(row_node_ids(row[f], f, where) if row.get(f) is not None else () for f in _GRADED_FIELDS)

    def moved(node: str) -> str:
        path, sep, rest = node.partition("::")
        return renamed.get(path, path) + sep + rest

    return tuple(tuple(moved(node) for node in group) for group in ids)


def _protect_tests(
    files: dict[str, str], entry_point: str | None, where: str
) -> tuple[dict[str, str], str | None, dict[str, str]]:
    """Rename test files the grader would not recognise as tests (``test.py`` in SWE-PDB rows;
    ``problems/test_names.py``).

    A Python file the entry point names (or, without an entry point, a ``test.py``/``tests.py``
    that holds tests and no other module imports) that the grader's rule misses becomes
    ``test_<name>``, and the entry point follows. One the entry point names under a test directory
    keeps its name: grading protects it, and the task runs it by that name
    (``DebugTask.test_modules``; lark's suite runs through ``tests/__main__.py``)."""
    tokens = shlex.split(entry_point) if entry_point else []
    named = [t for t in tokens if t in files and t.endswith(".py")]
    if not tokens:
        named = misnamed_test_modules(files)
    renamed: dict[str, str] = {}
    for path in named:
        if _is_test_path(path) and (_is_test_module(path) or tokens):
            continue
        new = protected_name(path)
        if new in files:
            raise ConfigError(f"{where}: test file {path} must be renamed {new} for grading, which exists")
        renamed[path] = new
    if not renamed:
        return files, entry_point, {}
    files = {renamed.get(path, path): content for path, content in files.items()}
    if tokens:
        entry_point = shlex.join(renamed.get(t, t) for t in tokens)
    return files, entry_point, renamed


def _from_kodcode_row(row: Mapping[str, Any], where: str, split: str) -> DebugTask:
    for name in ("question", "solution"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ConfigError(f"{where}: KodCode row missing field {name} (a non-empty string)")
    test = _first(row, ("test", "test_code"))
    if not isinstance(test, str) or not test.strip():
        raise ConfigError(f"{where}: KodCode row missing field test (or test_code), the pytest file")
    info = row.get("test_info")
    if hasattr(info, "tolist"):  # numpy arrays from some parquet readers
        info = info.tolist()
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except json.JSONDecodeError:
            raise ConfigError(f"{where}: field test_info is a string but not a JSON list") from None
    if info is not None and (
        not isinstance(info, list | tuple) or not all(isinstance(item, Mapping) for item in info)
    ):
        raise ConfigError(f"{where}: field test_info must be a list of objects, got {info!r:.120}")
    # Without a question_id the id is a hash of the question: stable wherever the row is read.
    task_id = _first(row, ("question_id", "task_name", "id"))
    task_id = task_id if task_id is not None else hashlib.sha256(row["question"].encode()).hexdigest()[:12]
    stub = kodcode_stub(row["solution"], test, info)
    difficulty = _first(row, ("gpt_difficulty", "difficulty"))
    metadata = {
        key: row[key]
        for key in ("question_id", "subset", "style", "version", "gpt_pass_percentage", "bug_kind")
        if key in row
    }
    metadata["format"] = "kodcode"
    return DebugTask(
        task_id=f"kodcode/{task_id}",
        description=row["question"].strip(),
        files={KODCODE_SOLUTION: stub, KODCODE_TEST: test},
        fix={KODCODE_SOLUTION: row["solution"]},
        entry_point=f"{DEFAULT_TEST_COMMAND} {KODCODE_TEST}",
        difficulty=str(difficulty) if difficulty is not None else None,
        split=split,
        metadata=metadata,
    )


def _first(row: Mapping[str, Any], names: Sequence[str]) -> Any:
    return next((row[name] for name in names if row.get(name) is not None), None)


def _optional_str(row: Mapping[str, Any], names: Sequence[str], where: str) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise ConfigError(f"{where}: field {name} must be a string, got {type(value).__name__}")
            return value if value.strip() else None
    return None


def _file_list(value: Any, name: str, where: str) -> dict[str, str | bytes]:
    """``[{path, content}]`` (or a ``{path: content}`` mapping) as a dict; an entry with
    ``content_base64`` instead of ``content`` is a file that is not UTF-8 text (bytes)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, Mapping):
        value = [{"path": path, "content": content} for path, content in value.items()]
    if not isinstance(value, list | tuple):
        raise ConfigError(
            f"{where}: field {name} must be a list of {{path, content}}, got {type(value).__name__}"
        )
    files: dict[str, str | bytes] = {}
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not isinstance(item.get("path"), str):
            raise ConfigError(f"{where}: field {name}[{i}] needs a string path")
        if item["path"] in files:
            raise ConfigError(f"{where}: field {name} lists {item['path']} twice")
        files[item["path"]] = _file_content(item, f"{where}: field {name}[{i}] ({item['path']})")
    return files


def _file_content(item: Mapping[str, Any], where: str) -> str | bytes:
    text, encoded = item.get("content"), item.get("content_base64")
    if (text is None) == (encoded is None):
        raise ConfigError(f"{where} needs a string content or content_base64, not both")
    if text is not None:
        if not isinstance(text, str):
            raise ConfigError(f"{where} needs a string content")
        return text
    try:
        return base64.b64decode(encoded, validate=True)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: content_base64 is not base64") from None
