"""Closed intervals given as ``(start, end)`` pairs with ``start <= end``."""


def merge(intervals):
    """Merge overlapping intervals; the result is sorted and pairwise disjoint."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def total_length(intervals):
    """Length covered by the union of the intervals."""
    return sum(end - start for start, end in merge(intervals))
