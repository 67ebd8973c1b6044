"""SWE tasks: the shipped set and its loader, the time-safe repository copy, the cache, the build
script and the ``search`` tool bundle.

The shipped tasks are our own, so their tests run directly on the host here (no sandbox).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import load_problems
from lit_codeRL.problems import swe as swe_module
from lit_codeRL.problems.swe import (
    CACHE_ENV,
    RepoCache,
    SWETask,
    git_environment,
    load_swe_tasks,
    prepare_repo,
    run_git,
    to_problem,
)

REPO = Path(__file__).resolve().parents[2]
SWE_DATA = REPO / "data" / "swe"
SCRIPT = REPO / "scripts" / "make_swe_tasks.py"
TOOL = REPO / "env" / "tools" / "search"


def _shipped_rows() -> list[dict]:
    lines = (SWE_DATA / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def make_swe():
    spec = importlib.util.spec_from_file_location("make_swe_tasks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def all_tasks() -> list[SWETask]:
    return load_swe_tasks(split="all")


@pytest.fixture
def git(tmp_path):
    """``git(*args, cwd=...)`` with a private HOME and no user/system config."""
    env = git_environment(tmp_path / "git-home")

    def run(*args: str, cwd: Path, check: bool = True, input: str | None = None) -> str:
        return run_git(list(args), env, cwd=cwd, check=check, input=input)

    return run


def _task(all_tasks: list[SWETask], suffix: str) -> SWETask:
    return next(t for t in all_tasks if t.instance_id.endswith(suffix))


# --------------------------------------------------------------------------------------------
# The shipped set and the loader
# --------------------------------------------------------------------------------------------


def test_embedded_set_has_splits_difficulties_and_bundles(all_tasks):
    train = load_swe_tasks(split="train")
    evaluation = load_swe_tasks(split="eval")
    assert len(all_tasks) >= 10 and len(train) >= 7 and len(evaluation) >= 3
    assert [t.instance_id for t in load_swe_tasks(split="test")] == [t.instance_id for t in evaluation]
    assert {t.instance_id for t in train} | {t.instance_id for t in evaluation} == {
        t.instance_id for t in all_tasks
    }
    assert {t.split for t in train} == {"train"} and {t.split for t in evaluation} == {"eval"}
    assert len({t.instance_id for t in all_tasks}) == len(all_tasks)
    assert {t.difficulty for t in all_tasks} == {"easy", "medium", "hard"}
    assert {t.difficulty for t in evaluation} == {"easy", "medium", "hard"}
    for task in all_tasks:
        assert task.repo_source.endswith(".bundle") and Path(task.repo_source).is_file()
        assert len(task.base_commit) == 40 and task.fail_to_pass and len(task.pass_to_pass) >= 2
        assert task.patch.startswith("diff --git") and task.test_patch.startswith("diff --git")
        assert task.metadata["version"] and task.metadata["created_at"]
        # The issue text describes the symptom; it never carries the gold patch's lines.
        added = [
            line[1:].strip()
            for line in task.patch.splitlines()
            if line.startswith("+") and not line.startswith("+++")
        ]
        assert not any(len(line) > 12 and line in task.problem_statement for line in added), task.instance_id
    assert len(load_swe_tasks(split="all", limit=3)) == 3


def test_no_train_base_contains_an_eval_fix(all_tasks, git, tmp_path):
    """Training on a task must not show the fix of an eval task from the same repository."""
    clones = {}
    for task in all_tasks:
        if task.repo_source not in clones:
            clones[task.repo_source] = tmp_path / Path(task.repo_source).stem
            git(
                "clone",
                "--quiet",
                "--no-checkout",
                task.repo_source,
                str(clones[task.repo_source]),
                cwd=tmp_path,
            )
    for held_out in (t for t in all_tasks if t.split == "eval"):
        for train in (t for t in all_tasks if t.split == "train" and t.repo == held_out.repo):
            cwd = clones[held_out.repo_source]
            done = git(
                "merge-base", "--is-ancestor", held_out.base_commit, train.base_commit, cwd=cwd, check=False
            )
            assert done == "" and held_out.base_commit != train.base_commit
            later = git("rev-list", "--count", f"{train.base_commit}..{held_out.base_commit}", cwd=cwd)
            assert int(later) > 0, f"{train.instance_id}'s base already contains {held_out.instance_id}"


def test_to_problem_and_registry(all_tasks):
    problem = to_problem(all_tasks[0])
    assert problem.task_id == all_tasks[0].instance_id
    assert problem.prompt == all_tasks[0].problem_statement and problem.source == "swe"
    assert problem.metadata["swe_task"] is all_tasks[0] and problem.metadata["split"] == all_tasks[0].split
    via_registry = load_problems("swe", "eval")
    assert [p.task_id for p in via_registry] == [t.instance_id for t in load_swe_tasks(split="eval")]
    assert all(isinstance(p.metadata["swe_task"], SWETask) for p in via_registry)
    from_file = load_problems(f"swe:{SWE_DATA / 'tasks.jsonl'}", "train")
    assert [p.task_id for p in from_file] == [t.instance_id for t in load_swe_tasks(split="train")]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_file_round_trip(tmp_path, all_tasks, fmt):
    rows = _shipped_rows()
    if fmt == "jsonl":  # lists instead of swebench's JSON strings
        rows = [
            {
                **r,
                "FAIL_TO_PASS": json.loads(r["FAIL_TO_PASS"]),
                "PASS_TO_PASS": json.loads(r["PASS_TO_PASS"]),
            }
            for r in rows
        ]
        path = tmp_path / "tasks.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path = tmp_path / "tasks.json"
        path.write_text(json.dumps({"data": rows}))
    else:
        pa = pytest.importorskip("pyarrow")  # the `hub` extra, as for MBPP parquet files
        pq = pytest.importorskip("pyarrow.parquet")

        rows = [{**r, "FAIL_TO_PASS": json.loads(r["FAIL_TO_PASS"])} for r in rows]  # one list column
        path = tmp_path / "tasks.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    # repo_source is relative ("repos/x.bundle"): found under repos_dir, not beside this file.
    loaded = load_swe_tasks(str(path), split="all", repos_dir=SWE_DATA)
    assert loaded == all_tasks
    assert [t.metadata for t in loaded] == [t.metadata for t in all_tasks]
    assert [t.instance_id for t in load_swe_tasks(str(path), "eval", repos_dir=SWE_DATA / "repos")] == [
        t.instance_id for t in all_tasks if t.split == "eval"
    ]


def test_swebench5_fields_and_rows_without_split(tmp_path, all_tasks):
    row = {
        **_shipped_rows()[0],
        "image": "swebench/sweb.eval.x86_64.x:latest",
        "eval_script": "#!/bin/bash\n",
    }
    row["test_command"] = "python -m pytest -x"
    del row["split"]
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_swe_tasks(str(path), split="test", repos_dir=SWE_DATA)
    assert task.image == row["image"] and task.eval_script == row["eval_script"]
    assert task.test_command == "python -m pytest -x"
    assert task.split == "eval"  # no split column: the row belongs to the split asked for
    assert load_swe_tasks(str(path), split="train", repos_dir=SWE_DATA)[0].split == "train"


def _bad(row: dict, **changes) -> dict:
    bad = {**row, **changes}
    return {k: v for k, v in bad.items() if v is not _DROP}


_DROP = object()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"patch": _DROP}, "missing field(s) patch"),
        ({"FAIL_TO_PASS": _DROP, "PASS_TO_PASS": None}, "missing field(s) FAIL_TO_PASS, PASS_TO_PASS"),
        ({"FAIL_TO_PASS": "tests/test_x.py::test_a"}, "field FAIL_TO_PASS is a string but not a JSON list"),
        ({"FAIL_TO_PASS": "[]"}, "field FAIL_TO_PASS is empty"),
        ({"PASS_TO_PASS": [1, 2]}, "field PASS_TO_PASS must be a list of test ids"),
        ({"base_commit": "main"}, "field base_commit must be a hex commit id"),
        ({"problem_statement": 7}, "field problem_statement must be a string"),
        ({"patch": "  "}, "field patch is empty"),
        ({"repo_source": "repos/missing.bundle"}, "not found; looked at"),
        ({"image": 3}, "field image must be a string"),
    ],
)
def test_bad_rows_name_row_and_field(tmp_path, changes, message):
    good, second = _shipped_rows()[:2]
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(_bad(second, **changes)) + "\n")
    with pytest.raises(ConfigError) as err:
        load_swe_tasks(str(path), split="all", repos_dir=SWE_DATA)
    assert message in str(err.value) and f"{path}: row 1" in str(err.value)
    if isinstance(second.get("instance_id"), str):
        assert second["instance_id"] in str(err.value)


def test_file_level_errors(tmp_path):
    row = _shipped_rows()[0]
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match="repeats row 0"):
        load_swe_tasks(str(path), split="all", repos_dir=SWE_DATA)
    path.write_text(json.dumps(row) + "\n{not json\n")
    with pytest.raises(ConfigError, match="line 2 is not valid JSON"):
        load_swe_tasks(str(path), split="all", repos_dir=SWE_DATA)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_swe_tasks(str(tmp_path / "absent.jsonl"))
    (tmp_path / "tasks.csv").write_text("x")
    with pytest.raises(FileNotFoundError):
        load_swe_tasks(str(tmp_path / "nothing" / "tasks.csv"))


def test_node_ids_as_list_or_json_string(tmp_path):
    row = _shipped_rows()[0]
    as_list = {**row, "FAIL_TO_PASS": json.loads(row["FAIL_TO_PASS"]), "instance_id": "x__y-1"}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(as_list) + "\n")
    first, second = load_swe_tasks(str(path), split="all", repos_dir=SWE_DATA)
    assert first.fail_to_pass == second.fail_to_pass == tuple(json.loads(row["FAIL_TO_PASS"]))
    assert isinstance(first.fail_to_pass, tuple) and first.fail_to_pass[0].startswith("tests/")


def test_hub_rows_find_repositories_in_repos_dir(tmp_path, git):
    row = {k: v for k, v in _shipped_rows()[0].items() if k != "repo_source"}
    path = tmp_path / "hub.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match="no repo_source and no repos_dir"):
        load_swe_tasks(str(path), split="all")
    repos = tmp_path / "repos"
    repos.mkdir()
    key = row["repo"].replace("/", "__")
    with pytest.raises(ConfigError) as err:
        load_swe_tasks(str(path), split="all", repos_dir=repos)
    assert str(repos / f"{key}.bundle") in str(err.value) and str(repos / key) in str(err.value)
    # a git directory named <owner>__<name>
    git(
        "clone",
        "--quiet",
        str(SWE_DATA / "repos" / f"{row['repo'].split('/')[1]}.bundle"),
        str(repos / key),
        cwd=tmp_path,
    )
    (task,) = load_swe_tasks(str(path), split="all", repos_dir=repos)
    assert task.repo_source == str(repos / key)
    # a bundle wins over the directory
    shutil.copyfile(SWE_DATA / "repos" / f"{row['repo'].split('/')[1]}.bundle", repos / f"{key}.bundle")
    assert load_swe_tasks(str(path), split="all", repos_dir=repos)[0].repo_source == str(
        repos / f"{key}.bundle"
    )


@pytest.mark.parametrize("repo", ["..", ".", " .. "])
def test_a_repo_of_dots_is_not_the_repos_dir_or_its_parent(tmp_path, git, repo):
    row = {k: v for k, v in _shipped_rows()[0].items() if k != "repo_source"}
    path = tmp_path / "hub.jsonl"
    path.write_text(json.dumps({**row, "repo": repo}) + "\n")
    repos = tmp_path / "repos"
    git("init", "--quiet", str(tmp_path), cwd=tmp_path)  # the parent is a git repository
    repos.mkdir()
    with pytest.raises(ConfigError, match="names no repository"):
        load_swe_tasks(str(path), split="all", repos_dir=repos)


def test_datasets_directory_and_hub_errors(tmp_path, monkeypatch, all_tasks):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    rows = _shipped_rows()
    saved = tmp_path / "saved"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(saved))
    loaded = load_swe_tasks(str(saved), split="test", repos_dir=SWE_DATA / "repos")
    assert [t.instance_id for t in loaded] == [t.instance_id for t in all_tasks]
    assert {t.split for t in loaded} == {"eval"}  # the dataset's split, not the rows' column
    assert len(load_swe_tasks(str(saved), split="eval", repos_dir=SWE_DATA / "repos")) == len(rows)
    with pytest.raises(ConfigError, match="no split 'train'"):
        load_swe_tasks(str(saved), split="train", repos_dir=SWE_DATA / "repos")
    with pytest.raises(ConfigError, match="cannot load SWE tasks from 'nobody-here/no-such-swe-set'"):
        load_swe_tasks("nobody-here/no-such-swe-set", split="test", repos_dir=SWE_DATA / "repos")


# --------------------------------------------------------------------------------------------
# The time-safe copy
# --------------------------------------------------------------------------------------------


def _later_objects(git, task: SWETask, clone: Path) -> list[str]:
    """Commits and tag objects of a full clone that are not ancestors of the base."""
    ancestors = set(git("rev-list", task.base_commit, cwd=clone).split())
    present = set(git("rev-list", "--all", cwd=clone).split())
    present |= set(git("for-each-ref", "--format=%(objectname)", cwd=clone).split())
    return sorted(present - ancestors)


def _assert_time_safe(git, task: SWETask, copy: Path, later: list[str]) -> None:
    base = task.base_commit
    assert git("for-each-ref", "--format=%(refname)", cwd=copy).split() == ["refs/heads/main"]
    assert git("rev-parse", "HEAD", cwd=copy).strip() == base
    assert git("symbolic-ref", "HEAD", cwd=copy).strip() == "refs/heads/main"
    assert git("remote", cwd=copy) == "" and git("tag", cwd=copy) == ""
    assert git("branch", "--all", "--format=%(refname)", cwd=copy).split() == ["refs/heads/main"]
    assert git("stash", "list", cwd=copy) == "" and git("notes", "list", cwd=copy, check=False) == ""
    # git log --all ends at the base: exactly the base and its ancestors
    assert git("log", "--all", "--format=%H", cwd=copy).split() == git("rev-list", base, cwd=copy).split()
    assert git("reflog", "--all", "--format=%H", cwd=copy).split() == []
    for sha in later:
        done = subprocess.run(["git", "-C", str(copy), "cat-file", "-e", sha], capture_output=True)
        assert done.returncode != 0, f"{sha} is still in the object database"
    assert git("fsck", "--unreachable", "--no-reflogs", cwd=copy).strip() == ""
    assert not any((copy / ".git" / name).exists() for name in ("ORIG_HEAD", "FETCH_HEAD"))
    assert git("status", "--porcelain", cwd=copy) == ""
    # The copy is at the base: the task's patches apply to it.
    for patch in (task.patch, task.test_patch):
        git("apply", "--check", "-", cwd=copy, input=patch)


def test_naive_clone_shows_the_fix_and_prepared_copy_does_not(tmp_path, git, all_tasks):
    task = _task(all_tasks, "numkit-1")
    naive = tmp_path / "naive"
    git("clone", "--quiet", task.repo_source, str(naive), cwd=tmp_path)
    later = _later_objects(git, task, naive)
    log = git("log", "--all", "--format=%H %s", cwd=naive)
    fix = next(line.split()[0] for line in log.splitlines() if "Fix median()" in line)
    assert fix in later and "v1.1" in git("tag", cwd=naive) and "origin/dev" in git("branch", "-a", cwd=naive)
    assert "(ordered[mid - 1] + ordered[mid]) / 2" in git("show", fix, cwd=naive)  # the leak is real
    copy = prepare_repo(task, tmp_path / "copy")
    assert copy == tmp_path / "copy"
    _assert_time_safe(git, task, copy, later)
    assert "Fix median()" not in git("log", "--all", "--format=%s", cwd=copy)
    assert "ordered[mid - 1]" not in git("grep", "-h", "ordered", "HEAD", cwd=copy, check=False)


@pytest.mark.parametrize("index", range(10))
def test_prepare_repo_every_shipped_task(tmp_path, git, all_tasks, index):
    task = all_tasks[index]
    naive = tmp_path / "naive"
    git("clone", "--quiet", "--mirror", task.repo_source, str(naive), cwd=tmp_path)
    later = _later_objects(git, task, naive)
    assert later, "the bundle should hold later history"
    _assert_time_safe(git, task, prepare_repo(task, tmp_path / "copy"), later)


def test_prepare_repo_from_a_directory_with_stash_notes_and_replace_refs(tmp_path, git, all_tasks):
    task = _task(all_tasks, "textkit-1")
    source = tmp_path / "source"
    git("clone", "--quiet", task.repo_source, str(source), cwd=tmp_path)
    git("checkout", "--quiet", "-b", "dev", "origin/dev", cwd=source)
    (source / "README.md").write_text("work in progress\n")
    git("stash", "--quiet", cwd=source)
    git("notes", "add", "-m", "the fix is in the next commit", task.base_commit, cwd=source)
    git("replace", git("rev-parse", "HEAD~1", cwd=source).strip(), "HEAD", cwd=source)
    git("reset", "--quiet", "--hard", "HEAD~1", cwd=source)  # leaves ORIG_HEAD and reflog entries
    later = _later_objects(git, task, source)
    stash = git("rev-parse", "refs/stash", cwd=source).strip()
    assert stash in later
    copy = prepare_repo(dataclasses.replace(task, repo_source=str(source)), tmp_path / "copy")
    _assert_time_safe(git, task, copy, later)
    assert not (copy / ".git" / "objects" / "info" / "alternates").exists()


def test_prepare_repo_errors(tmp_path, all_tasks):
    task = _task(all_tasks, "numkit-1")
    with pytest.raises(ConfigError, match="is not in"):
        prepare_repo(dataclasses.replace(task, base_commit="0" * 40), tmp_path / "a")
    with pytest.raises(ConfigError, match="does not exist"):
        prepare_repo(dataclasses.replace(task, repo_source=str(tmp_path / "none.bundle")), tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "file").write_text("x")
    with pytest.raises(FileExistsError):
        prepare_repo(task, tmp_path / "c")


def test_git_environment_ignores_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    env = git_environment(tmp_path / "home")
    assert "GIT_DIR" not in env and env["HOME"] == str(tmp_path / "home")
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull
    config = run_git(["config", "--list", "--show-origin"], env, cwd=tmp_path)
    assert all(line.startswith("command line:") for line in config.splitlines()), config


# --------------------------------------------------------------------------------------------
# RepoCache
# --------------------------------------------------------------------------------------------


def test_repo_cache_prepares_once(tmp_path, monkeypatch, all_tasks, git):
    cache = RepoCache(tmp_path / "cache")
    task = _task(all_tasks, "confkit-2")
    first = cache.get(task)
    inode = (first / ".git" / "index").stat().st_ino
    assert cache.get(task) == first and (first / ".git" / "index").stat().st_ino == inode
    assert git("rev-parse", "HEAD", cwd=first).strip() == task.base_commit
    other = cache.get(_task(all_tasks, "confkit-1"))
    assert other != first and other.parent == first.parent
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")) == sorted(
        [first.name, other.name]
    )
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "from-env"))
    assert RepoCache().root == tmp_path / "from-env"
    monkeypatch.delenv(CACHE_ENV)
    assert RepoCache().root == (Path.home() / ".cache" / "lit-coderl" / "swe-repos").resolve()


def test_repo_cache_processes_race(tmp_path, all_tasks, git):
    task = _task(all_tasks, "calckit-1")
    code = (
        "import sys; from lit_codeRL.problems.swe import RepoCache, load_swe_tasks\n"
        "task = next(t for t in load_swe_tasks(split='all') if t.instance_id == sys.argv[2])\n"
        "print(RepoCache(sys.argv[1]).get(task))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / "cache"), task.instance_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(set(outputs)) == 1
    entries = [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")]
    assert entries == [Path(outputs[0]).name]  # one copy, no temporary directories left
    assert git("rev-parse", "HEAD", cwd=Path(outputs[0])).strip() == task.base_commit


def test_repo_cache_rename_race_without_locks(tmp_path, monkeypatch, all_tasks):
    """Where file locks do nothing (some network file systems) both builders finish and the
    loser of the rename returns the winner's copy."""
    monkeypatch.setattr(swe_module.fcntl, "flock", lambda *args: None)
    barrier = threading.Barrier(2, timeout=60)
    real_prepare = swe_module.prepare_repo

    def slow_prepare(task, dest):
        result = real_prepare(task, dest)
        barrier.wait()  # both copies are built before either is renamed
        return result

    monkeypatch.setattr(swe_module, "prepare_repo", slow_prepare)
    cache = RepoCache(tmp_path / "cache")
    task = _task(all_tasks, "textkit-2")
    results: list[Path | BaseException] = []

    def worker() -> None:
        try:
            results.append(cache.get(task))
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            results.append(err)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [cache.path_for(task)] * 2
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == [
        cache.path_for(task).name
    ]


