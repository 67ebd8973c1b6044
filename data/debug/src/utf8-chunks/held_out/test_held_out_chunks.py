import pytest
from chunks import split_message


def test_held_out_1():
    assert split_message('🙂🙂🙂 ook', 4) == ['🙂', '🙂', '🙂', 'ook']


def test_held_out_2():
    assert split_message('🙂🙂o ok', 4) == ['🙂', '🙂', 'o ok']


def test_held_out_3():
    assert split_message('🙂🙂🙂o k', 4) == ['🙂', '🙂', '🙂', 'o k']


def test_held_out_4():
    assert split_message('🙂k🙂 ok', 4) == ['🙂', 'k', '🙂', 'ok']


def test_held_out_5():
    assert split_message('the quick brown fox', 9) == ['the quick', 'brown fox']
