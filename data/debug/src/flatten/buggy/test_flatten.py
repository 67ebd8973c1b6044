from flatten import flatten


def test_flat_list():
    assert flatten([1, 2, 3]) == [1, 2, 3]


def test_nested_lists():
    assert flatten([1, [2, [3, [4]]], 5]) == [1, 2, 3, 4, 5]


def test_tuples_and_generators():
    assert flatten((1, (2, 3), (x * 10 for x in [4, 5]))) == [1, 2, 3, 40, 50]


def test_empty():
    assert flatten([]) == []
    assert flatten([[], [[]]]) == []


def test_strings_are_values():
    assert flatten(["ab", ["c"]]) == ["ab", "c"]


def test_mixed_values():
    assert flatten([1, "x", [None, 2.5, ["yz", b"raw"]]]) == [1, "x", None, 2.5, "yz", b"raw"]
