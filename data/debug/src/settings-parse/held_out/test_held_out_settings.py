import pytest
from settings import SettingsError, parse_settings, parse_value

import ast as _lcrl_ast


def _lcrl_plain(value):
    kind = type(value)
    if kind in (list, tuple, set, frozenset):
        return all(_lcrl_plain(v) for v in value)
    if kind is dict:
        return all(_lcrl_plain(k) and _lcrl_plain(v) for k, v in value.items())
    return kind in (int, float, complex, str, bytes, bool, type(None))


def _lcrl_keep(value):
    _lcrl_r = repr(value)
    if type(_lcrl_r) is not str:
        return ("<repr>", None)
    try:
        _lcrl_v = _lcrl_ast.literal_eval(_lcrl_r)
    except Exception:
        return ("<repr>", _lcrl_r)
    return _lcrl_v if _lcrl_plain(_lcrl_v) else ("<repr>", _lcrl_r)


def _lcrl_check(failed, thunk):
    try:
        _lcrl_holds = bool(thunk())
    except Exception:
        _lcrl_holds = False
    if not _lcrl_holds:
        failed.append(True)



def _lcrl_f1():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        with pytest.raises(SettingsError, match='line 2'):
            parse_settings('a = 1\njust some words\nc =3 ')
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_1():
    assert _lcrl_f1() == []


def _lcrl_f2():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        with pytest.raises(SettingsError, match='line 1'):
            parse_settings('=  5')
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_2():
    assert _lcrl_f2() == []


def _lcrl_f3():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        with pytest.raises(SettingsError, match='line 3'):
            parse_settings('a = 1\nb = 2\na  3')
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_f3() == []


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        with pytest.raises(SettingsError, match='line 2'):
            parse_settings('a = 1\njust 1ome words\nc = 3')
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == []


def test_held_out_5():
    assert parse_value('8088') == 8088
