"""Memoization for methods."""

import functools


def memoize_method(method):
    """Remember ``method``'s result for each argument tuple, so it runs once per state."""
    attribute = f"_memo_{method.__name__}"

    @functools.wraps(method)
    def wrapper(self, *args):
        cache = self.__dict__.setdefault(attribute, {})
        if args not in cache:
            cache[args] = method(self, *args)
        return cache[args]

    return wrapper
