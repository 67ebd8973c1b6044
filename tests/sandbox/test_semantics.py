"""Verdicts and result fields on ordinary programs, backend selection, and the container argv."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from lit_codeRL.sandbox import Program, SandboxConfig, Verdict, make_sandbox, pool
from lit_codeRL.sandbox.backends import SERVER_MOUNT, apptainer_argv, bwrap_argv
from lit_codeRL.sandbox.pool import resolve_backend

ADD = "def add(a, b):\n    return a + b\n"


def test_pass_and_per_test_outcomes(sandbox):
    res = sandbox.run(
        Program(code=ADD, tests=("assert add(1, 2) == 3", "assert add(1, 1) == 3", "assert add(2, 2) == 4"))
    )
    assert res.verdict is Verdict.FAILED
    assert res.test_passed == [True, False, True]  # a failing test does not stop the others
    assert res.failed_test == 1 and res.exception_type == "AssertionError"
    assert res.pass_fraction == pytest.approx(2 / 3)
    assert res.backend == sandbox.backend
    ok = sandbox.run(Program(code=ADD, tests=("assert add(1, 2) == 3",)))
    assert ok.passed and ok.test_passed == [True] and ok.wall_time_s > 0


def test_syntax_and_runtime_errors(sandbox):
    res = sandbox.run(Program(code="def f(:\n  pass", tests=("assert f()",)))
    assert res.verdict is Verdict.SYNTAX_ERROR and res.exception_type == "SyntaxError"
    res = sandbox.run(Program(code="def f():\n\treturn 1\n        return 2", tests=()))
    assert res.verdict is Verdict.SYNTAX_ERROR
    res = sandbox.run(Program(code="x = 1 / 0", tests=("assert True",)))
    assert res.verdict is Verdict.RUNTIME_ERROR
    assert res.exception_type == "ZeroDivisionError" and "division" in res.exception_message
    assert "ZeroDivisionError" in res.stderr  # traceback for feedback
    res = sandbox.run(Program(code="import sys\nsys.exit(3)", tests=()))
    assert res.verdict is Verdict.RUNTIME_ERROR and res.exception_type == "SystemExit"
    res = sandbox.run(Program(code="def f():\n    return {}['k']\n", tests=("assert f() == 1",)))
    assert res.verdict is Verdict.FAILED and res.exception_type == "KeyError"


def test_no_tests_passes_iff_no_exception(sandbox):
    assert sandbox.run(Program(code="print('hi')")).verdict is Verdict.PASSED
    assert sandbox.run(Program(code="raise ValueError('x')")).verdict is Verdict.RUNTIME_ERROR


def test_stdin_stdout(sandbox):
    prog = "n = int(input())\nfor i in range(n):\n    print(i * i)\n"
    res = sandbox.run(Program(code=prog, stdin="3\n", expected_stdout="0\n1\n4\n"))
    assert res.verdict is Verdict.PASSED and res.stdout == "0\n1\n4\n"
    res = sandbox.run(Program(code=prog, stdin="3\n", expected_stdout="0\n1\n4  \n\n"))  # trailing ws
    assert res.verdict is Verdict.PASSED
    res = sandbox.run(Program(code=prog, stdin="3\n", expected_stdout="0\n1\n5\n"))
    assert res.verdict is Verdict.FAILED and res.exception_type == "WrongOutput"
    res = sandbox.run(Program(code="import sys\nprint(sys.stdin.read().upper(), end='')", stdin="abc"))
    assert res.stdout == "ABC"


def test_setup_code_runs_after_program(sandbox):
    """MBPP test_setup_code builds objects from the program's classes (e.g. task 367)."""
    code = "class Node:\n    def __init__(self, v):\n        self.v = v\ndef val(n):\n    return n.v\n"
    res = sandbox.run(
        Program(
            code=code,
            setup_code="import math\nroot = Node(7)",
            tests=("assert val(root) == 7", "assert math.pi > 3"),
        )
    )
    assert res.verdict is Verdict.PASSED, res


def test_tests_are_isolated_namespaces(sandbox):
    res = sandbox.run(Program(code="x = 1", tests=("y = 2\nassert x == 1", "assert 'y' not in globals()")))
    assert res.test_passed == [True, True]


def test_stdout_truncated(sandbox):
    res = sandbox.run(Program(code="print('a' * 100000)"))
    assert res.verdict is Verdict.PASSED
    assert len(res.stdout) == sandbox.config.max_capture_bytes


def test_timeout_in_a_test(sandbox):
    res = sandbox.run(Program(code="def f():\n    while True: pass\n", tests=("assert f()",), timeout_s=1.0))
    assert res.verdict is Verdict.TIMEOUT
    assert res.test_passed == [False]


