import os

import pytest

from confkit.cache import FileCache
from confkit.loader import load_config_cached


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


def _touch_later(path):
    info = os.stat(path)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))


def test_reloads_after_change(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("one")
    cache = FileCache(lambda p: open(p).read())
    assert cache.get(path) == "one"
    path.write_text("three")
    _touch_later(path)
    assert cache.get(path) == "three"


def test_deleted_file_raises(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("one")
    cache = FileCache(lambda p: open(p).read())
    cache.get(path)
    path.unlink()
    with pytest.raises(FileNotFoundError):
        cache.get(path)


def test_load_config_cached_sees_edits(tmp_path):
    path = tmp_path / "app.ini"
    path.write_text("[logging]\nlevel = DEBUG\n")
    assert load_config_cached(path)["logging"]["level"] == "DEBUG"
    path.write_text("[logging]\nlevel = WARNING\n")
    _touch_later(path)
    assert load_config_cached(path)["logging"]["level"] == "WARNING"
