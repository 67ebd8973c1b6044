import pytest

from stats import mean, median, spread


def test_median_of_odd_count():
    assert median([3, 1, 2]) == 2


def test_median_of_even_count_with_whole_mean():
    assert median([7, 1, 5, 3]) == 4


def test_median_of_even_count():
    assert median([1, 2, 3, 4]) == 2.5


def test_median_of_floats():
    assert median([0.5, 0.25]) == 0.375


def test_median_of_negative_numbers():
    assert median([-3, -2]) == -2.5


def test_mean_and_spread():
    assert mean([1, 2, 3, 4]) == 2.5
    assert spread([4, -1, 9]) == 10


def test_empty_lists_raise():
    with pytest.raises(ValueError):
        median([])
    with pytest.raises(ValueError):
        mean([])
