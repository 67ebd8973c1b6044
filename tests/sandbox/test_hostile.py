"""Hostile programs: no escape, no false pass, no hang, nothing left behind, the caller unharmed.

Tests parametrized over every available backend (``sandbox`` fixture) check what *all* backends
promise: limits, cleanup and unforgeable grading. ``local`` is resource limits only, not
isolation, so the containment tests (network, host files, writes outside the workdir, kill(-1))
run against bwrap only.
"""

from __future__ import annotations

import os
import shutil
import socket
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from lit_codeRL.sandbox import Program, Verdict, cgroups, make_sandbox

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

WRONG_F = "def f(x):\n    return x - 1\n"
TESTS = ("assert f(1) == 2", "assert f(5) == 6")


def run(sb, code: str, tests=TESTS, **kw):
    return sb.run(Program(code=textwrap.dedent(code), tests=tuple(tests), **kw))


def assert_healthy(sb) -> None:
    """The sandbox still grades a correct and a wrong program right after the hostile one."""
    for _ in range(2):  # twice per worker (the pool hands them out in turn)
        good = sb.run_batch([Program(code="def f(x):\n    return x + 1\n", tests=TESTS)] * 4)
        bad = sb.run_batch([Program(code=WRONG_F, tests=TESTS)] * 4)
        assert all(r.verdict is Verdict.PASSED and r.retries == 0 for r in good), good
        assert all(r.verdict is Verdict.FAILED and r.test_passed == [False, False] for r in bad), bad


# ----------------------------------------------------------------------------------------------
# false-pass attempts (every backend)
# ----------------------------------------------------------------------------------------------

HACKS = {
    "sys_exit_before_asserts": WRONG_F + "import sys\nsys.exit(0)\n",
    "os_exit_before_asserts": WRONG_F + "import os\nos._exit(0)\n",
    # (``exit()`` itself is not defined under ``-S``: that hack could never have run)
    "raise_systemexit": WRONG_F + "raise SystemExit\n",
    "print_fake_success": WRONG_F
    + "print('PASSED'); print('All tests passed'); print('{\"passed\": true}')\n",
    "assertion_error_redefined": WRONG_F
    + "import builtins\nclass Nope(BaseException): pass\nbuiltins.AssertionError = Nope\nAssertionError = Nope\n",
    "builtins_dict_tampered": WRONG_F
    + "__builtins__.__dict__['AssertionError'] = type('X', (Exception,), {})\n"
    + "import builtins\nbuiltins.__dict__.clear()\n",
    "sys_exit_patched": WRONG_F + "import sys, os\nsys.exit = lambda *a: None\nos._exit = lambda *a: None\n",
    "os_write_swallowed": WRONG_F + "import os\nos.write = lambda fd, b: len(b)\n",
    "hashlib_patched": WRONG_F
    + "import hashlib, hmac\nhashlib.sha256 = lambda *a: hashlib.md5(*a)\nhmac.compare_digest = lambda a, b: True\n",
    "settrace_skips_asserts": WRONG_F
    + textwrap.dedent(
        """
        import sys
        def tracer(frame, event, arg):
            if frame.f_code.co_filename.startswith('<test'):
                frame.f_trace_lines = True
                def skip(fr, ev, a):
                    if ev == 'line':
                        try:
                            fr.f_lineno = fr.f_lineno + 1
                        except Exception:
                            pass
                    return skip
                return skip
            return None
        sys.settrace(tracer)
        """
    ),
    "fake_records_on_result_fd": WRONG_F
    + textwrap.dedent(
        """
        import os
        for fd in range(3, 20):
            for seq, body in enumerate([b'P|ok||', b'T|0|1||', b'T|1|1||', b'E']):
                try:
                    os.write(fd, b'0' * 64 + b' ' + str(seq).encode() + b'|' + body + b'\\n')
                except OSError:
                    pass
        """
    ),
    "fake_records_then_os_exit": WRONG_F
    + textwrap.dedent(
        """
        import os
        try:
            os.write(3, b'garbage\\n')
        finally:
            os._exit(0)
        """
    ),
    "systemexit_inside_test": "def f(x):\n    raise SystemExit(0)\n",
    "keyboardinterrupt_inside_test": "def f(x):\n    raise KeyboardInterrupt\n",
    "os_exit_inside_test": "import os\ndef f(x):\n    os._exit(0)\n",
    "close_result_fd": WRONG_F + "import os\nos.closerange(3, 1000)\n",
    "thread_writes_garbage": WRONG_F
    + textwrap.dedent(
        """
        import os, threading, time
        def spam():
            while True:
                try:
                    os.write(3, b'x' * 100 + b'\\n')
                except OSError:
                    return
                time.sleep(0.0005)
        threading.Thread(target=spam, daemon=True).start()
        time.sleep(0.01)
        """
    ),
    "math_isclose_patched": "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0.0\n",
    "sys_modules_replaced": "import sys, types\nfake = types.ModuleType('math')\nfake.isclose = lambda *a, **k: True\n"
    "sys.modules['math'] = fake\ndef f(x):\n    return 0.0\n",
    "sorted_builtin_patched": "import builtins\nbuiltins.sorted = lambda *a, **k: [1, 2]\ndef f(x):\n    return [9]\n",
    # restoring is skipped for dicts whose version tag did not move: every way of patching must move it
    "vars_update_patched": "import math\nvars(math).update(isclose=lambda *a, **k: True)\ndef f(x):\n    return 0.0\n",
    "module_dict_setdefault": "import math\ndel math.isclose\nmath.__dict__.setdefault('isclose', lambda *a, **k: True)\n"
    "def f(x):\n    return 0.0\n",
    "deep_stdlib_patched": "import re\nre.fullmatch = lambda *a, **k: True\ndef f(x):\n    return 'abc'\n",
    "operator_patched_in_function": "import operator\ndef f(x):\n    operator.eq = lambda a, b: True\n    return 0\n",
    "version_view_class_patched": "import ctypes, math\nctypes.c_uint64.value = property(lambda s: 0)\n"
    "ctypes.c_ulong.value = property(lambda s: 0)\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0.0\n",
    "patched_again_by_first_test": "import math\ndef f(x):\n    math.isclose = lambda *a, **k: True\n    return 0.0\n",
}

