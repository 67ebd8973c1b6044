"""Test files that change while the tests run: watched from the runner's parent, beside the child.

The diff cannot change a test file: every test path is put back as the base has it before the run.
The code under test still runs inside that run, and can write. A module imported while an earlier
test module is collected rewrites a later one (``add(2, 3) == 5`` -> ``== -1``, the canary kept),
or plants a ``conftest.py`` in a directory not collected yet, from the child or from a process it
starts, and can put the original back before the run ends. So the parent, which runs none of the
repository's code, asks the kernel (inotify: a record no process of the run can edit) about every
file the run restored and the directories they are in, plus every directory from the repository
root down to each graded test file, from after the canaries are written until the child's session
is gone. A test file written, truncated, removed, renamed or replaced, a Python file (a
``conftest.py``, an ``__init__.py``, a test module) created or moved in among the test files, a
``__pycache__`` directory or a ``.pyc`` created in a watched directory (pytest loads a rewritten
test module's cached bytecode if it names the source's hash, which the code can compute; the child
reads bytecode only from a read-only tree, ``_runner.TRUSTED_BYTECODE``, so nothing of grading makes one), or a
watched directory moved: ``tamper``. Data files the tests create there are not (a suite may write
its output next to its tests); one that existed before the run is a test file like the others (a
golden file rewritten before it is read). A directory made among the test files is watched from
then on and what it holds read at once (a package ``tests/b/helpers/`` is found before
``tests/b/helpers.py``). The repository's ``sys.path`` roots (the root, a ``src``) come before the
test directories with ``--import-mode=append``: a module or directory made there named like one
the tests import from their own directories (``names``: ``_scan.imported_by_tests``) is named as
it is made.

Each file is watched too, not only its directory: a write through a hard link made elsewhere in the
repository names no test file in any directory's events. A write through ``mmap`` raises no event
at all, so the files are made read-only first and a change of their mode, or a file opened for
writing, counts as a change. Where inotify is missing or its watches
run out, the contents are compared at the end instead (a change that was undone is then missed);
the report says so (``unwatched``). Bound read-only beside ``_runner.py`` in the grading sandbox;
standard library only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import importlib.machinery
import os
import struct
from collections.abc import Callable, Iterable

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_Q_OVERFLOW, IN_ISDIR, IN_ONLYDIR = 0x4000, 0x40000000, 0x01000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, 0o2000000
# IN_ATTRIB and IN_CLOSE_WRITE: a write through mmap raises no event of its own, and the files are
# made read-only before the watch starts (:func:`read_only`), so such a write needs a chmod first
# (or, with a capability the sandbox does not give, a file opened for writing, whose close is seen)
FILE_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF
DIR_MASK = IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name
MAX_REASONS = 5
MAX_NEW_DIRS = 1000  # directories made among the test files that are watched; more: overflow
MODULE_SUFFIXES = tuple(importlib.machinery.all_suffixes())  # source, bytecode, native code


def read_only(paths: Iterable[str]) -> None:
    """Take the write bits off ``paths`` (the run's processes hold no capability, so a file of
    theirs that is read-only must be made writable again, which the watch sees, before a write
    through ``mmap`` can reach it)."""
    for path in paths:
        try:
            os.chmod(path, os.stat(path).st_mode & ~0o222)
        except OSError:
            pass


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


class TestFileWatch:
    """Watches ``files`` (repository-relative paths of the restored files present now) and
    ``dirs`` (their directories and the graded test files' ancestors); ``restored(path)``: would
    the run restore ``path`` (a test path), for files created during the run."""

    def __init__(
        self,
        files: Iterable[str],
        dirs: Iterable[str],
        restored: Callable[[str], bool],
        names: Iterable[str] = (),
        roots: Iterable[str] = (),
    ) -> None:
        self.files = sorted({os.path.normpath(p) for p in files})
        self.restored = restored
        self.names, self.roots = frozenset(names), {os.path.normpath(r) for r in roots}
        self.new_dirs: set[str] = set()
        self.before = {p: _digest(p) for p in self.files}
        self.changed: set[str] = set()
        self.moved_dirs: set[str] = set()
        self.overflow = False
        self.unwatched: str | None = None
        self.paths: dict[int, tuple[str, bool]] = {}  # watch descriptor -> (path, is a directory)
        self.fd: int | None = None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            self.fd, self._add = fd, libc.inotify_add_watch
        except (OSError, AttributeError) as e:
            self.unwatched = f"no inotify ({e})"
            return
        for d in sorted({os.path.normpath(p) for p in dirs}):
            self._watch(d, DIR_MASK | IN_ONLYDIR, True)
        for path in self.files:
            if self.unwatched:
                break
            self._watch(path, FILE_MASK, False)

    def _watch(self, path: str, mask: int, is_dir: bool) -> int:
        wd = self._add(self.fd, os.fsencode(path), mask)
        if wd >= 0:
            self.paths[wd] = (path, is_dir)
            return wd
        err = ctypes.get_errno()
        if err in (errno.ENOSPC, errno.ENOMEM):  # the user's watches are spent: the end check stands
            self.unwatched = f"watches ran out at {len(self.paths)}"
        # ENOENT and the like: a path that is not there (a deleted test file); nothing to watch
        return -1

    def fileno(self) -> int | None:
        return self.fd

    def drain(self) -> None:
        """Read the events waiting (the parent calls this while the child runs, so the kernel's
        queue never fills)."""
        if self.fd is None:
            return
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            at = 0
            while at + EVENT.size <= len(data):
                wd, mask, _cookie, size = EVENT.unpack_from(data, at)
                name = data[at + EVENT.size : at + EVENT.size + size].rstrip(b"\0")
                at += EVENT.size + size
                self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self.overflow = True
            return
        where = self.paths.get(wd)
        if where is None:
            return
        path, is_dir = where
        if not is_dir:
            if mask & FILE_MASK:
                self.changed.add(path)
            return
        if not name:  # the directory itself
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF):
                self.moved_dirs.add(path)
            return
        child = os.path.normpath(os.path.join(path, name))
        if child in self.before:
            if mask & (IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE):
                self.changed.add(child)
        elif mask & (IN_CREATE | IN_MOVED_TO):
            is_dir = bool(mask & IN_ISDIR) or os.path.isdir(child)  # a link to a directory imports as one
            module = name if is_dir else name.split(".", 1)[0] if name.endswith(MODULE_SUFFIXES) else None
            if name == "__pycache__" or name.endswith(".pyc"):
                self.changed.add(child)
            elif path in self.roots and module in self.names:
                # where the import system looks before the test directories: a module, or a
                # directory (a package as soon as an __init__.py is in it, which may be there
                # and gone again before it could be watched), named like one the tests import
                self.changed.add(child)
            elif is_dir:
                self._new_dir(child)
            elif module is not None and self.restored(child):
                self.changed.add(child)
        elif (
            mask & IN_MOVED_FROM
            and mask & IN_ISDIR
            and any(f.startswith(child + os.sep) for f in self.before)
        ):
            self.moved_dirs.add(child)

    def _new_dir(self, path: str) -> None:
        """A directory made among the test files (``tests/b/helpers/``: with an ``__init__.py``,
        a package, found before ``tests/b/helpers.py``): watched from now on, and what it holds
        already read as if it had been made now, so a Python file in it counts as one made among
        the tests whether it came before the watch or after. One made and gone before it could
        be watched is not named (a suite's own temporary directory would be, by chance): a
        Python file in it that was imported is, by the child's audit hook
        (``_guard.made_among_tests``)."""
        if path in self.new_dirs or not self.restored(os.path.join(path, "__init__.py")):
            return  # outside the test files: the code's own business
        if len(self.new_dirs) >= MAX_NEW_DIRS:
            self.overflow = True
            return
        self.new_dirs.add(path)
        wd = self._watch(path, DIR_MASK | IN_ONLYDIR, True)
        if wd < 0:
            return
        try:
            entries = [(e.name, e.is_dir()) for e in os.scandir(path)]
        except OSError:
            entries = []
        for name, is_dir in entries:
            self._event(wd, IN_CREATE | (IN_ISDIR if is_dir else 0), name)

    def close(self) -> list[str]:
        """The last events, the end check, the watch closed: the tamper reasons (``[]``: none)."""
        self.drain()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        for path, digest in self.before.items():
            if path not in self.changed and _digest(path) != digest:
                self.changed.add(path)
        reasons = [f"run time: {p} changed while the tests ran" for p in sorted(self.changed)]
        reasons += [f"run time: {d}/ moved or removed while the tests ran" for d in sorted(self.moved_dirs)]
        if self.overflow:
            reasons.append("run time: the test directories changed faster than they could be watched")
        return reasons[:MAX_REASONS]
