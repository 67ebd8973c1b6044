import pytest

from build import CycleError, build_order


def test_independent_steps_in_sorted_order():
    assert build_order({"b": [], "a": [], "c": []}) == ["a", "b", "c"]


def test_nothing_to_build():
    assert build_order({}) == []


def test_chain():
    assert build_order({"app": ["lib"], "lib": ["core"], "core": []}) == ["core", "lib", "app"]


def test_diamond():
    deps = {"app": ["net", "db"], "net": ["core"], "db": ["core"], "core": []}
    assert build_order(deps) == ["core", "net", "db", "app"]


def test_needed_step_without_its_own_entry():
    assert build_order({"app": ["lib"]}) == ["lib", "app"]


def test_cycle():
    with pytest.raises(CycleError):
        build_order({"a": ["b"], "b": ["c"], "c": ["a"]})


def test_step_that_needs_itself():
    with pytest.raises(CycleError):
        build_order({"a": ["a"]})


def test_cycle_error_is_a_value_error():
    assert issubclass(CycleError, ValueError)
