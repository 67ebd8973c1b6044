import pytest

from sensors import parse_readings, summary


def test_parse_readings():
    lines = ["# temperature", "21.5", "", "  22.0  ", "# end"]
    assert list(parse_readings(lines)) == [21.5, 22.0]


def test_summary_of_a_list():
    assert summary([3.0, 1.0, 2.0]) == {"min": 1.0, "max": 3.0, "mean": 2.0}


def test_summary_of_a_tuple():
    assert summary((4, 8)) == {"min": 4, "max": 8, "mean": 6.0}


def test_summary_of_a_generator():
    assert summary(x for x in [3.0, 1.0, 2.0]) == {"min": 1.0, "max": 3.0, "mean": 2.0}


def test_summary_of_parsed_lines():
    lines = ["# header", "1.5", "", "2.5"]
    assert summary(parse_readings(lines)) == {"min": 1.5, "max": 2.5, "mean": 2.0}


def test_no_readings():
    with pytest.raises(ValueError):
        summary([])
    with pytest.raises(ValueError):
        summary(iter([]))