# --------------------------------------------------------------------------------------------
# The build script
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("index", range(10))
def test_shipped_task_verifies_on_host(make_swe, index):
    row = _shipped_rows()[index]
    make_swe.verify_task(row, SWE_DATA / row["repo_source"])


def test_verify_task_rejects_wrong_rows(make_swe):
    row = _shipped_rows()[0]
    bundle = SWE_DATA / row["repo_source"]
    p2p = json.loads(row["PASS_TO_PASS"])
    with pytest.raises(make_swe.TaskVerificationError, match="FAIL_TO_PASS"):
        make_swe.verify_task({**row, "FAIL_TO_PASS": json.dumps(p2p[:1])}, bundle)  # passes at base
    with pytest.raises(make_swe.TaskVerificationError, match="PASS_TO_PASS"):
        make_swe.verify_task(
            {**row, "PASS_TO_PASS": json.dumps([*p2p, *json.loads(row["FAIL_TO_PASS"])])}, bundle
        )
    with pytest.raises(make_swe.TaskVerificationError, match="patch touches"):
        make_swe.verify_task({**row, "patch": row["test_patch"]}, bundle)
    half_fix = _shipped_rows()[0]  # calckit-1: the fix without its helper's last line does not work
    assert half_fix["instance_id"] == "lit-coderl__calckit-1"
    broken = "\n".join(
        line for line in half_fix["patch"].splitlines() if "return incoming not in" not in line
    )
    with pytest.raises((make_swe.TaskVerificationError, RuntimeError)):
        make_swe.verify_task({**half_fix, "patch": broken + "\n"}, bundle)


