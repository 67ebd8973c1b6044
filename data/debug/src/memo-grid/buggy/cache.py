"""Memoization for methods."""

import functools


def memoize_method(method):
    """Remember ``method``'s result for each argument tuple, so it runs once per state."""
    cache = {}

    @functools.wraps(method)
    def wrapper(self, *args):
        if args not in cache:
            cache[args] = method(self, *args)
        return cache[args]

    return wrapper
