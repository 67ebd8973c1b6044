from receipt import WIDTH, format_line, receipt

ITEMS = [("tea", 2.5), ("scones", 1.25)]


def test_line_width():
    assert len(format_line("tea", 2.5)) == WIDTH


def test_line_has_two_decimals():
    assert format_line("tea", 2.5) == "tea" + " " * 13 + "    2.50"


def test_line_with_a_large_price():
    assert format_line("bike", 249.0) == "bike" + " " * 12 + "  249.00"


def test_separator_and_line_count():
    lines = receipt(ITEMS).splitlines()
    assert len(lines) == len(ITEMS) + 2
    assert lines[len(ITEMS)] == "-" * WIDTH


def test_total_line():
    assert receipt(ITEMS).splitlines()[-1] == "TOTAL" + " " * 11 + "    3.75"
