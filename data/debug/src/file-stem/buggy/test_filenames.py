from filenames import extension, stem, with_extension


def test_extension():
    assert extension("report.txt") == "txt"
    assert extension("archive.tar.gz") == "gz"
    assert extension("Makefile") == ""
    assert extension(".bashrc") == ""


def test_stem_of_a_name_with_an_extension():
    assert stem("report.txt") == "report"
    assert stem("archive.tar.gz") == "archive.tar"


def test_stem_of_a_name_without_an_extension():
    assert stem("Makefile") == "Makefile"


def test_stem_of_a_hidden_file():
    assert stem(".bashrc") == ".bashrc"


def test_replace_an_extension():
    assert with_extension("notes.md", "txt") == "notes.txt"


def test_add_an_extension():
    assert with_extension("README", "md") == "README.md"
