"""Expected values never enter the untrusted process.

Each hostile program below hunts for the expected value of the test that calls it, the way a
policy optimised against the grader could: its caller's frames, code objects, locals and globals,
traceback frames, the ``gc`` heap, source lines, raw process memory. On the protected path
(``assert <expr> == <literal>``, stdin/stdout) it finds nothing and fails. Every hunter is also run
against the old in-process comparison (``trusted_comparison=False``), where it must *pass*: that
proves the hunter works, so the protected result is not a hunter that simply misses.
"""

from __future__ import annotations

import textwrap

import pytest

from lit_codeRL.sandbox import Program, Verdict, make_sandbox
from lit_codeRL.sandbox.grading import shape_of, split_value_test, value_matches

MARK = 7345129
TESTS = (f"assert f(1) == {MARK}", f"assert {MARK + 1} == f(2)")
PATTERN = r"f\((\d)\)\s*==\s*(\d{7})|(\d{7})\s*==\s*f\((\d)\)"

HELPERS = textwrap.dedent(
    f"""
    import gc, re, sys
    PAT = re.compile({PATTERN!r})
    def from_text(s, arg):
        for m in PAT.finditer(s):
            a, v = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            if int(a) == arg:
                return int(v)
    def from_obj(o, arg, depth=0, seen=None):
        seen = set() if seen is None else seen
        if id(o) in seen or depth > 6:
            return None
        seen.add(id(o))
        if isinstance(o, str):
            return from_text(o, arg)
        if isinstance(o, bytes):
            return from_text(o.decode('latin-1'), arg)
        if hasattr(o, 'co_consts'):
            consts = [c for c in o.co_consts if isinstance(c, int) and c > 1000000]
            if consts and arg in o.co_consts:
                return consts[0]
            return None
        items = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple, set)) else ()
        for x in items:
            r = from_obj(x, arg, depth + 1, seen)
            if r is not None:
                return r
    def frames():
        fr = sys._getframe(2)
        while fr is not None:
            yield fr
            fr = fr.f_back
    """
)

HUNTERS = {
    "caller_code_consts": "for fr in frames():\n    r = from_obj(fr.f_code, x)\n    if r: return r",
    "caller_locals": "for fr in frames():\n    r = from_obj(fr.f_locals, x)\n    if r: return r",
    "caller_frame_objects": "for fr in frames():\n    r = from_obj([fr.f_code, fr.f_locals, fr.f_code.co_consts], x)\n"
    "    if r: return r",
    "traceback_frames": "try:\n    raise ValueError\nexcept ValueError as e:\n    fr = e.__traceback__.tb_frame\n"
    "while fr is not None:\n    r = from_obj(fr.f_locals, x) or from_obj(fr.f_code, x)\n    if r: return r\n"
    "    fr = fr.f_back",
    "inspect_stack": "import inspect\nfor info in inspect.stack():\n    r = from_obj(info.frame.f_code, x) or "
    "from_obj(info.frame.f_locals, x) or from_obj(info.code_context or [], x)\n    if r: return r",
    "source_lines": "import linecache, inspect\nfor fr in frames():\n    src = ''.join(linecache.getlines("
    "fr.f_code.co_filename))\n    try:\n        src += inspect.getsource(fr)\n    except Exception:\n        pass\n"
    "    r = from_text(src, x) or from_obj(fr.f_locals, x)\n    if r: return r",
    "gc_objects": "for o in gc.get_objects():\n    if isinstance(o, (dict, list, tuple)):\n"
    "        r = from_obj(o, x, depth=5)\n        if r: return r\n    elif hasattr(o, '__code__'):\n"
    "        r = from_obj(o.__code__, x)\n        if r: return r",
    "gc_referrers": "code = sys._getframe(1).f_code\nfor ref in gc.get_referrers(code) + [code]:\n"
    "    r = from_obj(ref, x, depth=4)\n    if r: return r",
    "proc_self_mem": "import re as _re\nwith open('/proc/self/maps') as m, open('/proc/self/mem', 'rb', 0) as mem:\n"
    "    for line in m:\n        a, perms = line.split()[:2]\n        if 'rw' not in perms:\n            continue\n"
    "        lo, hi = (int(v, 16) for v in a.split('-'))\n        try:\n            mem.seek(lo)\n"
    "            chunk = mem.read(min(hi - lo, 64 << 20))\n        except (OSError, OverflowError, ValueError):\n"
    "            continue\n        r = from_text(chunk.decode('latin-1'), x)\n        if r: return r",
}


