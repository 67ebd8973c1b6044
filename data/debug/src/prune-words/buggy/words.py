"""Clean up word lists."""


def remove_short(words, min_length):
    """Remove, in place, every word shorter than ``min_length``; return how many were removed."""
    removed = 0
    for word in words:
        if len(word) < min_length:
            words.remove(word)
            removed += 1
    return removed


def normalise(words):
    """Lower-cased, stripped copies of the words, without the empty ones."""
    return [word.strip().lower() for word in words if word.strip()]
