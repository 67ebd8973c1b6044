from report import class_report, letter, top_student

MARKS = {"ann": [92, 98, 60], "bob": [70, 85, 80], "cy": [40, 62]}


def test_letter():
    assert [letter(m) for m in (95, 90, 85, 72.5, 60, 59.9)] == ["A", "A", "B", "C", "D", "F"]


def test_averages_and_letters():
    rows = class_report(MARKS)
    assert [(name, mean, grade) for name, mean, grade, _ in rows] == [
        ("ann", 95.0, "A"),
        ("bob", 82.5, "B"),
        ("cy", 51.0, "F"),
    ]


def test_latest_mark():
    assert [latest for *_, latest in class_report(MARKS)] == [60, 80, 62]


def test_top_student():
    assert top_student(MARKS) == "ann"


def test_top_student_listed_last():
    assert top_student({"cy": [50, 60], "ann": [90, 95]}) == "ann"
