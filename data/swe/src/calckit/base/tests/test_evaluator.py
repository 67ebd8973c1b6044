import pytest

from calckit.evaluator import evaluate
from calckit.tokens import CalcError


def test_single_number():
    assert evaluate("42") == 42


def test_precedence_mul_over_add():
    assert evaluate("1 + 2 * 3") == 7


def test_parentheses():
    assert evaluate("(1 + 2) * 3") == 9


def test_power_right_associative():
    assert evaluate("2 ^ 3 ^ 2") == 512


def test_division_by_zero():
    with pytest.raises(CalcError):
        evaluate("1 / (2 - 2)")


def test_unbalanced():
    with pytest.raises(CalcError):
        evaluate("(1 + 2")
