"""Split CSV lines into fields (one line at a time; no embedded newlines)."""


def _unquote(field):
    if len(field) >= 2 and field[0] == field[-1] == '"':
        return field[1:-1].replace('""', '"')
    return field


def split_fields(line, sep=","):
    """Fields of one CSV line; whitespace around a field is dropped, quotes are removed."""
    return [_unquote(part.strip()) for part in line.split(sep)]


def parse_rows(text, sep=","):
    """``split_fields`` for every non-blank line of ``text``."""
    return [split_fields(line, sep) for line in text.splitlines() if line.strip()]


def read_records(text, sep=","):
    """Rows as dicts keyed by the header (the first row)."""
    rows = parse_rows(text, sep)
    if not rows:
        return []
    header, *body = rows
    return [dict(zip(header, row)) for row in body]
