import pytest

from confkit.defaults import DEFAULTS
from confkit.loader import load_config, parse


def test_defaults_without_file():
    assert load_config() == DEFAULTS


def test_parse_types():
    parsed = parse("[server]\nport = 9000\ndebug = yes\nhost = example.org\n")
    assert parsed == {"server": {"port": 9000, "debug": True, "host": "example.org"}}


def test_parse_bad_boolean():
    with pytest.raises(ValueError):
        parse("[server]\ndebug = maybe\n")


def test_full_section_override(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[logging]\nlevel = DEBUG\nfile = app.log\n")
    assert load_config(path)["logging"] == {"level": "DEBUG", "file": "app.log"}


def test_unknown_section_kept(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[plugins]\nenabled = cache\n")
    assert load_config(path)["plugins"] == {"enabled": "cache"}
