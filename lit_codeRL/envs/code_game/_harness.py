"""The trusted harness of the code game's validity gate. Its *text* runs inside the sandbox.

Standard library only (the sandbox shows no ``lit_codeRL``), no import at module level (the inner
interpreter pays for nothing it does not use). Two halves:

* :func:`outer_main` is the sandbox's ``Program``: it runs in the sandbox's forked child, starts a
  fresh interpreter ``python -S -s -P -B`` whose ``PYTHONHASHSEED`` is the seed it was given (the
  worker itself runs ``-I``, which ignores that variable, and its children inherit the worker's
  one random seed: two runs on one worker would hash alike) and, for a ``malloc`` run,
  ``PYTHONMALLOC=malloc``, waits for it under the wall-clock
  limit, and turns its report into the sandbox's own channels: the program's output on stdout,
  any failure as an exception of a ``CodeGame*`` class, whose name comes back as
  ``ExecutionResult.exception_type``. Nothing the program prints is read as a verdict.
* :func:`inner_main` runs in that fresh interpreter, before any program code: it imports the
  allowed modules, compiles the program with a fixed filename, refuses it when its bytecode names
  a private or introspection attribute, replaces ``__import__`` (the program's and the real
  builtins') with a guard, swaps the dangerous builtins for refusing stubs, sends ``print`` to a
  bounded buffer, installs a ``sys.settrace`` step counter, ``exec``s the program and writes one
  report line on fd 1 (the program cannot write there: it has no ``sys``, ``os`` or ``open``).

A refusal (blocked import, banned builtin, step budget, output cap) sets a flag before it raises,
so a program that catches the exception is still refused.
"""


class CodeGameImportBlocked(Exception):
    """The program imported a module outside the allowed list (at run time)."""


class CodeGameBannedName(Exception):
    """The program called a banned builtin or its bytecode names a banned attribute (at run time)."""


class CodeGameStepBudget(Exception):
    """The program ran past ``max_steps`` traced steps, or removed the step counter."""


class CodeGameOutputLimit(Exception):
    """The program printed more than ``max_output_chars`` characters."""


class CodeGameProgramError(Exception):
    """The program raised; the message names the exception type."""


class CodeGameSyntaxError(Exception):
    """The program does not compile (reached only when the static check was skipped)."""


class CodeGameTimeout(Exception):
    """The program ran past ``timeout_s`` of wall-clock time."""


class CodeGameCrashed(Exception):
    """The program's interpreter died after the program started (a signal) without a report."""


class CodeGameHarnessFailure(Exception):
    """The harness itself failed (interpreter did not start, garbled report): never the program's
    fault; the gate reports ``sandbox_error``."""


class _Refused(BaseException):
    """Raised into the program by a refusing stub, the step counter and the output cap: a
    ``BaseException`` so that ``except Exception`` does not swallow it (and the flag is set anyway)."""


class _ImportRefused(ImportError):
    """Raised into the program by the import guard: an ``ImportError``, as a real missing module
    would be (the flag makes the program invalid even if it catches it)."""


_STATUS_EXCEPTIONS = {
    "import_blocked": CodeGameImportBlocked,
    "banned_name": CodeGameBannedName,
    "step_budget": CodeGameStepBudget,
    "output_limit": CodeGameOutputLimit,
    "error": CodeGameProgramError,
    "syntax": CodeGameSyntaxError,
    "infra": CodeGameHarnessFailure,
}


