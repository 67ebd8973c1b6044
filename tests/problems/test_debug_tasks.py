"""Debugging tasks: the shipped set, the loaders (debugging rows, KodCode rows), the conversion to
SWE tasks, and grading through the real bubblewrap sandbox with the real SWE grader.

Every row here is self-written in the layouts the loaders read (KodCode's own data is CC BY-NC 4.0
and never ships). The sandboxed tests share one cache root per session, so each task's node ids
and validation are computed once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import sys
from pathlib import Path

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.grading import SWEGrader
from lit_codeRL.grading._scan import is_test_path
from lit_codeRL.problems.debug import (
    KODCODE_SOLUTION,
    KODCODE_TEST,
    DebugTask,
    DebugTaskInvalid,
    debug_problem,
    debug_task,
    kodcode_stub,
    load_debug_tasks,
    task_from_row,
    validate_debug_tasks,
)
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.swe import RepoCache, SWETask, git_environment, run_git
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "debug"
SCRIPT = REPO / "scripts" / "make_debug_tasks.py"
LOGGER = "lit_codeRL.problems.debug"


@pytest.fixture(scope="module")
def shipped() -> list[DebugTask]:
    return load_debug_tasks("embedded", "all")


def _task(tasks: list[DebugTask], name: str) -> DebugTask:
    return next(t for t in tasks if t.task_id == f"debug/{name}")


# --------------------------------------------------------------------------------------------
# Self-written rows in the layouts the loaders read
# --------------------------------------------------------------------------------------------

KODCODE_ROW = {
    "version": "v1",
    "style": "instruct",
    "subset": "Leetcode",
    "question_id": "Selfmade_1_I",
    "question": "Given a list of integers, return the indices of the two numbers that add up to target.",
    "solution": (
        "from typing import List\n\n\n"
        "def pair_sum(nums: List[int], target: int) -> List[int]:\n"
        "    seen = {}\n"
        "    for i, n in enumerate(nums):\n"
        "        if target - n in seen:\n"
        "            return [seen[target - n], i]\n"
        "        seen[n] = i\n"
        "    return []\n"
    ),
    "test": (
        "from solution import pair_sum\n\n\n"
        "def test_found():\n    assert pair_sum([2, 7, 11], 9) == [0, 1]\n\n\n"
        "def test_later_pair():\n    assert pair_sum([3, 2, 4], 6) == [1, 2]\n\n\n"
        "def test_missing():\n    assert pair_sum([1, 2], 7) == []\n"
    ),
    "test_info": [
        {
            "function_name": "pair_sum",
            "function_declaration": "def pair_sum(nums: List[int], target: int) -> List[int]:",
            "docstring": 'Indices of the two numbers adding up to target ("[]" when none).',
            "parameter_list": "(nums, target)",
        }
    ],
    "gpt_difficulty": "easy",
    "gpt_pass_percentage": 0.9,
}

# An older KodCode row: test_code, no test_info, and the test imports a class and a function.
KODCODE_OLD_ROW = {
    "question_id": "Selfmade_2_C",
    "question": "Implement a Counter class with add(word) and most_common(), and a helper tally(words).",
    "solution": (
        "class Counter:\n"
        '    """Counts words."""\n\n'
        "    def __init__(self):\n        self.counts = {}\n\n"
        "    def add(self, word):\n        self.counts[word] = self.counts.get(word, 0) + 1\n\n"
        "    def most_common(self):\n        return max(sorted(self.counts), key=self.counts.get)\n\n\n"
        "def tally(words):\n    counter = Counter()\n    for w in words:\n        counter.add(w)\n"
        "    return counter.counts\n"
    ),
    "test_code": (
        "from solution import Counter, tally\n\n\n"
        "def test_counter():\n    c = Counter()\n    c.add('a')\n    c.add('b')\n    c.add('b')\n"
        "    assert c.most_common() == 'b'\n\n\n"
        "def test_tally():\n    assert tally(['x', 'y', 'x']) == {'x': 2, 'y': 1}\n"
    ),
    "gpt_difficulty": "medium",
}

# A debugging row as the SWE-PDB design writes them: test.py, nested extra_info.
PDB_ROW = {
    "id": "pdb/clamp",
    "files": [
        {"path": "clamp.py", "content": "def clamp(x, lo, hi):\n    return max(lo, min(x, lo))\n"},
        {
            "path": "test.py",
            "content": (
                "from clamp import clamp\n\n\n"
                "def test_inside():\n    assert clamp(5, 0, 10) == 5\n\n\n"
                "def test_below():\n    assert clamp(-3, 0, 10) == 0\n\n\n"
                "def test_above():\n    assert clamp(12, 0, 10) == 10\n"
            ),
        },
    ],
    "entrypoint": "python -m pytest --tb=short -sq test.py",
    "extra_info": {
        "question": "clamp(x, lo, hi) limits x to the range [lo, hi].",
        "split": "test",
        "source": "mine",
    },
    "fix": [{"path": "clamp.py", "content": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"}],
}


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# The shipped set
# --------------------------------------------------------------------------------------------


def test_shipped_splits_and_difficulty_spread(shipped):
    assert len(shipped) >= 16
    assert len({t.task_id for t in shipped}) == len(shipped)
    by = {(t.split, t.difficulty): 0 for t in shipped}
    for t in shipped:
        by[(t.split, t.difficulty)] += 1
    assert {split for split, _ in by} == {"train", "eval"}
    for difficulty in ("easy", "medium", "hard"):
        assert by.get(("train", difficulty), 0) >= 2 and by.get(("eval", difficulty), 0) >= 1, by
    train = sum(t.split == "train" for t in shipped)
    assert 0.55 <= train / len(shipped) <= 0.75
    assert sum(t.difficulty == "hard" for t in shipped) >= 4
    assert len({t.metadata["bug_kind"] for t in shipped}) == len(shipped), "every task its own kind of bug"


def test_shipped_tasks_are_well_formed(shipped):
    for t in shipped:
        assert t.fix and set(t.fix) <= set(t.source_files), t.task_id
        assert all(t.fix[p] != t.files[p] for p in t.fix), t.task_id
        assert t.test_modules and all(is_test_path(p) for p in t.test_modules)
        assert t.entry_point == "python -m pytest -sq " + " ".join(t.test_modules)
        assert t.description.strip() and t.difficulty in ("easy", "medium", "hard")
    multi_file = [t for t in shipped if len(t.source_files) > 1]
    assert len(multi_file) >= 3
    assert any(len(t.fix) == 2 for t in shipped), "a task with bugs in two files"


def test_shipped_file_is_what_the_sources_build():
    spec = importlib.util.spec_from_file_location("make_debug_tasks", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    assert module.render(module.build()) == (DATA / "tasks.jsonl").read_text(encoding="utf-8"), (
        "data/debug/tasks.jsonl is out of date: python scripts/make_debug_tasks.py"
    )


def test_split_selection(shipped):
    train, evaluation = load_debug_tasks("debug", "train"), load_debug_tasks("embedded", "eval")
    assert [t.task_id for t in train + evaluation] == [t.task_id for t in shipped if t.split == "train"] + [
        t.task_id for t in shipped if t.split == "eval"
    ]
    assert [t.task_id for t in load_debug_tasks("embedded", "test")] == [t.task_id for t in evaluation]
    assert len(load_debug_tasks("embedded", None)) == len(shipped)
    assert len(load_debug_tasks("embedded", "train", limit=3)) == 3
    with pytest.raises(ConfigError, match="no split 'trian'"):
        load_debug_tasks("embedded", "trian")


def test_problem_record(shipped):
    task = shipped[0]
    problem = debug_problem(task)
    assert isinstance(problem, Problem) and problem.source == "debug"
    assert problem.task_id == task.task_id and problem.prompt == task.description
    assert problem.metadata["split"] == task.split and debug_task(problem) is task
    with pytest.raises(ConfigError, match="not a debugging task"):
        debug_task(Problem(task_id="x", prompt="p"))


# --------------------------------------------------------------------------------------------
# Loaders
# --------------------------------------------------------------------------------------------


def test_debugging_row_layout(tmp_path):
    [task] = load_debug_tasks(str(_write_jsonl(tmp_path / "rows.jsonl", [PDB_ROW])), "eval")
    assert task.task_id == "pdb/clamp" and task.split == "eval"
    assert task.description == PDB_ROW["extra_info"]["question"]
    # test.py is outside the grader's test-path rule, so it is renamed and the entry point follows.
    assert sorted(task.files) == ["clamp.py", "test_test.py"] and task.test_files == ["test_test.py"]
    assert task.entry_point == "python -m pytest --tb=short -sq test_test.py"
    assert task.source_files == ["clamp.py"] and set(task.fix) == {"clamp.py"}
    assert task.metadata["source"] == "mine" and task.metadata["renamed_tests"] == {"test.py": "test_test.py"}
    plain = task_from_row({"task_name": "t", "files": {"a.py": "x = 1\n", "tests/test_a.py": "import a\n"}})
    assert plain.entry_point == "python -m pytest -sq tests/test_a.py" and plain.fix is None
    assert plain.description.startswith("Some tests in tests/test_a.py fail")
    # a suite run through a module the entry point names under a test directory (lark's
    # tests/__main__.py): grading protects it by its path, so it keeps its name and is what runs
    files = {"a.py": "", "tests/__init__.py": "", "tests/__main__.py": "", "tests/test_a.py": ""}
    lark = task_from_row(
        {"task_name": "t", "files": files, "entry_point": "python -m pytest tests/__main__.py"}
    )
    assert sorted(lark.files) == sorted(files) and lark.test_modules == ["tests/__main__.py"]
    assert task_from_row({"task_name": "t", "files": files}).test_modules == ["tests/test_a.py"]


def test_kodcode_row_becomes_a_stub_and_its_fix(tmp_path):
    [task] = load_debug_tasks(str(_write_jsonl(tmp_path / "kod.jsonl", [KODCODE_ROW])))
    assert task.task_id == "kodcode/Selfmade_1_I" and task.difficulty == "easy"
    assert task.description == KODCODE_ROW["question"]
    assert task.files[KODCODE_TEST] == KODCODE_ROW["test"]
    assert task.fix == {KODCODE_SOLUTION: KODCODE_ROW["solution"]}
    assert task.metadata["subset"] == "Leetcode" and task.metadata["format"] == "kodcode"
    stub = task.files[KODCODE_SOLUTION]
    assert "seen" not in stub, "the stub gives nothing of the solution away"
    namespace: dict = {}
    exec(compile(stub, "solution.py", "exec"), namespace)
    assert namespace["pair_sum"].__doc__.startswith("Indices of the two numbers")
    with pytest.raises(NotImplementedError):
        namespace["pair_sum"]([1], 1)


def test_old_kodcode_row_without_test_info(tmp_path):
    [task] = load_debug_tasks(str(_write_jsonl(tmp_path / "kod.jsonl", [KODCODE_OLD_ROW])))
    namespace: dict = {}
    exec(compile(task.files[KODCODE_SOLUTION], "solution.py", "exec"), namespace)
    counter = namespace["Counter"]()  # the class skeleton keeps its methods' signatures
    with pytest.raises(NotImplementedError):
        counter.add("a")
    with pytest.raises(NotImplementedError):
        namespace["tally"]([])
    assert task.difficulty == "medium" and task.files[KODCODE_TEST] == KODCODE_OLD_ROW["test_code"]


def test_stub_for_a_declaration_that_does_not_parse():
    stub = kodcode_stub(
        "def f(x):\n    return x\n",
        "from solution import f, g\n",
        [
            {
                "function_name": "f",
                "function_declaration": "def f(x",
                "parameter_list": "(x)",
                "docstring": None,
            }
        ],
    )
    namespace: dict = {}
    exec(compile(stub, "solution.py", "exec"), namespace)
    for name in ("f", "g"):
        with pytest.raises(NotImplementedError):
            namespace[name](1)


def test_json_directory_and_parquet(tmp_path):
    folder = tmp_path / "rows"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({"data": [PDB_ROW]}), encoding="utf-8")
    _write_jsonl(folder / "b.jsonl", [KODCODE_ROW])
    (folder / "notes.txt").write_text("not rows")
    assert [t.task_id for t in load_debug_tasks(str(folder))] == ["pdb/clamp", "kodcode/Selfmade_1_I"]
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([KODCODE_ROW]), tmp_path / "kod.parquet")
    [task] = load_debug_tasks(str(tmp_path / "kod.parquet"))
    assert task.fix == {KODCODE_SOLUTION: KODCODE_ROW["solution"]}


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match="needs pyarrow"):
        load_debug_tasks(str(tmp_path / "x.parquet"))


BAD_ROWS = {
    "no id": ({"files": PDB_ROW["files"]}, "row 1: missing field task_name"),
    "files not a list": ({"task_name": "x", "files": "clamp.py"}, "row 1: field files must be a list"),
    "file without content": ({"task_name": "x", "files": [{"path": "a.py"}]}, r"row 1: field files\[0\]"),
    "no test file": (
        {"task_name": "x", "files": [{"path": "a.py", "content": ""}]},
        "row 1: .*no test module",
    ),
    "path outside": (
        {"task_name": "x", "files": [{"path": "../test_a.py", "content": ""}]},
        "row 1: .*must be relative",
    ),
    "fix changes a test": (
        {**PDB_ROW, "id": "x", "fix": [{"path": "test.py", "content": ""}]},
        "row 1: .*fix changes test file",
    ),
    "kodcode without solution": (
        {"question": "q", "test": "def test_a(): pass"},
        "row 1: KodCode row missing field solution",
    ),
    "kodcode without test": ({"question": "q", "solution": "x = 1"}, "row 1: KodCode row missing field test"),
    "neither": ({"prompt": "q"}, "row 1: neither a debugging row"),
    "bad extra_info": ({**PDB_ROW, "extra_info": [1]}, "row 1: field extra_info must be an object"),
    "repeated id": ({**PDB_ROW}, r"row 1: task id 'pdb/clamp' repeats .*row 0"),
    "content and content_base64": (
        {"task_name": "x", "files": [{"path": "a.bin", "content": "", "content_base64": ""}]},
        r"row 1: field files\[0\] \(a.bin\) needs a string content or content_base64, not both",
    ),
    "content_base64 not base64": (
        {"task_name": "x", "files": [{"path": "a.bin", "content_base64": "not base64!"}]},
        r"row 1: field files\[0\] \(a.bin\): content_base64 is not base64",
    ),
    "fix of a binary file": (
        {
            **PDB_ROW,
            "id": "x",
            "files": [*PDB_ROW["files"], {"path": "a.bin", "content_base64": "AAE="}],
            "fix": [{"path": "a.bin", "content": ""}],
        },
        r"row 1: .*the fix must change text files only, not \['a.bin'\]",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ROWS))
def test_bad_rows_name_the_row_and_field(tmp_path, case):
    row, message = BAD_ROWS[case]
    file = _write_jsonl(tmp_path / "rows.jsonl", [PDB_ROW, row])
    with pytest.raises(ConfigError, match=message) as info:
        load_debug_tasks(str(file))
    assert "\n" not in str(info.value), "one line"


def test_missing_source(tmp_path):
    with pytest.raises(ConfigError, match="debug task source not found"):
        load_debug_tasks(str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match="no .jsonl, .json or .parquet"):
        load_debug_tasks(str(tmp_path))


# --------------------------------------------------------------------------------------------
# Through the real sandbox
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def debug_sandbox(tmp_path_factory) -> tuple[SWEGrader, Path]:
    """A bubblewrap grader and a debug-task cache root, fresh for this module."""
    require_bwrap()
    base = tmp_path_factory.mktemp("debug-cache")
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(base / "prepared"), timeout_s=120)
    return grader, base / "tasks"


@pytest.fixture(scope="module")
def validated(shipped, debug_sandbox) -> list[DebugTask]:
    grader, root = debug_sandbox
    return validate_debug_tasks(shipped, grader, root, workers=2)


def _diff(swe: SWETask, changes: dict[str, str], tmp_path: Path) -> str:
    """A ``git diff`` against the task's base writing ``changes`` (path -> new content)."""
    env = git_environment(tmp_path / "home")
    work = tmp_path / "work"
    run_git(["clone", "--quiet", swe.repo_source, str(work)], env)
    for path, content in changes.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(content, encoding="utf-8")
    run_git(["-C", str(work), "add", "--all"], env)
    return run_git(["-C", str(work), "diff", "--cached", "--binary", "HEAD"], env)


