import pytest
from sensors import parse_readings, summary
import math as _lcrl_math

def _lcrl_close(actual, expected):
    if isinstance(expected, float):
        return (
            isinstance(actual, (int, float))
            and not isinstance(actual, bool)
            and _lcrl_math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, type(expected))
            and len(actual) == len(expected)
            and all(_lcrl_close(a, e) for a, e in zip(actual, expected))
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_lcrl_close(actual[k], v) for k, v in expected.items())
        )
    return actual == expected


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
        _lcrl_v0 = summary((x for x in [3.0, 1.0, 2.0, 2.0]))
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == {'min': 1.0, 'max': 3.0, 'mean': 2.0})
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_1():
    assert _lcrl_close(_lcrl_f1(), [{'min': 1.0, 'max': 3.0, 'mean': 2.0}])


def _lcrl_f2():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        lines = ['# header', '# header', '1.5', '', '2.5']
        _lcrl_v0 = summary(parse_readings(lines))
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == {'min': 1.5, 'max': 2.5, 'mean': 2.0})
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_2():
    assert _lcrl_close(_lcrl_f2(), [{'min': 1.5, 'max': 2.5, 'mean': 2.0}])


def _lcrl_f3():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = summary((x for x in [3.0, 1.0, 1.0, 2.0]))
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == {'min': 1.0, 'max': 3.0, 'mean': 2.0})
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_close(_lcrl_f3(), [{'min': 1.0, 'max': 3.0, 'mean': 1.75}])


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        lines = ['# header', '1.5', '1.5', '', '2.5']
        _lcrl_v0 = summary(parse_readings(lines))
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == {'min': 1.5, 'max': 2.5, 'mean': 2.0})
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_close(_lcrl_f4(), [{'min': 1.5, 'max': 2.5, 'mean': 1.8333333333333333}])


def test_held_out_5():
    assert _lcrl_close(summary([1.0, 2.0]), {'min': 1.0, 'max': 2.0, 'mean': 1.5})
