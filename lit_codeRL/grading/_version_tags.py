"""Which classes and module dictionaries were written to since last seen: CPython's version tags.

Runs in the pytest child beside ``_runner.py``. The record's checks compare what a class holds
between tests; a method swapped for the diff's no-op while a test runs and put back before it ends
(by the no-op itself, as the test calls it) leaves nothing to compare, and CPython 3.11 raises no
audit event for a class attribute set. But every write to a class's dictionary through the type
(``setattr``, ``del``, ``mock.patch.object``) calls ``PyType_Modified``, which drops the class's
version tag (the key of the interpreter's method cache); the next lookup gives it a new one from a
counter that only grows. A tag that differs from the one read before the test says the class was
written to, whatever put it back after.

A module attribute set raises no audit event either (``math.isclose`` swapped for a no-op that
puts the original back as the test calls it); a dictionary's version (PEP 509, ``ma_version_tag``,
CPython 3.6 to 3.13) takes a new value from a global counter each time a key is given another
value, added or removed (:class:`DictTags`).

Each is read through ``ctypes`` at an offset proved at run time on an object made for it (a
class's tag: the field after ``tp_del``, located from ``tp_flags``, whose value ``__flags__``
gives; a dictionary's version: the word after ``ma_used``, its length): on an interpreter where
the probe does not behave as described, the reader reads nothing (``working`` is false) and the
record's other checks stand alone.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable

_WORD = ctypes.sizeof(ctypes.c_void_p)
_TAG_AFTER_FLAGS = 27  # words from ``tp_flags`` to ``tp_version_tag`` (CPython 3.8 to 3.13)
_LOOKUP = "__lcrl_version_probe__"  # a name no class has: its lookup assigns a tag


def _find_flags(probe: type) -> int | None:
    """The offset of the first word of the class ``probe`` that holds its ``__flags__``."""
    base = id(probe)
    return next(
        (
            o
            for o in range(0, 64 * _WORD, _WORD)
            if ctypes.c_ulong.from_address(base + o).value == probe.__flags__
        ),
        None,
    )


def _tag_offset() -> int | None:
    """The offset of ``tp_version_tag`` in a type object, proved on a class made for it."""

    class Probe:
        pass

    base = id(Probe)
    flags = _find_flags(Probe)
    if flags is None:
        return None
    offset = flags + _TAG_AFTER_FLAGS * _WORD
    tag = ctypes.c_uint.from_address(base + offset)
    getattr(Probe, _LOOKUP, None)
    first = tag.value
    Probe.attribute = 1
    dropped = tag.value
    getattr(Probe, _LOOKUP, None)
    again = tag.value
    getattr(Probe, _LOOKUP, None)
    kept = tag.value
    ok = first != 0 and dropped == 0 and again not in (0, first) and kept == again
    return offset if ok else None


class _Versions:
    """The versions of the objects given to :meth:`watch` (read as ``field`` at ``offset``), and
    which of them changed; ``offset`` ``None``: the probe failed, nothing is read."""

    field: type = ctypes.c_uint

    def __init__(self, probe: Callable[[], int | None]) -> None:
        try:
            self.offset = probe()
        except Exception:  # noqa: BLE001 - an interpreter laid out otherwise: no versions
            self.offset = None
        self.working = self.offset is not None
        self.views: dict[int, tuple[object, ctypes._SimpleCData, int]] = {}  # an id: it, its view, as read

    def _refresh(self, obj: object) -> None:
        """Make the version current before it is read (a class's tag is given on a lookup)."""

    def watch(self, objects: Iterable[object]) -> None:
        """Read (again) the versions of ``objects``: they are the ones compared from now on."""
        if not self.working:
            return
        for obj in objects:
            held = self.views.get(id(obj))
            view = held[1] if held is not None and held[0] is obj else None
            if view is None:
                view = self.field.from_address(id(obj) + self.offset)  # type: ignore[operator]
            self._refresh(obj)
            self.views[id(obj)] = (obj, view, view.value)

    def changed(self) -> list:
        """The watched objects written to since their versions were read (read again for the next
        call: each write is reported once)."""
        if not self.working:
            return []
        found = [obj for obj, view, was in self.views.values() if view.value != was]
        self.watch(found)
        return found


class TypeTags(_Versions):
    """Classes' version tags: a write drops a class's tag, a lookup gives it a new one."""

    def __init__(self) -> None:
        super().__init__(_tag_offset)

    def _refresh(self, obj: object) -> None:
        getattr(obj, _LOOKUP, None)


def _dict_version_offset() -> int | None:
    """The offset of ``ma_version_tag`` in a dictionary, proved on a dictionary made for it."""
    probe = {"a": 1, "b": 2}
    base = id(probe)
    if ctypes.c_ssize_t.from_address(base + 2 * _WORD).value != len(probe):  # ``ma_used``
        return None
    version = ctypes.c_uint64.from_address(base + 3 * _WORD)
    first = version.value
    probe["a"] = 3
    second = version.value
    _ = probe["a"], len(probe), list(probe)
    read = version.value
    del probe["b"]
    third = version.value
    ok = second not in (0, first) and read == second and third not in (0, second)
    return 3 * _WORD if ok else None


class DictTags(_Versions):
    """Dictionaries' versions (PEP 509)."""

    field = ctypes.c_uint64

    def __init__(self) -> None:
        super().__init__(_dict_version_offset)


_IMMUTABLE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (CPython 3.10 and later): ``type.__setattr__`` refuses
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, not a static type


def _flags_offset() -> int | None:
    """The offset of ``tp_flags`` in a type object, proved on a class made for it: the bit set
    there, ``setattr`` on the class is refused and its attributes still read."""

    class Probe:
        kept = 1

    base = id(Probe)
    offset = _find_flags(Probe)
    if offset is None:
        return None
    flags = ctypes.c_ulong.from_address(base + offset)
    flags.value |= _IMMUTABLE
    try:
        Probe.kept = 2
    except TypeError:
        return offset if Probe.kept == 1 and Probe().kept == 1 else None
    return None


def freeze(classes: Iterable[type]) -> bool:
    """Make ``classes`` immutable as the built-in types are: ``setattr`` and ``del`` on them raise
    ``TypeError``. The grader's own classes in the child, once set up: their methods are what every
    check runs (``_Versions.changed`` made to say "nothing changed" blinded the watch that would have
    named it), and CPython 3.11 raises no audit event for a class attribute set. False where the
    probe fails (nothing is changed)."""
    try:
        offset = _flags_offset()
    except Exception:  # noqa: BLE001 - an interpreter laid out otherwise
        offset = None
    if offset is None:
        return False
    for cls in classes:
        if isinstance(cls, type) and cls.__flags__ & _HEAPTYPE:
            ctypes.c_ulong.from_address(id(cls) + offset).value |= _IMMUTABLE
    return True
