"""Summary statistics of a list of numbers."""


def mean(values):
    """The arithmetic mean."""
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def median(values):
    """The middle value of the sorted values (the mean of the two middle ones for an even count)."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def spread(values):
    """The largest value minus the smallest."""
    return max(values) - min(values)
