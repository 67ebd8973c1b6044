from intervals import covered_length, merge


def test_held_out_1():
    assert merge([[3, 1], [2, 6], [8, 10]]) == [[2, 6], [8, 10]]


def test_held_out_2():
    assert merge([[8, 10], [1, 3], [6, 2]]) == [[1, 3], [6, 2], [8, 10]]


def test_held_out_3():
    assert merge([[1, 10], [2, 4]]) == [[1, 10]]


def test_held_out_4():
    assert merge([[3, 5], [1, 3]]) == [[1, 5]]


def test_held_out_5():
    assert merge([[1, 2]]) == [[1, 2]]
