from filenames import extension, stem, with_extension


def test_held_out_1():
    assert stem('Mafefile') == 'Mafefile'


def test_held_out_2():
    assert stem('.baashrc') == '.baashrc'


def test_held_out_3():
    assert with_extension('notesnmd', 'txt') == 'notesnmd.txt'


def test_held_out_4():
    assert with_extension('README', 'mmd') == 'README.mmd'


def test_held_out_5():
    assert extension('rport.txt') == 'txt'