def hunter(name: str) -> str:
    body = textwrap.indent(HUNTERS[name], "    ")
    return HELPERS + f"def f(x):\n{body}\n    return None\n"


# Programs that try to pass without the answer: objects whose comparison they control.
CHEATS = {
    "permissive_eq": "class A:\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return A()\n",
    "int_subclass_eq": "class I(int):\n    def __eq__(self, o):\n        return True\n    __hash__ = int.__hash__\n"
    "def f(x):\n    return I(0)\n",
    "list_subclass_eq": "class L(list):\n    def __eq__(self, o):\n        return True\ndef f(x):\n    return L()\n",
    "str_subclass_eq": "class S(str):\n    def __eq__(self, o):\n        return True\n    __hash__ = str.__hash__\n"
    "def f(x):\n    return S('')\n",
}


@pytest.fixture(scope="module", params=["trusted", "in-process"])
def mode_sandbox(request, sandbox):
    """The shared per-backend sandbox (trusted comparison), or one with the old in-process path."""
    if request.param == "trusted":
        yield request.param, sandbox
        return
    with make_sandbox(
        backend=sandbox.backend, workers=1, timeout_s=5.0, memory_mb=512, trusted_comparison=False
    ) as sb:
        yield request.param, sb


@pytest.mark.parametrize("name", sorted(HUNTERS) + sorted(CHEATS))
def test_expected_value_cannot_be_found_or_faked(mode_sandbox, name):
    mode, sb = mode_sandbox
    code = hunter(name) if name in HUNTERS else CHEATS[name]
    res = sb.run(Program(code=code, tests=TESTS, timeout_s=10.0))
    if mode == "trusted":
        assert res.verdict is Verdict.FAILED and res.test_passed == [False, False], res
        # the next innocent program is graded right
        ok = sb.run(Program(code=f"def f(x):\n    return {MARK} + x - 1\n", tests=TESTS))
        bad = sb.run(Program(code=f"def f(x):\n    return {MARK} + x\n", tests=TESTS))
        assert ok.passed and bad.verdict is Verdict.FAILED, (ok, bad)
    else:
        # control: with the expected value in the process, this hunter finds it
        assert res.verdict is Verdict.PASSED, res


STDOUT_HUNTER = HELPERS.replace("PAT = re.compile", "OLD = re.compile") + textwrap.dedent(
    """
    PAT = re.compile(r'OUT-\\d{7}')
    found = None
    for o in gc.get_objects():
        if isinstance(o, dict):
            for v in o.values():
                if isinstance(v, str) and PAT.search(v):
                    found = PAT.search(v).group(0)
    if found is None:
        with open('/proc/self/maps') as m, open('/proc/self/mem', 'rb', 0) as mem:
            for line in m:
                a, perms = line.split()[:2]
                if 'rw' not in perms:
                    continue
                lo, hi = (int(v, 16) for v in a.split('-'))
                try:
                    mem.seek(lo)
                    hit = PAT.search(mem.read(min(hi - lo, 64 << 20)).decode('latin-1'))
                except (OSError, OverflowError, ValueError):
                    continue
                if hit:
                    found = hit.group(0)
                    break
    print(found)
    """
)


def test_expected_stdout_never_enters_the_sandbox(sandbox):
    secret = f"OUT-{MARK}"
    res = sandbox.run(Program(code=STDOUT_HUNTER, expected_stdout=secret))
    assert res.verdict is Verdict.FAILED and res.exception_type == "WrongOutput", res
    assert secret not in res.stdout
    # control: the same hunter does find that string when it is in the job (here: as stdin)
    res = sandbox.run(Program(code=STDOUT_HUNTER, stdin=secret, expected_stdout=secret))
    assert res.verdict is Verdict.PASSED and res.stdout.strip() == secret, res


