import pytest
from stats import mean, median, spread
import math as _lcrl_math


def test_held_out_1():
    assert _lcrl_math.isclose(median([3, 1, 1, 2]), 1.5, rel_tol=1e-9, abs_tol=1e-9)


def test_held_out_2():
    assert _lcrl_math.isclose(median([7, 1, 5, 4]), 4.5, rel_tol=1e-9, abs_tol=1e-9)


def test_held_out_3():
    assert _lcrl_math.isclose(median([1, 2, 4, 3]), 2.5, rel_tol=1e-9, abs_tol=1e-9)


def test_held_out_4():
    assert _lcrl_math.isclose(median([0.5, 0.375]), 0.4375, rel_tol=1e-9, abs_tol=1e-9)


def test_held_out_5():
    assert median([3, 2, 1]) == 2