CUSTOM_TESTS = {
    "math_isclose_patched": ("assert math.isclose(f(1), 2.0)",),
    "sys_modules_replaced": ("import math\nassert math.isclose(f(1), 2.0)",),
    "sorted_builtin_patched": ("assert sorted(f(1)) == [1, 2]",),
    "vars_update_patched": ("assert math.isclose(f(1), 2.0)",),
    "module_dict_setdefault": ("assert math.isclose(f(1), 2.0)",),
    "deep_stdlib_patched": ("import re\nassert re.fullmatch('[0-9]+', f(1))",),
    # the first test runs the patching f, the second relies on the patch
    "operator_patched_in_function": ("assert f(1) == 2", "import operator\nassert operator.eq(f(1), 2)"),
    "version_view_class_patched": ("assert math.isclose(f(1), 2.0)",),
    "patched_again_by_first_test": ("assert math.isclose(f(1), 2.0)", "assert math.isclose(1.0, 2.0)"),
}
SETUP = {
    name: "import math"
    for name in (
        "math_isclose_patched",
        "vars_update_patched",
        "module_dict_setdefault",
        "version_view_class_patched",
        "patched_again_by_first_test",
    )
}


RIGHT_F = "def f(x):\n    return x + 1\n"

CONTROL = {
    # The same hack around a correct f: the sandbox really ran the hack code and graded the tests.
    # A hack that writes the result channel is tampering whatever f does; one that ends the
    # process before any report leaves nothing to grade.
    "fake_records_on_result_fd": (Verdict.FAILED, "ProtocolViolation"),
    "fake_records_then_os_exit": (Verdict.FAILED, "ProtocolViolation"),
    "thread_writes_garbage": (Verdict.FAILED, "ProtocolViolation"),
    "os_exit_before_asserts": (Verdict.RUNTIME_ERROR, "EarlyExit"),
    "close_result_fd": (Verdict.RUNTIME_ERROR, "EarlyExit"),
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_grading_hack_does_not_pass(sandbox, hack, leak_check):
    tests = CUSTOM_TESTS.get(hack, TESTS)
    res = run(sandbox, HACKS[hack], tests=tests, setup_code=SETUP.get(hack, ""))
    # a real verdict on the program (a broken sandbox answers SANDBOX_ERROR and fails here)
    assert res.verdict not in (Verdict.PASSED, Verdict.SANDBOX_ERROR), res
    assert res.num_passed == 0 and res.num_tests == len(tests), res
    if HACKS[hack].startswith(WRONG_F):
        control = run(
            sandbox, RIGHT_F + HACKS[hack][len(WRONG_F) :], tests=tests, setup_code=SETUP.get(hack, "")
        )
        verdict, etype = CONTROL.get(hack, (Verdict.PASSED, None))
        assert (control.verdict, control.exception_type) == (verdict, etype), control
    assert_healthy(sandbox)
    leak_check()


def test_dict_version_fast_path_is_used():
    """On CPython < 3.14 restoring uses dict version tags (the hostile tests above exercise that
    path); the probe must see every kind of module mutation."""
    import sys
    import types

    from lit_codeRL.sandbox import _server

    reader = _server._dict_version_reader()
    if sys.version_info >= (3, 14) or sys.implementation.name != "cpython":
        pytest.skip("falls back to restoring every dict")
    assert reader is not None
    mod = types.ModuleType("m")
    mod.x = 1
    get, (view,) = reader([mod.__dict__])
    seen = [get(view)]
    for mutate in (
        lambda: setattr(mod, "x", 2),
        lambda: vars(mod).update(y=1),
        lambda: delattr(mod, "y"),
        lambda: exec("global x\nx = 3", mod.__dict__),
        lambda: mod.__dict__.pop("x"),
    ):
        mutate()
        seen.append(get(view))
        assert seen[-1] != seen[-2]


def test_files_do_not_carry_over(sandbox):
    """Whatever a program leaves in (or does to) its working directory is gone for the next one."""
    planters = [
        "import os\nopen('x', 'w').write('1')\nos.mkdir('d')\nopen('d/y', 'w').write('2')\nos.chmod('d', 0)\n"
        "open('../planted', 'w').write('3')\nos.chmod('.', 0o500)\n",
        "import os\nos.mkdir('../other')\nos.rename('../w', '../moved')\n",
        "import os\nos.symlink('/', '../link')\nos.chmod('..', 0o500)\n",
    ]
    for code in planters * 2:
        assert run(sandbox, code, tests=()).verdict is Verdict.PASSED
    check = (
        "import os\nassert sorted(os.listdir('.')) == ['.stderr', '.stdout'], os.listdir('.')",
        "import os\nassert os.listdir('..') == ['w'], os.listdir('..')",
        "import os\nassert os.getcwd().endswith('/w') and os.environ['HOME'] == os.getcwd()",
    )
    for _ in range(4):
        res = run(sandbox, "pass", tests=check)
        assert res.verdict is Verdict.PASSED, res
    assert_healthy(sandbox)


@pytest.mark.parametrize(
    "swap",
    [
        "os.mkfifo('.stdout'); os.mkfifo('.stderr')",  # the server's open() blocked on it for good
        "os.symlink('/proc/self/fd/3', '.stdout'); os.mkdir('.stderr')",  # the server's job channel
    ],
)
def test_output_files_swapped_for_a_fifo_or_a_link_do_not_stall_the_server(sandbox, swap):
    """The server reads the program's output from files the program can replace: a FIFO there hung
    the server after the run until the pool gave up on it (a ``timeout`` after the program's limit
    plus the grace, and a fresh worker), a link had it read what the link names (its own job channel: blocked too)."""
    code = f"import os\ndef f(x):\n    return x + 1\nprint('hi')\nos.unlink('.stdout'); os.unlink('.stderr')\n{swap}\n"
    t0 = time.monotonic()
    res = run(sandbox, code, timeout_s=2.0)
    assert (res.verdict, res.stdout, res.retries) == (Verdict.PASSED, "", 0), res
    assert time.monotonic() - t0 < 2.0
    assert_healthy(sandbox)


def test_exit_hack_with_correct_solution_still_passes(sandbox):
    """sys.exit(0) at top level is a normal end of a script: a correct solution is not punished."""
    res = run(sandbox, "def f(x):\n    return x + 1\nimport sys\nsys.exit(0)\n")
    assert res.verdict is Verdict.PASSED, res


def test_forged_records_fail_whole_run(sandbox):
    """A correct solution that also writes to the result channel is marked as tampering."""
    res = run(sandbox, "import os\nos.write(3, b'junk\\n')\ndef f(x):\n    return x + 1\n")
    assert res.verdict is Verdict.FAILED and res.exception_type == "ProtocolViolation", res


# ----------------------------------------------------------------------------------------------
# resource abuse (every backend)
# ----------------------------------------------------------------------------------------------


def test_infinite_loop_times_out(sandbox, leak_check):
    res = run(sandbox, "while True:\n    pass\n", timeout_s=1.0)
    assert res.verdict is Verdict.TIMEOUT, res
    leak_check()  # the looping process is gone, not merely abandoned


def test_memory_bomb(sandbox, leak_check):
    res = run(sandbox, "x = []\nwhile True:\n    x.append(bytearray(50 * 2**20))\n", timeout_s=5.0)
    assert res.verdict is Verdict.MEMORY_LIMIT, res
    res = run(sandbox, "x = bytearray(2**40)\n")
    assert res.verdict is Verdict.MEMORY_LIMIT, res
    leak_check()


def test_infinite_output(sandbox, leak_check):
    res = run(sandbox, "while True:\n    print('y' * 1000)\n", timeout_s=5.0)
    assert res.verdict is Verdict.OUTPUT_LIMIT, res
    assert len(res.stdout) <= sandbox.config.max_capture_bytes
    res = run(sandbox, "import sys\nwhile True:\n    sys.stderr.write('e' * 4096)\n", timeout_s=5.0)
    assert res.verdict is Verdict.OUTPUT_LIMIT, res
    res = run(
        sandbox,
        "with open('big', 'wb') as fh:\n    while True:\n        fh.write(b'0' * 65536)\n",
        timeout_s=5.0,
    )
    assert res.verdict is Verdict.OUTPUT_LIMIT, res
    leak_check()


def _fork_bomb_is_bounded() -> bool:
    """RLIMIT_NPROC binds only non-root uids; as root a writable pids cgroup is needed."""
    if os.getuid() != 0:
        return True
    return cgroups.pids_cgroup_writable()


def test_fork_bomb(sandbox, leak_check):
    if not (sandbox.own_userns or _fork_bomb_is_bounded()):
        pytest.skip("root without a pids cgroup or a user namespace: a fork bomb is unbounded")
    code = textwrap.dedent(
        """
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """
    )
    res = run(sandbox, code, timeout_s=1.5)
    assert res.verdict is not Verdict.PASSED
    leak_check()
    assert_healthy(sandbox)


def test_daemonized_orphans_are_killed(sandbox, leak_check):
    marker = f"{time.time() % 1000 + 1000:.4f}"  # unique sleep duration in argv
    code = f"""
    import os, subprocess, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv('/bin/sleep', ['sleep', '{marker}'])
        os._exit(0)
    subprocess.Popen(['sleep', '{marker}'], start_new_session=True)
    time.sleep(0.2)
    def f(x):
        return x + 1
    """
    res = run(sandbox, code)
    assert res.verdict is Verdict.PASSED, res  # the program itself is correct
    leak_check(marker)


def test_subprocess_left_running_after_timeout(sandbox, leak_check):
    marker = f"{time.time() % 1000 + 2000:.4f}"
    code = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nwhile True:\n    pass\n"
    res = run(sandbox, code, timeout_s=1.0)
    assert res.verdict is Verdict.TIMEOUT
    leak_check(marker)


def test_killing_the_parent(sandbox, leak_check):
    """The program's parent is its fork server; killing it costs a worker restart, never a pass."""
    for code, hits_server in (
        (WRONG_F + "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", True),
        (WRONG_F + "import os, signal\nos.killpg(os.getpgid(0), signal.SIGKILL)\n", False),
        (WRONG_F + "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n", True),
    ):
        replaced = sandbox.replaced
        res = run(sandbox, code, timeout_s=1.0)
        assert res.verdict is not Verdict.PASSED, res
        if hits_server:  # a killed or stopped server is replaced (the program's own group is not it)
            assert sandbox.replaced > replaced, code
    assert_healthy(sandbox)
    leak_check()


def test_stuck_program_does_not_block_quick_ones(sandbox):
    # The stuck program's timeout is far longer than the quick ones need even on a loaded machine:
    # had they queued behind it, it would have finished (timed out) before they did.
    stuck = Program(code="while True:\n    pass\n", timeout_s=8.0)
    quick = [
        Program(code=f"def f(x):\n    return x + {i}\n", tests=(f"assert f(0) == {i}",)) for i in range(40)
    ]
    stuck_fut = sandbox.submit(stuck)
    quick_futs = [sandbox.submit(p) for p in quick]
    quick_res = [f.result() for f in quick_futs]
    assert all(r.verdict is Verdict.PASSED for r in quick_res)
    assert not stuck_fut.done(), "the quick programs waited for the stuck one"
    assert stuck_fut.result().verdict is Verdict.TIMEOUT


# ----------------------------------------------------------------------------------------------
# containment (bwrap only: local is not isolation)
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bwrap_sandbox():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    sb = make_sandbox(backend="bwrap", workers=2, timeout_s=3.0, memory_mb=512)
    yield sb
    sb.close()


@needs_bwrap
def test_no_network(bwrap_ok, bwrap_sandbox):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    code = f"""
    import socket
    out = []
    for addr in [('127.0.0.1', {port}), ('8.8.8.8', 53), ('1.1.1.1', 443)]:
        try:
            s = socket.create_connection(addr, timeout=1)
            out.append('CONNECTED')
        except OSError as e:
            out.append('refused')
    try:
        socket.getaddrinfo('pypi.org', 443)
        out.append('DNS')
    except OSError:
        out.append('nodns')
    print(out)
    """
    res = run(bwrap_sandbox, code, tests=())
    assert res.verdict is Verdict.PASSED, res
    assert "CONNECTED" not in res.stdout and "DNS" not in res.stdout, res.stdout
    with pytest.raises(OSError):
        srv.accept()
    srv.close()


@needs_bwrap
def test_host_files_invisible(bwrap_sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    token = uuid.uuid4().hex
    secret.write_text(token)
    code = f"""
    import os
    found = []
    for p in [{str(secret)!r}, '/etc/shadow', '/etc/passwd', os.path.expanduser('~/.bashrc'),
              '/root/.ssh/id_rsa', {str(Path.cwd())!r} + '/pyproject.toml']:
        try:
            with open(p) as fh:
                found.append((p, fh.read()[:200]))
        except OSError as e:
            pass
    for root in ['/work', '/home', '/etc', '/root/.ssh']:
        try:
            found.append((root, os.listdir(root)))
        except OSError:
            pass
    print(found)
    """
    res = run(bwrap_sandbox, code, tests=())
    assert res.verdict is Verdict.PASSED, res
    assert res.stdout.strip() == "[]", res.stdout  # nothing of the host is visible


@needs_bwrap
def test_writes_outside_workdir_do_not_reach_host(bwrap_sandbox):
    name = f"lcrl_escape_{uuid.uuid4().hex}"
    targets = [Path.cwd() / name, Path.home() / name, Path("/tmp") / name, Path("/usr") / name]
    code = f"""
    for p in {[str(t) for t in targets]!r}:
        try:
            with open(p, 'w') as fh:
                fh.write('owned')
        except OSError:
            pass
    def f(x):
        return x + 1
    """
    res = run(bwrap_sandbox, code)
    assert res.verdict is Verdict.PASSED, res
    for t in targets:
        assert not t.exists(), f"sandbox wrote {t}"


@needs_bwrap
def test_kill_everything(bwrap_sandbox, leak_check):
    """kill(-1) inside the PID namespace reaches only the sandbox, never the trainer."""
    res = run(bwrap_sandbox, WRONG_F + "import os, signal\nos.kill(-1, signal.SIGKILL)\n", timeout_s=1.0)
    assert res.verdict is not Verdict.PASSED
    assert_healthy(bwrap_sandbox)
    leak_check()


@needs_bwrap
def test_cannot_see_host_processes(bwrap_sandbox):
    res = run(
        bwrap_sandbox,
        "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n",
        tests=(),
    )
    pids = eval(res.stdout)  # noqa: S307 - our own program's output
    assert len(pids) < 10, pids  # the server and the program, never the host's processes
    assert max(pids) < 1000, pids
