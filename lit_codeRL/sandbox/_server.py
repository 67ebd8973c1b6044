"""Trusted fork server: one per sandbox worker, runs untrusted programs in forked children.

This file is executed as a script (``python -I -S -B _server.py CONFIG_JSON``), possibly inside a
bubblewrap or apptainer container, so it imports nothing from ``lit_codeRL`` and only the standard
library. Protocol with the parent (the trainer side), over the server's stdin/stdout:
4-byte big-endian length + JSON object, one request -> one reply; the server first sends
``{"ready": true}``.

Per job the server forks a child that sets rlimits, moves into a fresh working directory, points
fds 0/1/2 at files there, and runs :func:`_run_untrusted`. The child reports the program's status
and each test's outcome over a pipe as HMAC-SHA256-authenticated records keyed by a per-job random
key; the server (a separate process the untrusted code cannot touch in memory) enforces the wall
clock, kills every descendant, verifies the records and builds the result. See the threat model
in ``lit_codeRL/sandbox/__init__.py``.
"""

from __future__ import annotations

import bisect  # noqa: F401
import builtins
import collections  # noqa: F401
import copy  # noqa: F401
import errno
import functools  # noqa: F401
import gc
import hashlib
import heapq  # noqa: F401
import hmac
import io
import itertools  # noqa: F401
import json
import math  # noqa: F401
import operator  # noqa: F401
import os
import random  # noqa: F401
import re  # noqa: F401
import resource
import select
import signal
import stat
import string  # noqa: F401
import struct
import sys
import time
import traceback

# bisect ... string above are preloaded so forked children do not pay for them per program (fork
# shares the pages) and so their module dicts are in the pristine snapshot restored before tests.
_HDR = struct.Struct(">I")
_RESULT_FD = 3
_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


# ----------------------------------------------------------------------------------------------
# framing with the parent
# ----------------------------------------------------------------------------------------------


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd: int) -> dict:
    (n,) = _HDR.unpack(_read_exact(fd, _HDR.size))
    return json.loads(_read_exact(fd, n))


def _send(fd: int, obj: dict) -> None:
    data = json.dumps(obj).encode()
    data = _HDR.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


# ----------------------------------------------------------------------------------------------
# the untrusted side (runs in the forked child)
# ----------------------------------------------------------------------------------------------


def _dict_version_reader():  # noqa: ANN202 - returns a ctypes getter or None
    """A C-level reader of a dict's PEP 509 version tag (``ma_version_tag``), or ``None``.

    CPython bumps the tag on every mutation of a dict (it exists for global-variable guards), so
    "tag unchanged" proves "dict unchanged" without touching a single value (no refcount writes,
    so no copy-on-write page faults in a forked child). The layout is probed here on a scratch
    dict against every mutation path; any mismatch (another interpreter, a free-threaded build, a
    version that stops bumping the tag) returns ``None`` and restoring falls back to rewriting
    every module dict before every test. Forging a tag needs raw memory writes (ctypes), which the
    threat model already leaves undefended.
    """
    try:
        import ctypes
    except ImportError:
        return None
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        return None
    word = ctypes.sizeof(ctypes.c_void_p)
    if word != 8 or getattr(sys, "_is_gil_enabled", lambda: True)() is False:
        return None
    # PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag. The getter is the C descriptor
    # of _SimpleCData, so patching the c_uint64/c_ssize_t classes cannot change what it reads.
    get = ctypes._SimpleCData.__dict__["value"].__get__

    def views(d: dict) -> tuple:
        return ctypes.c_ssize_t.from_address(id(d) + 2 * word), ctypes.c_uint64.from_address(id(d) + 3 * word)

    try:
        d = {f"k{i}": i for i in range(10)}
        used, tag = views(d)
        g: dict = {}
        mutations = (
            lambda: d.__setitem__("k0", object()),
            lambda: d.__setitem__("new", 1),
            lambda: d.__delitem__("new"),
            lambda: d.pop("k1"),
            lambda: d.popitem(),
            lambda: d.setdefault("z", 2),
            lambda: d.update({"k2": object()}),
            lambda: d.__ior__({"k3": object()}),
            lambda: d.clear(),
            lambda: d.update({"a": 1, "b": 2}),
        )
        last = get(tag)
        for mutate in mutations:
            mutate()
            now = get(tag)
            if now == last or get(used) != len(d):
                return None
            last = now
        _, gtag = views(g)
        before = get(gtag)
        exec("x = 1", g)  # STORE_NAME/STORE_GLOBAL on a namespace dict
        if get(gtag) == before:
            return None
        import types

        mod = types.ModuleType("probe")
        _, mtag = views(mod.__dict__)
        before = get(mtag)
        mod.attr = object()  # module setattr, the usual way programs monkeypatch
        if get(mtag) == before:
            return None
    except Exception:  # noqa: BLE001 - any surprise means: do not trust the tag
        return None

    def reader(dicts: list[dict]) -> tuple:
        """(getter, views): ``getter(views[i])`` is the current version tag of ``dicts[i]``. The
        views are allocated back to back so reading them all touches only a few pages."""
        return get, [ctypes.c_uint64.from_address(id(d) + 3 * word) for d in dicts]

    return reader


