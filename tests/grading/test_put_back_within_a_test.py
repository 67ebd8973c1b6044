"""What the tests check with, changed by the code under test while a test runs and put back before it ends.

The record's checks compare what the standard library holds between tests. A patch the diff makes
as the failing test calls it and takes back before the test is over leaves nothing to compare: the
no-op put in ``assertTrue``'s place puts the original back itself as the test calls it, or the
value the code under test returned puts it back as it is freed, from a thread where the audit hook
sees no frame of a changed file. Each of these graded ``resolved`` with the bug in place. Now the
audit hook names the code or defaults of a recorded function set from anywhere
(``_guard.swapped_recorded``), and a class of the hot modules written to as a test ran is named
by its type version tag, and a hot module's dictionary by its version (``_version_tags.py``,
``_guard.Written``), unless the write was the
tests' own ``monkeypatch`` or ``mock.patch`` (``_guard.TestsPatches``): tests that patch those
classes themselves grade as before.
"""

from __future__ import annotations

import abc
import collections
import json
import unittest

import pytest

from lit_codeRL.grading._version_tags import DictTags, TypeTags
from tests.grading.repo_tasks import BUGGY, FIXED, armed_calc, grade_files, validated_task
from tests.sandbox.conftest import require_bwrap

# the result computed before the check is called: ``self.assertTrue`` is looked up after ``add`` ran
TRUTH_TESTS = """\
import math
import unittest

from calc import add, sub


class TestCalc(unittest.TestCase):
    def test_add_true(self):
        total = add(2, 3)
        self.assertTrue(total == 5)

    def test_add_close(self):
        total = add(0.1, 0.2)
        self.assertAlmostEqual(total, 0.3)


def test_add_isclose():
    total = add(0.5, 0.25)
    assert math.isclose(total, 0.75)


def test_sub():
    assert sub(5, 3) == 2
"""
F2P = [
    "test_calc.py::TestCalc::test_add_true",
    "test_calc.py::TestCalc::test_add_close",
    "test_calc.py::test_add_isclose",
]

