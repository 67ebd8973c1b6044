from stats import average, drop_lowest


def test_drop_lowest():
    assert drop_lowest([70, 50, 90]) == [70, 90]
    assert drop_lowest([60, 40]) == [40, 60]


def test_average():
    assert average([80, 60, 100]) == 90.0
    assert average([55]) == 55.0


def test_marks_are_not_changed():
    marks = [70, 50, 90]
    drop_lowest(marks)
    average(marks)
    assert marks == [70, 50, 90]
