"""A program's busy processes cannot take the CPU from other samples' runs (``use_cpu_cgroup``).

The attack: a model-written program (or an agent's command, or the tests of its edit) forks as
many busy processes as it may. Where the scheduler shares the CPU between processes, every
other program running beside it slows down by that factor and meets its wall-clock limit: a
``timeout`` for a correct sample, which in a GRPO group raises the hostile sample's advantage.
Each worker and each workspace session gets a cpu cgroup of its own at the same weight, so the
scheduler shares the CPU between sandboxes instead.

The kernel's autogroup already shares per session, but only for processes in the root cpu
cgroup: a container or a SLURM job is not. The tests put themselves in a cpu cgroup of their
own, as such a job is, and show the attack landing with the groups off (the control) and
failing with them on. Real bubblewrap, real scheduler; they need root and a writable v1 cpu
hierarchy (``.ci/run`` has both) and skip elsewhere. They measure how the scheduler shares this
machine, so under pytest-xdist they run alone (``host_exclusive``): the other process's tests
would change the shares between the run alone and the run under attack.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lit_codeRL.sandbox import Program, Verdict, cgroups, make_sandbox
from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace

pytestmark = pytest.mark.host_exclusive

CPU_ROOT = Path("/sys/fs/cgroup/cpu")

BUSY_PROGRAM = """
import os
def f(x):
    return x
for _ in range(29):
    if os.fork() == 0:
        while True:
            pass
while True:
    pass
