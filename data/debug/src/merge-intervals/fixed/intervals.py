"""Merge closed intervals."""


def merge(intervals):
    """The union of closed intervals ``[start, end]`` as sorted, disjoint ``[start, end]`` lists."""
    merged = []
    for start, end in sorted(intervals, key=lambda interval: interval[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def covered_length(intervals):
    """The total length covered, overlaps counted once."""
    return sum(end - start for start, end in merge(intervals))