def outer_main(job: dict) -> None:
    """In the sandbox: run the program once in a fresh interpreter seeded with ``job["seed"]``."""
    import os
    import select
    import signal
    import sys
    import time

    nonce = os.urandom(12).hex()
    inner_cfg = dict(job["inner"], nonce=nonce, seed=int(job["seed"]))
    source = job["harness"] + f"\ninner_main({inner_cfg!r})\n"
    argv = [sys.executable, "-S", "-s", "-P", "-B", "-c", source]
    env = {"PYTHONHASHSEED": str(int(job["seed"])), "LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}
    if job.get("allocator") == "malloc":  # the C library's allocator: objects at other addresses
        env["PYTHONMALLOC"] = "malloc"
    try:
        os.set_inheritable(3, False)  # the sandbox's record pipe: not the inner interpreter's business
    except OSError:
        pass
    rfd, wfd = os.pipe()
    try:
        pid = os.posix_spawn(sys.executable, argv, env, file_actions=[(os.POSIX_SPAWN_DUP2, wfd, 1)])
    except OSError as e:
        raise CodeGameHarnessFailure(f"could not start the interpreter: {e}") from None
    finally:
        os.close(wfd)
    buf = bytearray()
    started = False
    deadline = time.monotonic() + float(job["startup_s"])
    cap = 64 * 1024 + 4 * int(job["inner"]["max_output_chars"])
    try:
        while True:
            if not started and buf[:2] == b"S\n":
                started = True
                deadline = time.monotonic() + float(job["timeout_s"])
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if started:
                    raise CodeGameTimeout(f"exceeded {job['timeout_s']:g} s")
                raise CodeGameHarnessFailure("the interpreter did not start in time")
            if not select.select([rfd], [], [], remaining)[0]:
                continue
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            buf += chunk
            if len(buf) > cap:
                raise CodeGameHarnessFailure("report larger than the output cap allows")
    finally:
        os.close(rfd)
        try:  # done or out of time either way; the sandbox kills the process group after us too
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        _, status = os.waitpid(pid, 0)
    data = bytes(buf[2:] if started else buf)
    head, newline, output = data.partition(b"\n")
    fields = head.decode("ascii", "replace").split("\t")
    if not newline or len(fields) != 4 or fields[0] != nonce:
        if started and os.WIFSIGNALED(status):
            raise CodeGameCrashed(f"killed by signal {os.WTERMSIG(status)}")
        if started:
            raise CodeGameCrashed(f"exited ({status}) without a report")
        raise CodeGameHarnessFailure(f"no report from the interpreter (status {status})")
    _, kind, info, steps = fields
    sys.stderr.write(f"codegame-steps {steps}\n")
    if kind == "ok":
        sys.stdout.write(output.decode("utf-8", "replace"))
        return
    if kind == "memory":
        raise MemoryError(info)
    raise _STATUS_EXCEPTIONS.get(kind, CodeGameHarnessFailure)(info)


def _shift_heap(seed: int, keep: list) -> None:
    """Fill ``keep`` (the caller keeps it alive) with objects that move every later allocation of
    the program by a ``seed``-dependent amount inside its memory page.

    A fresh interpreter running the same program allocates the same blocks in the same order, so
    the low bits of an object's address (inside its page; only the page is randomised) were the
    same in every run: ``repr(object())[-4:-1]``, the order of a set of objects (their hash is
    their address) or a generator's repr sliced past its ``0x`` printed the same thing under every
    hash seed, and passed the gate although no predictor can know them. Here each run (seed) takes
    a random number of blocks of every small-object size class (CPython's allocator: 16-byte
    classes up to 512 bytes, pools of a page) and gives half of them back in a random order, so both
    the next fresh block and the head of each class's free list (where the next allocation comes
    from) sit at other offsets in every run; a few blocks above 512 bytes shift the C heap. An
    output that depends on addresses then differs between runs and is refused as nondeterministic.
    Called last before the program runs: a block freed after it (allocated before it) is where
    the program's first allocation of that size would land.
    """
    state = [seed * 2 + 1]

    def draw(n: int) -> int:
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (state[0] >> 33) % n

    makers = [lambda n: object(), lambda n: (1 << 40) + n]  # the 16- and 32-byte classes
    makers += [lambda n, size=size: bytes(size - 33 - n % 16) for size in range(48, 513, 16)]  # 33 + len
    makers.append(lambda n: bytes(513 + 16 * n))  # malloc's heap
    blocks = [[make(draw(256)) for _ in range(8 + draw(256))] for make in makers]
    keep.append((state, draw, makers, blocks))  # nothing of ours is freed after the churn below
    for group in blocks:
        order = list(range(len(group)))
        keep.append(order)
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates: the free list's order is shuffled too,
            j = draw(i + 1)  # so the program's next blocks are not at ascending addresses either
            order[i], order[j] = order[j], order[i]
        for i in order[: len(order) // 2]:
            group[i] = None  # back on its class's free list


def inner_main(cfg: dict) -> None:  # noqa: C901 - one linear setup, kept in one place on purpose
    """In the fresh interpreter: guard, run and report the program (see the module docstring)."""
    import builtins
    import gc
    import os
    import sys

    write, exit_, settrace, gettrace, getframe = os.write, os._exit, sys.settrace, sys.gettrace, sys._getframe
    _type, _str, _issubclass = type, str, issubclass
    str_copy = str.__str__  # an exact str from a str subclass, without running any override of it
    nonce = cfg["nonce"]
    count = [0]
    flags: dict[str, str] = {}

    def report(kind: str, info: str = "", output: str = "") -> None:
        info = info.replace("\t", " ").replace("\n", " ")[:500]
        data = f"{nonce}\t{kind}\t{info}\t{count[0]}\n".encode() + output.encode("utf-8", "backslashreplace")
        while data:
            data = data[write(1, data) :]
        exit_(0)

    allowed = frozenset(cfg["allowed"])
    try:
        for name in sorted(allowed):
            __import__(name)  # import-time work happens here, trusted, before the lock
        import dis
    except BaseException as e:  # noqa: BLE001 - a missing allowed module is a configuration fault
        report("infra", repr(f"{type(e).__name__}: {e}"))
    module_type = _type(sys)

    try:
        code = compile(cfg["source"], cfg["filename"], "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report("syntax", type(e).__name__)
    except MemoryError:
        report("memory", "MemoryError")
    except BaseException as e:  # noqa: BLE001 - e.g. RecursionError in the compiler
        report("error", type(e).__name__)
    code_type = _type(code)

    # Every attribute the program can touch is named in its bytecode (it has no getattr): refuse
    # private and introspection attributes there, whatever the source looked like.
    banned_attributes = frozenset(cfg["banned_attributes"])
    attribute_ops = {
        "LOAD_ATTR",
        "LOAD_METHOD",
        "STORE_ATTR",
        "DELETE_ATTR",
        "IMPORT_FROM",
        "LOAD_SUPER_ATTR",
    }

    def refused(name: object) -> bool:
        return _type(name) is str and (name.startswith("_") or name in banned_attributes)

    def refused_attribute(co: object) -> str | None:
        match_class = False
        for ins in dis.get_instructions(co):
            if ins.opname in attribute_ops and refused(ins.argval):
                return ins.argval
            match_class = match_class or ins.opname == "MATCH_CLASS"
        for const in co.co_consts:
            if match_class and _type(const) is tuple:  # class patterns name attributes in a constant
                for item in const:
                    if refused(item):
                        return item
            if _type(const) is code_type:
                found = refused_attribute(const)
                if found is not None:
                    return found
        return None

    bad = refused_attribute(code)
    if bad is not None:
        report("banned_name", repr(bad))

    # What the program may import: a fresh module object per allowed name holding only its public,
    # non-module attributes (so ``re.enum.sys`` is no way to ``sys``), minus hidden members.
    hidden = {name: frozenset(members) for name, members in cfg["hidden_members"].items()}
    views: dict[str, object] = {}

    def view(name: str) -> object:
        if name in views:
            return views[name]
        mod = module_type(name)
        if name in allowed:
            for key, value in list(vars(sys.modules[name]).items()):
                if (
                    key.startswith("_")
                    or _issubclass(_type(value), module_type)
                    or key in hidden.get(name, ())
                ):
                    continue
                setattr(mod, key, value)
        for other in sorted(allowed):
            if other.startswith(name + "."):
                child = other[len(name) + 1 :].split(".")[0]
                setattr(mod, child, view(f"{name}.{child}"))
        views[name] = mod
        return mod

    prefixes = frozenset(a.rsplit(".", i)[0] for a in allowed for i in range(a.count(".") + 1))
    for name in sorted(prefixes):
        view(name)
    stdlib = os.path.dirname(dis.__file__) + os.sep
    real_import = builtins.__import__

    def trusted(filename: object) -> bool:
        # Standard-library code from files (and frozen stdlib modules). Code compiled from a string
        # (eval/exec in a library) gets "<string>" or the like, and the program's own code has
        # cfg["filename"]: neither can pass for a file under the stdlib directory.
        if _type(filename) is not str:
            return False
        if filename.startswith("<frozen "):
            return True
        return filename.startswith(stdlib) and "site-packages" not in filename

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002, ANN001, ANN202
        if trusted(getframe(1).f_code.co_filename):
            # a library's own (possibly lazy) import: the program does not choose its name
            return real_import(name, globals, locals, fromlist, level)
        if _type(name) is str and level == 0:
            if fromlist and name in prefixes:
                return views[name]
            if not fromlist and name in allowed:
                return views[name.split(".")[0]]
        flags.setdefault("import_blocked", repr(name)[:200])
        raise _ImportRefused(f"import of {name!r} is not allowed")

    def refusing_stub(name: str):  # noqa: ANN202
        def stub(*args: object, **kwargs: object) -> None:
            flags.setdefault("banned_name", repr(name))
            raise _Refused(f"{name} is not allowed")

        return stub

    safe_builtins: dict[str, object] = {
        key: value
        for key, value in vars(builtins).items()
        if not key.startswith("__") or key in ("__build_class__", "__debug__")
    }
    for name in cfg["banned_names"]:
        safe_builtins[name] = refusing_stub(name)
    safe_builtins["__import__"] = guarded_import
    builtins.__import__ = guarded_import  # library frames reach the guard too (and pass as trusted)

    max_output = int(cfg["max_output_chars"])

    class BoundedOutput:
        """``sys.stdout`` for the program: keeps what ``print`` writes, up to the cap."""

        def __init__(self) -> None:
            self.parts: list[str] = []
            self.size = 0

        def write(self, s: str) -> int:
            if _type(s) is not str:
                s = str_copy(s)  # print writes a str subclass as is (``sep=``, ``__str__``): no len() of it
            # a real UTF-8 stdout raises on a lone surrogate; writing it out escaped made up an
            # output (``\ud800``) that the program never prints outside the harness
            s.encode("utf-8")
            self.size += len(s)
            if self.size > max_output:
                flags.setdefault("output_limit", _str(self.size))
                raise _Refused("output cap exceeded")
            self.parts.append(s)
            return len(s)

        def flush(self) -> None:
            return None

    out = BoundedOutput()
    max_steps = int(cfg["max_steps"])

    def tracer(frame, event: str, arg: object):  # noqa: ANN001, ANN202
        # one step per trace event with per-opcode events on: about one per bytecode instruction.
        # Line events alone miss a loop that jumps to itself (``while True: pass`` on one line).
        n = count[0] + 1
        count[0] = n
        if event == "call":
            frame.f_trace_opcodes = True
        if n > max_steps:
            flags.setdefault("step_budget", _str(max_steps))
            raise _Refused("step budget exceeded")
        return tracer

    namespace = {"__name__": "__main__", "__builtins__": safe_builtins}
    padding: list = []  # a local of this frame: alive until the report
    _shift_heap(int(cfg["seed"]), padding)
    sys.stdout = out
    write(1, b"S\n")
    exc_type = None
    settrace(tracer)
    try:
        exec(code, namespace)
    except BaseException as e:  # noqa: BLE001 - everything the program raises is reported
        exc_type = _type(e)
    tracer_kept = gettrace() is tracer
    settrace(None)
    gc.disable()  # no finalizer of the program's runs past this point
    output = "".join(out.parts)
    for kind in ("banned_name", "import_blocked", "step_budget", "output_limit"):
        if kind in flags:
            report(kind, flags[kind], output)
    if exc_type is not None:
        # the type's own name, read through type's descriptor (a metaclass cannot fake it)
        name = str_copy(_type.__dict__["__name__"].__get__(exc_type))
        report("memory" if _issubclass(exc_type, MemoryError) else "error", repr(name), output)
    if not tracer_kept:
        # the counter was lost (an exception inside it, e.g. RecursionError, unsets it): the run
        # cannot be counted, so it does not count
        report("step_budget", "'step counter removed'", output)
    report("ok", "", output)
