from report import class_report, letter, top_student
MARKS = {'ann': [92, 98, 60], 'bob': [70, 85, 80], 'cy': [40, 62]}


def test_held_out_1():
    assert top_student({'ann': [90, 95]}) == 'ann'