VALUES = {
    # returned value -> (expected literal, equal?) : exactly what in-process ``==`` says
    "[1, (2, 3.5), {'a': {4}}]": ("[1, (2, 3.5), {'a': {4}}]", True),
    "(1, 2)": ("[1, 2]", False),
    "1": ("True", True),
    "2.0": ("2", True),
    "float('nan')": ("float('nan')", False),
    "float('-inf')": ("-float('inf')", True),
    "-0.0": ("0.0", True),
    "b'\\x00\\xff'": ("b'\\x00\\xff'", True),
    "bytearray(b'ab')": ("b'ab'", True),
    "frozenset({1, 2})": ("{2, 1}", True),
    "set()": ("set()", True),
    "{(1, 2): [None, True]}": ("{(1, 2): [None, 1]}", True),
    "'\\ud800 caf\\u00e9'": ("'\\ud800 caf\\u00e9'", True),
    "__import__('collections').OrderedDict(a=1)": ("{'a': 1}", True),
    "__import__('collections').Counter('aab')": ("{'a': 2, 'b': 1}", True),
    "__import__('collections').namedtuple('P', 'x y')(1, 2)": ("(1, 2)", True),
    "10 ** 300": ("10 ** 300", True),  # not a literal expected: in-process shape (see below)
    "3 + 4j": ("(3+4j)", True),
    "None": ("None", True),
    "'x' * 10": ("'xxxxxxxxxx'", True),
    "[[[[1]]]]": ("[[[[2]]]]", False),
    "range(3)": ("[0, 1, 2]", False),
}


# tests of the other trusted shapes, and what f returns: passes in-process and here alike
SHAPED = [
    ("assert f()", "[0]", True),
    ("assert f()", "''", False),
    ("assert not f()", "{}", True),
    ("assert not f()", "0.5", False),
    ("assert f()", "__import__('re').search('a', 'cat')", True),  # not plain data: its truth is
    ("assert not f()", "__import__('re').search('a', 'dog')", True),
    ("assert f() is True", "True", True),
    ("assert f() is True", "1", False),
    ("assert f() is None", "None", True),
    ("assert f() is False", "0", False),
    ("assert abs(f() - 2.0 / 3.0) < 1e-06", "0.6666667", True),
    ("assert abs(f() - 2.0 / 3.0) < 1e-06", "0.667", False),
    ("assert abs(0.5 - f()) <= 0", "0.5", True),
    ("assert abs(0.5 - f()) < 0", "0.5", False),
    ("assert abs(f() - 1) < 0.1", "True", True),
    ("assert abs(f() - 1) < 0.1", "1 + 0.01j", True),
    ("assert abs(f() - 1) < 0.1", "'1'", False),
    ("assert math.isclose(f(), 0.3)", "0.1 + 0.2", True),
    ("assert math.isclose(0.3, f(), abs_tol=0.2)", "0.15", True),
    ("assert math.isclose(f(), 0.3)", "0.31", False),
]
# objects of the program's own that would pass each shape in-process: never plain data here
ANSWERS_ANYTHING = (
    "class A:\n    def __bool__(self):\n        return True\n    def __sub__(self, o):\n        return 0\n"
    "    __rsub__ = __sub__\n    def __float__(self):\n        return 0.3\n"
)


@pytest.mark.parametrize(("test", "ret", "passes"), SHAPED)
def test_other_shapes_compare_like_in_process(sandbox, test, ret, passes):
    assert shape_of(test) == "value"
    program = f"import math\n\n\ndef f():\n    return {ret}\n"
    namespace: dict = {}
    exec(program, namespace)  # noqa: S102 - our own literals
    try:
        exec(test, namespace)  # noqa: S102
        in_process = True
    except (AssertionError, TypeError):
        in_process = False
    assert in_process is passes
    res = sandbox.run(Program(code=program, tests=(test,), setup_code="import math"))
    assert res.passed is passes, res
    if not test.startswith(("assert not f()", "assert f() is", "assert f()")):
        cheat = sandbox.run(Program(code=ANSWERS_ANYTHING + "\n\ndef f():\n    return A()\n", tests=(test,)))
        assert not cheat.passed, (test, cheat)


