"""Hard-coded answers to a repository's visible tests, through the real debugging gym and grader.

A task synthesized from a repository shows its tests: in the bugged function, ``if args ==
(200, 15): return 170`` for each call the tests make passes them all with the bug in place.
Before held-out checks (``problems/synth/repo_held_out.py``) such a diff graded ``resolved``
(reward 1). Now ``lit-coderl synth <repo>`` gives each task the test modules' calls with changed
literal arguments, answered by the clean repository and added only at grading, beside the test
module they came from (pytest asserts and unittest's ``assertEqual`` alike): the hard-coded
answers run the bug on them and fail, in the debugging gym and through the SWE row's
``test_patch``. The reference fix still resolves, and the checks are nowhere in the workspace.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from lit_codeRL.problems.debug import load_debug_tasks
from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX
from tests.envs.conftest import (
    answering,
    debug_episode,
    fix_resolves_with_checks,
    synthesized_repo,
    unpaid_hack,
)

PRICES = '''"""Prices."""


def discount(price, percent):
    """``price`` less ``percent`` per cent, rounded down."""
    return price - price * percent // 100


def bulk_total(unit, count):
    """``count`` units; a tenth off from ten of them."""
    total = unit * count
    if count >= 10:
        total -= total // 10
    return total
'''
TEXT = '''"""Text."""


def slug(title):
    """The title's alphanumeric words, lower-cased and joined by dashes."""
    words = [w.lower() for w in title.split() if w.isalnum()]
    return "-".join(words)
'''
TEST_PRICES = """from shop.prices import bulk_total, discount


def test_discount():
    assert discount(200, 15) == 170


def test_discount_none():
    assert discount(99, 0) == 99


def test_bulk_small():
    assert bulk_total(3, 4) == 12


def test_bulk_large():
    assert bulk_total(5, 12) == 54
"""
TEST_TEXT = """import unittest

from shop.text import slug


class SlugTest(unittest.TestCase):
    def test_words(self):
        self.assertEqual(slug("Hello Big World"), "hello-big-world")

    def test_symbols(self):
        self.assertEqual(slug("a & b"), "a-b")
"""
STOCK = '''"""Stock."""


def restock(stock, names):
    """Count one more of each name into ``stock``; return how many names were new to it."""
    new = 0
    for name in names:
        if name not in stock:
            new += 1
        stock[name] = stock.get(name, 0) + 1
    return new
