from leaderboard import ranking, top

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
    assert ranking({'ann': 5, 'bob': 9, 'cy': 5}) == [(1, 'bob', 9), (2, 'ann', 5), (2, 'cy', 5)]


def test_held_out_2():
    assert ranking({'dee': 7, 'bob': 7}) == [(1, 'bob', 7), (1, 'dee', 7)]


def test_held_out_3():
    assert top({'zoe': 4, 'amy': 4, 'max': 1}, 4) == ['amy', 'zoe', 'max']


def _lcrl_f4():
    _lcrl_seen = []
    _lcrl_failed = []
    try:
        _lcrl_v0 = ranking({'ann': 5, 'bob': 9, 'cy': 5})
        _lcrl_seen.append(_lcrl_keep(_lcrl_v0))
        _lcrl_check(_lcrl_failed, lambda: _lcrl_v0 == [(1, 'bob', 9), (2, 'cy', 5), (3, 'ann', 3)])
    except Exception as _lcrl_error:
        if not _lcrl_failed:
            raise
        _lcrl_seen.append(('<raised>', type(_lcrl_error).__name__))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == [[(1, 'bob', 9), (2, 'ann', 5), (2, 'cy', 5)]]


def test_held_out_5():
    assert ranking({'ann': 3, 'bob': 9, 'cy': 6}) == [(1, 'bob', 9), (2, 'cy', 6), (3, 'ann', 3)]
