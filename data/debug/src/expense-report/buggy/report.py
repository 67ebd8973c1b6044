"""Expense reports from ``category;amount`` lines."""

from money import format_cents, parse_cents


def totals(lines):
    """Total cents per category, in order of first appearance."""
    result = {}
    for line in lines:
        if not line.strip():
            continue
        category, amount = line.split(";")
        category = category.strip()
        result[category] = result.get(category, 0) + parse_cents(amount)
    return result


def report(lines):
    """One ``category: total`` line per category, then ``TOTAL: total``."""
    sums = totals(lines)
    out = [f"{category}: {format_cents(cents)}" for category, cents in sums.items()]
    out.append(f"TOTAL: {format_cents(sum(sums.values()))}")
    return "\n".join(out)
