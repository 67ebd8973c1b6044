"""A class report from every student's marks."""

from stats import average

LETTERS = ((90, "A"), (80, "B"), (70, "C"), (60, "D"))


def letter(mean):
    """The letter of an average mark."""
    for cutoff, grade in LETTERS:
        if mean >= cutoff:
            return grade
    return "F"


def class_report(marks_by_student):
    """``(name, average, letter, latest mark)`` for every student, in the order given."""
    rows = []
    for name, marks in marks_by_student.items():
        mean = average(marks)
        rows.append((name, mean, letter(mean), marks[-1]))
    return rows


def top_student(marks_by_student):
    """The student with the highest average (the first listed among equals)."""
    best, best_mean = None, None
    for name, marks in marks_by_student.items():
        mean = average(marks)
        if best_mean is None or mean > best_mean:
            best, best_mean = name, mean
    return best
