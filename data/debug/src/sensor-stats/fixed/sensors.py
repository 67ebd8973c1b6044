"""Summaries of sensor readings."""


def parse_readings(lines):
    """The number on each line, skipping blank lines and '#' comments."""
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            yield float(line)


def summary(readings):
    """Minimum, maximum and mean of the readings."""
    readings = list(readings)
    count = 0
    total = 0.0
    for value in readings:
        count += 1
        total += value
    if count == 0:
        raise ValueError("no readings")
    return {"min": min(readings), "max": max(readings), "mean": total / count}
