"""Shared fixtures: one sandbox per available backend, and a leak check on processes."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from lit_codeRL.sandbox import Sandbox, SandboxConfig, make_sandbox
from lit_codeRL.sandbox.pool import bwrap_problem

BACKENDS = ["local"] + (["bwrap"] if shutil.which("bwrap") else [])
"""Every backend installed here (apptainer has its own marked tests). bwrap is in the list as soon
as the binary exists: if it then does not work (a venv interpreter it cannot see, user namespaces
off), its tests fail with the reason instead of silently disappearing."""
if "bwrap" in BACKENDS and os.getuid() == 0:
    BACKENDS.append("bwrap-userns")
    """bwrap as a root trainer without a pids cgroup runs it: each worker in a user namespace of
    its own, programs as a host uid that is not root (``sandbox/userns.py``)."""

BWRAP_PROBLEM = bwrap_problem(SandboxConfig()) if shutil.which("bwrap") else "bubblewrap is not installed"


def require_bwrap() -> None:
    """Skip when bwrap is absent; fail (not skip) when it is installed but broken."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    if BWRAP_PROBLEM:
        pytest.fail(f"bubblewrap is installed but the sandbox cannot use it: {BWRAP_PROBLEM}")


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, start time in clock ticks since boot, cmdline) for live, non-zombie processes."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] == b"Z":
            continue
        out[int(name)] = (int(fields[1]), int(fields[19]), cmd)
    return out


def _boot_ticks_now() -> int:
    return int(float(Path("/proc/uptime").read_text().split()[0]) * CLK_TCK)


def _below(table: dict[int, tuple[int, int, str]], pid: int, ancestors: set[int]) -> bool:
    """Whether ``pid`` descends from one of ``ancestors``."""
    p, seen = pid, 0
    while p > 1 and seen < 64:
        p = table.get(p, (0, 0, ""))[0]
        seen += 1
        if p in ancestors:
            return True
    return False


def leaked_processes(since_ticks: int, markers: tuple[str, ...] = ()) -> list[str]:
    """Processes started after ``since_ticks`` below this test process (other than sandbox
    workers), plus any process anywhere whose command line contains one of ``markers`` (one that
    escaped the tree: reparented to init), except below another pytest-xdist worker of this run
    (its own tests' sandboxes: it waits while a host-checking test runs, but its module fixtures
    keep theirs)."""
    table = _proc_table()
    me = os.getpid()
    siblings = (
        {pid for pid, (ppid, _, _) in table.items() if ppid == os.getppid() and pid != me}
        if os.environ.get("PYTEST_XDIST_WORKER")
        else set()
    )
    leaks = []
    for pid, (_, start, cmd) in table.items():
        if any(m in cmd for m in markers):
            if not _below(table, pid, siblings):
                leaks.append(f"{pid}: {cmd}")
            continue
        if start < since_ticks or pid == me or not _below(table, pid, {me}):
            continue
        if "_server.py" not in cmd and not cmd.startswith(("bwrap", "/bin/sh -c echo")):
            leaks.append(f"{pid}: {cmd}")
    return leaks


@pytest.fixture
def bwrap_ok() -> None:
    """Depend on this in a bwrap-only test: skip without bubblewrap, fail when it is broken."""
    require_bwrap()


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request) -> Sandbox:
    if request.param.startswith("bwrap"):
        require_bwrap()
    if request.param == "bwrap-userns":
        sb = make_sandbox(backend="bwrap", workers=2, timeout_s=3.0, memory_mb=512, use_pids_cgroup=False)
        assert sb.own_userns, "a root trainer without a pids cgroup must run programs as another uid"
    else:
        sb = make_sandbox(backend=request.param, workers=2, timeout_s=3.0, memory_mb=512)
    yield sb
    sb.close()


@pytest.fixture
def leak_check():
    """Yields a callable asserting nothing the test started is still alive (after a short settle)."""
    start = _boot_ticks_now() - 1

    def check(*markers: str) -> None:
        for _ in range(50):
            leaks = leaked_processes(start, markers)
            if not leaks:
                return
            time.sleep(0.05)
        raise AssertionError(f"processes left behind: {leaks}")

    return check
