import pytest

from settings import SettingsError, parse_settings, parse_value


def test_parse_value():
    assert parse_value("8080") == 8080
    assert parse_value("0.5") == 0.5
    assert parse_value("TRUE") is True
    assert parse_value("'a b'") == "a b"
    assert parse_value("plain") == "plain"
    with pytest.raises(ValueError):
        parse_value('"open')


def test_settings():
    text = "port = 8080\nratio=0.5\n\n# a comment\ndebug = false\nname = 'web server'\n"
    assert parse_settings(text) == {"port": 8080, "ratio": 0.5, "debug": False, "name": "web server"}


def test_unclosed_quote_is_left_out():
    assert parse_settings('a = 1\nb = "oops\nc = 3') == {"a": 1, "c": 3}


def test_line_without_equals_sign():
    with pytest.raises(SettingsError, match="line 2"):
        parse_settings("a = 1\njust some words\nc = 3")


def test_empty_key():
    with pytest.raises(SettingsError, match="line 1"):
        parse_settings(" = 5")


def test_key_given_twice():
    with pytest.raises(SettingsError, match="line 3"):
        parse_settings("a = 1\nb = 2\na = 3")
