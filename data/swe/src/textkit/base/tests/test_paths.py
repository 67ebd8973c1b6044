from textkit.paths import join, normalize


def test_normalize_dots_and_slashes():
    assert normalize("a//b/./c/") == "a/b/c"


def test_normalize_parent():
    assert normalize("a/b/../c") == "a/c"


def test_normalize_absolute():
    assert normalize("/usr/local/../lib") == "/usr/lib"


def test_normalize_root_parent():
    assert normalize("/../etc") == "/etc"


def test_normalize_empty_and_dot():
    assert normalize("") == "."
    assert normalize("./") == "."


def test_join():
    assert join("src", "pkg", "../mod.py") == "src/mod.py"


def test_join_absolute_part():
    assert join("src", "/etc", "hosts") == "/etc/hosts"