_STATE: dict = {}
"""Server-side snapshot, filled once (a dict *value*, so filling it does not bump a module dict)."""


def _pristine() -> dict:
    """What a program could use to fool a test, and a copy of it: ``sys.modules`` and every loaded
    module's ``__dict__`` (builtins and ``sys`` included). Taken once in the server, which never runs
    untrusted code, so forked children inherit a snapshot no program has touched.

    Keys: ``dicts`` and ``snaps`` (parallel lists), ``views`` and ``tags`` (version-tag views and
    their values at copy time; ``views`` is ``None`` without a usable version tag), ``get``
    (reads a view), ``pack`` (packs a list of tags into bytes, so comparing with ``tags`` touches one
    object instead of one int per dict).
    """
    if not _STATE:
        reader = _dict_version_reader()
        mods = {n: m for n, m in sys.modules.items() if m is not None}
        dicts = {id(sys.modules): (sys.modules, mods)}
        for m in mods.values():
            d = getattr(m, "__dict__", None)
            if type(d) is dict and id(d) not in dicts:
                dicts[id(d)] = (d, dict(d))
        pairs = list(dicts.values())
        snap: dict = {"dicts": [d for d, _ in pairs], "snaps": [c for _, c in pairs], "views": None}
        if reader is not None:
            get, views = reader(snap["dicts"])
            pack = struct.Struct(f"{len(views)}Q").pack
            snap.update(views=views, tags=pack(*[get(v) for v in views]), get=get, pack=pack)
        _STATE.update(snap)
    return _STATE


_WARM_SOURCE = '''
import re, math
from collections import defaultdict
class A(object):
    """doc"""
    x: int = 1
    def m(self, a, *b, c=2, **d):
        return [i * i for i in range(a) if i % 2], {k: v for k, v in d.items()}, (lambda y: y + 1)(a)
def f(s, n=0):
    total, seen = 0, set()
    for i, ch in enumerate(s):
        if ch in seen or not ch.isalpha():
            continue
        seen.add(ch); total += ord(ch) ** 2 // 3 - n
    while n > 0:
        n -= 1
    try:
        with open("x") as fh:
            data = fh.read()
    except (OSError, ValueError) as e:
        data = f"{e!r:>10} {total:.2f}"
    finally:
        pass
    return sorted(seen, key=lambda c: (-ord(c), c))[::-1], data, s[1:-1], not total and n or None
'''


def _warm_compiler() -> None:
    """Compile a few representative programs once in the server, before any child is forked.

    The first ``compile()`` in a process sets up the parser's and compiler's memory (measured here:
    1.5 ms and ~240 page faults for an MBPP-sized program, against 0.08 ms for the next one). Done
    in every child it was the largest single cost of a short program; done here, children inherit
    it and their first compile costs ~0.3 ms. Only trusted source is compiled and nothing runs.
    """
    for _ in range(4):
        compile(_WARM_SOURCE, "<warm>", "exec", dont_inherit=True)
        compile("f([1, 2, (3, 4)], 'a', b=None) == {'k': [1.5, -2]}", "<warm>", "eval", dont_inherit=True)


class ResultNotPlainData(TypeError):
    """A value test's expression returned something that is not plain builtin data."""


def _value_encoder(cap: int):  # noqa: ANN202, C901 - returns the encoder closure
    """An encoder of a test expression's value as tagged JSON text, built before any untrusted code
    runs from C-level callables a program cannot rebind (``int.__repr__``, ``float.hex``...).

    Plain data only: None, bool, int, float, complex, str, bytes/bytearray, list, tuple, dict, set,
    frozenset, nested; a subclass of one of these is read through the base type's own C methods
    (an ``OrderedDict`` as a dict, a namedtuple as a tuple), so no method the program defined runs
    and no ``__eq__`` it wrote survives. Anything else, a structure nested deeper than 100 levels or
    an encoding longer than ``cap`` characters raises: the test fails.
    """
    from _json import encode_basestring_ascii as enc_str

    _type, _issub, _len, _join = type, issubclass, len, "".join
    _int, _bool, _float, _complex, _strt = int, bool, float, complex, str
    _bytes, _bytearray, _list, _tuple, _dict, _set, _frozenset = (
        bytes,
        bytearray,
        list,
        tuple,
        dict,
        set,
        frozenset,
    )
    int_repr, float_hex, bytes_hex, bytearray_hex = int.__repr__, float.hex, bytes.hex, bytearray.hex
    str_copy = str.__str__
    real, imag = complex.__dict__["real"].__get__, complex.__dict__["imag"].__get__
    iters = (
        (_list, '["l"', list.__iter__),
        (_tuple, '["t"', tuple.__iter__),
        (_set, '["s"', set.__iter__),
        (_frozenset, '["z"', frozenset.__iter__),
    )
    dict_items = dict.items
    _rne = ResultNotPlainData

    def encode(value: object) -> str:
        out: list[str] = []
        size = [0]

        def put(s: str) -> None:
            size[0] += _len(s)
            if size[0] > cap:
                raise _rne(f"value larger than {cap} characters")
            out.append(s)

        def walk(v: object, depth: int) -> None:
            if depth > 100:
                raise _rne("value nested deeper than 100 levels")
            t = _type(v)
            if v is None:
                put("null")
            elif t is _bool:
                put("true" if v is True else "false")
            elif _issub(t, _int):
                put(int_repr(v))
            elif _issub(t, _float):
                put('["f","' + float_hex(v) + '"]')
            elif _issub(t, _strt):
                put(enc_str(str_copy(v)))
            elif _issub(t, _bytes):
                put('["b","' + bytes_hex(v) + '"]')
            elif _issub(t, _bytearray):
                put('["b","' + bytearray_hex(v) + '"]')
            elif _issub(t, _complex):
                put('["c","' + float_hex(real(v)) + '","' + float_hex(imag(v)) + '"]')
            elif _issub(t, _dict):
                put('["d"')
                for k, item in dict_items(v):
                    put(",")
                    walk(k, depth + 1)
                    put(",")
                    walk(item, depth + 1)
                put("]")
            else:
                for base, tag, it in iters:
                    if _issub(t, base):
                        put(tag)
                        for item in it(v):
                            put(",")
                            walk(item, depth + 1)
                        put("]")
                        return
                raise _rne(f"{t.__name__} is not plain data (builtin types only)")

        walk(value, 0)
        return _join(out)

    return encode


