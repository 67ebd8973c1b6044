from grid import Grid


def test_held_out_1():
    assert Grid(1, 4).count_paths() == 1


def test_held_out_2():
    assert Grid(4, 2).count_paths() == 4


def test_held_out_3():
    assert Grid(4, 4).count_paths() == 20


def test_held_out_4():
    assert Grid(6, 6, blocked=[(1, 1)]).count_paths() == 112


def test_held_out_5():
    assert Grid(2, 3, blocked=[(1, 0)]).render() == '...\n#..'