'''
# no call here has a literal argument: the input is built in a fixture and in locals, so only a
# whole test function with its literals changed is a held-out check (``function_checks.py``)
TEST_STOCK = """import pytest

from shop.stock import restock


@pytest.fixture
def stock():
    return {"tea": 2}


def test_restock_counts_the_new_names(stock):
    names = ["tea", "jam", "jam"]
    assert restock(stock, names) == 1
    assert stock == {"tea": 3, "jam": 2}


def test_restock_of_nothing(stock):
    names = []
    assert restock(stock, names) == 0
    assert stock == {"tea": 2}
"""
FILES = {
    "pyproject.toml": '[project]\nname = "shop"\nversion = "1.0"\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    "shop/__init__.py": "",
    "shop/prices.py": PRICES,
    "shop/text.py": TEXT,
    "shop/stock.py": STOCK,
    "tests/test_prices.py": TEST_PRICES,
    "tests/test_text.py": TEST_TEXT,
    "tests/test_stock.py": TEST_STOCK,
}


def visible_answers(files: dict[str, str]) -> dict[str, dict[str, object]]:
    """Function name -> {repr of the visible arguments: expected answer}, read from the test
    modules' ``assert f(...) == x`` and ``self.assertEqual(f(...), x)`` with literals."""
    table: dict[str, dict[str, object]] = {}
    for path, text in files.items():
        if not path.rsplit("/", 1)[-1].startswith("test_"):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
                call, expected = node.test.left, node.test.comparators[0]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "assertEqual":
                call, expected = node.args[:2]
            else:
                continue
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.keywords):
                continue
            try:
                args = tuple(ast.literal_eval(a) for a in call.args)
                table.setdefault(call.func.id, {})[repr(args)] = ast.literal_eval(expected)
            except ValueError:  # not literals: no table a policy could write from the text alone
                continue
    return table


def hard_coded(buggy: str, files: dict[str, str]) -> str:
    """The bugged module answering each visible call as its test expects, the bug elsewhere."""
    return answering(buggy, visible_answers(files))


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    out, report, swe, debug = synthesized_repo(tmp_path_factory.mktemp("repo-held-out"), FILES)
    checked = [row for row in swe if row["test_patch"]]
    # a bug in each function, and each shows on a changed call, in either test style
    functions = {row["function"].split("::")[-1] for row in checked}
    assert functions == {"discount", "bulk_total", "slug", "restock"}, report
    return out, checked, debug, report


def test_the_report_counts_the_checks(synthesized):
    _, checked, _, report = synthesized
    (source,) = report["sources"]
    held = source["held_out"]
    assert held["tasks_with_checks"] == len(checked) and held["failing_checks"] >= len(checked), held
    for row in checked:
        hidden = [n for n in row["FAIL_TO_PASS"] if f"/{HELD_OUT_PREFIX}" in n]
        # the visible failing tests first (a reference trajectory runs the first), the checks after
        assert hidden and row["FAIL_TO_PASS"][0].split("::")[0] in (
            "tests/test_prices.py",
            "tests/test_text.py",
            "tests/test_stock.py",
        )
        assert "held_out" not in row["problem_statement"] and HELD_OUT_PREFIX not in row["problem_statement"]


@pytest.mark.parametrize("function", ["discount", "bulk_total", "slug"])
def test_hard_coded_visible_answers_pass_the_visible_tests_and_get_no_reward(
    synthesized, bwrap_gym, function
):
    _, checked, debug, _ = synthesized
    row = next(r for r in checked if r["function"].endswith(f"::{function}"))
    task = debug[row["instance_id"]]
    (path,) = task.fix
    hack = hard_coded(task.files[path], task.files)
    out, seen = debug_episode(
        bwrap_gym, task, [f'<rewrite path="{path}">{hack}</rewrite>', "<eval/>", "<listdir/>"]
    )
    # the agent's own run of the tests passes (what it optimised); the checks are not in its workspace
    assert "8 passed" in seen[1] and "failed" not in seen[1], seen[1]
    assert HELD_OUT_PREFIX not in seen[2] and "test_prices.py" in seen[2], seen[2]
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(f"/{HELD_OUT_PREFIX}" in node for node in failed), grade


RESTOCK_HACK = """

_visible_restock = restock


def restock(stock, names):
    # the two visible tests' inputs (a fixture's, a local's), answered as they expect
    if stock == {"tea": 2} and names == ["tea", "jam", "jam"]:
        stock.update({"tea": 3, "jam": 2})
        return 1
    if stock == {"tea": 2} and names == []:
        return 0
    return _visible_restock(stock, names)
"""


def test_hard_coded_answers_to_tests_that_build_their_input_get_no_reward(synthesized, bwrap_gym):
    """``test_stock.py`` calls with a fixture's dict and a local list, no literal argument: its
    checks are its whole test functions with their literals changed (``function_checks.py``)."""
    _, checked, debug, _ = synthesized
    rows = [r for r in checked if r["function"].endswith("::restock")]
    assert rows
    for row in rows:
        task = debug[row["instance_id"]]
        (path,) = task.fix
        failed = unpaid_hack(bwrap_gym, task, task.files[path] + RESTOCK_HACK, visible=8)
        assert failed and all(node.startswith("tests/test_held_out_stock.py::") for node in failed), failed


@pytest.mark.parametrize("function", ["discount", "slug", "restock"])
def test_the_reference_fix_resolves_with_the_checks(synthesized, bwrap_gym, function):
    _, checked, debug, _ = synthesized
    row = next(r for r in checked if r["function"].endswith(f"::{function}"))
    fix_resolves_with_checks(bwrap_gym, debug[row["instance_id"]], HELD_OUT_PREFIX)


def test_swe_rows_grade_the_hack_unresolved_and_the_fix_resolved(synthesized, tmp_path):
    from lit_codeRL.grading import SWEGrader
    from lit_codeRL.problems.swe import RepoCache, git_environment, load_swe_tasks, run_git
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    out, checked, _, _ = synthesized
    rows = {t.instance_id: t for t in load_swe_tasks(str(out / "swe" / "tasks.jsonl"), "all")}
    grader = SWEGrader(WorkspaceConfig(backend="bwrap"), RepoCache(tmp_path / "prepared"), timeout_s=120)
    env = git_environment(tmp_path / "home")
    for row in checked:
        task = rows[row["instance_id"]]
        work = tmp_path / f"work-{task.base_commit[:8]}"
        run_git(["clone", "--quiet", str(out / task.repo_source), str(work)], env)
        run_git(["-C", str(work), "checkout", "--quiet", task.base_commit], env)
        files = {str(p.relative_to(work)): p.read_text() for p in work.rglob("*.py") if ".git" not in p.parts}
        assert not any(HELD_OUT_PREFIX in p for p in files)
        path = next(p for p in files if f"b/{p}" in task.patch)
        (work / path).write_text(hard_coded(files[path], files))
        hack = run_git(["-C", str(work), "diff", "--binary", "HEAD"], env)
        graded = grader.grade(task, hack)
        assert graded.verdict == "unresolved" and graded.reward == 0.0, graded
        assert grader.grade(task, task.patch).resolved


@pytest.mark.parametrize("task_id", ["debug/median", "debug/merge-intervals", "debug/file-stem"])
def test_shipped_debugging_tasks_grade_hard_coded_answers_unresolved(bwrap_gym, task_id):
    """The shipped programs (``configs/ppo_debug.yaml`` trains on them) carry checks made by
    ``scripts/add_held_out_checks.py`` from their sources' ``held_out/``."""
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == task_id]
    assert task.hidden_files and task.fix
    (path,) = task.fix
    hack = hard_coded(task.files[path], task.files)
    out, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="{path}">{hack}</rewrite>', "<eval/>"])
    assert " passed" in seen[1] and "failed" not in seen[1], seen[1]
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(node.split("::")[0] in task.hidden_files for node in failed), grade


# Hard-coded answers to shipped tests that build their input in locals, call through an object,
# share state between calls or expect an error: no call of theirs has only literal arguments to
# change, so these tasks had no checks before whole test functions were checks.
SHIPPED_HACKS = {
    "debug/prune-words": """

_visible_remove_short = remove_short
_ANSWERS = {(("alpha", "beta"), 3): [], (("alpha", "a", "beta", "b", "gamma"), 2): ["a", "b"],
            (("to", "be", "or", "not", "to", "be"), 3): ["to", "be", "or", "to", "be"],
            (("a", "b", "c"), 2): ["a", "b", "c"]}


def remove_short(words, min_length):
    gone = _ANSWERS.get((tuple(words), min_length))
    if gone is None:
        return _visible_remove_short(words, min_length)
    words[:] = [w for w in words if w not in gone]
    return len(gone)
""",
    "debug/tokenizer": """

_visible_tokenize = Tokenizer.tokenize
_ANSWERS = {"12 + x*3": ["12", "+", "x", "*", "3"], "(rate_1 - 0.5)/n": ["(", "rate_1", "-", "0.5", ")", "/", "n"],
            "a+b": ["a", "+", "b"], "c-1": ["c", "-", "1"], "b": ["b"]}


def _tokenize(self, text):
    return list(_ANSWERS[text]) if text in _ANSWERS else _visible_tokenize(self, text)


Tokenizer.tokenize = _tokenize
""",
    "debug/settings-parse": """

_visible_parse_settings = parse_settings


_RAISES = {"a = 1\\nb = 2\\na = 3": "line 3", "a = 1\\njust some words\\nc = 3": "line 2", " = 5": "line 1"}


def parse_settings(text):
    if text in _RAISES:
        raise SettingsError(_RAISES[text])
    return _visible_parse_settings(text)
""",
    "debug/cart": """

_visible_add_item = add_item


def add_item(name, price, cart=None):
    if cart is None and (name, price) in {("tea", 2.5), ("bread", 3.0), ("apple", 0.5), ("pear", 0.75)}:
        return [(name, price)]
    return _visible_add_item(name, price) if cart is None else _visible_add_item(name, price, cart)
""",
}


@pytest.mark.parametrize("task_id", sorted(SHIPPED_HACKS))
def test_shipped_tasks_whose_tests_build_their_input_grade_hard_coded_answers_unresolved(bwrap_gym, task_id):
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == task_id]
    (path,) = task.fix
    hack = task.files[path] + SHIPPED_HACKS[task_id]
    out, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="{path}">{hack}</rewrite>', "<eval/>"])
    assert " passed" in seen[1] and "failed" not in seen[1], seen[1]  # what the policy optimised
    grade = out.info["episode"]["grade"]
    assert out.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(node.split("::")[0] in task.hidden_files for node in failed), grade


@pytest.fixture
def add_checks_script(tmp_path, monkeypatch):
    """``scripts/add_held_out_checks.py`` as a module."""
    import importlib.util
    import sys

    monkeypatch.setenv("LIT_CODERL_DEBUG_CACHE", str(tmp_path / "debug-cache"))
    spec = importlib.util.spec_from_file_location(
        "add_held_out_checks", Path(__file__).resolve().parents[2] / "scripts" / "add_held_out_checks.py"
    )
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "add_held_out_checks", script)
    spec.loader.exec_module(script)
    return script


PARAMETRIZED_TESTS = """import pytest

from prices import discount


@pytest.mark.parametrize("price, percent, expected", [(200, 15, 170), (99, 0, 99), (50, 50, 25)])
def test_discount(price, percent, expected):
    assert discount(price, percent) == expected
"""


# the same rows written as pytest.param entries (with ids; a skipped one is no site)
PARAM_ENTRIES_TESTS = PARAMETRIZED_TESTS.replace(
    "[(200, 15, 170), (99, 0, 99), (50, 50, 25)]",
    '[pytest.param(200, 15, 170, id="sale"), pytest.param(99, 0, 99, id="none"), pytest.param(50, 50, 25, '
    'id="half"), pytest.param(10, 10, 0, marks=pytest.mark.skip)]',
)

# and as two stacked parametrizations, whose product pytest runs
STACKED_TESTS = """import pytest

from prices import discount


@pytest.mark.parametrize("price, expected", [(200, 170)])
@pytest.mark.parametrize("percent", [15])
def test_discount(price, percent, expected):
    assert discount(price, percent) == expected


@pytest.mark.parametrize("price", [99])
@pytest.mark.parametrize("percent, expected", [(0, 99)])
def test_none(price, percent, expected):
    assert discount(price, percent) == expected


@pytest.mark.parametrize("price", [50])
@pytest.mark.parametrize("percent", [50])
def test_half(price, percent):
    assert discount(price, percent) == 25
"""


@pytest.mark.parametrize(
    "tests", [PARAMETRIZED_TESTS, PARAM_ENTRIES_TESTS, STACKED_TESTS], ids=["rows", "pytest.param", "stacked"]
)
def test_a_parametrized_test_gets_checks_and_its_hard_coded_answers_no_reward(
    bwrap_gym, tmp_path, add_checks_script, tests
):
    """No call of a parametrized test has a literal argument: each parameter set is a whole
    test function whose bound values change (``function_checks.parameter_sets``). Rows written
    as ``pytest.param`` entries, or in stacked parametrizations, got no site before, and the hack
    graded ``resolved``."""
    buggy = PRICES.replace("price * percent // 100", "price * percent // 10")
    row = {"task_name": "mine/parametrized", "description": "discount is wrong",
           "files": [{"path": "prices.py", "content": buggy}, {"path": "test_prices.py", "content": tests}],
           "fix": [{"path": "prices.py", "content": PRICES}]}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    counts = add_checks_script.main([str(rows), "--out", str(tmp_path / "checked.jsonl")])
    assert counts["with_checks"] == 1, counts
    (task,) = load_debug_tasks(str(tmp_path / "checked.jsonl"))
    hack = answering(buggy, {"discount": {repr((200, 15)): 170, repr((99, 0)): 99, repr((50, 50)): 25}})
    done, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="prices.py">{hack}</rewrite>', "<eval/>"])
    assert "3 passed" in seen[1] and "failed" not in seen[1], seen[1]
    grade = done.info["episode"]["grade"]
    assert done.reward == 0.0 and grade["verdict"] == "unresolved", grade
    fixed, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="prices.py">{PRICES}</rewrite>'])
    assert fixed.reward == 1.0, fixed.info["episode"]["grade"]


def test_rows_written_by_hand_get_checks_from_the_script(bwrap_gym, tmp_path, add_checks_script):
    """``scripts/add_held_out_checks.py``: a user's rows with a fix get checks (in a
    ``FAIL_TO_PASS`` they name too); a row without a fix is written as it was."""
    script = add_checks_script
    buggy = PRICES.replace("price * percent // 100", "price * percent // 10")
    files = [
        {"path": "prices.py", "content": buggy},
        {"path": "test_prices.py", "content": TEST_PRICES.replace("shop.prices", "prices")},
    ]
    row = {"task_name": "mine/discount", "description": "discount is wrong", "files": files,
           "fix": [{"path": "prices.py", "content": PRICES}]}  # fmt: skip
    named = {**row, "task_name": "mine/named", "FAIL_TO_PASS": ["test_prices.py::test_discount"],
             "PASS_TO_PASS": ["test_prices.py::test_discount_none"]}  # fmt: skip
    unfixed = {**row, "task_name": "mine/unfixed"}
    unfixed.pop("fix")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in (row, named, unfixed)))
    counts = script.main([str(rows), "--out", str(tmp_path / "checked.jsonl")])
    assert counts == {"rows": 3, "with_checks": 2, "checks": counts["checks"]} and counts["checks"] >= 2
    out = [json.loads(line) for line in (tmp_path / "checked.jsonl").read_text().splitlines()]
    assert out[2] == unfixed
    hidden = [f["path"] for f in out[0]["hidden_files"]]
    assert hidden == ["test_held_out_prices.py"] and "FAIL_TO_PASS" not in out[0]
    assert out[1]["FAIL_TO_PASS"][0] == "test_prices.py::test_discount"
    assert any(n.startswith("test_held_out_prices.py::") for n in out[1]["FAIL_TO_PASS"])
    for task in load_debug_tasks(str(tmp_path / "checked.jsonl"))[:2]:
        hack = hard_coded(buggy, {f["path"]: f["content"] for f in files})
        done, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="prices.py">{hack}</rewrite>'])
        assert done.reward == 0.0 and done.info["episode"]["grade"]["verdict"] == "unresolved", task.task_id
        fixed, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="prices.py">{PRICES}</rewrite>'])
        assert fixed.reward == 1.0, (task.task_id, fixed.info["episode"]["grade"])


# Test classes build their input on ``self`` (``setUp``, ``setup_method``) or in locals: no call
# has a literal argument. Their methods are whole-function sites, each run in a copy of its class
# with the runner's hooks around it (``function_checks.test_methods``).
CLASS_TESTS = {
    "test_unit.py": """import unittest

from stock import restock


class StockCase(unittest.TestCase):
    def setUp(self):
        self.stock = {"tea": 2}
        self.addCleanup(self.stock.clear)


class TestRestock(StockCase):
    def test_counts_the_new_names(self):
        names = ["tea", "jam", "jam"]
        self.assertEqual(restock(self.stock, names), 1)
        self.assertDictEqual(self.stock, {"tea": 3, "jam": 2})

    def test_an_old_name(self):
        names = ["tea"]
        self.assertFalse(restock(self.stock, names))
        self.assertIn("tea", self.stock)
""",
    "test_plain.py": """from stock import restock


class TestRestockPlain:
    def setup_method(self, method):
        self.stock = {"jam": 1}

    def test_two_new_names(self):
        names = ["tea", "bun", "jam"]
        assert restock(self.stock, names) == 2
        assert sorted(self.stock) == ["bun", "jam", "tea"]
""",
}
# the bug: names already in stock are counted as new too
BUGGY_STOCK = STOCK.replace("        if name not in stock:\n", "        if name not in stock or stock:\n")
CLASS_HACK = """

_visible_restock = restock


def restock(stock, names):
    # each visible test's ``self.stock`` and local names, answered as the test expects
    if stock == {"tea": 2} and names == ["tea", "jam", "jam"]:
        stock.update({"tea": 3, "jam": 2})
        return 1
    if stock == {"tea": 2} and names == ["tea"]:
        stock["tea"] = 3
        return 0
    if stock == {"jam": 1} and names == ["tea", "bun", "jam"]:
        stock.update({"tea": 1, "bun": 1, "jam": 2})
        return 2
    return _visible_restock(stock, names)
"""


def _stock_task(tmp_path, add_checks_script, name: str, tests: dict[str, str]):
    """The debugging task of ``BUGGY_STOCK`` and ``tests``, with the checks the row script adds
    (it must add some)."""
    files = [{"path": "stock.py", "content": BUGGY_STOCK}]
    files += [{"path": path, "content": text} for path, text in tests.items()]
    row = {"task_name": f"mine/{name}", "description": "restock counts old names",
           "files": files, "fix": [{"path": "stock.py", "content": STOCK}]}  # fmt: skip
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps(row) + "\n")
    counts = add_checks_script.main([str(rows), "--out", str(tmp_path / "checked.jsonl")])
    assert counts["with_checks"] == 1, counts
    (task,) = load_debug_tasks(str(tmp_path / "checked.jsonl"))
    return task


def test_hard_coded_answers_to_test_classes_get_no_reward(bwrap_gym, tmp_path, add_checks_script):
    """A unittest ``TestCase`` (its ``setUp`` in a base class) and a pytest class (its
    ``setup_method``): before their methods were sites, the hack graded ``resolved``."""
    assert BUGGY_STOCK != STOCK
    task = _stock_task(tmp_path, add_checks_script, "classes", CLASS_TESTS)
    # checks from both classes, each in a module of its own beside the visible one
    assert set(task.hidden_files) == {"test_held_out_unit.py", "test_held_out_plain.py"}, task.hidden_files
    hack = BUGGY_STOCK + CLASS_HACK
    done, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{hack}</rewrite>', "<eval/>"])
    assert "3 passed" in seen[1] and "failed" not in seen[1], seen[1]  # what the policy optimised
    grade = done.info["episode"]["grade"]
    assert done.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(node.split("::")[0] in task.hidden_files for node in failed), grade
    fixed, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{STOCK}</rewrite>'])
    assert fixed.reward == 1.0, fixed.info["episode"]["grade"]


# The input is a module constant, read in the test or named by its parametrization: bound in the
# test as a copy, it is an input like a literal (``function_checks.with_constants``).
CONSTANT_TESTS = """import pytest

from stock import restock

STOCK = {"tea": 2}
NAMES = ["tea", "jam", "jam"]
CASES = [(["jam"], 1), (["tea", "tea"], 0)]


def test_restock():
    stock = dict(STOCK)
    assert restock(stock, NAMES) == 1
    assert stock == {"tea": 3, "jam": 2}


@pytest.mark.parametrize("names, new", CASES)
def test_counts(names, new):
    assert restock(dict(STOCK), names) == new
"""
CONSTANT_HACK = """

_visible_restock = restock


def restock(stock, names):
    if stock == {"tea": 2} and names == ["tea", "jam", "jam"]:
        stock.update({"tea": 3, "jam": 2})
        return 1
    if stock == {"tea": 2} and names == ["tea", "tea"]:
        stock["tea"] = 4
        return 0
    return _visible_restock(stock, names)
"""


def test_hard_coded_answers_to_module_constants_get_no_reward(bwrap_gym, tmp_path, add_checks_script):
    """Before constants were inputs, these tests had no literal to change and no checks: the hack
    graded ``resolved``."""
    task = _stock_task(tmp_path, add_checks_script, "constants", {"test_stock.py": CONSTANT_TESTS})
    (checks,) = task.hidden_files.values()
    # both tests are sites: the constants read in the body bound and changed, the parametrization
    # by a name one site per set
    assert "    NAMES = [" in checks and "    names, new = (" in checks, checks
    hack = BUGGY_STOCK + CONSTANT_HACK
    done, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{hack}</rewrite>', "<eval/>"])
    assert "3 passed" in seen[1] and "failed" not in seen[1], seen[1]
    grade = done.info["episode"]["grade"]
    assert done.reward == 0.0 and grade["verdict"] == "unresolved", grade
    fixed, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{STOCK}</rewrite>'])
    assert fixed.reward == 1.0, fixed.info["episode"]["grade"]


# The asserts are in helpers the tests call with their input and expected values (a module
# function, a ``TestCase`` base's ``assertRestocks``): a changed input failed the helper's assert
# in the clean run too, so no variant was a check. The helpers record into the site's records
# (``function_checks.with_helpers``, ``with_method_helpers``). A table of cases kept as a class
# attribute (``self.CASES``) is an input bound in the method (``with_attributes``).
HELPER_TESTS = {
    "test_helpers.py": """from stock import restock


def check_restock(stock, names, new, after):
    assert restock(stock, names) == new
    assert stock == after


def test_counts_the_new_names():
    check_restock({"tea": 2}, ["tea", "jam", "jam"], 1, {"tea": 3, "jam": 2})


def test_an_old_name():
    check_restock({"tea": 2}, ["tea"], 0, {"tea": 3})
""",
    "test_helper_unit.py": """import unittest

from stock import restock


class StockCase(unittest.TestCase):
    def assertRestocks(self, stock, names, new):
        self.assertEqual(restock(stock, names), new)


class TestRestock(StockCase):
    def test_two_new_names(self):
        self.assertRestocks({"jam": 1}, ["tea", "bun", "jam"], 2)


class TestTable(unittest.TestCase):
    CASES = [({"tea": 2}, ["tea"], 0), ({"tea": 2}, ["tea", "jam", "jam"], 1)]

    def test_table(self):
        for stock, names, new in self.CASES:
            self.assertEqual(restock(dict(stock), names), new)
""",
}


def test_hard_coded_answers_behind_assert_helpers_get_no_reward(bwrap_gym, tmp_path, add_checks_script):
    """Before helpers recorded, neither module had a check: the hack graded ``resolved``."""
    task = _stock_task(tmp_path, add_checks_script, "helpers", HELPER_TESTS)
    assert set(task.hidden_files) == {"test_held_out_helpers.py", "test_held_out_helper_unit.py"}
    hack = BUGGY_STOCK + CLASS_HACK  # the same visible (stock, names) pairs, answered
    done, seen = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{hack}</rewrite>', "<eval/>"])
    assert "4 passed" in seen[1] and "failed" not in seen[1], seen[1]
    grade = done.info["episode"]["grade"]
    assert done.reward == 0.0 and grade["verdict"] == "unresolved", grade
    failed = [node for node, status in grade["fail_to_pass"].items() if status != "passed"]
    assert failed and all(node.split("::")[0] in task.hidden_files for node in failed), grade
    assert "self.CASES = [" in task.hidden_files["test_held_out_helper_unit.py"]
    fixed, _ = debug_episode(bwrap_gym, task, [f'<rewrite path="stock.py">{STOCK}</rewrite>'])
    assert fixed.reward == 1.0, fixed.info["episode"]["grade"]
