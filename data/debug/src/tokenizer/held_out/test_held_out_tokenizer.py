import pytest
from tokenizer import Tokenizer

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
        tokenizer = Tokenizer()
        _lcrl_v0 = tokenizer.tokenize('a++b')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['a', '+', 'b'])
        _lcrl_v0 = tokenizer.tokenize('c-1')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['c', '-', '1'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_1():
    assert _lcrl_f1() == [['a', '+', '+', 'b'], ['c', '-', '1']]


def _lcrl_f2():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        tokenizer = Tokenizer()
        first = tokenizer.tokenize('b+b')
        tokenizer.tokenize('c')
        _lcrl_v0 = first
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['a', '+', 'b'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_2():
    assert _lcrl_f2() == [['b', '+', 'b']]


def _lcrl_f3():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        tokenizer = Tokenizer()
        with pytest.raises(ValueError):
            tokenizer.tokenize('a ++ $')
        _lcrl_v0 = tokenizer.tokenize('b')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['b'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_f3() == [['b']]


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        tokenizer = Tokenizer()
        _lcrl_v0 = tokenizer.tokenize('++b')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['a', '+', 'b'])
        _lcrl_v0 = tokenizer.tokenize('c1-')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['c', '-', '1'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == [['+', '+', 'b'], ['c1', '-']]


def _lcrl_f5():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = Tokenizer().tokenize('2 + x*3')
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['12', '+', 'x', '*', '3'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_5():
    assert _lcrl_f5() == [['2', '+', 'x', '*', '3']]
