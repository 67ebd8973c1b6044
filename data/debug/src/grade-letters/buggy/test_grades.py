import pytest

from grades import grade_counts, letter_grade


def test_scores_inside_a_band():
    assert [letter_grade(s) for s in (95, 85, 75, 65, 30)] == ["A", "B", "C", "D", "F"]


def test_scores_on_a_cutoff():
    assert [letter_grade(s) for s in (90, 80, 70, 60)] == ["A", "B", "C", "D"]


def test_extremes():
    assert letter_grade(100) == "A"
    assert letter_grade(0) == "F"


def test_out_of_range():
    with pytest.raises(ValueError):
        letter_grade(101)
    with pytest.raises(ValueError):
        letter_grade(-1)


def test_grade_counts():
    assert grade_counts([90, 85, 59, 60, 100]) == {"A": 2, "B": 1, "C": 0, "D": 1, "F": 1}


def test_grade_counts_of_nothing():
    assert grade_counts([]) == {"A": 0, "B": 0, "C": 0, "D": 0, "F": 0}
