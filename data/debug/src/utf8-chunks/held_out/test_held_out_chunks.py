import pytest
from chunks import split_message
def utf8_len(text):
    return len(text.encode('utf-8'))

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



def test_held_out_1():
    assert split_message('🙂🙂🙂 ook', 4) == ['🙂', '🙂', '🙂', 'ook']


def _lcrl_f2():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        chunks = split_message('café crème brûlée', 10)
        _lcrl_v0 = bool(all((utf8_len(chunk) <= 10 for chunk in chunks)))
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0)
        _lcrl_v0 = '  '.join(chunks)
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == 'café crème brûlée')
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_2():
    assert _lcrl_f2() == [True, 'café  crème  brûlée']


def _lcrl_f3():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        chunks = split_message('éééé', 5)
        _lcrl_v0 = chunks
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['éé', 'éé', 'é'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_f3() == [['éé', 'éé']]


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = split_message('🙂🙂🙂 ok', 5)
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == ['🙂', '🙂', '🙂', 'ok'])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == [['🙂', '🙂', '🙂', 'ok']]


def test_held_out_5():
    assert split_message('the quick brown fox', 9) == ['the quick', 'brown fox']
