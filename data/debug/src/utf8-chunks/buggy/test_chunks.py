import pytest

from chunks import split_message


def utf8_len(text):
    return len(text.encode("utf-8"))


def test_ascii_words():
    assert split_message("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_long_ascii_word():
    assert split_message("abcdefghij xy", 4) == ["abcd", "efgh", "ij", "xy"]


def test_limit_too_small():
    with pytest.raises(ValueError):
        split_message("hello", 3)


def test_empty_text():
    assert split_message("   ", 10) == []


def test_accented_words_fit_the_byte_limit():
    chunks = split_message("café crème brûlée", 10)
    assert all(utf8_len(chunk) <= 10 for chunk in chunks)
    assert " ".join(chunks) == "café crème brûlée"


def test_long_accented_word_keeps_every_character():
    chunks = split_message("ééééé", 5)
    assert chunks == ["éé", "éé", "é"]


def test_emoji():
    assert split_message("🙂🙂🙂 ok", 4) == ["🙂", "🙂", "🙂", "ok"]
