import pytest
from build import CycleError, build_order


def test_held_out_1():
    assert build_order({'app': ['lib'], 'lib': ['core', 'core'], 'core': []}) == ['core', 'lib', 'app']


def test_held_out_2():
    assert build_order({'app': ['lib', 'lib']}) == ['lib', 'app']


def test_held_out_3():
    assert build_order({'app': ['lib'], 'lib': ['core']}) == ['core', 'lib', 'app']


def test_held_out_4():
    assert build_order({'app': ['llib']}) == ['llib', 'app']


def test_held_out_5():
    assert build_order({'b': [], 'a': []}) == ['a', 'b']
