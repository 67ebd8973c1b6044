"""Statistics of one student's marks."""


def drop_lowest(marks):
    """The marks, sorted, without the lowest one when there are at least three."""
    if len(marks) < 3:
        return sorted(marks)
    return sorted(marks)[1:]


def average(marks):
    """The mean of the marks ``drop_lowest`` keeps, to one decimal."""
    kept = drop_lowest(marks)
    return round(sum(kept) / len(kept), 1)