def _baseline() -> tuple:
    """``(dicts, snaps, views, tags, get)``: what :func:`_run_untrusted`'s ``restore()`` puts back.

    Runs in the child *before* its job arrives (a pre-forked child waits for it), so the page
    faults of this first read of every module dict's version tag are off the program's clock.
    """
    pristine = _pristine()
    dicts, snaps, views = pristine["dicts"], pristine["snaps"], pristine["views"]
    get, tags = pristine.get("get"), None
    if views is not None:
        # The baseline restore() puts back: the server's copy of each dict, unless the dict moved
        # since (nothing in this child should move one before the program; copy it then anyway).
        tags = list(map(get, views))
        if pristine["pack"](*tags) != pristine["tags"]:
            old = memoryview(pristine["tags"]).cast("Q")
            snaps = [
                s if t == old[i] else dict(d)
                for i, (d, s, t) in enumerate(zip(dicts, snaps, tags, strict=True))
            ]
    return dicts, snaps, views, tags, get


def _run_untrusted(job: dict, key: bytes, wfd: int, baseline: tuple) -> None:
    """Compile and run the program, then each test, reporting authenticated records on ``wfd``.

    Everything this function needs after the untrusted code started is captured in locals first:
    C-level callables (``os.write``, ``exec``, the sha256 constructor) that a program cannot
    rebind for us, and a pristine copy of every loaded module's dict (builtins included) that is
    put back before each test (``baseline``, from :func:`_baseline`).
    """
    _write, _exit, _exec, _compile, _str, _type = os.write, os._exit, exec, compile, str, type
    _eval = eval
    _isinstance, _len, _base_exc, _sysexit = isinstance, len, BaseException, SystemExit
    _sha256, _settrace, _setprofile = hashlib.sha256, sys.settrace, sys.setprofile
    _update, _list, _map, _range = dict.update, list, map, range
    dicts, snaps, views, tags, _get = baseline
    k = key.ljust(64, b"\0")
    ipad = bytes(b ^ 0x36 for b in k)
    opad = bytes(b ^ 0x5C for b in k)
    del key, k
    seq = [0]
    stdout, stderr = sys.stdout, sys.stderr

    def record(kind: bytes, *fields: bytes) -> None:
        body = b"|".join((_str(seq[0]).encode(), kind) + fields)
        seq[0] += 1
        mac = _sha256(opad + _sha256(ipad + body).digest()).hexdigest().encode()
        line = mac + b" " + body + b"\n"
        while line:
            line = line[_write(wfd, line) :]

    def hexs(s: object) -> bytes:
        return _str(s)[:2000].encode("utf-8", "replace").hex().encode()

    def describe(e: BaseException) -> tuple[bytes, bytes]:
        try:
            name = _type(e).__name__
            msg = _str(e)
        except _base_exc:  # a hostile __str__ must not stop the report
            name, msg = "Exception", "<unprintable>"
        return hexs(name), hexs(msg)

    def restore() -> None:
        # C-level updates (no comparison ever calls a program-supplied __eq__), only of dicts whose
        # version tag moved: untouched dicts cost one read and no copy-on-write fault. Names a
        # program *added* to a module stay (harmless to grading).
        _settrace(None)
        _setprofile(None)
        if views is None:
            for i in _range(_len(dicts)):
                _update(dicts[i], snaps[i])
            return
        now = _list(_map(_get, views))
        if now != tags:
            for i in _range(_len(views)):
                if now[i] != tags[i]:
                    _update(dicts[i], snaps[i])
                    tags[i] = _get(views[i])

    def flush() -> None:
        for f in (stdout, stderr):
            try:
                f.flush()
            except _base_exc:
                pass

    def report_traceback(e: BaseException) -> None:
        try:
            stderr.write("".join(traceback.format_exception(e)[-20:]))
        except _base_exc:
            pass

    encode = _value_encoder(int(job.get("max_value_bytes") or 1 << 20))
    code: str = job["code"]
    tests: list[str] = job["tests"]
    value_tests = frozenset(job.get("value_tests") or ())
    ns: dict = {"__name__": "__main__", "__builtins__": builtins}
    try:
        prog = _compile(code, "<program>", "exec", dont_inherit=True, optimize=0)
    except _base_exc as e:  # SyntaxError, or ValueError for NUL bytes
        record(b"P", b"syntax", *describe(e))
        record(b"E")
        flush()
        _exit(0)
    try:
        compiled = [
            _compile(t, f"<test {i}>", "eval" if i in value_tests else "exec", dont_inherit=True, optimize=0)
            for i, t in enumerate(tests)
        ]
        setup = _compile(job.get("setup_code") or "", "<setup>", "exec", dont_inherit=True, optimize=0)
    except _base_exc as e:
        record(b"P", b"badtest", *describe(e))
        record(b"E")
        flush()
        _exit(0)
    status = b"ok"
    err = (b"", b"")
    try:
        _exec(prog, ns)
    except _sysexit as e:
        # sys.exit(0) / exit() is a normal end of a script; tests still run on its definitions.
        if e.code not in (None, 0):
            status, err = b"error", describe(e)
    except _base_exc as e:
        status, err = b"error", describe(e)
        report_traceback(e)
    restore()
    flush()
    if status == b"ok" and setup.co_code:
        try:
            _exec(setup, ns)
        except _base_exc as e:
            status, err = b"error", describe(e)
            report_traceback(e)
    record(b"P", status, *err)
    if status == b"ok":
        setup_names = dict(ns)
        for i, t in enumerate(compiled):
            restore()
            tns = dict(setup_names)
            tns["__builtins__"] = builtins
            ok, terr = b"1", (b"", b"")
            if i in value_tests:
                # Only the expression runs here; its value goes out as plain data and the trusted
                # side compares it with an expected value this process never held.
                try:
                    value = encode(_eval(t, tns))
                except _base_exc as e:
                    ok, terr = b"0", describe(e)
                else:
                    record(b"V", _str(i).encode(), value.encode().hex().encode())
                    continue
            else:
                try:
                    _exec(t, tns)
                except _base_exc as e:
                    ok, terr = b"0", describe(e)
            record(b"T", _str(i).encode(), ok, *terr)
    flush()
    record(b"E")
    _exit(0)


