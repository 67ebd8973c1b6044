"""Combine configuration dictionaries."""


def merge(base, override):
    """A new dict: ``base`` with ``override`` on top.

    Sections (nested dicts) are merged key by key, so a file that sets one key of a section keeps
    the other keys' defaults. Nothing in the result is shared with either argument, so editing
    a loaded configuration never changes the defaults.
    """
    result = {key: _copy(value) for key, value in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = _copy(value)
    return result


def _copy(value):
    return merge(value, {}) if isinstance(value, dict) else value