def test_every_shipped_task_validates(shipped, validated, debug_sandbox):
    grader, root = debug_sandbox
    assert [t.task_id for t in validated] == [t.task_id for t in shipped]
    for task in shipped:
        swe = task.to_swe_task(root, grader)
        assert swe.fail_to_pass and swe.pass_to_pass, task.task_id
        graded = {n.split("::")[0] for n in (*swe.fail_to_pass, *swe.pass_to_pass)}
        assert graded <= {*task.test_modules, *task.hidden_files}
        # the held-out checks (``held_out/`` of its source): graded, some failing at the base, and
        # added only by the grader (the SWE task's test_patch)
        assert bool(task.hidden_files) == bool(swe.test_patch) == bool(graded & set(task.hidden_files))
        assert all(f"b/{p}" in swe.test_patch for p in task.hidden_files)
        assert not task.hidden_files or any(n.split("::")[0] in task.hidden_files for n in swe.fail_to_pass)
        assert swe.problem_statement == task.description
        assert swe.patch.startswith("diff --git") and all(f"b/{p}" in swe.patch for p in task.fix)


def test_the_reference_fix_leaves_no_object_in_the_cached_repository(
    shipped, validated, debug_sandbox, tmp_path
):
    """The fix's diff is made in a scratch object store: the cached repository (shared by every
    process that opens the task, cloned into each workspace) holds the base commit's objects alone."""
    grader, root = debug_sandbox
    env = git_environment(tmp_path / "home")
    for task in shipped:
        repo = task.to_swe_task(root, grader).repo_source
        assert run_git(["-C", repo, "fsck", "--unreachable", "--no-reflogs"], env).strip() == "", task.task_id