def _child_main(cfg: dict, workdir: str, jfd: int, wfd: int) -> None:
    """In a child forked *before* its job: isolate as far as the OS lets an unprivileged process,
    read the job (32-byte record key, then the job's JSON) from ``jfd`` until EOF, then run it.

    Signal dispositions, the environment, ``sys.argv`` and the ``sys.std*`` wrappers (over fds
    0/1/2) were set once in the server (:func:`_prepare_server`) and are inherited, so a child only
    does what differs per program: session, fds, limits. A child whose job never comes (the
    server died or stopped) reads EOF and exits.
    """
    try:
        for sig in _SERVER_IGNORES:  # the server's shield is not the program's
            if sig not in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
        os.setsid()  # own session and process group: killpg reaches everything it starts
        if cfg.get("drop_to") is not None:
            # The server's uid switch left this process non-dumpable, so its /proc/self files
            # belong to the namespace's root, which the program is not here (elsewhere it is
            # their owner): make them its own again, as they are for any program.
            import ctypes

            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE = 1
        os.chdir(workdir)
        baseline = _baseline()
        data = bytearray()
        while True:
            chunk = os.read(jfd, 1 << 16)
            if not chunk:
                break
            data += chunk
        if len(data) <= 32:
            os._exit(0)
        key, job = bytes(data[:32]), json.loads(bytes(data[32:]))
        del data
        stdin_path = os.path.join(workdir, ".stdin") if job.get("stdin") is not None else os.devnull
        fd0 = os.open(stdin_path, os.O_RDONLY)
        fd1 = os.open(os.path.join(workdir, ".stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        fd2 = os.open(os.path.join(workdir, ".stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for src, dst in ((fd0, 0), (fd1, 1), (fd2, 2), (wfd, _RESULT_FD)):
            os.dup2(src, dst)
        os.closerange(_RESULT_FD + 1, 1 << 16)  # parent pipes, pidfds, everything else
        timeout = float(job["timeout_s"])
        limits = [
            (resource.RLIMIT_CPU, int(timeout) + 1, int(timeout) + 2),
            (resource.RLIMIT_FSIZE, cfg["max_output_bytes"], cfg["max_output_bytes"]),
            (resource.RLIMIT_NOFILE, cfg["max_open_files"], cfg["max_open_files"]),
            (resource.RLIMIT_NPROC, cfg["max_processes"], cfg["max_processes"]),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if cfg["memory_mb"]:
            mem = cfg["memory_mb"] << 20
            limits += [(resource.RLIMIT_AS, mem, mem), (resource.RLIMIT_DATA, mem, mem)]
        for which, soft, hard in limits:
            try:
                resource.setrlimit(which, (soft, hard))
            except (ValueError, OSError):
                pass
        _run_untrusted(job, key, _RESULT_FD, baseline)
    except BaseException:
        pass
    os._exit(0)


class _Forked:
    """A child forked ahead of its job: its pid, pidfd, the job pipe and the result pipe."""

    def __init__(self, cfg: dict) -> None:
        jr, self.jw = os.pipe()
        self.rfd, wfd = os.pipe()
        gc.freeze()  # children then never touch (copy-on-write) the server's objects when collecting
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - child
            os.close(self.jw)
            os.close(self.rfd)
            _child_main(cfg, cfg["workdir"], jr, wfd)
            os._exit(0)
        os.close(jr)
        os.close(wfd)
        os.set_blocking(self.rfd, False)
        self.pidfd = os.pidfd_open(self.pid)

    def send(self, key: bytes, job: dict) -> None:
        """Hand the job over (blocking: the child reads while we write) and close the pipe."""
        data = memoryview(key + json.dumps(job).encode())
        try:
            while data:
                data = data[os.write(self.jw, data) :]
        finally:
            self.close("jw")

    def close(self, *names: str) -> None:
        """Close these of our fds (``jw``, ``rfd``, ``pidfd``), each once."""
        for name in names:
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)

    def discard(self) -> None:
        """Kill and reap the child (its job never came, or running it failed) and close our fds."""
        self.close("jw", "rfd", "pidfd")
        _kill_tree(os.getpid(), also=[self.pid])


def _prepare_server(workdir: str) -> None:
    """Per-process state every child inherits, set once here instead of once per program.

    Also makes the server's own ``sys`` what the pristine snapshot records, so a child changes no
    module dict before the program runs (and restoring costs nothing when the program did not).
    """
    # The server ignores every signal a program could send it (see _SERVER_IGNORES); each child
    # puts the defaults back. SIGPIPE stays ignored in both (Python's default) so a program writing
    # to a closed pipe gets BrokenPipeError and the server's own write to a dead parent raises and
    # ends the server. SIGXFSZ stays ignored in both: EFBIG -> OSError -> OUTPUT_LIMIT.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in _SERVER_IGNORES:
        signal.signal(sig, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
    )
    # Wrappers over fds 0/1/2, never used by the server (it talks over dup'ed fds): a child dup2s
    # its files onto 0/1/2 and finds fresh, empty, ready streams.
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="replace"
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace"
    )
    sys.argv = ["main.py"]


# ----------------------------------------------------------------------------------------------
# the trusted side (the server loop)
# ----------------------------------------------------------------------------------------------


def _descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (a /proc scan; no psutil)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the comm field may contain spaces and parens: ppid is the 2nd field after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields and fields[0] != b"Z":
            parent[int(name)] = int(fields[1])
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    out, stack = [], [root]
    while stack:
        for c in children.get(stack.pop(), ()):
            out.append(c)
            stack.append(c)
    return out


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _sigkill(pids: list[int] | set[int]) -> None:
    """SIGKILL each of ``pids``; one that is already gone is no error."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill_tree(root: int, pgid: int | None = None, also: list[int] | set[int] = ()) -> None:
    """SIGKILL process group ``pgid``, the pids ``also`` and every process below ``root`` (and
    ``root`` itself unless it is this process), until no process is left below ``root``.

    The one process-tree kill of the sandbox: the server runs it on itself after every job, the
    pool on a worker it stops. The server is a child subreaper, so daemonized grandchildren
    (double fork + setsid) are reparented to it instead of escaping to init, and it reaps them
    here; killed processes cannot fork any more, so the loop converges even against a fork bomb
    (which the pids limit bounds anyway). A ``root`` that is another process dies in the first
    round and its orphans leave its tree, so its tree is listed before anything is killed.
    """
    own = root == os.getpid()
    victims = [] if own else [root, *also, *_descendants(root)]
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    if own:
        try:  # fast path: with the subreaper, no child at all means no descendant at all
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                pass
        except ChildProcessError:
            _sigkill(also)
            return
        victims = [*also, *_descendants(root)]
    for _ in range(1000):
        if not victims:
            break
        _sigkill(victims)
        if own:
            _reap()
        time.sleep(0.001)
        victims = _descendants(root)
    if own:
        _reap()


def _parse_records(data: bytes, key: bytes, n_tests: int, value_tests: frozenset = frozenset()) -> dict:
    """Verify the child's records; any forged, garbled, duplicated or reordered line is tampering."""
    out: dict = {"program": None, "tests": {}, "values": {}, "end": False, "tampered": False}
    expected_seq = 0
    for line in data.split(b"\n"):
        if not line:
            continue
        mac, _, body = line.partition(b" ")
        good = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(mac, good):
            out["tampered"] = True
            return out
        parts = body.split(b"|")
        try:
            seq, kind = int(parts[0]), parts[1]
            fields = [p.decode() for p in parts[2:]]
        except (ValueError, IndexError, UnicodeDecodeError):
            out["tampered"] = True
            return out
        if seq != expected_seq or out["end"]:
            out["tampered"] = True
            return out
        expected_seq += 1

        def unhex(h: str) -> str:
            return bytes.fromhex(h).decode("utf-8", "replace")

        if kind == b"P" and out["program"] is None and len(fields) == 3:
            out["program"] = (fields[0], unhex(fields[1]), unhex(fields[2]))
        elif kind == b"T" and out["program"] is not None and len(fields) == 4:
            i = int(fields[0])
            if i != len(out["tests"]) or i >= n_tests:
                out["tampered"] = True
                return out
            out["tests"][i] = (fields[1] == "1", unhex(fields[2]), unhex(fields[3]))
        elif kind == b"V" and out["program"] is not None and len(fields) == 2:
            i = int(fields[0])
            if i != len(out["tests"]) or i >= n_tests or i not in value_tests:
                out["tampered"] = True
                return out
            # provisionally passed: the trusted side compares the value with the expected one
            out["tests"][i] = (True, "", "")
            out["values"][str(i)] = unhex(fields[1])
        elif kind == b"E" and not fields:
            out["end"] = True
        else:
            out["tampered"] = True
            return out
    return out


def _read_capped(path: str, cap: int) -> tuple[str, int]:
    """The first ``cap`` bytes of the program's output file ``path`` (decoded) and its size.

    The program may have replaced the file: a FIFO blocked the server's ``open`` for good (no
    writer is left once the program's processes are killed) until the pool gave up on the worker,
    and a symlink had the server read what it points to (its own ``/proc/self/fd/3``: the job
    channel). So it is opened without following a link and without blocking, and only a regular
    file is read; anything else is no output."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "", 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "", 0
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(cap)
    except OSError:
        return "", 0
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace"), st.st_size


def _rmtree(path: str) -> None:
    """Remove the workdir, fixing permissions a program may have removed (chmod 000 dirs)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.chmod(p, 0o700)
                    os.rmdir(p)
            except OSError:
                _rmtree_force(p)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _rmtree_force(path: str) -> None:
    try:
        os.chmod(path, 0o700)
        _rmtree(path)
    except OSError:
        pass


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        _rmtree_force(path)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _reset_work_root(root: str, workdir: str, scratch: list[str]) -> None:
    """Leave ``root`` holding only an empty ``workdir`` and every ``scratch`` directory (a
    container's own /tmp, /dev/shm) holding nothing but the way to ``root``: whatever a program
    wrote, renamed, chmodded or deleted there goes or comes back, so nothing carries over to the
    next program. One listing per directory, so an ordinary job costs a few ``listdir`` calls and
    the unlinks of its output files."""
    keep = {os.path.join(d, os.path.relpath(root, d).split(os.sep)[0]) for d in scratch if _inside(root, d)}
    for d in scratch:
        try:
            os.chmod(d, 0o700)
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if path not in keep:
                _remove(path)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)  # a program may have deleted it, parents too
    except OSError:
        pass
    for path in (root, workdir):
        try:
            os.chmod(path, 0o700)
        except OSError:
            pass
    try:
        names = os.listdir(root)
    except OSError:
        names = []
    for name in names:
        path = os.path.join(root, name)
        if path == workdir and os.path.isdir(path) and not os.path.islink(path):
            try:
                inner = os.listdir(path)
            except OSError:
                inner = [""]  # unreadable: recreate it below
            for sub in inner:
                if sub:
                    _remove(os.path.join(path, sub))
        else:
            _remove(path)
    try:
        ok = os.path.isdir(workdir) and not os.path.islink(workdir) and not os.listdir(workdir)
    except OSError:
        ok = False
    if not ok:
        _remove(workdir)
        try:
            os.mkdir(workdir, 0o700)
        except OSError:
            pass  # the health check reports it and the pool replaces this worker


