"""Parsing from the sandbox pool's grading threads: no two ``ast.parse`` calls overlap (CPython
before 3.13 raised ``SystemError: AST constructor recursion depth mismatch`` in CI when they
did, gh-106905)."""

from __future__ import annotations

import ast
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lit_codeRL
from lit_codeRL import pyparse
from lit_codeRL.problems.debug_task import DebugTask
from lit_codeRL.sandbox import grading


def test_parses_from_many_threads_never_overlap(monkeypatch):
    real_parse = ast.parse
    inside, most = 0, 0
    count = threading.Lock()

    def slow_parse(source, *args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.002)  # hands the GIL to the other threads mid-parse
        try:
            return real_parse(source, *args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    grading.split_value_test.cache_clear()
    tests = [f"assert f({i}) == {i + 1}" for i in range(64)]
    # a debugging task's helpers of its tests, found as validation's threads make its SWE task
    # (a CI run raised the SystemError there: ``DebugTask.test_support`` parsed on its own)
    files = {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "checks.py": "def same(a, b):\n    assert a == b\n",
    }
    files["test_calc.py"] = (
        "from calc import add\nfrom checks import same\n\n\ndef test_add():\n    same(add(2, 3), 5)\n"
    )
    tasks = [DebugTask(f"t{i}", "d", dict(files), fix={"calc.py": "fixed\n"}) for i in range(16)]
    with ThreadPoolExecutor(8) as pool:
        split = list(pool.map(grading.split_value_test, tests))
        trees = list(pool.map(pyparse.parse, tests))
        support = list(pool.map(lambda task: task.test_support, tasks))
    grading.split_value_test.cache_clear()
    assert split == [(f"(\nf({i})\n)", i + 1) for i in range(64)]
    assert all(isinstance(t, ast.Module) for t in trees)
    assert support == [["checks.py"]] * 16
    assert most == 1, f"{most} parses ran at once"


def test_the_parsed_source_s_own_warnings_reach_no_one():
    """A task program's ``'\\w'`` escape or ``x is 1`` is data, not the user's code: no warning is
    shown (Python 3.12 printed one per program into a GPU run's log) and, under ``-W error``, no
    parse fails; the caller's warning filters are as they were."""
    import warnings

    source = "import re\npattern = re.compile('\\w+')\nsame = pattern is 1\n"
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("error")
        before = list(warnings.filters)
        tree = pyparse.parse(source)
        assert list(warnings.filters) == before
    assert shown == [] and isinstance(tree.body[2], ast.Assign)


def test_the_library_parses_only_through_pyparse():
    """Every ``ast.parse`` of the library is :func:`pyparse.parse`, whichever thread it runs in:
    one called directly (``DebugTask.test_support`` in validation's threads) raised the
    ``SystemError`` in CI. Grading's in-sandbox modules (``grading/_*.py``, standard library only)
    run in their own single-threaded processes."""
    root = Path(lit_codeRL.__file__).parent
    direct = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "pyparse.py" and not (path.parent.name == "grading" and path.name.startswith("_"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bast\.parse\(", line)
    ]
    assert direct == [], direct
