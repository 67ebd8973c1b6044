import pytest

from tokenizer import Tokenizer


def test_one_expression():
    assert Tokenizer().tokenize("12 + x*3") == ["12", "+", "x", "*", "3"]


def test_names_numbers_and_parentheses():
    assert Tokenizer().tokenize("(rate_1 - 0.5)/n") == ["(", "rate_1", "-", "0.5", ")", "/", "n"]


def test_unexpected_character():
    with pytest.raises(ValueError):
        Tokenizer().tokenize("a $ b")


def test_two_texts_in_a_row():
    tokenizer = Tokenizer()
    assert tokenizer.tokenize("a+b") == ["a", "+", "b"]
    assert tokenizer.tokenize("c-1") == ["c", "-", "1"]


def test_earlier_result_is_unchanged():
    tokenizer = Tokenizer()
    first = tokenizer.tokenize("a+b")
    tokenizer.tokenize("c")
    assert first == ["a", "+", "b"]


def test_text_after_an_error():
    tokenizer = Tokenizer()
    with pytest.raises(ValueError):
        tokenizer.tokenize("a + $")
    assert tokenizer.tokenize("b") == ["b"]
