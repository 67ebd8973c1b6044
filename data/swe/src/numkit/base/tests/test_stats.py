import pytest

from numkit.stats import mean, median, mode, variance


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd():
    assert median([5, 1, 3]) == 3


def test_median_single():
    assert median([7]) == 7


def test_mode_ties_pick_smallest():
    assert mode([3, 1, 3, 1, 2]) == 1


def test_variance():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9]) == 4