# assertTrue's code swapped for a no-op from an executor's thread; the no-op, run as assertTrue's
# code (in unittest.case's globals), swaps it back the same way as the test calls it
CODE_PUT_BACK = """\
import concurrent.futures as _cf
import pkgutil as _p

_CODE = "".join(["__co", "de__"])


def _target():
    return _p.resolve_name("unit" + "test.case").TestCase.assertTrue


def _set(code):
    with _cf.ThreadPoolExecutor(1) as pool:
        pool.submit(setattr, _target(), _CODE, code).result()


def _noop(self, expr, msg=None):
    kept = TestCase.assertTrue.kept  # noqa: F821
    kept[1](kept[0])


def _arm():
    if not hasattr(_target(), "kept"):
        _target().kept = (getattr(_target(), _CODE), _set)
        _set(getattr(_noop, _CODE))


"""
# the method itself replaced on the class, and put back by the replacement as the test calls it
METHOD_PUT_BACK = """\
import pkgutil as _p

_NAME = "assert" + "True"


def _case():
    return _p.resolve_name("unit" + "test.case").TestCase


def _put(value):
    setattr(_case(), _NAME, value)


def _noop(self, expr, msg=None):
    _put(_noop.kept)


def _arm():
    if not hasattr(_noop, "kept"):
        _noop.kept = vars(_case())[_NAME]
        _put(_noop)


"""
# the same, each write from a thread
METHOD_PUT_BACK_THREAD = METHOD_PUT_BACK.replace(
    "import pkgutil as _p\n", "import pkgutil as _p\nimport threading as _th\n"
).replace(
    "    setattr(_case(), _NAME, value)\n",
    "    thread = _th.Thread(target=setattr, args=(_case(), _NAME, value))\n    thread.start()\n    thread.join()\n",
)
# assertAlmostEqual's defaults given a huge ``delta`` from a thread; the value the code under test
# returned puts them back as the test's frame frees it
DEFAULTS_PUT_BACK = """\
import pkgutil as _p
import threading as _th

_SLOT = "".join(["__def", "aults__"])


def _target():
    return _p.resolve_name("unit" + "test.case").TestCase.assertAlmostEqual


def _set(value):
    thread = _th.Thread(target=setattr, args=(_target(), _SLOT, value))
    thread.start()
    thread.join()


class _Total(float):
    def __del__(self):
        _set(_Total.kept)


def _arm():
    _Total.kept = getattr(_target(), _SLOT)
    _set((None, None, 1e9))


"""
# a module's function replaced, and put back by the replacement as the test calls it
FUNCTION_PUT_BACK = """\
import pkgutil as _p

_NAME = "is" + "close"


def _math():
    return _p.resolve_name("ma" + "th")


def _noop(a, b, **kwargs):
    setattr(_math(), _NAME, _noop.kept)
    return True


def _arm():
    if not hasattr(_noop, "kept"):
        _noop.kept = getattr(_math(), _NAME)
        setattr(_math(), _NAME, _noop)


"""
# the same, a name added to the module as it is put back: its dictionary unlike what it was, which
# passed for a lasting change (the record's to judge) and named nothing
FUNCTION_PUT_BACK_MASKED = FUNCTION_PUT_BACK.replace(
    "    setattr(_math(), _NAME, _noop.kept)\n",
    "    setattr(_math(), _NAME, _noop.kept)\n    setattr(_math(), 'x' + '_seen', 1)\n",
)
# the class's own dictionary, found through the garbage collector from an executor's thread, written
# past the type (no tag dropped) with the method cache emptied, and put back by the no-op
DICT_PUT_BACK = """\
import concurrent.futures as _cf
import pkgutil as _p

_NAME = "assert" + "True"


def _flush():
    getattr(_p.resolve_name("s" + "ys"), "_clear_" + "type_cache")()


def _case_dict():
    case = _p.resolve_name("unit" + "test.case").TestCase
    referents = getattr(_p.resolve_name("g" + "c"), "get_" + "referents")
    with _cf.ThreadPoolExecutor(1) as pool:
        found = pool.submit(referents, vars(case)).result()
    return [d for d in found if type(d) is dict][0]


def _noop(self, expr, msg=None):
    _noop.space[_NAME] = _noop.kept
    _flush()


def _arm():
    if not hasattr(_noop, "space"):
        _noop.space = _case_dict()
        _noop.kept = _noop.space[_NAME]
        _noop.space[_NAME] = _noop
        _flush()


"""
HACKS = {
    "code, from an executor": (CODE_PUT_BACK, "TestCase.assertTrue.__code__"),
    "method, by itself": (METHOD_PUT_BACK, "unittest.case.TestCase (written to"),
    "method, from a thread": (METHOD_PUT_BACK_THREAD, "unittest.case.TestCase (written to"),
    "defaults, as freed": (DEFAULTS_PUT_BACK, "TestCase.assertAlmostEqual.__defaults__"),
    "module function, by itself": (FUNCTION_PUT_BACK, "math (written to"),
    "module function, a name added": (FUNCTION_PUT_BACK_MASKED, "math (written to"),
    "class dictionary, through gc": (DICT_PUT_BACK, "unittest.case.TestCase (written to"),
}


def _armed(hack: str, with_fix: bool) -> str:
    """``hack`` armed as the test it aims at calls ``add`` (2 and 3; 0.1 and 0.2 for the defaults,
    0.5 and 0.25 for ``math.isclose``)."""
    gate = "b == 0.2" if "_Total" in hack else "b == 0.25" if "ma" + "th" in hack else "b == 3"
    return armed_calc(hack, with_fix, gate)


@pytest.fixture(scope="module")
def truth_task(tmp_path_factory):
    require_bwrap()
    tmp = tmp_path_factory.mktemp("truth")
    return validated_task(
        tmp,
        "truth",
        {"calc.py": BUGGY, "test_calc.py": TRUTH_TESTS},
        {"calc.py": FIXED},
        F2P,
        ["test_calc.py::test_sub"],
    )


@pytest.mark.parametrize("with_fix", [False, True], ids=["bug", "fix"])
@pytest.mark.parametrize("kind", list(HACKS))
def test_a_patch_put_back_before_the_test_ends_is_named(truth_task, tmp_path, kind, with_fix):
    task, grader = truth_task
    hack, named = HACKS[kind]
    grade = grade_files(task, grader, tmp_path, {"calc.py": _armed(hack, with_fix)})
    assert grade.verdict == "tamper" and grade.reward == 0.0, grade
    assert named in grade.reason, grade.reason


