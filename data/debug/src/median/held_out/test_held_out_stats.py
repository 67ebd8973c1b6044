import pytest
from stats import mean, median, spread
import math as _lcrl_math

def _lcrl_close(actual, expected):
    if isinstance(expected, float):
        return (
            isinstance(actual, (int, float))
            and not isinstance(actual, bool)
            and _lcrl_math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(_lcrl_close(a, e) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_lcrl_close(actual[k], v) for k, v in expected.items())
        )
    return actual == expected



def test_held_out_1():
    assert _lcrl_close(median([3, 1, 1, 2]), 1.5)


def test_held_out_2():
    assert _lcrl_close(median([7, 1, 5, 4]), 4.5)


def test_held_out_3():
    assert _lcrl_close(median([1, 2, 4, 3]), 2.5)


def test_held_out_4():
    assert _lcrl_close(median([0.5, 0.375]), 0.4375)


def test_held_out_5():
    assert median([3, 2, 1]) == 2
