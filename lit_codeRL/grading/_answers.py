"""The answer run of grading (trusted, stdlib only; the runner's parent imports it).

Every other check of a grading run asks the process that ran the code under test what happened
in it: pytest's reports, the audit hook's events, the record of the grader's objects. Code that
knows where those live can change them (a reporter patched to forge the failing test's pass, the
record emptied first), and code that can tell the mirror run from the first (the test's values
where they run against its source text) forges only where the values are the test's own. Where a
task has one failing test function, nothing caught that (``docs/swe.md``, the answer run).

Here the verdict is made **outside** that process, from values the code under test cannot know
without computing them. A check is an equality of a computed value with a literal written in the
test: ``assert <computed> == <literal>`` (either side), ``assert _lcrl_close(<computed>,
<literal>)`` (a held-out check comparing floats) or, in a class, ``self.assertEqual(<computed>,
<literal>)`` (and its ``assert*Equal`` siblings). A test function with one or more (no decorator,
no parameter but ``self`` and ``tmp_path``) is *answerable*. The answer run (a grading run of its
own, in a fresh workspace) applies the diff and the tests as the first run does, reads the
answerable functions of the FAIL_TO_PASS tests it is given, keeps each check's literal **here**,
in this process (undumpable, never running a line of the repository), and then removes every
graded test file, the repository's git objects and every compiled file from the work tree. A
child with no test file in it runs each test module's code other than its tests (imports,
helpers, setup), then each answerable function with each check replaced by a record of its
computed side (every other statement as written, ``self`` a bare ``unittest.TestCase``,
``tmp_path`` a fresh directory), writing each value's ``repr`` and each test's end to a pipe of
its own; this process compares each record with its literal, and wants every check recorded and
every test ended without an error.

The child may write anything: to pass, it must write the value the test expects, which is in no
file, no process and no argument it can reach. A diff that forged the first run's reports and
computes the bug gives the bug's value here; a diff that computes the answer honestly gives it
here too (its run is the reference's, which validation asked: a test whose reference answers
disagree is not asked again). What is left: the other statements of an answered test, which
run with their literals in the child (``assert "sep" in text`` can be read there and met); test
files the task does not grade, left in the work tree; an answer the diff carries written out
(the visible tests' answers hard-coded; the held-out checks, which the agent never sees, are
answerable tests too); and marks a run leaves on the machine (the host's page cache) used as a
channel from the first run's process, which holds the test's values.
"""

import ast
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import time

import _mirror

MAX_ANSWER = 1 << 16
"""Longest ``repr`` of one value the child may answer with (a longer one differs)."""
MAX_OUTPUT = 8 << 20
"""Most bytes read from the child's answer pipe (the rest differs)."""
CLOSE = "_lcrl_close"
"""The held-out checks' float comparison (``problems/synth/held_out.py: CLOSE_FUNCTION``)."""
AGREE, DIFFER, NONE = "agree", "differ", "none"
"""A test's verdict: every check recorded with its literal and the test ended; not; not answerable."""


FIXTURES = frozenset({"tmp_path"})
"""Fixtures a test may take and still be answered: each made afresh for it, as pytest makes it."""
RECORD = "_lcrl_record"
"""What each check becomes in the child: ``_lcrl_record(<index>, <computed>)``."""
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


class _NotAnswerable(Exception):
    """A generator or a coroutine: pytest does not run its body as a test."""


class _Records(ast.NodeTransformer):
    """Each check of a test becomes a record of its computed side, its literal kept aside."""

    def __init__(self, start: int, method: bool) -> None:
        self.start, self.method = start, method
        self.expected: list[tuple[object, bool]] = []

    def _record(self, computed: ast.expr, value: object, close: bool) -> ast.stmt:
        index = ast.Constant(self.start + len(self.expected))
        self.expected.append((value, close))
        return ast.Expr(ast.Call(ast.Name(RECORD, ast.Load()), [index, computed], []))

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        check = _check(node, self.method)
        return node if check is None else self._record(*check)

    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        check = _check(node, self.method)
        return self.generic_visit(node) if check is None else self._record(*check)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Await):
            raise _NotAnswerable
        return super().generic_visit(node)


def answerable(function: ast.AST, method: bool, start: int = 0) -> tuple[str, list, list[str]] | None:
    """An answerable test function as the child runs it: ``(source, expected, fixtures)``, the
    function renamed ``_lcrl_test`` with each check a record numbered from ``start``, each
    check's ``(literal, close)`` in that order, and the fixtures it takes (``None``: it is not
    answerable: no such check, or a generator). A check is an equality of a computed value with
    a literal (``assert``, or a ``self.assert*Equal`` call in a class), anywhere in the body (a
    loop, a ``with``, a helper it defines); each is recorded and its literal leaves the child's
    code. Every other statement stands as written: the input built first, ``with
    pytest.raises``, another ``assert`` (``is``, ``in``, a truth value), which fails the test in
    the child as in pytest."""
    if not isinstance(function, ast.FunctionDef) or function.decorator_list:
        return None
    a = function.args
    names = [p.arg for p in [*a.posonlyargs, *a.args]]
    if method:
        if names[:1] != ["self"]:
            return None
        names = names[1:]
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or not set(names) <= FIXTURES:
        return None
    records = _Records(start, method)
    copy = ast.parse(ast.unparse(function)).body[0]
    try:
        body = [records.visit(statement) for statement in copy.body]
    except (_NotAnswerable, RecursionError):
        return None
    copy.body, copy.name = body, "_lcrl_test"
    if not records.expected:
        return None
    return ast.unparse(ast.fix_missing_locations(copy)), records.expected, names