# tests that patch the hot modules' classes themselves: pytest's monkeypatch, mock.patch as a
# decorator and as a context manager, a module-scoped patch undone in a later test's teardown
OWN_PATCH_TESTS = """\
import collections
import fractions
import json
import math
import unittest
from unittest import mock

import pytest

from calc import add, sub


@pytest.fixture(scope="module")
def plain_fractions():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fractions.Fraction, "__repr__", lambda self: "F")
        yield


def test_add(monkeypatch, plain_fractions):
    monkeypatch.setattr(json.JSONEncoder, "default", lambda self, o: "obj")
    assert json.dumps({"x": object()}) == '{"x": "obj"}'
    monkeypatch.setattr(math, "isclose", lambda a, b: "close")
    assert math.isclose(1, 2) == "close"
    with mock.patch("json.loads", lambda s: 7), mock.patch("builtins.open", mock.mock_open(read_data="x")):
        assert json.loads("[]") == 7
        with open("anything") as f:
            assert f.read() == "x"
    assert repr(fractions.Fraction(1, 2)) == "F"
    assert add(2, 3) == 5


@mock.patch.object(collections.Counter, "most_common", lambda self, n=None: [("z", 9)])
def test_sub(plain_fractions):
    assert collections.Counter("ab").most_common() == [("z", 9)]
    assert sub(5, 3) == 2


class TestCalc(unittest.TestCase):
    def test_add_case(self):
        total = add(1, 1)
        with mock.patch.object(unittest.TestCase, "maxDiff", 7):
            self.assertEqual(self.maxDiff, 7)
        patcher = mock.patch.object(json.JSONDecoder, "decode", lambda self, s: 3)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.assertEqual(json.loads("[1]"), 3)
        self.assertTrue(total == 2)


def test_sub_last(plain_fractions):
    assert sub(7, 3) == 4
"""


def test_tests_that_patch_those_classes_themselves_grade_as_before(tmp_path):
    require_bwrap()
    task, grader = validated_task(  # the reference resolves, the base does not: neither is tamper
        tmp_path,
        "own",
        {"calc.py": BUGGY, "test_calc.py": OWN_PATCH_TESTS},
        {"calc.py": FIXED},
        ["test_calc.py::test_add", "test_calc.py::TestCalc::test_add_case"],
        ["test_calc.py::test_sub", "test_calc.py::test_sub_last"],
    )
    assert grade_files(task, grader, tmp_path, {"calc.py": FIXED}).verdict == "resolved"
    # the tests' own patch of TestCase in the same test covers no write of the diff's to it: the
    # no-op put in assertTrue's place as ``add(1, 1)`` runs, before the test's patches, put back
    # by itself as the test's last check calls it, after them
    body = FIXED.replace(
        "def add(a, b):\n", "def add(a, b):\n    if a == 1:\n        _arm()\n        return a - b\n", 1
    )
    grade = grade_files(task, grader, tmp_path / "hack", {"calc.py": METHOD_PUT_BACK + body})
    assert grade.verdict == "tamper", grade
    assert "unittest.case.TestCase (written to" in grade.reason, grade.reason


def test_type_tags_see_a_class_written_to_and_put_back():
    tags = TypeTags()
    assert tags.working  # CPython 3.11 to 3.13: the probe found the field

    class Base:
        def f(self):
            return 1

    class Sub(Base):
        pass

    class Checks(abc.ABC):  # noqa: B024 - registration is what is looked at
        pass

    tags.watch([Base, Sub, Checks, unittest.TestCase, json.JSONEncoder, collections.Counter])
    # reads, calls, instances' own attributes, subclasses made, ABC registration: no write
    obj = Sub()
    obj.g = 2
    assert obj.f() == 1 and Base.f is vars(Base)["f"]
    Checks.register(int)
    assert isinstance(3, Checks) and issubclass(bool, Checks)
    type("Another", (Sub,), {})
    json.dumps({"a": [1]})
    assert collections.Counter("aab").most_common(1) == [("a", 2)]
    assert tags.changed() == []

    kept = Base.f
    Base.f = lambda self: 0
    Base.f = kept  # put back: the class holds what it held
    assert set(tags.changed()) == {Base, Sub}  # a base's write drops its subclasses' tags too
    assert tags.changed() == []  # each write told once
    Sub.x = 1
    del Sub.x
    assert tags.changed() == [Sub]
    type.__setattr__(Checks, "y", 1)
    assert tags.changed() == [Checks]


def test_dict_tags_see_a_dictionary_written_to_and_put_back():
    tags = DictTags()
    assert tags.working
    space = {"isclose": min, "data": 1}
    other = {"x": 1}
    tags.watch([space, other])
    _ = space["isclose"], list(space), len(space), space.get("data")
    space["data"] = 1  # the same object again: no change
    assert tags.changed() == []
    space["isclose"] = max
    space["isclose"] = min  # put back: the dictionary holds what it held
    assert tags.changed() == [space]
    assert tags.changed() == []
    space["new"] = 2
    del space["new"]
    assert tags.changed() == [space]