def _inside(path: str, d: str) -> bool:
    return path.startswith(d.rstrip("/") + "/")


def _on_path(root: str, p: str) -> bool:
    """Is ``p`` the work root or one of its ancestors (to be kept when emptying a scratch dir)?"""
    return p == root or _inside(root, p)


_RLIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]
_BASELINE: dict = {}
"""The server's own state at start (rlimits, priority, CPU affinity), compared after every job."""


def _snapshot_self() -> dict:
    return {
        "rlimits": [resource.getrlimit(r) for r in _RLIMITS],
        "priority": os.getpriority(os.PRIO_PROCESS, 0),
        "affinity": sorted(os.sched_getaffinity(0)),
    }


def _health(cfg: dict) -> list[str]:
    """What a program left damaged that would change how the *next* program runs; empty = healthy.

    Checked after the cleanup, so anything listed here is damage the server could not undo (a
    deleted scratch root it cannot recreate, its own limits lowered by ``prlimit``, a process it
    cannot kill, a full tmpfs): the pool then replaces this worker with a fresh one.
    """
    problems = []
    root, workdir = cfg["work_root"], cfg["workdir"]
    try:
        st = os.lstat(workdir)
        if not (os.path.isdir(workdir) and not os.path.islink(workdir)) or st.st_uid != os.getuid():
            problems.append("workdir replaced")
        elif os.listdir(workdir) or not os.access(workdir, os.W_OK | os.X_OK):
            problems.append("workdir not empty or not writable")
    except OSError as e:
        problems.append(f"workdir: {e}")
    for d in cfg["scratch"]:
        try:
            extra = [n for n in os.listdir(d) if not _on_path(root, os.path.join(d, n))]
            if extra:
                problems.append(f"{d} not cleaned: {extra[:3]}")
            fs = os.statvfs(d)
            need = min(cfg["min_free_bytes"], fs.f_blocks * fs.f_frsize // 2)
            if fs.f_bavail * fs.f_frsize < need or fs.f_favail < 64:
                problems.append(f"{d} full")
        except OSError as e:
            problems.append(f"{d}: {e}")
    try:
        os.waitpid(-1, os.WNOHANG)
        problems.append("a process survived the cleanup")
    except ChildProcessError:
        pass
    if _snapshot_self() != _BASELINE:
        problems.append("server limits, priority or affinity changed")
    return problems


_SIGNAL_NAMES = {int(v): v.name for v in signal.Signals}


def _run_job(job: dict, cfg: dict, child: _Forked) -> dict:
    t0 = time.monotonic()
    workdir = cfg["workdir"]
    if job.get("stdin") is not None:
        with open(os.path.join(workdir, ".stdin"), "w", encoding="utf-8") as f:
            f.write(job["stdin"])
    key = os.urandom(32)
    pid, pidfd, rfd = child.pid, child.pidfd, child.rfd
    child.send(key, job)  # an OSError here (the child is gone) is an infrastructure fault
    data = bytearray()
    status = None
    timed_out = False
    timeout = float(job["timeout_s"])
    deadline = t0 + timeout
    record_cap = (
        256 * 1024
        + 4096 * max(1, len(job["tests"]))
        + 2 * int(job.get("max_value_bytes") or 0) * len(job.get("value_tests") or ())
    )
    watch = [rfd, pidfd]
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(watch, [], [], remaining)
        if rfd in ready:
            try:
                chunk = os.read(rfd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk:
                data += chunk
                if len(data) > record_cap:  # a program spamming the result pipe
                    break
            elif chunk == b"":  # every writer closed it; wait for the exit status only
                watch = [pidfd]
        if pidfd in ready:
            _, status = os.waitpid(pid, 0)
            break
    wall = time.monotonic() - t0
    if status is None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    child.close("pidfd")
    # drain what the child wrote before it exited (non-blocking: an orphan may hold the pipe)
    while True:
        try:
            chunk = os.read(rfd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
        if len(data) > record_cap:
            break
    child.close("rfd")
    _kill_tree(os.getpid(), pgid=pid)
    cap = cfg["max_capture_bytes"]
    stdout, out_size = _read_capped(os.path.join(workdir, ".stdout"), cap)
    stderr, err_size = _read_capped(os.path.join(workdir, ".stderr"), cap)
    full_stdout = None
    if job.get("full_stdout") and out_size > cap:  # the trusted side compares it with the expected
        full_stdout, _ = _read_capped(os.path.join(workdir, ".stdout"), cfg["max_output_bytes"])
    _reset_work_root(cfg["work_root"], workdir, cfg["scratch"])

    n_tests = len(job["tests"])
    rec = _parse_records(bytes(data), key, n_tests, frozenset(job.get("value_tests") or ()))
    res = _verdict(
        rec,
        n_tests,
        timed_out=timed_out,
        term_sig=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        timeout_s=timeout,
        hit_output_cap=max(out_size, err_size) >= cfg["max_output_bytes"],
    )
    res.update(
        stdout=stdout, stderr=stderr, wall_time_s=wall, values={} if rec["tampered"] else rec["values"]
    )
    if full_stdout is not None:
        res["full_stdout"] = full_stdout
    return res


def _verdict(
    rec: dict, n_tests: int, *, timed_out: bool, term_sig: int | None, timeout_s: float, hit_output_cap: bool
) -> dict:
    """The verdict ladder: from the child's parsed records (:func:`_parse_records`), how it ended
    (``timed_out``, the signal that killed it) and whether its output reached the cap, to the
    ``verdict``, ``test_passed``, ``failed_test``, ``exception_type``, ``exception_message`` and
    ``signal`` fields of the result. Pure: no process, file or clock is touched.

    First match wins: tampering, timeout, a program-level memory/output limit, no program record
    (output cap, signal or early exit), the program's syntax/bad-test/runtime error, a missing test
    record, the first failing test (memory and output limits told apart), no end record, the output
    cap; otherwise passed.
    """
    test_passed = [bool(rec["tests"].get(i, (False,))[0]) for i in range(n_tests)]
    signal_name = _SIGNAL_NAMES.get(term_sig, str(term_sig)) if term_sig and not timed_out else None
    res: dict = {
        "verdict": "passed",
        "test_passed": test_passed,
        "failed_test": None,
        "exception_type": None,
        "exception_message": None,
        "signal": signal_name,
    }
    killed = f"killed by signal {signal_name}" if signal_name else "exited before reporting (os._exit?)"
    early = "Signal" if signal_name else "EarlyExit"

    def fail(verdict: str, etype: str | None = None, msg: str | None = None) -> dict:
        res["verdict"] = verdict
        res["exception_type"] = res["exception_type"] or etype
        res["exception_message"] = res["exception_message"] or msg
        if verdict != "passed" and res["failed_test"] is None:
            res["failed_test"] = next((i for i, p in enumerate(res["test_passed"]) if not p), None)
        return res

    if rec["tampered"]:
        res["test_passed"] = [False] * n_tests
        return fail("failed", "ProtocolViolation", "result channel was written by the program")
    if timed_out or term_sig == signal.SIGXCPU and not rec["end"]:
        return fail("timeout", "TimeoutError", f"exceeded {timeout_s:g} s")
    prog = rec["program"]
    if prog is not None and prog[1] in ("MemoryError",):
        return fail("memory_limit", prog[1], prog[2])
    if prog is not None and prog[1] == "OSError" and f"[Errno {errno.EFBIG}]" in prog[2]:
        return fail("output_limit", prog[1], prog[2])
    if prog is None:
        if hit_output_cap or term_sig == signal.SIGXFSZ:
            return fail("output_limit", "OutputLimit", "output cap exceeded")
        # a signal death is reported as what it is (res["signal"]); a SIGSEGV is not guessed to
        # be the memory limit (RLIMIT_AS shows up as MemoryError)
        return fail("runtime_error", early, killed)
    kind, etype, emsg = prog
    if kind == "syntax":
        return fail("syntax_error", etype, emsg)
    if kind == "badtest":
        return fail("sandbox_error", etype, f"a test does not compile: {emsg}")
    if kind == "error":
        return fail("runtime_error", etype, emsg)
    # program ran; grade the tests
    for i in range(n_tests):
        if i not in rec["tests"]:
            if hit_output_cap:
                return fail("output_limit", "OutputLimit", "output cap exceeded")
            return fail("failed", early, f"test {i}: {killed}")
    failures = [i for i in range(n_tests) if not test_passed[i]]
    if failures:
        i = failures[0]
        _, etype, emsg = rec["tests"][i]
        res["failed_test"] = i
        if etype == "MemoryError":
            return fail("memory_limit", etype, emsg)
        if etype == "OSError" and f"[Errno {errno.EFBIG}]" in emsg:
            return fail("output_limit", etype, emsg)
        return fail("failed", etype or None, emsg or None)
    if not rec["end"]:
        return fail("failed", early, f"no end record: {killed}")
    if hit_output_cap:
        return fail("output_limit", "OutputLimit", "output cap exceeded")
    return res


def _set_subreaper() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us
        # PR_SET_DUMPABLE=0: same-uid children cannot ptrace us or open /proc/<us>/fd/*
        libc.prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the /proc scan still finds attached descendants
        pass


def _layout() -> dict:
    """For the trainer side (``--layout``): where this interpreter's stdlib is and which files it
    maps once everything the server loads is loaded, so a bwrap worker binds exactly those."""
    import sysconfig

    _set_subreaper()
    _dict_version_reader()
    _value_encoder(1)
    maps = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                maps.add(parts[5].strip())
    paths = sysconfig.get_paths()
    return {
        "executable": sys.executable,
        "base_executable": getattr(sys, "_base_executable", None),
        "path": sys.path,
        "maps": sorted(maps),
        "site": [paths["purelib"], paths["platlib"]],
    }


_SERVER_IGNORES = [
    s
    for s in signal.Signals
    if s not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT)
    and s not in (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
]
"""Signals the server ignores, so a program signalling its parent (same uid) cannot end it; only
SIGKILL/SIGSTOP remain, and the pool replaces a server that dies or stops answering. (Fault
signals stay default: the kernel forces them anyway when they are real.)"""


def _drop_to(uid: int | None) -> None:
    """Become ``uid`` (as gid too, no groups) before anything else, where the trainer gave this
    sandbox a user namespace of its own (``userns.py``); the capabilities that allow it go too."""
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)


def main() -> None:
    if sys.argv[1:] == ["--layout"]:
        print(json.dumps(_layout()))
        return
    cfg = json.loads(sys.argv[1])
    _drop_to(cfg.get("drop_to"))
    _set_subreaper()
    # One working directory per worker, emptied after every program (see _reset_work_root).
    cfg["workdir"] = os.path.join(cfg["work_root"], "w")
    cfg.setdefault("scratch", [])
    cfg["min_free_bytes"] = 2 * cfg["max_output_bytes"] + (8 << 20)
    os.makedirs(cfg["workdir"], mode=0o700, exist_ok=True)
    # Keep the protocol fds away from 0/1 so nothing printed by accident corrupts the stream.
    rfd, wfd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _prepare_server(cfg["workdir"])
    _pristine()
    _warm_compiler()
    _BASELINE.update(_snapshot_self())
    problems = _health(cfg)
    _send(wfd, {"ready": not problems, "pid": os.getpid(), "health": problems})
    child: _Forked | None = None
    while True:
        if child is None and not problems:
            try:
                child = _Forked(cfg)  # ready before the job arrives: fork is off the clock
            except OSError:
                child = None  # retried with the job below
        try:
            job = _recv(rfd)
        except EOFError:
            break
        try:
            if child is None:
                child = _Forked(cfg)
            reply = _run_job(job, cfg, child)
        except Exception as e:  # noqa: BLE001 - report, never die silently
            # an infrastructure fault (the server could not set up or reap the run): the pool
            # retries the program on a fresh worker
            if child is not None:
                child.discard()
            reply = {
                "verdict": "sandbox_error",
                "infra": True,
                "exception_type": type(e).__name__,
                "exception_message": str(e),
            }
        child = None
        try:
            problems = reply["health"] = _health(cfg)
        except Exception as e:  # noqa: BLE001
            problems = reply["health"] = [f"health check failed: {e}"]
        _send(wfd, reply)
        if problems:
            break  # damaged: the pool starts a fresh worker instead of this one
    if child is not None:
        child.discard()


if __name__ == "__main__":
    main()
