"""Amounts of money as integer cents."""


def parse_cents(text):
    """The cents of an amount such as "1,234.50", "12.5", "7" or "-2.25"."""
    text = text.strip().replace(",", "")
    negative = text.startswith("-")
    digits = text.lstrip("-").replace(".", "")
    cents = int(digits)
    return -cents if negative else cents


def format_cents(cents):
    """Cents written out: "1,234.50" for 123450, "-2.25" for -225."""
    sign = "-" if cents < 0 else ""
    whole, part = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{part:02d}"
