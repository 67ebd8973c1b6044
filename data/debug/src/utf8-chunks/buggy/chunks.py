"""Split a message into chunks that fit a byte limit when encoded as UTF-8."""


def split_message(text, max_bytes):
    """Chunks of at most ``max_bytes`` bytes in UTF-8, words kept whole where they fit."""
    if max_bytes < 4:
        raise ValueError("max_bytes must be at least 4, the longest UTF-8 character")
    chunks = []
    current = ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= max_bytes:
            current = candidate
            continue
        if current:
            chunks.append(current)
        if len(word) <= max_bytes:
            current = word
        else:
            pieces = _cut(word, max_bytes)
            chunks.extend(pieces[:-1])
            current = pieces[-1]
    if current:
        chunks.append(current)
    return chunks


def _cut(word, max_bytes):
    """``word`` in pieces of at most ``max_bytes`` bytes."""
    data = word.encode("utf-8")
    return [
        data[start : start + max_bytes].decode("utf-8", errors="ignore")
        for start in range(0, len(data), max_bytes)
    ]
