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


def test_partial_section_keeps_defaults(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[server]\nport = 9000\n")
    assert load_config(path)["server"] == {"host": "127.0.0.1", "port": 9000, "workers": 2, "debug": False}


def test_editing_result_leaves_defaults_alone():
    saved = {section: dict(values) for section, values in DEFAULTS.items()}
    try:
        config = load_config()
        config["server"]["port"] = 1
        assert load_config()["server"]["port"] == 8080
    finally:
        for section, values in saved.items():
            DEFAULTS[section].clear()
            DEFAULTS[section].update(values)
