"""Build ``data/debug/tasks.jsonl`` from the readable task sources in ``data/debug/src``.

Each task is a directory ``data/debug/src/<name>/``:

- ``task.json``: ``description`` (what the program should do, never where the bug is),
  ``difficulty``, ``split`` (``train``/``eval``), ``bug_kind`` (for the README and logs);
- ``buggy/``: every starting file, the program with its bug and the pytest file(s);
- ``fixed/``: the reference fix, the new contents of the program files it changes;
- ``held_out/`` (optional): test modules graded but never shown, the row's ``hidden_files``
  (``scripts/add_held_out_checks.py --write-src`` makes them: the tests' calls with changed
  arguments, or whole tests with changed literals, answered by the fix, so hard-coded answers to
  the visible tests fail).

The output rows are debugging rows in the SWE-PDB layout (``task_name``, ``files: [{path,
content}]``, ``fix``, ``entry_point``, ``extra_info``) that ``lit_codeRL.problems.debug`` loads.
Before writing, every task is verified on this machine (our own code, so no sandbox): pytest at the
buggy files must fail some tests and pass others, and with the fix every test must pass. Nothing
is written unless all tasks verify. The sandboxed check of the same facts (the real grader, test
files restored, junit and signed records) is ``tests/problems/test_debug_tasks.py``.

    python scripts/make_debug_tasks.py            # verify and write
    python scripts/make_debug_tasks.py --check    # verify; fail if tasks.jsonl is out of date
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "data" / "debug" / "src"
OUT = ROOT / "data" / "debug" / "tasks.jsonl"
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "eval")


def read_tree(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative ``/`` paths -> text), caches left out."""
    return {
        path.relative_to(directory).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted(directory.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def build_row(task_dir: Path) -> dict[str, Any]:
    """The debugging row of one task directory."""
    meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
    if meta.get("difficulty") not in DIFFICULTIES or meta.get("split") not in SPLITS:
        raise SystemExit(
            f"{task_dir}/task.json: difficulty must be one of {DIFFICULTIES}, split one of {SPLITS}"
        )
    files = read_tree(task_dir / "buggy")
    fix = read_tree(task_dir / "fixed")
    unknown = sorted(set(fix) - set(files))
    if unknown:
        raise SystemExit(f"{task_dir}: fixed/ has files that buggy/ lacks: {unknown}")
    tests = sorted(path for path in files if Path(path).name.startswith("test_"))
    hidden = read_tree(task_dir / "held_out") if (task_dir / "held_out").is_dir() else {}
    return {
        "task_name": f"debug/{task_dir.name}",
        "description": meta["description"],
        "difficulty": meta["difficulty"],
        "split": meta["split"],
        "entry_point": "python -m pytest -sq " + " ".join(tests),
        "files": [{"path": path, "content": content} for path, content in files.items()],
        "fix": [{"path": path, "content": content} for path, content in fix.items()],
        "extra_info": {"bug_kind": meta["bug_kind"]},
        **({"hidden_files": [{"path": p, "content": c} for p, c in hidden.items()]} if hidden else {}),
    }


def build(src: Path = SRC) -> list[dict[str, Any]]:
    """Every task's row: easy, medium, hard; train before eval; by name."""
    rows = [build_row(d) for d in sorted(src.iterdir()) if (d / "task.json").is_file()]
    return sorted(
        rows, key=lambda r: (DIFFICULTIES.index(r["difficulty"]), SPLITS.index(r["split"]), r["task_name"])
    )


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)


def run_pytest(files: Mapping[str, str], tests: Sequence[str]) -> dict[str, str]:
    """Status of every test (``classname::name`` -> passed/failed/error/skipped) of ``files``."""
    with tempfile.TemporaryDirectory(prefix="debug-task-") as tmp:
        work = Path(tmp)
        for path, content in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(content, encoding="utf-8")
        junit = work / ".junit.xml"
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests],
            cwd=work,
            capture_output=True,
            timeout=120,
        )
        statuses = {}
        for case in ET.parse(junit).getroot().iter("testcase"):
            tags = {child.tag for child in case}
            status = next(
                (
                    s
                    for t, s in (("error", "error"), ("failure", "failed"), ("skipped", "skipped"))
                    if t in tags
                ),
                "passed",
            )
            statuses[f"{case.get('classname')}::{case.get('name')}"] = status
        return statuses


def verify(row: Mapping[str, Any]) -> str:
    """A one-line summary of the task's tests, or SystemExit saying what is wrong with it."""
    hidden = {f["path"]: f["content"] for f in row.get("hidden_files", ())}
    files = {f["path"]: f["content"] for f in row["files"]}
    fixed = {**files, **{f["path"]: f["content"] for f in row["fix"]}}
    tests = sorted(path for path in files if Path(path).name.startswith("test_"))
    name = row["task_name"]
    if hidden:  # the held-out checks: every one passes with the fix, and the bug fails some
        before = run_pytest({**files, **hidden}, sorted(hidden))
        after = run_pytest({**fixed, **hidden}, sorted(hidden))
        if (
            not before
            or all(s == "passed" for s in before.values())
            or any(s != "passed" for s in after.values())
        ):
            raise SystemExit(
                f"{name}: its held-out checks must fail at the bug and pass with the fix: {before} {after}"
            )
    before, after = run_pytest(files, tests), run_pytest(fixed, tests)
    failing = sorted(t for t, s in before.items() if s != "passed")
    passing = sorted(t for t, s in before.items() if s == "passed")
    if len(before) < 4 or not failing or not passing:
        raise SystemExit(f"{name}: the buggy program must fail some tests and pass others: {before}")
    if set(after) != set(before) or any(s != "passed" for s in after.values()):
        raise SystemExit(f"{name}: with the fix every test must pass: {after}")
    checks = f", {len(hidden)} held-out module(s)" if hidden else ""
    return (
        f"{name}: {len(failing)} failing, {len(passing)} passing at the base; all pass with the fix{checks}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify and compare; write nothing")
    args = parser.parse_args(argv)
    rows = build()
    for row in rows:
        print(verify(row))
    text = render(rows)
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            raise SystemExit(f"{OUT} is out of date: run python scripts/make_debug_tasks.py")
        print(f"{OUT}: up to date ({len(rows)} tasks)")
        return
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {len(rows)} tasks to {OUT}")


if __name__ == "__main__":
    main()
