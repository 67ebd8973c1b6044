from intervals import covered_length, merge


def test_disjoint():
    assert merge([[1, 2], [4, 5]]) == [[1, 2], [4, 5]]


def test_overlapping():
    assert merge([[1, 3], [2, 6], [8, 10]]) == [[1, 6], [8, 10]]


def test_unsorted_input():
    assert merge([[8, 10], [1, 3], [2, 6]]) == [[1, 6], [8, 10]]


def test_interval_inside_another():
    assert merge([[1, 10], [2, 3]]) == [[1, 10]]


def test_touching_intervals():
    assert merge([[1, 3], [3, 5]]) == [[1, 5]]


def test_covered_length():
    assert covered_length([[0, 4], [1, 2], [4, 6], [10, 11]]) == 7


def test_input_is_not_changed():
    intervals = [[5, 7], [1, 6]]
    merge(intervals)
    assert intervals == [[5, 7], [1, 6]]


def test_empty():
    assert merge([]) == []
    assert covered_length([]) == 0
