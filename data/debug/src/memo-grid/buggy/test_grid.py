from grid import Grid


def test_is_open():
    grid = Grid(2, 3, blocked=[(1, 1)])
    assert grid.is_open(0, 0) and grid.is_open(1, 2)
    assert not grid.is_open(1, 1)
    assert not grid.is_open(2, 0) and not grid.is_open(0, -1)


def test_render():
    assert Grid(2, 3, blocked=[(0, 1)]).render() == ".#.\n..."


def test_open_three_by_three():
    assert Grid(3, 3).count_paths() == 6


def test_two_grids():
    assert Grid(2, 2).count_paths() == 2
    assert Grid(3, 4).count_paths() == 10


def test_blocked_cells():
    assert Grid(3, 3, blocked=[(1, 1)]).count_paths() == 2


def test_same_shape_different_walls():
    open_grid = Grid(3, 3)
    walled = Grid(3, 3, blocked=[(0, 1), (1, 0)])
    assert open_grid.count_paths() == 6
    assert walled.count_paths() == 0