def _check(statement: ast.stmt, method: bool) -> tuple[ast.expr, object, bool] | None:
    close = False
    if isinstance(statement, ast.Assert):
        test = statement.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            sides = [test.left, test.comparators[0]]
        elif _call_of(test, CLOSE) and len(test.args) == 2:
            sides, close = list(test.args), True
        else:
            return None
    elif method and isinstance(statement, ast.Expr) and _self_call(statement.value):
        call = statement.value
        if call.func.attr not in _mirror.EQUAL_METHODS or len(call.args) not in (2, 3) or call.keywords:
            return None  # a message may follow
        sides = list(call.args[:2])
    else:
        return None
    literal = [_mirror._is_literal(s) for s in sides]
    if literal.count(True) != 1 or (close and not literal[1]):
        return None
    computed, expected = (sides[1], sides[0]) if literal[0] else (sides[0], sides[1])
    try:
        value = ast.literal_eval(expected)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return computed, value, close


def _call_of(node: ast.AST, name: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == name
        and not node.keywords
    )


def _self_call(node: ast.AST) -> bool:
    """``self.assert...(...)``: a unittest check (an equality one is answered, another is not)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and node.func.attr.startswith(("assert", "fail"))
    )


def support(module: ast.Module) -> str:
    """The module's code other than its tests: its imports, helpers and setup, which the computed
    sides may read. Test functions and every class holding a test are left out (their literals
    are the expected values), and so is ``if __name__ == "__main__":``."""
    kept = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            continue
        if isinstance(node, ast.ClassDef) and (
            node.name.startswith("Test")
            or any(
                isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
                for n in node.body
            )
        ):
            continue
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        kept.append(node)
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def module_name(path: str) -> tuple[str, str]:
    """``(name, basedir)``: the dotted name pytest's ``append`` import mode gives the test file
    ``path`` and the directory it puts on ``sys.path`` (the first one up without ``__init__.py``)."""
    parts = [os.path.splitext(os.path.basename(path))[0]]
    directory = os.path.dirname(path)
    while directory and os.path.isfile(os.path.join(directory, "__init__.py")):
        parts.insert(0, os.path.basename(directory))
        directory = os.path.dirname(directory)
    return ".".join(parts), directory or "."


PROGRAM = r"""
import json as _j, os as _o, pathlib as _p, random as _r, sys as _s, tempfile as _t, unittest as _u

_s.path += {path!r}  # after the standard library, as in the pytest child
_s.dont_write_bytecode = True
_out = _o.fdopen({fd}, "w", buffering=1)


def _plain(value, seen=()):
    kind = next((t for t in (dict, list, tuple, set, frozenset) if isinstance(value, t)), None)
    if kind is None or id(value) in seen or len(seen) > 50:
        return value
    seen = (*seen, id(value))
    if kind is dict:
        return {{k: _plain(v, seen) for k, v in value.items()}}
    return kind(_plain(v, seen) for v in value)


def _reseed():  # as the workspace's pytest plugin does before each test (sandbox/pytest_steady.py)
    _r.seed(0)
    try:
        _s.modules["numpy"].random.seed(0)
    except Exception:
        pass


def _record(index, value):
    try:
        plain = _plain(value)
        text = repr(plain if plain is value or (value == plain) is True else value)
        row = [index, "ok", text] if len(text) <= {limit} else [index, "big", ""]
    except BaseException as error:
        row = [index, "raise", type(error).__name__]
    _out.write(_j.dumps(row) + "\n")


def _fixture(name):
    return _p.Path(_t.mkdtemp(prefix="lcrl-answer-"))


for _name, _package, _file, _code, _tests in {modules!r}:
    _ns = {{"__name__": _name, "__package__": _package, "__file__": _file}}
    try:
        exec(compile(_code, _file, "exec"), _ns)
    except BaseException as _e:
        for _t_index, _method, _src, _fixtures in _tests:
            _out.write(_j.dumps(["end", _t_index, "raise", type(_e).__name__]) + "\n")
        continue
    for _t_index, _method, _src, _fixtures in _tests:
        _reseed()
        try:
            _ns["{record}"] = _record
            exec(compile(_src, _file, "exec"), _ns)
            # a method gets a bare TestCase: its assert* methods, none of what its own setUp built
            _self = [_u.TestCase()] if _method else []
            _ns["_lcrl_test"](*_self, **{{f: _fixture(f) for f in _fixtures}})
            _row = ["end", _t_index, "ok"]
        except BaseException as _e:
            _row = ["end", _t_index, "raise", type(_e).__name__]
        _out.write(_j.dumps(_row) + "\n")
