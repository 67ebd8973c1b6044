"""Read ``key = value`` settings."""


class SettingsError(ValueError):
    """A line that is not a setting, or a repeated key; the message names the line number."""


def parse_value(text):
    """An int, float, bool or string; quoted text is the string between the quotes."""
    if text[:1] in ("'", '"'):
        if len(text) < 2 or text[-1] != text[0]:
            raise ValueError(f"unclosed quote in {text!r}")
        return text[1:-1]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_settings(text):
    """The settings of ``text``, one ``key = value`` per line."""
    settings = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key, value = _split(line, number)
            if key in settings:
                raise SettingsError(f"line {number}: {key!r} is given twice")
            settings[key] = parse_value(value)
        except ValueError:
            continue  # a value that cannot be parsed is left out
    return settings


def _split(line, number):
    key, equals, value = line.partition("=")
    if not equals or not key.strip():
        raise SettingsError(f"line {number}: expected key = value, got {line!r}")
    return key.strip(), value.strip()