def test_make_swe_tasks_is_deterministic_and_matches_shipped(tmp_path):
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--no-verify", "--out", str(out)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert "10 tasks written" in done.stdout
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert [str(f) for f in files] == [
        "repos/calckit.bundle",
        "repos/confkit.bundle",
        "repos/numkit.bundle",
        "repos/textkit.bundle",
        "tasks.jsonl",
    ]
    for rel in files:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel
        assert (outs[0] / rel).read_bytes() == (SWE_DATA / rel).read_bytes(), (
            f"{rel}: rerun scripts/make_swe_tasks.py"
        )


def test_make_swe_tasks_refuses_a_task_that_does_not_verify(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(REPO / "data" / "swe" / "src" / "numkit", src / "numkit")
    meta_path = src / "numkit" / "tasks" / "1-median-even" / "task.json"
    meta = json.loads(meta_path.read_text())
    meta["FAIL_TO_PASS"].append("tests/test_stats.py::test_mean")  # passes at base: not a F2P test
    meta_path.write_text(json.dumps(meta))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--src", str(src), "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "lit-coderl__numkit-1" in done.stderr and "test_mean" in done.stderr
    assert not (out / "tasks.jsonl").exists() and not (out / "repos").exists()


# --------------------------------------------------------------------------------------------
# The search tool bundle
# --------------------------------------------------------------------------------------------


def _search(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TOOL / "bin" / "search"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / ".git" / "objects").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "core.py").write_text("def paginate(items):\n    return items  # a.b\nVALUE = 'axb'\n")
    (root / "pkg" / "util_text.py").write_text("import re\nPATTERN = re.compile('x')\n")
    (root / "tests" / "test_core.py").write_text(
        "from pkg.core import paginate\n\ndef test_paginate():\n    pass\n"
    )
    (root / ".git" / "config").write_text("paginate in git metadata\n")
    (root / ".git" / "objects" / "test_hidden.py").write_text("paginate\n")
    (root / "blob.bin").write_bytes(b"paginate\0\x01\x02")
    return root


