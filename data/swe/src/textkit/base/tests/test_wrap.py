import pytest

from textkit.wrap import fill, wrap


def test_wrap_simple():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_collapses_whitespace():
    assert wrap("a   b\n\tc", 3) == ["a b", "c"]


def test_wrap_empty():
    assert wrap("", 5) == []


def test_wrap_rejects_zero_width():
    with pytest.raises(ValueError):
        wrap("abc", 0)


def test_fill():
    assert fill("one two three", 7) == "one two\nthree"
