import pytest

from numkit.pagination import page_count, paginate


def test_page_count_exact():
    assert page_count(9, 3) == 3


def test_page_count_rejects_zero_per_page():
    with pytest.raises(ValueError):
        page_count(5, 0)


def test_first_page():
    assert paginate(list(range(10)), 1, 4) == [0, 1, 2, 3]


def test_empty_list_has_one_page():
    assert paginate([], 1, 5) == []


def test_page_out_of_range():
    with pytest.raises(IndexError):
        paginate([1, 2, 3], 3, 2)
