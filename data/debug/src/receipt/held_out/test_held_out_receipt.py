from receipt import WIDTH, format_line, receipt
ITEMS = [('tea', 2.5), ('scones', 1.25)]

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
    assert format_line('tet', 2.5) == 'tet                 2.50'


def test_held_out_2():
    assert format_line('bikee', 249.0) == 'bikee             249.00'


def _lcrl_f3():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = format_line('tea', 2.5)
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_v1 = 'tea' + ' ' * 13 + '   2.50'
        _lcrl_seen.append(_lcrl_keep(_lcrl_v1))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == _lcrl_v1)
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_f3() == ['tea                 2.50', 'tea                2.50']


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = format_line('bike', 249.0)
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_v1 = 'bike' + ' ' * 13 + '  249.00'
        _lcrl_seen.append(_lcrl_keep(_lcrl_v1))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == _lcrl_v1)
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == ['bike              249.00', 'bike               249.00']


def test_held_out_5():
    assert len(format_line('teaa', 2.5)) == 24
