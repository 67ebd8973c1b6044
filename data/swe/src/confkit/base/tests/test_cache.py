from confkit.cache import FileCache


def test_loads_once(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("one")
    calls = []

    def load(p):
        calls.append(p)
        with open(p) as f:
            return f.read()

    cache = FileCache(load)
    assert cache.get(path) == "one"
    assert cache.get(path) == "one"
    assert len(calls) == 1


def test_clear(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("one")
    cache = FileCache(lambda p: open(p).read())
    cache.get(path)
    cache.clear()
    assert len(cache) == 0