"""
"""30 busy processes (the test's workers allow 64)."""

HONEST_PROGRAM = """
def work(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
"""


def _honest_test(n: int) -> tuple[str, ...]:
    return (f"assert work({n}) == {sum(i * i for i in range(n))}",)


@pytest.fixture
def in_cpu_cgroup(bwrap_ok) -> Iterator[Path]:
    """This test process in a cpu cgroup of its own (as a container or a SLURM job runs), so the
    kernel's autogroup no longer shares the CPU between its sandboxes; moved back afterwards."""
    if os.getuid() != 0 or not (CPU_ROOT / "cgroup.procs").exists():
        pytest.skip("needs root and the v1 cpu hierarchy at /sys/fs/cgroup/cpu")
    own = cgroups.own_cgroup("cpu")
    home = CPU_ROOT / own.lstrip("/")
    job = home / f"lcrl-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        job.mkdir()
        (job / "cgroup.procs").write_text(str(os.getpid()))
    except OSError as e:
        pytest.skip(f"cannot make a cpu cgroup here: {e}")
    try:
        yield job
    finally:
        (home / "cgroup.procs").write_text(str(os.getpid()))
        for d in sorted(job.rglob("*"), key=lambda p: -len(p.parts)):
            if d.is_dir():
                d.rmdir()
        job.rmdir()


def _host_cpu_groups(job: Path) -> list[str]:
    parent = job / "lit_coderl"
    return [d.name for d in parent.glob("c*") if d.is_dir()] if parent.exists() else []


@pytest.mark.parametrize("use_cpu_cgroup", [True, False], ids=["cpu-cgroups", "control-without"])
def test_busy_program_does_not_time_out_its_neighbours(in_cpu_cgroup: Path, use_cpu_cgroup: bool) -> None:
    """One worker runs 30 busy processes until its timeout; meanwhile the other grades an honest
    program with a limit of three times its run alone. With a cpu cgroup per worker it passes, and
    while the busy one still runs (its worker has a core of its own). The control, without: given
    10 s instead, it takes more than three times as long, so that limit would have failed it."""
    # The busy program outlives the honest one's round trip: 0.7 s with the groups; 9.5 s in the
    # control (2-core EPYC), where the test process's own threads share the CPU with the 30 too.
    busy_s = 6.0 if use_cpu_cgroup else 20.0
    with make_sandbox(
        backend="bwrap", workers=2, timeout_s=busy_s, max_processes=64, use_cpu_cgroup=use_cpu_cgroup
    ) as sb:
        n = 200_000
        while True:  # an honest program of about 0.2 s on this machine
            alone = sb.run(Program(code=HONEST_PROGRAM, tests=_honest_test(n)))
            assert alone.verdict == Verdict.PASSED, alone
            if alone.wall_time_s >= 0.2 or n > 50_000_000:
                break
            n *= 2
        groups = _host_cpu_groups(in_cpu_cgroup)
        assert len(groups) == (2 if use_cpu_cgroup else 0), groups
        hostile = sb.submit(Program(code=BUSY_PROGRAM, tests=("assert f(1) == 1",)))
        time.sleep(0.5)  # its processes are running
        limit = 3 * alone.wall_time_s if use_cpu_cgroup else 10.0
        honest = sb.run(Program(code=HONEST_PROGRAM, tests=_honest_test(n), timeout_s=limit))
        during = not hostile.done()
        assert hostile.result().verdict == Verdict.TIMEOUT
    assert honest.verdict == Verdict.PASSED, honest
    slowdown = honest.wall_time_s / alone.wall_time_s
    if use_cpu_cgroup:
        assert during, "the honest program ran while the busy one did"
        assert slowdown < 3
    else:
        # Had the busy one ended first, part of the honest run was not attacked: the slowdown
        # measured would be less than the attack's, so this bound holds either way.
        assert slowdown > 3, "the control did not reproduce the attack"
    assert not _host_cpu_groups(in_cpu_cgroup), "every worker's cpu cgroup is removed at close"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    (r / "README").write_text("a workspace\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "b"],
    ):
        subprocess.run(["git", *args], cwd=r, env=env, check=True, capture_output=True)
    return r


BUSY_COMMAND = "python3 -c 'import os\nfor _ in range(40):\n    if os.fork() == 0: break\nwhile True: pass'"
HONEST_COMMAND = (
    "python3 -c 'import time; t = time.process_time()\n"
    'while time.process_time() - t < {cpu}: pass\nprint("done")\''
)


@pytest.mark.parametrize("use_cpu_cgroup", [True, False], ids=["cpu-cgroups", "control-without"])
def test_busy_command_does_not_time_out_another_session(
    in_cpu_cgroup: Path, repo: Path, use_cpu_cgroup: bool
) -> None:
    """An agent's command forks 41 busy processes in its workspace; another episode's command
    (a grading run, say) needs 0.5 s of CPU and has 2 s: it finishes with a cpu cgroup per session,
    and times out without one (the control)."""
    cfg = WorkspaceConfig(backend="bwrap", command_timeout_s=10.0, use_cpu_cgroup=use_cpu_cgroup)
    with open_workspace(cfg, repo) as hostile, open_workspace(cfg, repo) as victim:
        assert len(_host_cpu_groups(in_cpu_cgroup)) == (2 if use_cpu_cgroup else 0)
        busy = threading.Thread(target=hostile.run, args=(BUSY_COMMAND,), kwargs={"timeout": 8.0})
        busy.start()
        try:
            time.sleep(1.0)  # its processes are running
            r = victim.run(HONEST_COMMAND.format(cpu=0.5), timeout=2.0)
        finally:
            busy.join()
    if use_cpu_cgroup:
        assert (r.timed_out, r.output) == (False, "done\n"), r
    else:
        assert r.timed_out, ("the control did not reproduce the attack", r)
    assert not _host_cpu_groups(in_cpu_cgroup), "every session's cpu cgroup is removed at close"


@pytest.mark.parametrize("reweigh", [True, False], ids=["parent-reweighed", "control-one-weight"])
def test_sandboxes_keep_their_share_beside_other_busy_processes(
    in_cpu_cgroup: Path, reweigh: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten busy processes beside the sandboxes (a trainer's threads, another test's processes)
    in the job's cgroup: the 8 workers' parent group weighs 8 processes, so an honest program
    keeps most of a core (slowdown under 2). The control, with the parent at one default weight
    (every sandbox together one process): it gets 2/11 of the two cores, over 3 times as long."""
    if not reweigh:
        monkeypatch.setattr(cgroups, "_reweigh_cpu_parent", lambda parent: None)
    with make_sandbox(backend="bwrap", workers=8, timeout_s=30.0, use_cpu_cgroup=True) as sb:
        n = 200_000
        while True:  # an honest program of about 1 s on this machine: the shares average out
            alone = sb.run(Program(code=HONEST_PROGRAM, tests=_honest_test(n)))
            assert alone.verdict == Verdict.PASSED, alone
            if alone.wall_time_s >= 1.0 or n > 50_000_000:
                break
            n *= 2
        parent, groups = in_cpu_cgroup / "lit_coderl", len(_host_cpu_groups(in_cpu_cgroup))
        assert groups >= 4, "the workers start in the background: most have started by now"
        assert (parent / "cpu.shares").read_text().strip() == str(1024 * groups if reweigh else 1024)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(10)]
        try:
            time.sleep(0.5)
            loaded = sb.run(Program(code=HONEST_PROGRAM, tests=_honest_test(n)))
        finally:
            for p in busy:
                p.kill()
                p.wait()
    assert loaded.verdict == Verdict.PASSED, loaded
    slowdown = loaded.wall_time_s / alone.wall_time_s
    if reweigh:
        assert slowdown < 2, slowdown
        assert (parent / "cpu.shares").read_text().strip() == "1024", "back to one weight once empty"
    else:
        assert slowdown > 3, ("the control did not reproduce the starving", slowdown)
