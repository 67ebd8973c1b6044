"""A root trainer without a pids cgroup runs bwrap programs as a host uid that is not root, in a
user namespace of its own per worker (``sandbox/userns.py``), so RLIMIT_NPROC bounds a fork bomb.
The hostile suite runs against this mode too (``conftest.py``: the ``bwrap-userns`` sandbox)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess

import pytest

from lit_codeRL.sandbox import Program, SandboxConfig, backends, cgroups, make_sandbox, pool, userns
from lit_codeRL.sandbox.types import Verdict
from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace

ROOT_ONLY = pytest.mark.skipif(
    os.getuid() != 0, reason="only a root trainer makes user namespaces for its programs"
)


def test_the_command_line_joins_the_namespace_and_the_server_drops_to_the_sandbox_uid():
    plain = backends.bwrap_argv(SandboxConfig())
    argv = backends.bwrap_argv(SandboxConfig(), userns_fd=7)
    assert "--unshare-user" in plain and "--perms" not in plain
    assert json.loads(plain[-1])["drop_to"] is None
    assert "--unshare-user" not in argv and "--unshare-all" not in argv
    i = argv.index("--userns")
    assert argv[i + 1] == "7"
    assert argv.count("--cap-add") == 2 and {"CAP_SETUID", "CAP_SETGID"} <= set(argv)
    for ns in ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"):
        assert ns in argv
    assert json.loads(argv[-1])["drop_to"] == userns.SANDBOX_ID
    # the writable tmpfs mounts are the namespace root's: sticky and world-writable
    for path in ("/tmp", "/dev/shm"):
        j = argv.index(path, argv.index("--tmpfs") - 1)
        assert argv[j - 5 : j - 3] == ["--perms", "1777"] and argv[j - 1] == "--tmpfs", argv[j - 6 : j + 1]


def test_the_directories_above_binds_are_made_passable_but_not_the_hosts_own():
    args = backends.bwrap_open_parents(
        ["/root/.pyenv/versions/3.11/lib/python3.11", "/opt/lcrl/.", "/usr/lib/x"]
    )
    made = args[3::4]
    assert made == ["/root", "/root/.pyenv", "/root/.pyenv/versions", "/root/.pyenv/versions/3.11",
                    "/root/.pyenv/versions/3.11/lib", "/opt"]  # fmt: skip
    assert args[:4] == ["--perms", "0755", "--dir", "/root"]


def test_each_sandbox_gets_its_own_host_uid():
    uids = {userns.host_uid(100000) for _ in range(8)}
    assert len(uids) == 8 and all(100000 <= u < 100000 + 4096 * 256 for u in uids)


@ROOT_ONLY
def test_a_namespace_maps_the_sandbox_uid_away_from_root_and_allows_no_nested_one(bwrap_ok):
    if not (shutil.which("unshare", path="/usr/bin:/bin") and shutil.which("setpriv", path="/usr/bin:/bin")):
        pytest.skip("util-linux unshare and setpriv are needed here")
    fd = userns.make(123456)
    try:
        script = (
            "cat /proc/self/uid_map; exec setpriv --reuid 65534 --regid 65534 --clear-groups "
            "/bin/sh -c 'id -u; unshare --user true 2>/dev/null && echo nested || echo no-nested'"
        )
        done = subprocess.run(
            [shutil.which("bwrap") or "bwrap", *userns.bwrap_isolation(fd), "--ro-bind", "/usr", "/usr",
             *_links(), "--proc", "/proc", "--dev", "/dev", "/bin/sh", "-c", script],
            pass_fds=(fd,), capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
    finally:
        os.close(fd)
    out = done.stdout.split()
    assert out[:6] == ["0", "0", "1", "65534", "123456", "1"], done
    assert out[6:] == ["65534", "no-nested"], done


def _links() -> list[str]:
    argv: list[str] = []
    for name in ("/bin", "/lib", "/lib64", "/sbin"):
        if os.path.islink(name):
            argv += ["--symlink", os.readlink(name), name]
    return argv


@ROOT_ONLY
def test_a_root_trainers_programs_run_as_another_uid_and_cannot_fork_past_the_limit(bwrap_ok):
    with make_sandbox(
        backend="bwrap", workers=1, timeout_s=5.0, use_pids_cgroup=False, max_processes=8
    ) as sb:
        assert sb.own_userns
        who = sb.run(Program(code="print(open('/proc/self/uid_map').read().split()[3:5])\n"))
        assert who.verdict is Verdict.PASSED, who
        sandbox_uid, host_uid = json.loads(who.stdout.replace("'", '"'))
        assert sandbox_uid == "65534" and int(host_uid) >= SandboxConfig().root_program_uid
        # at most 40 tries, whatever happens: the count says where the kernel stopped it
        counted = sb.run(
            Program(
                code=(
                    "import os, time\nn = 0\nfor _ in range(40):\n    try:\n        pid = os.fork()\n"
                    "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n"
                    "        os._exit(0)\n    n += 1\nprint(n)\n"
                )
            )
        )
        assert counted.verdict is Verdict.PASSED and int(counted.stdout) < 8, counted
        # the server and the next program are unharmed
        again = sb.run(Program(code="def f(x):\n    return x + 1\n", tests=("assert f(1) == 2",)))
        assert again.verdict is Verdict.PASSED and sb.replaced == 0, again


@ROOT_ONLY
def test_a_pids_cgroup_or_a_setting_of_none_keeps_the_plain_sandbox(bwrap_ok):
    if cgroups.pids_cgroup_writable():
        assert not pool.own_user_namespaces(SandboxConfig(backend="bwrap"))
    assert not pool.own_user_namespaces(
        SandboxConfig(backend="bwrap", use_pids_cgroup=False, root_program_uid=None)
    )


@ROOT_ONLY
def test_without_a_user_namespace_the_sandbox_runs_as_before_and_says_why(bwrap_ok, monkeypatch, caplog):
    def refused(outer: int, timeout_s: float = 10.0) -> int:
        raise OSError("user namespaces are off here")

    monkeypatch.setattr(userns, "make", refused)
    cfg = SandboxConfig(backend="bwrap", workers=1, use_pids_cgroup=False, timeout_s=4.5)  # a fresh probe
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.sandbox.pool"):
        with make_sandbox(cfg) as sb:
            assert not sb.own_userns
            res = sb.run(Program(code="def f(x):\n    return x + 1\n", tests=("assert f(1) == 2",)))
            assert res.verdict is Verdict.PASSED, res
    said = caplog.text
    assert "cannot run as a uid that is not root" in said and "user namespaces are off here" in said
    assert "nothing bounds the processes" in said


# -- workspace sessions (the agent envs) ---------------------------------------------------------


@pytest.fixture
def repo(tmp_path):
    d = tmp_path / "repo"
    d.mkdir()
    (d / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=d, check=True)
    return d


@pytest.fixture
def fresh_session_probe(monkeypatch):
    from lit_codeRL.sandbox import workspace

    monkeypatch.setattr(workspace, "_USERNS_PROBLEM", {})
    return workspace


@ROOT_ONLY
def test_a_root_trainers_session_runs_as_another_uid_and_outlives_a_fork_bomb(
    bwrap_ok, repo, fresh_session_probe
):
    cfg = WorkspaceConfig(backend="bwrap", use_pids_cgroup=False, max_processes=64)
    with open_workspace(cfg, repo) as ws:
        who = ws.run("id -u; cat /proc/self/uid_map").output.split()
        assert who[0] == "65534" and who[4] == "65534" and int(who[5]) >= cfg.root_program_uid, who
        r = ws.run("bomb() { bomb | bomb; }; bomb", timeout=3)
        assert r.timed_out or r.exit_code != 0, r
        assert "fork" in r.output, r  # the kernel refused the forks: not just the clock
        assert ws.alive
        ws.run("sed -i 's/a - b/a + b/' calc.py")
        assert "+    return a + b" in ws.diff()
    assert fresh_session_probe._USERNS_PROBLEM == {"bwrap": None}


@ROOT_ONLY
@pytest.mark.parametrize("failure", ["no namespace", "bwrap refuses it"])
def test_a_session_that_cannot_have_its_own_namespace_runs_as_before(
    bwrap_ok, repo, fresh_session_probe, monkeypatch, caplog, failure
):
    def no_namespace(outer: int, timeout_s: float = 10.0) -> int:
        raise OSError("user namespaces are off here")

    def own_namespace(outer: int, timeout_s: float = 10.0) -> int:
        return os.open("/proc/self/ns/user", os.O_RDONLY)  # bwrap cannot join the one it is in

    monkeypatch.setattr(userns, "make", no_namespace if failure == "no namespace" else own_namespace)
    cfg = WorkspaceConfig(backend="bwrap", use_pids_cgroup=False)
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.sandbox.workspace"):
        for _ in range(2):  # said once; the second session does not try
            with open_workspace(cfg, repo) as ws:
                assert ws.run("id -u").output == "65534\n"
                assert ws.run("cat /proc/self/uid_map").output.split()[:2] == ["65534", "0"]
    assert caplog.text.count("workspace sessions cannot run as a uid that is not root") == 1, caplog.text
    assert fresh_session_probe._USERNS_PROBLEM["bwrap"]


def test_a_sessions_command_line_joins_its_namespace_and_bounds_commands():
    from lit_codeRL.sandbox.workspace_argv import bwrap_workspace_argv

    cfg = WorkspaceConfig(backend="bwrap", max_processes=50)
    argv = bwrap_workspace_argv(
        cfg, "/srv/repo", toolchain="/srv/tools", scratch={"/scratch": 1 << 20}, userns_fd=9
    )
    assert argv[argv.index("--userns") + 1] == "9" and "--unshare-user" not in argv
    server = json.loads(argv[-1])
    assert server["drop_to"] == userns.SANDBOX_ID and server["nproc"] == 50  # RLIMIT_NPROC binds it now
    tmpfs = [i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i - 2] == "--size"]  # not the masks
    assert len(tmpfs) >= 5 and all(argv[i - 4 : i - 2] == ["--perms", "1777"] for i in tmpfs), argv
    assert ["--perms", "0755", "--dir", "/opt"] == argv[argv.index("/opt") - 3 : argv.index("/opt") + 1]


@pytest.mark.parametrize("bad", [0, -5, 1 << 32])
def test_a_base_uid_that_is_root_or_leaves_no_room_is_refused(bad):
    with pytest.raises(ValueError, match="sandbox.root_program_uid"):
        SandboxConfig(root_program_uid=bad)
    with pytest.raises(ValueError, match="workspace.root_program_uid"):
        WorkspaceConfig(root_program_uid=bad)
    assert SandboxConfig(root_program_uid=None).root_program_uid is None


@ROOT_ONLY
def test_making_namespaces_leaves_no_process_or_descriptor_behind(leak_check):
    if not shutil.which("unshare", path="/usr/bin:/bin"):
        pytest.skip("util-linux unshare is needed here")
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):
        os.close(userns.make(userns.host_uid(100000)))
    assert len(os.listdir("/proc/self/fd")) == before
    leak_check("sleep 60")