def test_base_commit_is_the_same_on_every_build(shipped, validated, debug_sandbox, tmp_path):
    grader, root = debug_sandbox
    task = _task(shipped, "cart")
    first = task.to_swe_task(root, grader)
    again = task.to_swe_task(tmp_path / "elsewhere", SWEGrader(grader.workspace, RepoCache(tmp_path / "p")))
    assert again.base_commit == first.base_commit and again.patch == first.patch
    assert (again.fail_to_pass, again.pass_to_pass) == (first.fail_to_pass, first.pass_to_pass)


def test_records_and_markers_alone_travel_no_test_runs_again(
    shipped, validated, debug_sandbox, tmp_path, monkeypatch, caplog
):
    """What ``scripts/gpu_stage.sh`` ships to a GPU machine: the task records and the validation
    markers, not the git directories. There the repository is rebuilt with the recorded base
    commit, the task counts as validated, and no test runs; a record whose base commit is not
    what the files build is measured again."""
    import shutil

    from lit_codeRL.problems.debug import DebugTask as Task

    grader, root = debug_sandbox
    task = _task(shipped, "median")
    here = task.to_swe_task(root, grader)
    moved_root, moved_prepared = tmp_path / "tasks", tmp_path / "prepared"
    moved_root.mkdir()
    moved_prepared.mkdir()
    for record in root.glob("*.json"):
        shutil.copy(record, moved_root / record.name)
    for marker in grader.repos.root.glob("*.valid-*"):
        shutil.copy(marker, moved_prepared / marker.name)
    moved = SWEGrader(grader.workspace, RepoCache(moved_prepared), timeout_s=120)

    def no_test_run(*args, **kwargs):
        raise AssertionError("a test ran: the record was not used")

    with monkeypatch.context() as m:
        m.setattr(Task, "_measure", no_test_run)
        m.setattr(SWEGrader, "grade", no_test_run)
        with caplog.at_level(logging.INFO, logger="lit_codeRL.problems.debug"):
            assert [t.task_id for t in validate_debug_tasks([task], moved, moved_root)] == [task.task_id]
        there = task.to_swe_task(moved_root, moved)
    assert "validated 1 debug tasks: 1 on this machine before, the other 0" in caplog.text
    assert there.base_commit == here.base_commit and there.patch == here.patch
    assert Path(there.repo_source) != Path(here.repo_source) and (Path(there.repo_source) / ".git").is_dir()
    assert moved.grade(there, _diff(there, task.fix, tmp_path / "fix")).resolved
    # a record from other files (its base commit is not what these files build): measured again
    other = _task(shipped, "cart")
    (stale,) = moved_root.glob(f"*{other.content_key()}.json")  # copied above, its directory not
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "base_commit": "0" * 40}))
    assert other.to_swe_task(moved_root, moved).base_commit == other.to_swe_task(root, grader).base_commit
    assert json.loads(stale.read_text())["base_commit"] != "0" * 40


