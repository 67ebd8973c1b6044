"""What a comparison check of a test holds, decided in the answer run's parent (trusted, stdlib
only; ``_answers.py`` imports it).

A check that compares one computed value with values written in the test, other than by plain
equality (``assert f(x) > 3``, ``assert 0 <= f(x) < 1``, ``assert "sep" in text(x)``, ``assert
f(x) == pytest.approx(3.14, rel=1e-3)``, ``assert math.isclose(f(x), 0.5)``, ``self.assertLess(f(x),
3)``, ``self.assertAlmostEqual(f(x), 3.1416, places=3)``, ``self.assertCountEqual(f(x), [1, 2])``,
``self.assertRegex(text(x), "^a+")``) records its computed side in the child, as an equality check
does; a :class:`Holds` keeps the rest here (the operators, the written values, the tolerances, and
whether the test wants the comparison true or false) and decides, on the value the child answered
(read back with ``ast.literal_eval``), what pytest or ``unittest`` would decide with it. The
child's code holds none of it: not the bound, not the tolerance, not which way the test checks.

``unittest``'s own methods decide their checks here (on a bare ``TestCase``: the values are plain
data read back from text, none of the repository's objects); ``pytest.approx`` is not importable
here and is written out as pytest defines it (``ApproxScalar``, its sequences and mappings).
"""

import math
import operator
from collections.abc import Callable

OPERATORS: dict[str, Callable[[object, object], object]] = {
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le,
    "Gt": operator.gt, "GtE": operator.ge,
    "In": lambda a, b: a in b,  # type: ignore[operator]
    "NotIn": lambda a, b: a not in b,  # type: ignore[operator]
}  # fmt: skip
"""The comparison operators a check may chain (``is`` is no comparison of values: a truth check)."""

UNITTEST_KINDS = frozenset(
    {"assertAlmostEqual", "assertNotAlmostEqual", "assertCountEqual", "assertRegex", "assertNotRegex"}
)
"""The ``unittest`` methods that decide their own checks here."""

APPROX_REL, APPROX_ABS = 1e-6, 1e-12
"""``pytest.approx``'s default relative and absolute tolerances."""


class Holds:
    """A comparison check's expectation. ``kind``: ``compare`` (the chain of ``ops`` over
    ``values`` with the computed value put at ``hole``), ``approx``, ``isclose`` (``values`` the
    expected value, ``options`` the tolerances as keywords) or one of :data:`UNITTEST_KINDS` (its
    arguments ``values`` with the computed value at ``hole``, ``options`` its keywords);
    ``wanted``: whether the test wants it to hold. A value may be a placeholder for a test's
    parameter until a row gives it (:meth:`given`). A plain class, as ``_answers._Raises``: every
    grading run's parent imports this module, and ``dataclasses`` would cost it more than the
    rest of it."""

    __slots__ = ("hole", "kind", "ops", "options", "values", "wanted")

    def __init__(
        self,
        kind: str,
        values: tuple,
        hole: int = 0,
        ops: tuple[str, ...] = (),
        options: tuple[tuple[str, object], ...] = (),
        wanted: bool = True,
    ) -> None:
        self.kind, self.values, self.hole, self.ops = kind, values, hole, ops
        self.options, self.wanted = options, wanted

    def _fields(self) -> tuple:
        return (self.kind, self.values, self.hole, self.ops, self.options, self.wanted)

    def __eq__(self, other: object) -> bool:  # for the tests that read a plan
        return isinstance(other, Holds) and self._fields() == other._fields()

    def __repr__(self) -> str:
        return f"Holds{self._fields()!r}"

    def given(self, value_of: Callable[[object], object]) -> "Holds":
        """This expectation with each value and option passed through ``value_of`` (a row's)."""
        values = tuple(value_of(v) for v in self.values)
        options = tuple((k, value_of(v)) for k, v in self.options)
        return Holds(self.kind, values, self.hole, self.ops, options, self.wanted)

    def met_by(self, value: object) -> bool:
        """Whether the computed value ``value`` holds as the test wants; a comparison that raises
        (``TypeError``: the value is another kind) fails the test in pytest, and here."""
        try:
            return self._holds(value) == self.wanted
        except Exception:  # noqa: BLE001 - what pytest reports as an error fails the test
            return False

    def _holds(self, value: object) -> bool:
        args = [*self.values[: self.hole], value, *self.values[self.hole :]]
        options = dict(self.options)
        if self.kind == "compare":
            return all(bool(OPERATORS[op](a, b)) for op, a, b in zip(self.ops, args, args[1:], strict=False))
        if self.kind == "approx":
            return approx_equal(value, self.values[0], **options)  # type: ignore[arg-type]
        if self.kind == "isclose":
            return math.isclose(value, self.values[0], **options)  # type: ignore[arg-type]
        if self.kind in UNITTEST_KINDS:
            import unittest  # here: only a grade that asks one of its checks pays for it

            try:
                getattr(unittest.TestCase(), self.kind)(*args, **options)
            except AssertionError:
                return False
            return True
        raise ValueError(self.kind)


def approx_equal(
    actual: object, expected: object, rel: float | None = None, abs: float | None = None, nan_ok: bool = False
) -> bool:
    """``actual == pytest.approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)``: a number within
    its tolerance, a list or tuple of the same type and length item by item, a dict with the same
    keys value by value; anything else equal. Nested containers: pytest refuses them (a test
    using one fails with the reference too, and is not answered)."""
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and set(actual) == set(expected)
            and all(approx_equal(actual[k], v, rel, abs, nan_ok) for k, v in expected.items())
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(approx_equal(a, e, rel, abs, nan_ok) for a, e in zip(actual, expected, strict=True))
        )
    return _approx_scalar(actual, expected, rel, abs, nan_ok)


def _approx_scalar(
    actual: object, expected: object, rel: float | None, abs_: float | None, nan_ok: bool
) -> bool:
    """pytest's ``ApproxScalar.__eq__`` (its tolerance: the absolute one alone where only it is
    given, else the larger of the two)."""
    if isinstance(expected, bool) and not isinstance(actual, bool):
        return False  # 1 is no approximation of True
    if actual == expected:
        return True
    numbers = (int, float, complex)
    if not (isinstance(expected, numbers) and isinstance(actual, numbers)):
        return False
    if math.isnan(abs(expected)):
        return nan_ok and math.isnan(abs(actual))
    if math.isinf(abs(expected)):
        return False
    absolute = APPROX_ABS if abs_ is None else abs_
    if absolute < 0 or math.isnan(absolute):
        raise ValueError("absolute tolerance can't be negative or NaN")
    if rel is None and abs_ is not None:
        tolerance = absolute
    else:
        relative = (APPROX_REL if rel is None else rel) * abs(expected)
        if relative < 0 or math.isnan(relative):
            raise ValueError("relative tolerance can't be negative or NaN")
        tolerance = max(relative, absolute)
    return abs(expected - actual) <= tolerance
