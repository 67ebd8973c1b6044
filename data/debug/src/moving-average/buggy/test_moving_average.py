import pytest

from moving_average import moving_averages


def test_three_windows():
    assert moving_averages([1, 2, 3, 4, 5], 3) == [2.0, 3.0, 4.0]


def test_window_of_one_is_the_series():
    assert moving_averages([4, 8, 15], 1) == [4.0, 8.0, 15.0]


def test_window_as_long_as_the_series():
    assert moving_averages([2, 4, 6], 3) == [4.0]


def test_series_shorter_than_the_window():
    assert moving_averages([1, 2], 3) == []


def test_empty_series():
    assert moving_averages([], 2) == []


def test_window_size_must_be_positive():
    with pytest.raises(ValueError):
        moving_averages([1, 2, 3], 0)
