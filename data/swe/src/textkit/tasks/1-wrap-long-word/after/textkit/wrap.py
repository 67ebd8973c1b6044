"""Greedy word wrapping."""


def wrap(text, width):
    """Lines of at most ``width`` characters, breaking only between words.

    Runs of whitespace count as one break. A word longer than ``width`` is kept whole on a line
    of its own.
    """
    if width < 1:
        raise ValueError("width must be at least 1")
    lines = []
    current = ""
    for word in text.split():
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        lines.append(current)
    return lines


def fill(text, width):
    """``wrap`` joined with newlines."""
    return "\n".join(wrap(text, width))
