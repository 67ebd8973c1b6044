from flatten import flatten


def test_held_out_1():
    assert flatten([['c']]) == ['c']


def test_held_out_2():
    assert flatten([1, 'x']) == [1, 'x']


def test_held_out_3():
    assert flatten(['ab', ['c', 'c']]) == ['ab', 'c', 'c']


def test_held_out_4():
    assert flatten(['ab']) == ['ab']


def test_held_out_5():
    assert flatten([1, 3, 2]) == [1, 3, 2]