def test_search_files(tree):
    done = _search("--files", "test_*.py", cwd=tree)
    assert done.returncode == 0 and done.stdout.splitlines()[1:] == ["tests/test_core.py"]
    assert "Found 1 file" in done.stdout
    done = _search("--files", "util", "pkg", cwd=tree)
    assert done.stdout.splitlines()[1:] == ["pkg/util_text.py"]
    done = _search("--files", "*.py", cwd=tree)
    assert ".git" not in done.stdout and len(done.stdout.splitlines()) == 5
    done = _search("--files", "nothing*", cwd=tree)
    assert done.returncode == 1 and "No files matching" in done.stdout


def test_search_text_fixed_string_and_regex(tree):
    done = _search("paginate", cwd=tree)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        'Found 3 matches for text "paginate" in 2 files:',
        "pkg/core.py:1: def paginate(items):",
        "tests/test_core.py:1: from pkg.core import paginate",
        "tests/test_core.py:3: def test_paginate():",
    ]  # neither .git nor the binary file
    assert _search("a.b", "pkg/core.py", cwd=tree).stdout.count("core.py:") == 1  # literal: not 'axb'
    assert _search("--regex", "a.b", "pkg/core.py", cwd=tree).stdout.count("core.py:") == 2
    assert _search("-i", "PAGINATE", "pkg", cwd=tree).returncode == 0
    missing = _search("no such text", cwd=tree)
    assert missing.returncode == 1 and "No matches" in missing.stdout
    assert _search("--regex", "(", cwd=tree).returncode == 2
    assert _search("x", "no/such/path", cwd=tree).returncode == 2


