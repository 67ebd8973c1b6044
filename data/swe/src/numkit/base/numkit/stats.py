"""Descriptive statistics over plain sequences of numbers."""

from collections import Counter


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    values = list(values)
    if not values:
        raise ValueError("mean() of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """Middle value of a non-empty sequence (the mean of the two middle values when even)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median() of an empty sequence")
    mid = len(ordered) // 2
    return ordered[mid]


def mode(values):
    """Most common value; the smallest one on ties."""
    counts = Counter(values)
    if not counts:
        raise ValueError("mode() of an empty sequence")
    best = max(counts.values())
    return min(value for value, count in counts.items() if count == best)


def variance(values):
    """Population variance of a non-empty sequence."""
    values = list(values)
    center = mean(values)
    return sum((v - center) ** 2 for v in values) / len(values)
