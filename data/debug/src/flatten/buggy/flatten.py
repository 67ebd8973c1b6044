"""Flatten nested lists, tuples and other iterables."""

from numbers import Number


def flatten(value):
    """Every value inside ``value``, in order, as one flat list."""
    if value is None or isinstance(value, Number):
        return [value]
    result = []
    for item in value:
        result.extend(flatten(item))
    return result