def test_fixing_one_of_two_files_does_not_resolve(shipped, validated, debug_sandbox, tmp_path):
    grader, root = debug_sandbox
    task = _task(shipped, "gradebook")
    swe = task.to_swe_task(root, grader)
    assert len(task.fix) == 2
    for i, (path, content) in enumerate(sorted(task.fix.items())):
        grade = grader.grade(swe, _diff(swe, {path: content}, tmp_path / str(i)))
        assert grade.verdict == "unresolved" and grade.reward == 0.0, (path, grade)
        assert any(s != "passed" for s in grade.fail_to_pass.values())
    assert grader.grade(swe, _diff(swe, task.fix, tmp_path / "both")).resolved


PASS_ALL_CONFTEST = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def test_editing_the_tests_or_adding_a_conftest_does_not_resolve(shipped, validated, debug_sandbox, tmp_path):
    grader, root = debug_sandbox
    task = _task(shipped, "median")
    swe = task.to_swe_task(root, grader)
    [module] = task.test_modules
    trivial = {
        module: "".join(f"def {n.split('::')[-1]}():\n    assert True\n\n\n" for n in swe.fail_to_pass)
    }
    for name, changes in {
        "tests edited": trivial,
        "conftest added": {"conftest.py": PASS_ALL_CONFTEST},
        "both": {**trivial, "conftest.py": PASS_ALL_CONFTEST},
    }.items():
        grade = grader.grade(swe, _diff(swe, changes, tmp_path / name.replace(" ", "-")))
        assert grade.verdict == "unresolved" and grade.reward == 0.0, (name, grade)
        assert set(grade.restored) == set(changes), (name, grade.restored)
    # Control: the same conftest beside the real fix resolves, so the zeros come from grading.
    grade = grader.grade(swe, _diff(swe, {**task.fix, "conftest.py": PASS_ALL_CONFTEST}, tmp_path / "ctl"))
    assert grade.resolved and grade.restored == ["conftest.py"]


