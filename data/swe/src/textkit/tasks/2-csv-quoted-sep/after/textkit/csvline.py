"""Split CSV lines into fields (one line at a time; no embedded newlines)."""


def split_fields(line, sep=","):
    """Fields of one CSV line; whitespace around a field is dropped, quotes are removed.

    A separator inside double quotes belongs to the field, and ``""`` inside quotes is a
    literal quote.
    """
    fields = []
    current = []
    in_quotes = False
    i = 0
    while i < len(line):
        char = line[i]
        if in_quotes:
            if char == '"' and line[i + 1 : i + 2] == '"':
                current.append('"')
                i += 1
            elif char == '"':
                in_quotes = False
            else:
                current.append(char)
        elif char == '"' and not "".join(current).strip():
            current = []
            in_quotes = True
        elif char == sep:
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(char)
        i += 1
    fields.append("".join(current).strip())
    return fields


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