def test_batch_order_and_future(sandbox):
    progs = [
        Program(code=f"def f():\n    return {i}\n", tests=(f"assert f() == {i if i % 3 else -1}",))
        for i in range(30)
    ]
    results = sandbox.run_batch(progs)
    assert [r.passed for r in results] == [i % 3 != 0 for i in range(30)]
    assert sandbox.submit(progs[1]).result().passed


def test_config_and_auto_logging(caplog, monkeypatch):
    monkeypatch.setattr(pool, "_ANNOUNCED", set())

    def open_once() -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lit_codeRL.sandbox"):
            with make_sandbox(SandboxConfig(workers=1), timeout_s=2.0) as sb:
                assert sb.config.timeout_s == 2.0 and sb.workers == 1
                assert sb.backend == resolve_backend(SandboxConfig())
                assert sb.run(Program(code=ADD, tests=("assert add(2, 3) == 5",))).passed
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]

    first = open_once()
    assert any(f"backend={resolve_backend(SandboxConfig())} (requested auto)" in m for m in first)
    # the same setting again (an eval every N steps) is not announced twice
    assert not any("backend=" in m for m in open_once())


def test_closed_sandbox_refuses():
    sb = make_sandbox(backend="local", workers=1)
    sb.close()
    with pytest.raises(RuntimeError):
        sb.submit(Program(code="pass"))


def test_bwrap_argv_is_locked_down():
    argv = bwrap_argv(SandboxConfig())
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--disable-userns"):
        assert flag in argv
    assert "--share-net" not in argv and "--bind" not in argv  # no writable host bind at all
    ro = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert "/usr" in ro and not any(p in ("/", "/etc", "/home", "/tmp", "/root") for p in ro)
    assert not any(p.endswith("site-packages") for p in ro)
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert "/tmp" in tmpfs and "/dev/shm" in tmpfs
    for i, a in enumerate(argv):  # site-packages under a bound prefix: hidden and read-only
        if a == "--tmpfs" and argv[i + 1].endswith("site-packages"):
            assert argv[i + 2 : i + 4] == ["--remount-ro", argv[i + 1]]
    # bwrap's own tmpfs root and /dev: read-only after the last mount that creates a mount point
    end = argv.index("--")
    ro_at = [i for i in range(end) if argv[i] == "--remount-ro" and argv[i + 1] in ("/", "/dev")]
    assert sorted(argv[i + 1] for i in ro_at) == ["/", "/dev"]
    mounts = ("--ro-bind", "--bind", "--tmpfs", "--proc", "--dev", "--symlink", "--dir")
    assert max(i for i in range(end) if argv[i] in mounts) < min(ro_at)
    tail = argv[end + 1 :]
    assert tail[0] == os.path.realpath(tail[0]) and tail[1:4] == ["-I", "-S", "-B"]  # the real binary


def test_apptainer_argv():
    argv = apptainer_argv(SandboxConfig(apptainer_python="/usr/local/bin/python3"), "/images/sandbox.sif")
    assert argv[:2] == ["apptainer", "exec"]
    for flag in ("--containall", "--cleanenv", "--no-home", "--net"):
        assert flag in argv
    assert argv[argv.index("--network") + 1] == "none"
    bind = argv[argv.index("--bind") + 1]
    assert bind.endswith(f":{SERVER_MOUNT}:ro")
    i = argv.index("/images/sandbox.sif")
    assert argv[i + 1 : i + 5] == ["/usr/local/bin/python3", "-I", "-S", "-B"]


def test_auto_prefers_apptainer_only_with_image(tmp_path, monkeypatch):
    monkeypatch.delenv("LIT_CODERL_SANDBOX_SIF", raising=False)
    assert resolve_backend(SandboxConfig(backend="local")) == "local"
    assert resolve_backend(SandboxConfig()) in ("bwrap", "local")  # no image -> never apptainer
    if shutil.which("apptainer"):
        img = tmp_path / "x.sif"
        img.write_bytes(b"")
        assert resolve_backend(SandboxConfig(apptainer_image=str(img))) == "apptainer"


@pytest.mark.apptainer
@pytest.mark.skipif(shutil.which("apptainer") is None, reason="apptainer not installed")
def test_apptainer_runs_for_real():
    import os

    image = os.environ.get("LIT_CODERL_SANDBOX_SIF")
    if not image:
        pytest.skip("set LIT_CODERL_SANDBOX_SIF to a .sif built from env/sandbox.def")
    with make_sandbox(backend="apptainer", workers=1, apptainer_image=image) as sb:
        assert sb.run(Program(code=ADD, tests=("assert add(2, 3) == 5",))).passed
        res = sb.run(Program(code="import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)"))
        assert res.verdict is Verdict.RUNTIME_ERROR
        assert (
            sb.run(Program(code=ADD + "import sys\nsys.exit(0)", tests=("assert add(1, 1) == 3",))).verdict
            is Verdict.FAILED
        )
