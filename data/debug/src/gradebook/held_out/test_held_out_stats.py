from stats import average, drop_lowest

import ast as _lcrl_ast


def _lcrl_keep(value):
    _lcrl_r = repr(value)
    try:
        return _lcrl_ast.literal_eval(_lcrl_r)
    except Exception:
        return ("<repr>", _lcrl_r)



def _lcrl_f1():
    _lcrl_seen = []
    marks = [70, 90, 50]
    drop_lowest(marks)
    average(marks)
    _lcrl_seen.append(_lcrl_keep(marks))
    return _lcrl_seen

def test_held_out_1():
    assert _lcrl_f1() == [[70, 90, 50]]


def _lcrl_f2():
    _lcrl_seen = []
    marks = [70, 70, 50, 90]
    drop_lowest(marks)
    average(marks)
    _lcrl_seen.append(_lcrl_keep(marks))
    return _lcrl_seen

def test_held_out_2():
    assert _lcrl_f2() == [[70, 70, 50, 90]]


def _lcrl_f3():
    _lcrl_seen = []
    marks = [72, 50, 90]
    drop_lowest(marks)
    average(marks)
    _lcrl_seen.append(_lcrl_keep(marks))
    return _lcrl_seen

def test_held_out_3():
    assert _lcrl_f3() == [[72, 50, 90]]


def _lcrl_f4():
    _lcrl_seen = []
    marks = [70, 50, 90, 90]
    drop_lowest(marks)
    average(marks)
    _lcrl_seen.append(_lcrl_keep(marks))
    return _lcrl_seen

def test_held_out_4():
    assert _lcrl_f4() == [[70, 50, 90, 90]]
