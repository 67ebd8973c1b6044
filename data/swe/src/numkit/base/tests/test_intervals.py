from numkit.intervals import merge, total_length


def test_merge_overlapping():
    assert merge([(5, 8), (1, 3), (2, 4)]) == [(1, 4), (5, 8)]


def test_merge_disjoint_sorted():
    assert merge([(10, 12), (1, 2)]) == [(1, 2), (10, 12)]


def test_merge_contained():
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]


def test_total_length():
    assert total_length([(0, 2), (1, 5), (7, 8)]) == 6
