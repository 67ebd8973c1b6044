from textkit.csvline import parse_rows, read_records, split_fields


def test_plain_fields():
    assert split_fields("a,b,c") == ["a", "b", "c"]


def test_whitespace_around_fields():
    assert split_fields(" a , b ,c ") == ["a", "b", "c"]


def test_quoted_field():
    assert split_fields('"hello",world') == ["hello", "world"]


def test_empty_fields():
    assert split_fields("a,,c,") == ["a", "", "c", ""]


def test_other_separator():
    assert split_fields("a;b", sep=";") == ["a", "b"]


def test_read_records():
    assert read_records("name,age\nann,31\n\nbob,42\n") == [
        {"name": "ann", "age": "31"},
        {"name": "bob", "age": "42"},
    ]


def test_parse_rows_skips_blank_lines():
    assert parse_rows("1,2\n\n3,4") == [["1", "2"], ["3", "4"]]
