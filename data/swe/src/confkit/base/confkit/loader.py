"""Read INI text into nested dicts of typed values."""

import configparser

from confkit.cache import FileCache
from confkit.defaults import DEFAULTS
from confkit.merge import merge

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(section, key, value):
    default = DEFAULTS.get(section, {}).get(key)
    if isinstance(default, bool):
        lowered = value.strip().lower()
        if lowered not in _TRUE | _FALSE:
            raise ValueError(f"[{section}] {key}: expected a boolean, got {value!r}")
        return lowered in _TRUE
    if isinstance(default, int):
        return int(value)
    return value


def parse(text):
    """Sections of INI ``text`` as ``{section: {key: value}}``, typed like the defaults."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return {
        section: {key: _coerce(section, key, value) for key, value in parser.items(section)}
        for section in parser.sections()
    }


def load_config(path=None):
    """The defaults with the file at ``path`` (if any) on top."""
    if path is None:
        return merge(DEFAULTS, {})
    with open(path, encoding="utf-8") as f:
        return merge(DEFAULTS, parse(f.read()))


_cache = FileCache(load_config)


def load_config_cached(path):
    """``load_config(path)``, parsed once per version of the file."""
    return _cache.get(path)
