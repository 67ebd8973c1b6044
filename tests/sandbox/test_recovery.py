"""No program affects a later one, and a failure of the sandbox is never graded as the program's.

Every damage test runs the hostile program, checks its own verdict (a real verdict, never
``SANDBOX_ERROR``), then checks that innocent programs on *every* worker are graded right.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time

import pytest

from lit_codeRL.sandbox import Program, Verdict, make_sandbox, pool

RIGHT_F = "def f(x):\n    return x + 1\n"
WRONG_F = "def f(x):\n    return x - 1\n"
TESTS = ("assert f(1) == 2", "assert f(5) == 6")


def assert_intact(sb) -> None:
    """Correct programs pass and wrong ones fail on every worker, first time (no retry needed)."""
    n = 2 * sb.workers
    for _ in range(2):
        good = sb.run_batch([Program(code=RIGHT_F, tests=TESTS)] * n)
        bad = sb.run_batch([Program(code=WRONG_F, tests=TESTS)] * n)
        assert all(r.verdict is Verdict.PASSED and r.retries == 0 for r in good), good
        assert all(r.verdict is Verdict.FAILED and r.test_passed == [False, False] for r in bad), bad
    res = sb.run(Program(code="import os\nprint(sorted(os.listdir('.')), os.access('.', os.W_OK))"))
    assert res.verdict is Verdict.PASSED and res.stdout.strip() == "['.stderr', '.stdout'] True", res


# Damage every backend can suffer (paths relative to the workdir, so ``local`` only touches its own
# temporary root).
DAMAGE = {
    "rmtree_parent": "import shutil\nshutil.rmtree('..', ignore_errors=True)\n",
    "rmtree_cwd_then_parent": "import os, shutil\nshutil.rmtree(os.getcwd(), ignore_errors=True)\n"
    "shutil.rmtree('..', ignore_errors=True)\n",
    "chmod_parent_000": "import os\nos.chmod('..', 0)\n",
    "chmod_cwd_000": "import os\nos.chmod('.', 0)\n",
    "workdir_becomes_file": "import os, shutil\nos.chdir('..')\nshutil.rmtree('w')\nopen('w', 'w').write('x')\n",
    "workdir_becomes_symlink": "import os, shutil\nos.chdir('..')\nshutil.rmtree('w')\nos.symlink('/', 'w')\n",
    "parent_full_of_junk": "import os\nfor i in range(300):\n    os.mkdir(f'../d{i}')\n    open(f'../d{i}/f', 'w').write('x')\n",
    "server_nofile_lowered": "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (5, 5))\n",
    "server_fsize_lowered": "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_FSIZE, (0, 0))\n",
    "server_as_lowered": "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_AS, (1 << 24, 1 << 24))\n",
    "server_nproc_lowered": "import os, resource\nresource.prlimit(os.getppid(), resource.RLIMIT_NPROC, (0, 0))\n",
    "server_reniced": "import os\nos.setpriority(os.PRIO_PROCESS, os.getppid(), 19)\n",
    "server_pinned": "import os\nos.sched_setaffinity(os.getppid(), {min(os.sched_getaffinity(0))})\n",
    "server_sigterm": "import os, signal\nos.kill(os.getppid(), signal.SIGTERM)\n",
    "server_sigusr1": "import os, signal\nos.kill(os.getppid(), signal.SIGUSR1)\n",
    "server_sigint_sighup": "import os, signal\nos.kill(os.getppid(), signal.SIGINT)\nos.kill(os.getppid(), signal.SIGHUP)\n",
    "server_sigalrm": "import os, signal\nos.kill(os.getppid(), signal.SIGALRM)\n",
    "daemon_deletes_workdir": textwrap.dedent(
        """
        import os, shutil, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    shutil.rmtree('..', ignore_errors=True)
                    time.sleep(0.001)
            os._exit(0)
        time.sleep(0.05)
        """
    ),
    "stopped_child_left": "import os, signal\npid = os.fork()\nif pid == 0:\n    os.kill(os.getpid(), signal.SIGSTOP)\n",
}

# Damage only a container's private filesystem can take (on ``local`` these would touch the host).
CONTAINER_DAMAGE = {
    "tmp_emptied": "import os, shutil\nfor n in os.listdir('/tmp'):\n    shutil.rmtree('/tmp/' + n, ignore_errors=True)\n",
    "tmp_chmod_000": "import os\nos.chmod('/tmp', 0)\n",
    "tmp_junk_outside_root": "import os\nfor i in range(50):\n    open(f'/tmp/junk{i}', 'w').write('x' * 1000)\nos.mkdir('/tmp/dir')\n",
    "work_root_renamed": "import os\nos.rename('/tmp/work', '/tmp/elsewhere')\n",
    "tmpfs_filled": textwrap.dedent(
        """
        import os
        os.mkdir('/tmp/fill')
        i = 0
        try:
            while True:
                with open(f'/tmp/fill/{i}', 'wb') as fh:
                    fh.write(b'0' * ((1 << 20) - 1))  # just under the output cap
                i += 1
        except OSError:
            pass
        """
    ),
    "shm_filled": "try:\n    i = 0\n    while True:\n        open(f'/dev/shm/s{i}', 'wb').write(b'0' * ((1 << 20) - 1))\n        i += 1\n"
    "except OSError:\n    pass\n",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\n",
}

EXPECTED = {
    # the program's own verdict after each damage (a real one: never SANDBOX_ERROR)
    "server_sigterm": Verdict.FAILED,  # ignored by the server: the program is graded normally
    "kill_everything": Verdict.RUNTIME_ERROR,  # killed its own server twice, then itself
}
NOT_OWNED = {"tmp_chmod_000"}
"""Damage a program in a user namespace of its own cannot even do: ``/tmp`` is not its uid's
(``sandbox/userns.py``), so the attempt is its runtime error."""


def _expected(sandbox, damage: str) -> Verdict:
    if sandbox.own_userns and damage in NOT_OWNED:
        return Verdict.RUNTIME_ERROR
    return EXPECTED.get(damage, Verdict.FAILED)


def _cases(backend: str) -> list[str]:
    return sorted(DAMAGE) + (sorted(CONTAINER_DAMAGE) if backend != "local" else [])


@pytest.mark.parametrize("damage", sorted(DAMAGE) + sorted(CONTAINER_DAMAGE))
def test_damage_does_not_reach_the_next_program(sandbox, damage, leak_check):
    if damage not in _cases(sandbox.backend):
        pytest.skip("would touch the host's filesystem on the local backend")
    code = WRONG_F + (DAMAGE.get(damage) or CONTAINER_DAMAGE[damage])
    res = sandbox.run(Program(code=code, tests=TESTS, timeout_s=10.0))
    assert res.verdict is not Verdict.SANDBOX_ERROR and res.verdict is not Verdict.PASSED, res
    assert res.num_passed == 0, res
    assert res.verdict is _expected(sandbox, damage), res
    # the damage was real: a correct program doing the same still passes (or ends as predicted)
    control = sandbox.run(Program(code=RIGHT_F + code[len(WRONG_F) :], tests=TESTS, timeout_s=10.0))
    failing = damage == "kill_everything" or (sandbox.own_userns and damage in NOT_OWNED)
    assert control.verdict is (Verdict.RUNTIME_ERROR if failing else Verdict.PASSED), control
    assert_intact(sandbox)
    leak_check()


def test_killing_the_server_is_the_programs_fault(sandbox):
    """SIGKILL to its own server: retried once on a fresh worker (maybe an accident of the
    infrastructure), then the program's RUNTIME_ERROR, never SANDBOX_ERROR."""
    res = sandbox.run(
        Program(code=RIGHT_F + "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", tests=TESTS)
    )
    assert (res.verdict, res.exception_type, res.retries) == (Verdict.RUNTIME_ERROR, "WorkerKilled", 1), res
    assert_intact(sandbox)


