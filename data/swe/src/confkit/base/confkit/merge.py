"""Combine configuration dictionaries."""


def merge(base, override):
    """``base`` with the sections and keys of ``override`` on top."""
    result = dict(base)
    result.update(override)
    return result
