import pytest
from grades import grade_counts, letter_grade


def test_held_out_1():
    assert grade_counts([85, 59, 60, 100]) == {'A': 1, 'B': 1, 'C': 0, 'D': 1, 'F': 1}


def test_held_out_2():
    assert grade_counts([91, 85, 59, 60, 100]) == {'A': 2, 'B': 1, 'C': 0, 'D': 1, 'F': 1}


def test_held_out_3():
    assert grade_counts([90, 85, 60, 59, 100]) == {'A': 2, 'B': 1, 'C': 0, 'D': 1, 'F': 1}


def test_held_out_4():
    assert grade_counts([90, 85, 59, 100, 60]) == {'A': 2, 'B': 1, 'C': 0, 'D': 1, 'F': 1}


def test_held_out_5():
    assert letter_grade(98) == 'A'
