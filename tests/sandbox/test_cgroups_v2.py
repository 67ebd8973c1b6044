"""cgroup v2: one group per sandbox with every limit, below the nearest group on the trainer's line
that hands the controllers down, never above a group that limits the trainer (``sandbox/cgroups.py``).

The choices are checked on fake trees of a systemd host, a SLURM job and a container. The kernel's
side is checked on this host's real v2 hierarchy where it can be: a hybrid host has its v2
hierarchy at ``/sys/fs/cgroup/unified`` with the controllers v1 does not hold (``hugetlb`` here),
and the v2 rules a sandbox group lives by (processes in leaves only, controllers handed down
through ``cgroup.subtree_control``, one group per process) do not depend on the controller.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lit_codeRL.sandbox import cgroups

EVERY = {"pids", "memory", "cpu"}


def _group(root: Path, rel: str, subtree: str = "", **files: str) -> Path:
    """A fake v2 group: ``cgroup.subtree_control`` and the given files (``memory_max`` ->
    ``memory.max``)."""
    group = root / rel.strip("/") if rel.strip("/") else root
    group.mkdir(parents=True, exist_ok=True)
    (group / "cgroup.subtree_control").write_text(subtree + "\n")
    (group / "cgroup.procs").write_text("")
    for name, text in files.items():
        (group / name.replace("_", ".")).write_text(text + "\n")
    return group


def test_a_systemd_session_gets_its_group_beside_its_scope(tmp_path: Path) -> None:
    """A root shell's trainer on a systemd host lives in a scope, a leaf that hands nothing down;
    its slice hands down every controller, so the sandbox group goes there, beside the scope."""
    _group(tmp_path, "/", "cpu io memory pids")
    _group(tmp_path, "/user.slice", "cpu memory pids")
    slice_ = _group(tmp_path, "/user.slice/user-0.slice", "cpu memory pids", memory_max="max", pids_max="max")
    _group(
        tmp_path,
        "/user.slice/user-0.slice/session-3.scope",
        memory_max="max",
        pids_max="max",
        cpu_max="max 100000",
    )
    found = cgroups.v2_parents(EVERY, tmp_path, "/", "/user.slice/user-0.slice/session-3.scope")
    assert found[0] == (slice_, EVERY)
    assert [group for group, _ in found] == [slice_, tmp_path / "user.slice", tmp_path]


def test_a_group_never_escapes_a_limit_the_trainer_runs_under(tmp_path: Path) -> None:
    """``systemd-run --scope -p MemoryMax=8G``, a CPU quota, a pids bound or a hugetlb bound on the
    trainer's own group: a sandbox group beside it would leave it (a v2 process is in one group),
    so none is made there or above it."""
    _group(tmp_path, "/", "cpu memory pids")
    _group(tmp_path, "/user.slice", "cpu memory pids")
    for limit in (
        {"memory_max": "8589934592"},
        {"cpu_max": "50000 100000"},
        {"pids_max": "64"},
        {"memory_high": "1G"},
    ):
        scope = _group(tmp_path, "/user.slice/run-1.scope", **limit)
        assert cgroups.v2_parents(EVERY, tmp_path, "/", "/user.slice/run-1.scope") == [], limit
        for f in scope.iterdir():
            if f.name not in ("cgroup.subtree_control", "cgroup.procs"):
                f.unlink()
    assert (
        cgroups.v2_parents(EVERY, tmp_path, "/", "/user.slice/run-1.scope")[0][0] == tmp_path / "user.slice"
    )


def test_a_slurm_task_gets_its_group_inside_its_job(tmp_path: Path) -> None:
    """SLURM's cgroup/v2 plugin: the job's memory limit is on ``job_7``; the task's ``user`` group
    hands the controllers down. The group goes there, inside the job's limit, and not above it."""
    job = "/system.slice/slurmstepd.scope/job_7"
    _group(tmp_path, "/", "cpu memory pids")
    _group(tmp_path, "/system.slice", "cpu memory pids")
    _group(tmp_path, "/system.slice/slurmstepd.scope", "cpu memory pids")
    _group(tmp_path, job, "cpu memory pids", memory_max="17179869184")
    _group(tmp_path, f"{job}/step_0", "cpu memory pids")
    user = _group(tmp_path, f"{job}/step_0/user", "memory pids")
    _group(tmp_path, f"{job}/step_0/user/task_0")
    found = cgroups.v2_parents(EVERY, tmp_path, "/", f"{job}/step_0/user/task_0")
    assert [group for group, _ in found] == [
        tmp_path / job.strip("/") / "step_0",
        tmp_path / job.strip("/"),
        user,
    ]
    assert found[0][1] == found[1][1] == EVERY and found[2][1] == {"memory", "pids"}


