from leaderboard import ranking, top


def test_held_out_1():
    assert ranking({'ann': 5, 'bob': 9, 'cy': 5}) == [(1, 'bob', 9), (2, 'ann', 5), (2, 'cy', 5)]


def test_held_out_2():
    assert ranking({'dee': 7, 'bob': 7}) == [(1, 'bob', 7), (1, 'dee', 7)]


def test_held_out_3():
    assert top({'zoe': 4, 'amy': 4, 'max': 1}, 4) == ['amy', 'zoe', 'max']


def test_held_out_4():
    assert ranking({'dee': 7, 'ann': 8, 'bob': 7}) == [(1, 'ann', 8), (2, 'bob', 7), (2, 'dee', 7)]


def test_held_out_5():
    assert ranking({'ann': 3, 'bob': 9, 'cy': 6}) == [(1, 'bob', 9), (2, 'cy', 6), (3, 'ann', 3)]