def test_stopping_the_server_is_a_timeout(sandbox):
    res = sandbox.run(
        Program(
            code=RIGHT_F + "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n",
            tests=TESTS,
            timeout_s=0.5,
        )
    )
    assert res.verdict is Verdict.TIMEOUT, res
    assert_intact(sandbox)


# ----------------------------------------------------------------------------------------------
# infrastructure faults are SANDBOX_ERROR (after retries), never the program's verdict
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def fresh(request):
    backend = request.param if hasattr(request, "param") else "local"
    sb = make_sandbox(backend=backend, workers=1, timeout_s=3.0, retries=2)
    yield sb
    sb.close()


def _break_starts(monkeypatch, failures: int) -> list[int]:
    """The next ``failures`` worker starts fail (exec of a missing binary); counts attempts."""
    calls = [0]
    real = pool._Worker._argv

    def argv(self, userns_fd=None):
        calls[0] += 1
        return ["/nonexistent/server"] if calls[0] <= failures else real(self, userns_fd)

    monkeypatch.setattr(pool._Worker, "_argv", argv)
    return calls


@pytest.mark.parametrize("fresh", ["local", "bwrap"], indirect=True)
def test_worker_that_cannot_start_is_sandbox_error(fresh, monkeypatch):
    for w in fresh._all:
        w.stop()  # the next program needs a (re)start
    calls = _break_starts(monkeypatch, failures=100)
    res = fresh.run(Program(code=RIGHT_F, tests=TESTS))
    assert (res.verdict, res.exception_type, res.retries) == (Verdict.SANDBOX_ERROR, "WorkerStartError", 2), (
        res
    )
    assert calls[0] == 3 and res.test_passed == [False, False]
    monkeypatch.undo()
    assert fresh.run(Program(code=RIGHT_F, tests=TESTS)).passed


