"""Plain-text receipts."""

WIDTH = 24


def format_line(name, price):
    """The name left-aligned, then the price right-aligned with two decimals: WIDTH characters."""
    return f"{name:<16}{price:>8.2f}"


def receipt(items):
    """One line per ``(name, price)``, a line of dashes, then the total."""
    lines = [format_line(name, price) for name, price in items]
    lines.append("-" * WIDTH)
    lines.append(format_line("TOTAL", sum(price for _, price in items)))
    return "\n".join(lines)
