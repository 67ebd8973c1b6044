from leaderboard import ranking, top


def test_distinct_scores():
    assert ranking({"ann": 3, "bob": 9, "cy": 5}) == [(1, "bob", 9), (2, "cy", 5), (3, "ann", 3)]


def test_equal_scores_share_a_place():
    places = [place for place, _, _ in ranking({"dee": 7, "ann": 10, "bob": 7, "cy": 2})]
    assert places == [1, 2, 2, 4]


def test_equal_scores_in_alphabetical_order():
    assert ranking({"dee": 7, "ann": 10, "bob": 7}) == [(1, "ann", 10), (2, "bob", 7), (2, "dee", 7)]


def test_top_without_ties():
    assert top({"ann": 3, "bob": 9, "cy": 5}, 2) == ["bob", "cy"]


def test_top_with_ties():
    assert top({"zoe": 4, "amy": 4, "max": 1}, 1) == ["amy"]


def test_empty():
    assert ranking({}) == []
    assert top({}, 3) == []