@pytest.mark.parametrize("fresh", ["local", "bwrap"], indirect=True)
def test_transient_start_failure_is_retried(fresh, monkeypatch):
    for w in fresh._all:
        w.stop()
    _break_starts(monkeypatch, failures=1)
    res = fresh.run(Program(code=WRONG_F, tests=TESTS))
    assert (res.verdict, res.retries) == (Verdict.FAILED, 1), res


@pytest.mark.parametrize("fresh", ["local", "bwrap"], indirect=True)
def test_server_killed_from_outside_is_retried(fresh):
    """The infrastructure (not the program) kills the server mid-run: the program is re-run on a
    fresh worker and gets its real verdict."""
    fut = fresh.submit(Program(code=RIGHT_F + "import time\ntime.sleep(0.5)\n", tests=TESTS))
    time.sleep(0.2)
    (worker,) = fresh._all
    os.kill(worker.proc.pid, signal.SIGKILL)
    res = fut.result()
    assert (res.verdict, res.retries) == (Verdict.PASSED, 1), res


def test_bad_test_is_sandbox_error_without_retry():
    with make_sandbox(backend="local", workers=1) as sb:
        res = sb.run(Program(code=RIGHT_F, tests=("assert f(1) ==",)))
    assert (res.verdict, res.retries) == (Verdict.SANDBOX_ERROR, 0), res


# ----------------------------------------------------------------------------------------------
# signal deaths are reported with the signal
# ----------------------------------------------------------------------------------------------

SIGNAL_DEATHS = {
    "segv_ctypes": ("import ctypes\nctypes.string_at(0)\n", "SIGSEGV"),
    "segv_kill": ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "SIGSEGV"),
    "abort": ("import os\nos.abort()\n", "SIGABRT"),
    "kill_self": ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "SIGKILL"),
    "term_self": ("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n", "SIGTERM"),
    "bus": ("import os, signal\nos.kill(os.getpid(), signal.SIGBUS)\n", "SIGBUS"),
    "fpe": ("import os, signal\nos.kill(os.getpid(), signal.SIGFPE)\n", "SIGFPE"),
}


@pytest.mark.parametrize("death", sorted(SIGNAL_DEATHS))
def test_signal_deaths_report_the_signal(sandbox, death):
    code, name = SIGNAL_DEATHS[death]
    res = sandbox.run(Program(code=RIGHT_F + code, tests=TESTS))
    assert (res.verdict, res.signal, res.exception_type) == (Verdict.RUNTIME_ERROR, name, "Signal"), res
    assert name in res.exception_message
    # killed inside a test, after the program ran: the test fails, the signal is named
    res = sandbox.run(
        Program(code="def f(x):\n" + textwrap.indent(code, "    ") + "    return x + 1\n", tests=TESTS)
    )
    assert (res.verdict, res.signal) == (Verdict.FAILED, name), res
    assert res.test_passed == [False, False]
    assert_intact(sandbox)


def test_timeout_has_no_signal(sandbox):
    res = sandbox.run(Program(code="while True:\n    pass\n", timeout_s=0.5))
    assert res.verdict is Verdict.TIMEOUT and res.signal is None, res