def test_search_output_is_capped(tmp_path):
    (tmp_path / "big.txt").write_text(
        "".join(f"needle {i}\n" for i in range(120)) + "needle " + "y" * 1000 + "\n"
    )
    done = _search("needle", "big.txt", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Found 121 matches") and len(lines) == 1 + 50 + 1
    assert lines[-1].startswith("... 71 more matches not shown")
    done = _search("--max", "5", "--max-line", "20", "needle", "big.txt", cwd=tmp_path)
    assert len(done.stdout.splitlines()) == 7
    last = _search("--max", "200", "--max-line", "20", "needle", "big.txt", cwd=tmp_path).stdout.splitlines()[
        -1
    ]
    assert last.endswith("... [987 more chars]") and len(last) < 80


def test_search_bundle_install_and_config(tmp_path):
    import yaml

    config = yaml.safe_load((TOOL / "config.yaml").read_text())
    assert config["name"] == "search" and "\n" not in config["description"]
    assert any(u.startswith("search --files") for u in config["usage"]) and config["examples"]
    assert (TOOL / "bin" / "search").stat().st_mode & stat.S_IXUSR
    # read-only copy: install.sh writes nothing and prints nothing on success, run after run
    copy = tmp_path / "search"
    shutil.copytree(TOOL, copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        for _ in range(2):
            done = subprocess.run(["bash", str(copy / "install.sh")], capture_output=True, text=True)
            assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
        done = subprocess.run(
            ["/bin/bash", str(copy / "install.sh")],
            capture_output=True,
            text=True,
            env={"PATH": "/nonexistent"},
        )
        assert done.returncode == 1 and "python3" in done.stderr
    finally:
        for path in [copy, *copy.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