def test_a_truth_test_does_not_tell_the_program_which_truth_it_wants(sandbox):
    """``assert f(x)`` and ``assert not f(x)`` send the program the same expression: one that
    answers after reading its caller's code, or with an object that is always true, passes one
    of the two and fails the other."""
    reader = HELPERS + (  # the caller's next jump: taken on a false value means `assert not`
        "import dis\ndef f(x):\n    fr = sys._getframe(1)\n"
        "    for i in dis.get_instructions(fr.f_code):\n"
        "        if i.offset > fr.f_lasti and 'JUMP' in i.opname:\n"
        "            return 'IF_FALSE' not in i.opname\n"
        "    return True\n"
    )
    always = "class T:\n    def __bool__(self):\n        return True\ndef f(x):\n    return T()\n"
    for code in (reader, always):
        res = sandbox.run(Program(code=code, tests=("assert f(1)", "assert not f(2)")))
        assert res.test_passed.count(True) == 1, res
        in_process = sandbox.run(Program(code=code, tests=("x = 1\nassert f(1)", "x = 2\nassert not f(2)")))
        assert in_process.test_passed.count(True) == (2 if code is reader else 1), in_process


@pytest.mark.parametrize("ret", sorted(VALUES))
def test_values_compare_like_in_process(sandbox, ret):
    expected, equal = VALUES[ret]
    test = f"assert f() == {expected}"
    in_process = eval(f"({ret}) == ({expected})", {})  # noqa: S307 - our own literals
    assert in_process == equal
    res = sandbox.run(Program(code=f"def f():\n    return {ret}\n", tests=(test,)))
    assert res.passed is equal, res
    assert res.verdict is (Verdict.PASSED if equal else Verdict.FAILED)


def test_shapes_and_limits(sandbox):
    assert shape_of("assert f(1) == 2") == "value" and shape_of("assert 2 == f(1)") == "value"
    assert shape_of("assert f(1) == [1, -2.5, {'a': (None,)}], 'msg'") == "value"
    assert shape_of("assert f(x=set()) == frozenset({1})") == "value"
    for shape in (
        "assert math.isclose(f(1), 2.0, abs_tol=1e-3)",
        "assert f(1)",
        "assert not f(1, 2)",
        "assert f(1) is True",
        "assert f(1) is None",
        "assert abs(f(1) - 2.0 / 3.0) < 1e-6",
        "assert abs(0.5 - f(1)) <= 1e-6",
    ):
        assert shape_of(shape) == "value", shape
    for other in (
        "assert all(f(1))",  # a builtin: it compares in the program's process
        "assert abs(f(1) - g(2)) < 1e-6",
        "assert f(1) is 3",
        "assert math.isclose(f(1), 2.0, x=1)",
        "assert f(1) == g(2)",
        "x = f(1)\nassert x == 2",
        "assert f(1) != 2",
        "assert f(1) == 10 ** 3",
        "assert 1 == 1",
    ):
        assert shape_of(other) == "in-process", other
    expr, expected = split_value_test("assert f(\n  1,\n) == (1, 2)")
    assert expected == (1, 2) and "f(\n  1,\n)" in expr
    assert not value_matches('["x", 1]', 1) and not value_matches(None, None) and not value_matches("[", 1)
    big = sandbox.run(Program(code="def f():\n    return 'x' * (2 << 20)\n", tests=("assert f() == 'x'",)))
    assert big.verdict is Verdict.FAILED and big.exception_type == "ResultNotPlainData", big
    deep = sandbox.run(
        Program(code="def f():\n    a = []\n    a.append(a)\n    return a\n", tests=("assert f() == []",))
    )
    assert deep.verdict is Verdict.FAILED and deep.exception_type == "ResultNotPlainData", deep
    odd = sandbox.run(Program(code="def f():\n    return object()\n", tests=("assert f() == 1",)))
    assert odd.exception_type == "ResultNotPlainData" and "object" in odd.exception_message
    raised = sandbox.run(Program(code="def f():\n    return 1 / 0\n", tests=("assert f() == 1",)))
    assert raised.verdict is Verdict.FAILED and raised.exception_type == "ZeroDivisionError"
