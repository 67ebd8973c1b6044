from receipt import WIDTH, format_line, receipt


def test_held_out_1():
    assert format_line('tet', 2.5) == 'tet                 2.50'


def test_held_out_2():
    assert format_line('bikee', 249.0) == 'bikee             249.00'


def test_held_out_3():
    assert format_line('tea', 3.0) == 'tea                 3.00'


def test_held_out_4():
    assert format_line('bbke', 249.0) == 'bbke              249.00'


def test_held_out_5():
    assert len(format_line('teaa', 2.5)) == 24