"""
"""The child: each module's support code, then each test with its checks recorded, one JSON line
per record and one at each test's end on its own descriptor (the tests' prints go to
``/dev/null``: a print without a line end must not swallow an answer)."""


def plan(tests: list[str]) -> tuple[dict[str, str], list[tuple], list[tuple[str, object, bool]], list[str]]:
    """Read the answerable functions of ``tests`` (FAIL_TO_PASS node ids) from their files:
    ``(verdicts, modules, expected, asked)``: each test's verdict so far (``none`` where it is
    not answerable), the child's modules (name, package, file, support code, ``[(test index,
    method, source, fixtures)]``), by check index ``(test, literal, close)``, and the answerable
    tests by test index."""
    verdicts: dict[str, str] = {}
    modules, expected, asked = [], [], []
    for path, qualnames in _mirror.plan(tests).items():
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        runs = []
        for qualname in qualnames:
            parts, test = qualname.split("::"), f"{path}::{qualname}"
            function = None if tree is None else _mirror._functions(tree, parts)
            found = None if function is None else answerable(function, len(parts) > 1, len(expected))
            verdicts[test] = NONE if found is None else AGREE
            if found is not None:
                source, literals, fixtures = found
                runs.append((len(asked), len(parts) > 1, source, fixtures))
                expected += [(test, value, use_close) for value, use_close in literals]
                asked.append(test)
        if runs and tree is not None:
            name, _ = module_name(path)
            package = name.rpartition(".")[0]
            modules.append((name, package, os.path.abspath(path), support(tree), runs))
    return verdicts, modules, expected, asked


def close(actual: object, expected: object) -> bool:
    """The held-out checks' ``_lcrl_close``: equality, floats within 1e-9 at any depth of lists,
    tuples and dicts' values."""
    if isinstance(expected, float):
        return (
            isinstance(actual, int | float)
            and not isinstance(actual, bool)
            and math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(close(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(close(actual[k], v) for k, v in expected.items())
        )
    return actual == expected


def agrees(row: object, expected: object, use_close: bool) -> bool:
    """Whether one answer line of the child (``[index, "ok", repr]``) is ``expected``."""
    if not (isinstance(row, list) and len(row) == 3 and row[1] == "ok" and isinstance(row[2], str)):
        return False
    if len(row[2]) > MAX_ANSWER:
        return False
    try:
        value = ast.literal_eval(row[2])
        return bool(close(value, expected) if use_close else value == expected)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False


def clear_tests(test_files: list[str]) -> None:
    """Remove what holds the tests' text from the work tree: the graded test files, the
    repository's git objects (the base's tests are blobs there) and every compiled file."""
    for path in test_files:
        try:
            os.unlink(path)
        except OSError:
            pass
    shutil.rmtree(".git", ignore_errors=True)
    for directory, subdirs, files in os.walk(".", topdown=True):
        for name in list(subdirs):
            if name == "__pycache__":
                shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
                subdirs.remove(name)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass


def answer(
    tests: list[str], test_files: list[str], path: list[str], env: dict[str, str], timeout_s: float
) -> dict[str, str]:
    """Each of ``tests``' verdict (:data:`AGREE`, :data:`DIFFER`, :data:`NONE`) after the child
    answered: ``path`` its ``sys.path`` before its own (the toolchain, the repository's roots),
    ``env`` its environment, ``timeout_s`` its time (an answer it did not give differs)."""
    verdicts, modules, expected, asked = plan(tests)
    clear_tests(test_files)
    if not expected:
        return verdicts
    bases = [module_name(m[2])[1] for m in modules]
    read_end, write_end = os.pipe()
    program = PROGRAM.format(
        path=[*path, *bases], fd=write_end, limit=MAX_ANSWER, modules=modules, record=RECORD
    )
    child = subprocess.Popen(
        [sys.executable, "-s", "-S", "-P", "-c", program],
        pass_fds=(write_end,),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(write_end)
    data, deadline = bytearray(), time.monotonic() + timeout_s
    while len(data) <= MAX_OUTPUT:
        wait = deadline - time.monotonic()
        if wait <= 0 or not select.select([read_end], [], [], wait)[0]:
            break
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    child.wait()
    rows: dict[int, list] = {}
    ends: dict[int, list] = {}
    for line in bytes(data[:MAX_OUTPUT]).split(b"\n"):
        try:
            row = json.loads(line)
            end, index = row[0] == "end", row[1] if row[0] == "end" else row[0]
        except Exception:  # noqa: BLE001, S112 - a line that is not one of ours answers nothing
            continue
        if type(index) is int and 0 <= index < (len(asked) if end else len(expected)):
            (ends if end else rows).setdefault(index, []).append(row)
    for index, test in enumerate(asked):
        if [row[2:] for row in ends.get(index, [])] != [["ok"]]:
            verdicts[test] = DIFFER  # it raised, did not end, or ended twice
    for index, (test, value, use_close) in enumerate(expected):
        answered = rows.get(index, [])
        if not answered or not all(agrees(row, value, use_close) for row in answered):
            verdicts[test] = DIFFER  # none, or another value (a check in a loop answers each time)
    return verdicts
