"""Cache values computed from files."""

import os


class FileCache:
    """Caches ``load(path)`` per file and loads again when the file changed on disk."""

    def __init__(self, load):
        self._load = load
        self._entries = {}

    def get(self, path):
        path = os.fspath(path)
        # The file's version on disk: a rewrite changes the mtime or the size (or the inode when
        # replaced by a rename). stat() also raises FileNotFoundError for a deleted file rather
        # than serving its stale value.
        info = os.stat(path)
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        entry = self._entries.get(path)
        if entry is None or entry[0] != stamp:
            entry = (stamp, self._load(path))
            self._entries[path] = entry
        return entry[1]

    def clear(self):
        self._entries.clear()

    def __len__(self):
        return len(self._entries)