def test_a_container_root_with_processes_gets_none(tmp_path: Path) -> None:
    """A container in a cgroup namespace of its own sees its group as ``/``; its processes sit in
    it, so it hands nothing down (v2 refuses both at once), and there is nowhere to go."""
    _group(tmp_path, "/")
    assert cgroups.v2_parents(EVERY, tmp_path, "/", "/") == []
    # the real root, which v2 exempts from the leaf rule, hands down what it enables
    _group(tmp_path, "/", "memory pids")
    assert cgroups.v2_parents(EVERY, tmp_path, "/", "/") == [(tmp_path, {"memory", "pids"})]


def test_a_mount_of_a_subtree_is_read_where_it_is_mounted(tmp_path: Path) -> None:
    """A runtime without cgroup namespaces bind-mounts the container's subtree: the process's
    path (``/docker/abc/x``) is read below the mount's root (``/docker/abc``); a group the mount
    does not show (a sibling with a longer name, a path through ``..``) gets nothing."""
    _group(tmp_path, "/", "memory")
    x = _group(tmp_path, "/x")
    assert cgroups.v2_parents({"memory"}, tmp_path, "/docker/abc", "/docker/abc/x") == [
        (tmp_path, {"memory"})
    ]
    assert x.is_dir()
    assert cgroups.v2_parents({"memory"}, tmp_path, "/docker/abc", "/docker/abcdef/x") == []
    assert cgroups.v2_parents({"memory"}, tmp_path, "/", "/../outside") == []
    assert cgroups.v2_parents({"memory"}, tmp_path, "/", "") == []


def test_limits_are_read_the_way_each_file_writes_them(tmp_path: Path) -> None:
    group = tmp_path / "g"
    group.mkdir()
    unlimited = {
        "memory.max": "max",
        "cpu.max": "max 100000",
        "misc.max": "sev max\nsev_es max",
        "io.max": "",
        "hugetlb.2MB.max": "9223372036854771712",  # what hugetlb writes for "no limit"
        "cgroup.max.depth": "3",  # a bound on the tree, not on the processes
        "memory.low": "1000",  # a protection, not a limit
    }
    for name, text in unlimited.items():
        (group / name).write_text(text + "\n")
    assert not cgroups._limited(group)
    for name, text in {
        "memory.max": "1073741824",
        "cpu.max": "50000 100000",
        "io.max": "8:0 rbps=1048576 wbps=max riops=max wiops=max",
        "hugetlb.2MB.max": "0",
        "memory.high": "1073741824",
        "misc.max": "sev 4",
    }.items():
        (group / name).write_text(text + "\n")
        assert cgroups._limited(group), name
        (group / name).write_text(unlimited.get(name, "max") + "\n")
    assert not cgroups._limited(group)