def test_validation_drops_broken_tasks_and_says_why(shipped, validated, debug_sandbox, caplog):
    grader, root = debug_sandbox
    cart = _task(shipped, "cart")
    no_fix = dataclasses.replace(cart, task_id="debug/cart-unfixed", fix=None)
    # A "fix" that does not fix: it only renames a variable.
    wrong_fix = dataclasses.replace(
        cart,
        task_id="debug/cart-wrong-fix",
        fix={"cart.py": cart.files["cart.py"].replace("cart.append", "(cart).append")},
    )
    nothing_to_debug = dataclasses.replace(
        cart, task_id="debug/cart-fixed-already", files={**cart.files, **cart.fix}
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        kept = validate_debug_tasks([no_fix, wrong_fix, nothing_to_debug, cart], grader, root)
    assert [t.task_id for t in kept] == ["debug/cart-unfixed", "debug/cart"]
    text = caplog.text
    assert "debug/cart-unfixed kept unvalidated" in text
    assert "debug/cart-wrong-fix dropped: the reference patch does not resolve it" in text
    assert "debug/cart-fixed-already dropped: all 10 tests pass at the base" in text  # 5 held out
    with pytest.raises(DebugTaskInvalid, match="nothing to debug"):
        nothing_to_debug.to_swe_task(root, grader)


def test_kodcode_and_pdb_rows_through_the_sandbox(debug_sandbox, tmp_path):
    grader, root = debug_sandbox
    tasks = load_debug_tasks(str(_write_jsonl(tmp_path / "rows.jsonl", [KODCODE_ROW, PDB_ROW])))
    assert validate_debug_tasks(tasks, grader, root) == tasks
    kod, pdb = (t.to_swe_task(root, grader) for t in tasks)
    assert sorted(kod.fail_to_pass) == [
        f"{KODCODE_TEST}::test_{n}" for n in ("found", "later_pair", "missing")
    ]
    assert kod.pass_to_pass == ()
    assert sorted(pdb.fail_to_pass) == ["test_test.py::test_above", "test_test.py::test_inside"]
    assert pdb.pass_to_pass == ("test_test.py::test_below",)


def test_a_bug_that_breaks_the_import_is_collected_with_the_fix(debug_sandbox):
    grader, root = debug_sandbox
    task = DebugTask(
        task_id="debug/broken-import",
        description="half(x) returns x / 2.",
        files={
            "half.py": "def half(x)\n    return x / 2\n",
            "test_half.py": "from half import half\n\n\n"
            "def test_even():\n    assert half(4) == 2\n\n\ndef test_odd():\n    assert half(3) == 1.5\n",
        },
        fix={"half.py": "def half(x):\n    return x / 2\n"},
    )
    swe = task.to_swe_task(root, grader)
    assert sorted(swe.fail_to_pass) == ["test_half.py::test_even", "test_half.py::test_odd"]
    assert validate_debug_tasks([task], grader, root) == [task]


def test_a_row_that_names_its_graded_tests_is_graded_on_those(debug_sandbox, tmp_path, caplog):
    """A row's ``FAIL_TO_PASS``/``PASS_TO_PASS`` (a synthesized row's, measured on the clean
    repository) are what it is graded on, those measured so at the base here: a test this
    machine breaks (asttokens' on another astroid, natsort's on a locale that is not here) is
    run but not graded, where without them it is FAIL_TO_PASS and no fix resolves the task."""
    grader, root = debug_sandbox
    clean = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    tests = (
        "from calc import add, sub\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
        "def test_sub():\n    assert sub(3, 1) == 2\n\n\n"
        "def test_needs_what_is_not_here():\n    import not_installed_here_xyz  # noqa: F401\n"
    )
    row = {
        "task_name": "debug/env-broken-test",
        "files": [
            {"path": "calc.py", "content": clean.replace("a + b", "a - b")},
            {"path": "test_calc.py", "content": tests},
        ],
        "fix": [{"path": "calc.py", "content": clean}],
    }
    named = {"FAIL_TO_PASS": ["test_calc.py::test_add"], "PASS_TO_PASS": ["test_calc.py::test_sub"]}
    rows = [
        row,  # no names: every test failing at the base is FAIL_TO_PASS, the broken one too
        {**row, **named, "task_name": "debug/named"},
        {
            **row,
            "task_name": "debug/named-broken-p2p",
            "FAIL_TO_PASS": ["test_calc.py::test_add"],
            "PASS_TO_PASS": ["test_calc.py::test_sub", "test_calc.py::test_needs_what_is_not_here"],
        },
        {**row, "task_name": "debug/named-passes", "FAIL_TO_PASS": ["test_calc.py::test_sub"]},
    ]
    plain, named_task, broken_p2p, passes = load_debug_tasks(str(_write_jsonl(tmp_path / "rows.jsonl", rows)))
    assert (named_task.fail_to_pass, named_task.pass_to_pass) == (
        ("test_calc.py::test_add",),
        ("test_calc.py::test_sub",),
    )
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        kept = validate_debug_tasks([plain, named_task, broken_p2p, passes], grader, root)
    assert [t.task_id for t in kept] == ["debug/named", "debug/named-broken-p2p"]
    assert "debug/env-broken-test dropped: the reference patch does not resolve it" in caplog.text
    assert (
        "debug/named-broken-p2p: 1 test(s) its row names measure otherwise at the base here, not graded: "
        "test_calc.py::test_needs_what_is_not_here" in caplog.text
    )
    assert (
        "debug/named-passes dropped: none of the 1 FAIL_TO_PASS tests its row names fails at the base"
        in caplog.text
    )
    swe = named_task.to_swe_task(root, grader)
    assert swe.fail_to_pass == ("test_calc.py::test_add",) and swe.pass_to_pass == ("test_calc.py::test_sub",)
    # graded on those: the fix resolves it, breaking sub does not
    assert grader.grade(swe, swe.patch).resolved
    assert not grader.grade(swe, _diff(swe, {"calc.py": clean.replace("a - b", "b - a")}, tmp_path)).resolved


def test_graded_node_ids_of_a_row_follow_its_renamed_test_file(tmp_path):
    row = {
        "task_name": "pdb/renamed",
        "files": [
            {"path": "code.py", "content": "X = 1\n"},
            {"path": "test.py", "content": "def test_x():\n    pass\n"},
        ],
        "FAIL_TO_PASS": '["test.py::test_x"]',  # a JSON string, as swebench's datasets have it
    }
    (task,) = load_debug_tasks(str(_write_jsonl(tmp_path / "rows.jsonl", [row])))
    assert "test_test.py" in task.files and task.fail_to_pass == ("test_test.py::test_x",)
    with pytest.raises(ConfigError, match="PASS_TO_PASS without FAIL_TO_PASS"):
        load_debug_tasks(
            str(
                _write_jsonl(
                    tmp_path / "p2p.jsonl",
                    [{**row, "FAIL_TO_PASS": None, "PASS_TO_PASS": ["test.py::test_x"]}],
                )
            )
        )
    with pytest.raises(ConfigError, match="row 0: field FAIL_TO_PASS must be a list of test ids"):
        load_debug_tasks(str(_write_jsonl(tmp_path / "bad.jsonl", [{**row, "FAIL_TO_PASS": [3]}])))


def test_a_hanging_edit_is_cut_at_a_multiple_of_the_reference_run(
    shipped, validated, debug_sandbox, tmp_path
):
    """The grading run of a validated task gets ``timeout_factor`` times its reference run (the
    time ``validate`` measured), not the whole ``timeout_s``: a policy's edit that hangs the tests
    costs the batch seconds. The real fix still resolves under that limit."""
    grader, root = debug_sandbox
    task = _task(shipped, "cart")
    swe = task.to_swe_task(root, grader)
    tight = SWEGrader(grader.workspace, grader.repos, timeout_s=120, timeout_factor=3, min_timeout_s=4)
    gold_s = tight.reference_seconds(swe)
    assert gold_s is not None and 0 < gold_s < 30, "validate recorded the reference run's wall time"
    limit = tight.time_limit(swe)
    assert limit == max(4.0, 3 * gold_s) < 120
    hang = {path: "import time\ntime.sleep(600)\n" + content for path, content in task.fix.items()}
    grade = tight.grade(swe, _diff(swe, hang, tmp_path / "hang"))
    assert grade.verdict == "timeout" and grade.reward == 0.0
    assert grade.wall_s < limit + 15, (limit, grade.wall_s)
    assert f"did not finish in {limit:g} s" in grade.reason and "reference patch" in grade.reason
    assert tight.grade(swe, _diff(swe, task.fix, tmp_path / "fix")).resolved
    # Unvalidated tasks and timeout_factor 0 keep the whole limit.
    unknown = dataclasses.replace(swe, instance_id="debug/never-validated")
    assert tight.time_limit(unknown) == 120
    assert SWEGrader(grader.workspace, grader.repos, timeout_s=120, timeout_factor=0).time_limit(swe) == 120


def test_a_busy_loop_is_stopped_by_its_cpu_time_not_the_wall_clock(
    shipped, validated, debug_sandbox, tmp_path
):
    """An edit that loops forever burns CPU: its grading run stops at the CPU-time limit
    (``timeout_factor`` times the reference run, at least ``min_cpu_s``) although the wall-clock
    floor is a minute; a ``timeout`` with the CPU named. A test that sleeps as long passes: only
    CPU counts. The fix still resolves; ``min_cpu_s=0`` and an unvalidated task have no limit."""
    import time

    grader, root = debug_sandbox
    task = _task(shipped, "cart")
    swe = task.to_swe_task(root, grader)
    cpu = SWEGrader(
        grader.workspace, grader.repos, timeout_s=120, timeout_factor=2, min_timeout_s=60, min_cpu_s=2
    )
    gold_cpu_s = cpu.reference_cpu_seconds(swe)
    assert gold_cpu_s is not None and 0 < gold_cpu_s < 10, "validate recorded the reference run's CPU time"
    assert cpu.time_limit(swe) == 60
    assert cpu.cpu_limit(swe) == max(2.0, 2 * gold_cpu_s) < 60
    loop = {path: "while True:\n    pass\n" + content for path, content in task.fix.items()}
    t0 = time.monotonic()
    grade = cpu.grade(swe, _diff(swe, loop, tmp_path / "loop"))
    assert grade.verdict == "timeout" and grade.reward == 0.0, grade
    assert "CPU time" in grade.reason, grade.reason
    assert time.monotonic() - t0 < 40, "stopped by its CPU time, not by the 60 s wall clock"
    nap = {path: "import time\ntime.sleep(3)\n" + content for path, content in task.fix.items()}
    assert cpu.grade(swe, _diff(swe, nap, tmp_path / "nap")).resolved, "waiting uses no CPU"
    assert cpu.grade(swe, _diff(swe, task.fix, tmp_path / "fix")).resolved
    unlimited = SWEGrader(grader.workspace, grader.repos, min_cpu_s=0)
    assert unlimited.cpu_limit(swe) is None
    # code that sends itself SIGXCPU with no limit set: a timeout, the reason says no limit
    xcpu = {
        path: "import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)\n" + c for path, c in task.fix.items()
    }
    grade = unlimited.grade(swe, _diff(swe, xcpu, tmp_path / "xcpu"))
    assert grade.verdict == "timeout" and grade.reward == 0.0 and "SIGXCPU" in grade.reason, grade
    assert cpu.cpu_limit(dataclasses.replace(swe, instance_id="debug/never-validated")) is None
