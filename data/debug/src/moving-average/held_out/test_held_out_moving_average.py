import pytest
from moving_average import moving_averages
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
    assert _lcrl_close(moving_averages([1, 2, 3, 4, 5], 2), [1.5, 2.5, 3.5, 4.5])


def test_held_out_2():
    assert _lcrl_close(moving_averages([4, 8, 8, 15], 1), [4.0, 8.0, 8.0, 15.0])


def test_held_out_3():
    assert _lcrl_close(moving_averages([2, 2, 4, 6], 3), [2.6666666666666665, 4.0])


def test_held_out_4():
    assert _lcrl_close(moving_averages([1, 2, 2], 3), [1.6666666666666667])


def test_held_out_5():
    assert moving_averages([1, 2, 3, 4, 5], 6) == []
