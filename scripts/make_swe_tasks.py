"""Build the shipped SWE tasks (``data/swe/``) from the plain-text sources in ``data/swe/src/``.

    python scripts/make_swe_tasks.py                # rebuild data/swe/tasks.jsonl and data/swe/repos/
    python scripts/make_swe_tasks.py --out /tmp/swe # somewhere else (the tests build twice and compare)

Sources, one directory per repository (``data/swe/src/<name>/``):

- ``repo.json``: ``repo`` (``owner/name``), ``package`` (its import name), ``version`` (of the
  base commits, SWE-bench's ``version`` field), ``start`` (date of the first commit).
- ``base/``: every file of the initial commit (the bugs are present).
- ``tasks/<n>-<slug>/`` in ``n`` order: ``task.json`` (``number``, ``difficulty``, ``split``,
  ``prep`` edits, ``fix_message``, ``FAIL_TO_PASS``, ``PASS_TO_PASS``), ``issue.md`` (the problem
  statement) and ``after/`` (full contents of every file the fix and its tests change).

History of each repository, so that a naive clone reveals every fix (``git log --all``) and
``prepare_repo`` has real history to remove::

    Initial commit (base/)                     tag v1.0
    per task: prep commit (``prep`` edits)     <- the task's base_commit
              fix commit (``after/``)          <- gold patch (non-test files) + test patch (tests/)
    Release 1.1.0                              annotated tag v1.1; a git note on the last fix
    branch dev: Start 1.2 development

Commits have fixed authors and dates, bundles are written with one pack thread, and rows are
serialised with a fixed key order, so two runs give byte-identical output. Every task is
verified on the host before anything is written (at base: PASS_TO_PASS pass; with the test
patch: each FAIL_TO_PASS fails and PASS_TO_PASS pass; with the gold patch too: the whole suite
passes); one failing task means nothing is written.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from lit_codeRL.problems.swe import git_environment, run_git

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "data" / "swe" / "src"
OUT = ROOT / "data" / "swe"
AUTHOR = ("Robin Maintainer", "robin@numkit.invalid")
"""Author and committer of every commit (the email domain is reserved: it reaches no one)."""
COMMIT_STEP = timedelta(days=1, minutes=17)
TEST_DIR = "tests/"
"""Paths under this prefix go into ``test_patch``; everything else into ``patch``."""
PYTEST_TIMEOUT_S = 120


class TaskVerificationError(RuntimeError):
    """A task whose tests do not behave as its FAIL_TO_PASS / PASS_TO_PASS lists say."""


@dataclass
class Builder:
    """Commits into one repository with fixed identities and a clock that ticks per commit."""

    path: Path
    env: dict[str, str]
    clock: datetime

    def git(self, *args: str) -> str:
        return run_git(["-C", str(self.path), *args], self._dated())

    def _dated(self) -> dict[str, str]:
        stamp = f"@{int(self.clock.timestamp())} +0000"
        return {
            **self.env,
            "GIT_AUTHOR_NAME": AUTHOR[0],
            "GIT_AUTHOR_EMAIL": AUTHOR[1],
            "GIT_COMMITTER_NAME": AUTHOR[0],
            "GIT_COMMITTER_EMAIL": AUTHOR[1],
            "GIT_AUTHOR_DATE": stamp,
            "GIT_COMMITTER_DATE": stamp,
        }

    def commit(self, message: str) -> str:
        self.git("add", "--all")
        self.git("commit", "--quiet", "--no-verify", "--allow-empty", "-m", message)
        self.clock += COMMIT_STEP
        return self.git("rev-parse", "HEAD").strip()


def copy_tree(src: Path, dest: Path) -> list[str]:
    """Copy the regular files under ``src`` onto ``dest`` (mode 644); their relative paths."""
    copied = []
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = file.relative_to(src)
        if "__pycache__" in rel.parts or file.suffix == ".pyc":
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.read_bytes())
        target.chmod(0o644)
        copied.append(rel.as_posix())
    return copied


def apply_edits(root: Path, edits: Mapping[str, Any]) -> None:
    """``{"append": {path: text}, "replace": {path: [old, new]}}`` applied to files under ``root``."""
    for rel, text in edits.get("append", {}).items():
        with (root / rel).open("a", encoding="utf-8") as f:
            f.write(text)
    for rel, (old, new) in edits.get("replace", {}).items():
        content = (root / rel).read_text(encoding="utf-8")
        if old not in content:
            raise ValueError(f"{root / rel}: text to replace not found: {old!r}")
        (root / rel).write_text(content.replace(old, new), encoding="utf-8")


def task_dirs(repo_src: Path) -> list[Path]:
    dirs = [d for d in (repo_src / "tasks").iterdir() if d.is_dir()]
    return sorted(dirs, key=lambda d: int(d.name.split("-", 1)[0]))


def build_repo(repo_src: Path, dest: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """Create the git repository of ``repo_src`` at ``dest``; the task rows (``repo_source`` unset)."""
    spec = json.loads((repo_src / "repo.json").read_text(encoding="utf-8"))
    owner, name = spec["repo"].split("/")
    package = spec["package"]
    run_git(["init", "--quiet", "--initial-branch=main", str(dest)], env)
    builder = Builder(dest, env, datetime.fromisoformat(spec["start"]))
    copy_tree(repo_src / "base", dest)
    initial = builder.commit("Initial commit")
    builder.git("tag", "v1.0", initial)

    rows = []
    for task_dir in task_dirs(repo_src):
        meta = json.loads((task_dir / "task.json").read_text(encoding="utf-8"))
        apply_edits(dest, meta["prep"])
        base = builder.commit(meta["prep"]["message"])
        changed = copy_tree(task_dir / "after", dest)
        created_at = builder.clock
        fix = builder.commit(f"{meta['fix_message']} (#{meta['number']})")
        code = [p for p in changed if not p.startswith(TEST_DIR)]
        tests = [p for p in changed if p.startswith(TEST_DIR)]
        if not code or not tests:
            raise ValueError(f"{task_dir}: after/ must change both code and files under {TEST_DIR}")
        diff = ("diff", "--no-color", "--no-ext-diff", "--no-textconv", base, fix, "--")
        rows.append(
            {
                "instance_id": f"{owner}__{name}-{meta['number']}",
                "repo": spec["repo"],
                "base_commit": base,
                "problem_statement": (task_dir / "issue.md").read_text(encoding="utf-8"),
                "patch": builder.git(*diff, *code),
                "test_patch": builder.git(*diff, *tests),
                # JSON strings, as in swebench's datasets; the loader takes lists too.
                "FAIL_TO_PASS": json.dumps(meta["FAIL_TO_PASS"]),
                "PASS_TO_PASS": json.dumps(meta["PASS_TO_PASS"]),
                "version": spec["version"],
                "created_at": created_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "hints_text": "",
                "repo_source": f"repos/{name}.bundle",
                "split": meta["split"],
                "difficulty": meta["difficulty"],
                "fix_commit": fix,
            }
        )

    # Later history that a naive clone would show: a release with a tag, a note, a branch.
    last_fix = rows[-1]["fix_commit"]
    bump = {"replace": {"pyproject.toml": ['version = "1.0.0"', 'version = "1.1.0"']}}
    bump["replace"][f"{package}/__init__.py"] = ['__version__ = "1.0.0"', '__version__ = "1.1.0"']
    apply_edits(dest, bump)
    release = builder.commit("Release 1.1.0")
    builder.git("tag", "--annotate", "-m", f"{name} 1.1.0", "v1.1", release)
    builder.git("notes", "add", "-m", f"Reviewed-by: {AUTHOR[0]} <{AUTHOR[1]}>", last_fix)
    builder.git("checkout", "--quiet", "-b", "dev")
    dev = {"replace": {"pyproject.toml": ['version = "1.1.0"', 'version = "1.2.0.dev0"']}}
    dev["replace"][f"{package}/__init__.py"] = ['__version__ = "1.1.0"', '__version__ = "1.2.0.dev0"']
    apply_edits(dest, dev)
    builder.commit("Start 1.2 development")
    builder.git("checkout", "--quiet", "main")
    return rows


# --------------------------------------------------------------------------------------------
# Verification on the host (these are our own trusted tasks: no sandbox needed)
# --------------------------------------------------------------------------------------------

_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")


def _ids(value: str | Sequence[str]) -> list[str]:
    return json.loads(value) if isinstance(value, str) else list(value)


def run_pytest(work: Path, node_ids: Sequence[str]) -> tuple[int, dict[str, str]]:
    """Exit code and ``{node id: PASSED|FAILED|ERROR|...}`` of pytest on ``node_ids`` (all if empty)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", *node_ids],
        cwd=work,
        # no plugin autoload: the repos need none, and the host venv has many (slow startup)
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "LC_ALL": "C.UTF-8",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=PYTEST_TIMEOUT_S,
    )
    statuses = {}
    for line in done.stdout.splitlines():
        match = _STATUS.match(line)
        if match:
            statuses[match.group(2)] = match.group(1)
    return done.returncode, statuses


