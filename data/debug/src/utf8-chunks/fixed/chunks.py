"""Split a message into chunks that fit a byte limit when encoded as UTF-8."""


def utf8_len(text):
    """The length of ``text`` in bytes when encoded as UTF-8."""
    return len(text.encode("utf-8"))


def split_message(text, max_bytes):
    """Chunks of at most ``max_bytes`` bytes in UTF-8, words kept whole where they fit."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4, the longest UTF-8 character")
    chunks = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if utf8_len(candidate) <= max_bytes:
            current = candidate
            continue
        if current:
            chunks.append(current)
        if utf8_len(word) <= max_bytes:
            current = word
        else:
            pieces = _cut(word, max_bytes)
            chunks.extend(pieces[:-1])
            current = pieces[-1]
    if current:
        chunks.append(current)
    return chunks


def _cut(word, max_bytes):
    """``word`` in pieces of at most ``max_bytes`` bytes, never cut inside a character."""
    pieces = []
    piece = ""
    for char in word:
        if utf8_len(piece + char) > max_bytes:
            pieces.append(piece)
            piece = char
        else:
            piece += char
    pieces.append(piece)
    return pieces
