"""Flatten nested lists, tuples and other iterables."""

from collections.abc import Iterable


def flatten(value):
    """Every value inside ``value``, in order, as one flat list."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return [value]
    result = []
    for item in value:
        result.extend(flatten(item))
    return result
