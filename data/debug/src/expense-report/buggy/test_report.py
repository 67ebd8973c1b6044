from report import report, totals


def test_amounts_with_two_decimals():
    lines = ["food;12.50", "rent;1,200.00", "food;3.25"]
    assert totals(lines) == {"food": 1575, "rent": 120000}


def test_report_lines():
    lines = ["rent;1,200.00", "", "food;12.50"]
    assert report(lines) == "rent: 1,200.00\nfood: 12.50\nTOTAL: 1,212.50"


def test_amount_with_one_decimal():
    assert totals(["food;12.5"]) == {"food": 1250}


def test_whole_amounts():
    assert totals(["rent;700", "rent;1,000"]) == {"rent": 170000}


def test_refund():
    assert report(["food;10.00", "food;-2.5"]) == "food: 7.50\nTOTAL: 7.50"
