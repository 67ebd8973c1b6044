"""Split file names into stem and extension."""


def extension(filename):
    """The part after the last dot ("" when there is none; a leading dot starts no extension)."""
    dot = filename.rfind(".")
    if dot <= 0:
        return ""
    return filename[dot + 1 :]


def stem(filename):
    """The name without its extension."""
    return filename[: filename.rfind(".")]


def with_extension(filename, ext):
    """``filename`` with its extension replaced by ``ext`` (or ``ext`` added)."""
    return f"{stem(filename)}.{ext}"
