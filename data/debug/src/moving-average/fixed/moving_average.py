"""Moving averages of a series of measurements."""


def moving_averages(values, k):
    """The mean of every window of ``k`` consecutive values, in order."""
    if k < 1:
        raise ValueError("window size must be at least 1")
    averages = []
    for start in range(len(values) - k + 1):
        window = values[start : start + k]
        averages.append(sum(window) / k)
    return averages
