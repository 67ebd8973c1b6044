import pytest

from calckit.tokens import CalcError, Token, tokenize


def test_numbers_and_operators():
    assert tokenize("12 + 3.5") == [Token("number", 12.0), Token("op", "+"), Token("number", 3.5)]


def test_parentheses():
    assert [t.kind for t in tokenize("(1)")] == ["(", "number", ")"]


def test_bad_character():
    with pytest.raises(CalcError):
        tokenize("2 $ 3")


def test_bad_number():
    with pytest.raises(CalcError):
        tokenize("1.2.3")
