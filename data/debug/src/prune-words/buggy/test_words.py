from words import normalise, remove_short


def test_nothing_to_remove():
    words = ["alpha", "beta"]
    assert remove_short(words, 3) == 0
    assert words == ["alpha", "beta"]


def test_short_words_apart():
    words = ["alpha", "a", "beta", "b", "gamma"]
    assert remove_short(words, 2) == 2
    assert words == ["alpha", "beta", "gamma"]


def test_short_words_next_to_each_other():
    words = ["to", "be", "or", "not", "to", "be"]
    assert remove_short(words, 3) == 5
    assert words == ["not"]


def test_every_word_short():
    words = ["a", "b", "c"]
    assert remove_short(words, 2) == 3
    assert words == []


def test_normalise():
    assert normalise(["  Hello", "WORLD ", "   ", ""]) == ["hello", "world"]
