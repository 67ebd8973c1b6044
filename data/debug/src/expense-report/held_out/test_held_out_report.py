from report import report, totals


def test_held_out_1():
    assert totals(['food;12.5', 'food;12.5']) == {'food': 2500}


def test_held_out_2():
    assert totals(['rent;1,000', 'rent;700']) == {'rent': 170000}


def test_held_out_3():
    assert report(['food;-2.5', 'food;10.00']) == 'food: 7.50\nTOTAL: 7.50'


def test_held_out_4():
    assert totals(['food;125']) == {'food': 12500}


def test_held_out_5():
    assert report(['food;10.00']) == 'food: 10.00\nTOTAL: 10.00'