def test_the_v2_mount_is_found_on_v2_and_hybrid_hosts(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(
        "25 30 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
        "33 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 25 0:38 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate\n"
    )
    assert cgroups.v2_mount(info) == (Path("/sys/fs/cgroup/unified"), "/")
    info.write_text("30 1 0:26 /docker/abc /sys/fs/cgroup\\040v2 rw - cgroup2 cgroup2 rw\n")
    assert cgroups.v2_mount(info) == (Path("/sys/fs/cgroup v2"), "/docker/abc")
    info.write_text("33 25 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")
    assert cgroups.v2_mount(info) is None


def test_on_a_v2_host_a_sandbox_joins_one_group_with_every_limit(tmp_path: Path, monkeypatch) -> None:
    """No v1 hierarchy (a v2-only host): the pids, memory and cpu limits of a session all go in
    one group, which its wrapper joins (joining a group per controller would leave the sandbox in
    the last one, bounded by its cpu weight alone)."""
    v1 = tmp_path / "v1"  # no hierarchy mounted there
    v1.mkdir()
    v2 = tmp_path / "v2"
    _group(v2, "/", "cpu memory pids")
    home = _group(v2, "/user.slice/lit_coderl", "cpu memory pids", cpu_weight="100")
    _group(v2, "/user.slice", "cpu memory pids")
    _group(v2, "/user.slice/session-1.scope")
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", v1)
    monkeypatch.setattr(cgroups, "v2_mount", lambda: (v2, "/"))
    monkeypatch.setattr(
        cgroups, "own_cgroup", lambda controller, *a: "/user.slice/session-1.scope" if not controller else ""
    )
    groups = cgroups.sandbox_cgroups(pids=72, memory_bytes=3 << 30, cpu=True)
    assert len(groups) == 1
    (group,) = groups
    assert (
        group.path is not None
        and group.path.parent == home
        and group.path.name.startswith(f"s{os.getpid()}-")
    )
    assert {f.name: f.read_text() for f in group.path.iterdir()} == {
        "pids.max": "72",
        "memory.max": str(3 << 30),
        "cpu.weight": "100",
    }
    assert cgroups.bounds(groups, "pids.max")
    argv = cgroups.join_cgroups_argv([g.procs for g in groups], ["true"])
    assert argv[4:6] == ["1", str(group.path / "cgroup.procs")]
    # the sandboxes' parent weighs one default weight per sandbox in it
    second = cgroups.sandbox_cgroups(cpu=True)
    assert (home / "cpu.weight").read_text() == "200"
    for f in group.path.iterdir():
        f.unlink()
    group.remove()
    assert not group.path.exists() and (home / "cpu.weight").read_text() == "100"
    cgroups.release(second)


# -- the kernel's side, on this host's real cgroup v2 hierarchy ------------------------------------

HUGE = "hugetlb.2MB.max"


@pytest.fixture
def v2_job() -> Iterator[tuple[Path, Path]]:
    """A job group on the real v2 hierarchy that hands ``hugetlb`` down, with an empty leaf
    ``task`` in it where the test's trainer processes run (as under SLURM or a systemd scope)."""
    mount = cgroups.v2_mount()
    if os.getuid() != 0 or mount is None or mount[1] != "/" or cgroups.own_cgroup("") != "/":
        pytest.skip("needs root at the root of a cgroup v2 hierarchy mounted here")
    root = mount[0]
    if "hugetlb" not in cgroups._read(root / "cgroup.controllers").split():
        pytest.skip("the v2 hierarchy here has no hugetlb controller")
    control = root / "cgroup.subtree_control"
    had = "hugetlb" in cgroups._read(control).split()
    job = root / f"lcrl-test-{uuid.uuid4().hex[:8]}"
    try:
        try:
            if not had:
                control.write_text("+hugetlb")
            job.mkdir()
            (job / "cgroup.subtree_control").write_text("+hugetlb")
            (job / "task").mkdir()
        except OSError as e:
            pytest.skip(f"cannot make a job group with hugetlb on the v2 hierarchy here: {e}")
        if not (job / "task" / HUGE).exists():
            pytest.skip(f"no {HUGE} on this kernel")
        yield job, job / "task"
    finally:
        groups = (
            sorted((p for p in job.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            if job.is_dir()
            else []
        )
        for group in [*groups, job] if job.is_dir() else []:
            for pid in cgroups._read(group / "cgroup.procs").split():
                try:
                    os.kill(int(pid), 9)
                except OSError:
                    pass
            for _ in range(100):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        if not had:
            try:
                control.write_text("-hugetlb")
            except OSError:
                pass


def _trainer(group: Path, code: str) -> dict:
    """Run ``code`` as a trainer process that starts in ``group``; its last stdout line, as JSON."""
    argv = cgroups.join_cgroups_argv(
        [str(group / "cgroup.procs")], [sys.executable, "-c", textwrap.dedent(code)]
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 or done.stdout.strip(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


SANDBOX = f"""
    import json, os, subprocess, time
    from lit_codeRL.sandbox import cgroups
    group = cgroups.V2Cgroup({{"{HUGE}": 0}})
    out = {{"own": cgroups.own_cgroup(""), "path": str(group.path) if group.path else None}}
    if group.path is not None:
        out["limit"] = (group.path / "{HUGE}").read_text().strip()
        out["enabled"] = (group.path.parent / "cgroup.subtree_control").read_text().split()
        child = subprocess.Popen(cgroups.join_cgroups_argv([group.procs], ["sleep", "60"]))
        for _ in range(500):
            if child.pid in group.pids():
                break
            time.sleep(0.01)
        out["listed"] = child.pid in group.pids()
        out["child"] = [x for x in open(f"/proc/{{child.pid}}/cgroup").read().splitlines() if x.startswith("0::")]
        child.kill()
        child.wait()
        group.kill_stragglers(100)
        group.remove()
        out["removed"] = not group.path.exists()
    print(json.dumps(out))
"""


@pytest.mark.host_exclusive
def test_a_v2_group_beside_the_trainers_leaf_holds_the_sandbox(v2_job) -> None:
    """A trainer in a leaf (``task``) of a group that hands a controller down: its sandbox group
    is made in ``<job>/lit_coderl``, which the code has the controller enabled in, with the limit
    written; the sandbox's process is in that group and no other v2 group; the group goes at
    close."""
    job, task = v2_job
    out = _trainer(task, SANDBOX)
    assert out["own"] == f"/{job.name}/task"
    assert out["path"] is not None and Path(out["path"]).parent == job / "lit_coderl", out
    assert out["limit"] == "0" and "hugetlb" in out["enabled"]
    assert out["listed"] and out["child"] == [f"0::/{job.name}/lit_coderl/{Path(out['path']).name}"]
    assert out["removed"]


@pytest.mark.host_exclusive
def test_a_v2_group_is_not_made_outside_a_limited_trainer(v2_job) -> None:
    """The same trainer with a hugetlb bound on its own leaf: a group in the job would take the
    sandbox out of that bound, so none is made (the sandbox stays in the trainer's group)."""
    job, task = v2_job
    (task / HUGE).write_text("0")
    out = _trainer(task, SANDBOX)
    assert out == {"own": f"/{job.name}/task", "path": None}
    assert not (job / "lit_coderl").exists()
    assert not (job.parent / "lit_coderl").exists()


@pytest.mark.host_exclusive
def test_a_killed_trainers_v2_group_is_swept(v2_job) -> None:
    """A trainer killed with SIGKILL cannot remove its sandbox group; the next trainer's sweep
    (what every workspace open does) removes it, and leaves a live trainer's group alone."""
    job, task = v2_job
    killed = _trainer(
        task,
        f"""
        import json, os, signal, sys
        from lit_codeRL.sandbox import cgroups
        group = cgroups.V2Cgroup({{"{HUGE}": 0}})
        print(json.dumps({{"path": str(group.path)}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """,
    )
    stale = Path(killed["path"])
    assert stale.parent == job / "lit_coderl" and stale.is_dir()
    out = _trainer(
        task,
        f"""
        import json
        from lit_codeRL.sandbox import cgroups
        mine = cgroups.V2Cgroup({{"{HUGE}": 0}})
        removed = cgroups.sweep_stale_cgroups()
        print(json.dumps({{"removed": removed, "mine": mine.path.is_dir()}}))
        mine.remove()
        """,
    )
    assert out == {"removed": 1, "mine": True}
    assert not stale.exists()