def verify_task(row: Mapping[str, Any], repo: Path) -> None:
    """Check one row against its repository (a bundle or a git directory); raise if it is wrong.

    At base, PASS_TO_PASS pass; with the test patch, every FAIL_TO_PASS fails (fails or errors,
    but is collected) and PASS_TO_PASS still pass; with the gold patch as well, FAIL_TO_PASS and
    PASS_TO_PASS pass and so does the whole suite. Both patches must ``git apply`` cleanly and
    keep to their side (code vs ``tests/``).
    """
    f2p, p2p = _ids(row["FAIL_TO_PASS"]), _ids(row["PASS_TO_PASS"])
    name = row["instance_id"]
    if len(p2p) < 2 or not f2p:
        raise TaskVerificationError(f"{name}: needs FAIL_TO_PASS and at least 2 PASS_TO_PASS")
    for label, patch, test_side in (("patch", row["patch"], False), ("test_patch", row["test_patch"], True)):
        paths = re.findall(r"^diff --git a/(\S+) ", patch, flags=re.MULTILINE)
        if not paths or any(p.startswith(TEST_DIR) != test_side for p in paths):
            raise TaskVerificationError(f"{name}: {label} touches {paths}")
    with tempfile.TemporaryDirectory(prefix="swe-verify-") as tmp:
        env = git_environment(Path(tmp) / "home")
        work = Path(tmp) / "work"
        run_git(["clone", "--quiet", "--no-checkout", str(repo), str(work)], env)
        run_git(["-C", str(work), "checkout", "--quiet", "--detach", row["base_commit"]], env)

        def apply(patch: str) -> None:
            run_git(["-C", str(work), "apply", "--whitespace=nowarn", "-"], env, input=patch)

        def check(stage: str, statuses: dict[str, str], ids: Sequence[str], want: set[str]) -> None:
            wrong = {i: statuses.get(i, "absent") for i in ids if statuses.get(i) not in want}
            if wrong:
                raise TaskVerificationError(f"{name}: {stage}: expected {sorted(want)}, got {wrong}")

        _, statuses = run_pytest(work, p2p)
        check("base, PASS_TO_PASS", statuses, p2p, {"PASSED"})
        apply(row["test_patch"])
        _, statuses = run_pytest(work, [*f2p, *p2p])
        check("base + test_patch, FAIL_TO_PASS", statuses, f2p, {"FAILED", "ERROR"})
        check("base + test_patch, PASS_TO_PASS", statuses, p2p, {"PASSED"})
        apply(row["patch"])
        _, statuses = run_pytest(work, [*f2p, *p2p])
        check("gold, FAIL_TO_PASS + PASS_TO_PASS", statuses, [*f2p, *p2p], {"PASSED"})
        code, statuses = run_pytest(work, [])
        bad = {i: s for i, s in statuses.items() if s != "PASSED"}
        if code != 0 or bad:
            raise TaskVerificationError(f"{name}: gold, whole suite: exit {code}, not passing: {bad}")


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def build(src: Path, out: Path, verify: bool = True) -> list[dict[str, Any]]:
    """Build every repository under ``src``, verify the tasks, then write ``out``; the rows."""
    repo_srcs = sorted(d for d in src.iterdir() if (d / "repo.json").is_file())
    if not repo_srcs:
        raise SystemExit(f"no repositories (*/repo.json) under {src}")
    with tempfile.TemporaryDirectory(prefix="make-swe-") as tmp:
        env = git_environment(Path(tmp) / "home")
        rows, bundles, failures = [], {}, []
        for repo_src in repo_srcs:
            repo_dir = Path(tmp) / repo_src.name
            repo_rows = build_repo(repo_src, repo_dir, env)
            bundle = Path(tmp) / "bundles" / f"{repo_src.name}.bundle"
            bundle.parent.mkdir(exist_ok=True)
            run_git(["-C", str(repo_dir), "bundle", "create", "--quiet", str(bundle), "--all"], env)
            bundles[bundle.name] = bundle
            for row in repo_rows:
                if verify:
                    try:
                        verify_task(row, bundle)
                    except (TaskVerificationError, subprocess.SubprocessError, RuntimeError) as err:
                        failures.append(str(err))
                        continue
                del row["fix_commit"]
                rows.append(row)
        if failures:
            raise SystemExit("not written; tasks that do not verify:\n  " + "\n  ".join(failures))
        (out / "repos").mkdir(parents=True, exist_ok=True)
        for stale in (out / "repos").glob("*.bundle"):
            if stale.name not in bundles:
                stale.unlink()
        for file_name, bundle in bundles.items():
            shutil.copyfile(bundle, out / "repos" / file_name)
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    (out / "tasks.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=SRC, help="the plain-text sources")
    parser.add_argument("--out", type=Path, default=OUT, help="where tasks.jsonl and repos/ go")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip running each task's tests (faster; for builds you compare)",
    )
    args = parser.parse_args(argv)
    rows = build(args.src.resolve(), args.out.resolve(), verify=not args.no_verify)
    counts = {}
    for row in rows:
        counts[(row["split"], row["difficulty"])] = counts.get((row["split"], row["difficulty"]), 0) + 1
    summary = ", ".join(f"{split}/{difficulty}: {n}" for (split, difficulty), n in sorted(counts.items()))
    verified = "written" if args.no_verify else "verified and written"
    print(f"{len(rows)} tasks {verified} to {args.out} ({summary})")


if __name__ == "__main__":
    main()
