"""Workspace sessions through real bubblewrap: commands and shell state, files, diff, isolation,
resource attacks (each leaving the host, the pool and the next session intact with nothing
behind), the pool, teardown when the trainer dies, and the apptainer backend's argv and lifecycle
(a fake ``apptainer`` on PATH; the real one when installed with an image)."""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from lit_codeRL.sandbox import backends, cgroups
from lit_codeRL.sandbox.workspace import (
    CPU_LIMIT_EXIT,
    PLUGINS_IN,
    SERVER_IN,
    Workspace,
    WorkspaceConfig,
    WorkspaceDead,
    WorkspaceError,
    WorkspacePool,
    apptainer_server_argv,
    apptainer_start_argv,
    apptainer_stop_argv,
    bwrap_workspace_argv,
    instance_name,
    open_workspace,
    workspace_image,
)
from lit_codeRL.sandbox.workspace_argv import STEADY_PLUGIN

CFG = WorkspaceConfig(backend="bwrap", command_timeout_s=10.0, memory_mb=1024, disk_mb=64, grace_s=5.0)


@pytest.fixture(autouse=True)
def _bwrap(request) -> None:
    if request.node.name != "test_apptainer_argv":  # pure argv test: runs anywhere
        request.getfixturevalue("bwrap_ok")  # skip without bubblewrap, fail when it is broken


def git(cwd: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    return subprocess.run(
        ["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (r / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    (r / "blob.bin").write_bytes(bytes(range(256)))
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def _tree_digest(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _cgroup_dirs() -> set[str]:
    out = set()
    for parent in Path("/sys/fs/cgroup").rglob("lit_coderl"):
        out |= {str(d) for d in parent.iterdir() if d.is_dir()}
    return out


@pytest.fixture
def clean_host(leak_check):
    """Yields a check that no process, /tmp entry or cgroup the test made is left behind."""
    tmp_before = set(os.listdir("/tmp"))
    cg_before = _cgroup_dirs()

    def check() -> None:
        leak_check("ws_server.py")
        # other programs use /tmp too: ours would be named lcrl*
        assert {n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("lcrl")} == set()
        assert _cgroup_dirs() - cg_before == set()

    return check


# -- commands, state, files, diff ------------------------------------------------------------------


def test_commands_exit_codes_and_persistent_shell_state(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        r = ws.run("pwd; ls")
        assert r.exit_code == 0 and not r.timed_out and not r.truncated
        assert r.output.splitlines()[0] == Workspace.REPO
        assert {"calc.py", "test_calc.py"} <= set(r.output.split())
        assert ws.run("exit 3").exit_code == 3
        assert ws.run("false").exit_code == 1
        assert ws.run("echo err >&2; echo out").output == "err\nout\n"
        assert ws.run("if").exit_code == 2  # a syntax error is the command's exit status
        # cwd and exported variables persist; unexported ones and unset ones do not
        assert ws.run("mkdir -p sub/dir && cd sub/dir && export FOO=bar && LOCAL=1").exit_code == 0
        assert (
            ws.run("pwd; echo $FOO; echo ${LOCAL:-none}").output == f"{Workspace.REPO}/sub/dir\nbar\nnone\n"
        )
        ws.run("unset FOO; cd ..")
        assert ws.run("pwd; echo ${FOO:-gone}").output == f"{Workspace.REPO}/sub\ngone\n"
        # state is saved even when the command exits early
        ws.run("cd /tmp; export X=1; exit 5")
        assert ws.run("pwd; echo $X").output == "/tmp\n1\n"
        assert ws.run("echo $SHLVL").output == "1\n"  # not counted up per command
        # the toolchain: python, pytest, git
        res = ws.run("cd /workspace/repo && python -m pytest -q -p no:cacheprovider test_calc.py")
        assert res.exit_code == 1 and "1 failed" in res.output
        assert ws.run("pytest --version").exit_code == 0
        assert ws.run("python3 -c 'import pluggy, iniconfig, packaging; print(1)'").output == "1\n"
        assert ws.run("git log --oneline | wc -l").output.strip() == "1"


def test_output_head_tail_truncation(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        r = ws.run("seq 1 100000", max_output=100)
        assert r.truncated and r.output_bytes == len("\n".join(map(str, range(1, 100001)))) + 1
        head, _, tail = r.output.partition("\n[... ")
        assert head.startswith("1\n2\n3\n") and len(head) == 50
        cut, _, rest = tail.partition(" characters cut ...]\n")
        assert int(cut) == r.output_bytes - 100
        assert rest.endswith("99999\n100000\n") and len(rest) == 50
        small = ws.run("echo hello", max_output=100)
        assert small.output == "hello\n" and not small.truncated
        assert len(ws.run("seq 1 5000").output) <= CFG.max_output_chars + 60


def test_read_and_write_files(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        assert ws.read_file("calc.py") == (repo / "calc.py").read_bytes()
        ws.write_file("pkg/new.py", "X = 1\n")
        ws.write_file("/tmp/raw.bin", b"\x00\xff", confine=False)  # the trainer's own path
        assert ws.read_file(f"{Workspace.REPO}/pkg/new.py") == b"X = 1\n"
        assert ws.read_file("/tmp/raw.bin", confine=False) == b"\x00\xff"
        assert ws.read_file("calc.py", max_bytes=3) == b"def"
        assert ws.run("cat pkg/new.py").output == "X = 1\n"
        with pytest.raises(WorkspaceError, match="^missing.txt: no such file or directory$"):
            ws.read_file("missing.txt")
        assert ws.alive  # a failed request is not a dead session


def test_an_edit_of_the_same_size_in_the_same_second_runs_the_new_code(repo: Path) -> None:
    """A .pyc counts as fresh while its source keeps its size and its mtime's second: with a
    bytecode cache, swapping ``+`` for ``*`` right after a test run ran the old code (a debugging
    agent saw its correct fix fail). The workspace writes no bytecode."""
    with open_workspace(CFG, repo) as ws:
        ws.write_file("calc.py", "def add(a, b):\n    return a + b\n")
        ws.run("touch -d @1700000000 calc.py")
        assert ws.run("python3 -c 'import calc; print(calc.add(2, 3))'").output == "5\n"
        ws.write_file("calc.py", "def add(a, b):\n    return a * b\n")  # the same size
        ws.run("touch -d @1700000000 calc.py")  # and the same second
        assert ws.run("python3 -c 'import calc; print(calc.add(2, 3))'").output == "6\n"
        assert ws.run("python3 -m pytest -q test_calc.py").exit_code == 1  # pytest sees it too
        assert ws.run("find . -name '*.pyc' | wc -l").output.strip() == "0"


def test_diff_new_deleted_binary_and_index_untouched(repo: Path) -> None:
    before = _tree_digest(repo)
    with open_workspace(CFG, repo) as ws:
        assert ws.diff() == ""
        ws.run("sed -i 's/a - b/a + b/' calc.py && rm test_calc.py && printf '\\x00\\x01\\x02' > new.bin")
        ws.run("mkdir -p d && echo hi > d/n.txt && git add new.bin")  # the agent's own index
        status_before = ws.run("git status --porcelain").output
        d = ws.diff()
        assert "+    return a + b" in d and "-    return a - b" in d
        assert "deleted file mode" in d and "a/test_calc.py" in d
        assert "diff --git a/d/n.txt b/d/n.txt" in d and "+hi" in d
        assert "diff --git a/new.bin b/new.bin" in d and "GIT binary patch" in d
        assert ws.run("git status --porcelain").output == status_before  # index untouched
        # bytecode that running the code leaves behind (the workspace writes none unless asked) is
        # not part of the change
        ws.run(
            "env -u PYTHONDONTWRITEBYTECODE python -c 'import calc' && mkdir -p d/__pycache__ && "
            "echo x > d/__pycache__/m.pyc && echo y > z.pyc"
        )
        assert ws.run("ls __pycache__").output.startswith("calc.")
        assert ws.diff() == d and ".pyc" not in d
        # the diff applies to the pristine repository and reproduces the agent's tree
        patch = repo.parent / "agent.patch"
        patch.write_bytes(d.encode(errors="surrogateescape"))
        copy = repo.parent / "copy"
        shutil.copytree(repo, copy)
        git(copy, "apply", "--binary", str(patch))
        assert (copy / "new.bin").read_bytes() == b"\x00\x01\x02"
        assert not (copy / "test_calc.py").exists() and (copy / "d/n.txt").read_text() == "hi\n"
        # an agent git config cannot run its own diff driver through the trusted diff
        ws.run("git config diff.external 'sh -c \"echo PWNED\"'; echo '*.py diff=evil' > .gitattributes")
        ws.run("git config diff.evil.textconv 'echo PWNED'")
        assert "PWNED" not in ws.diff()
    assert _tree_digest(repo) == before  # the host repository is never modified


def test_a_large_repository_diffs_with_no_agent_action(tmp_path: Path) -> None:
    # 20k tracked files with long paths: a 5 MB git index, more than the state tmpfs's fixed 4 MiB,
    # where the diff builds its throwaway index (a real repository of ~40k files is as large)
    big = tmp_path / "big"
    deep = big / ("p" * 60) / ("q" * 60)
    deep.mkdir(parents=True)
    for i in range(20_000):
        (deep / f"f{i:05d}_{'x' * 60}.txt").touch()
    (big / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(big, "init", "-q")
    git(big, "add", "-A")
    git(big, "commit", "-qm", "base")
    assert (big / ".git" / "index").stat().st_size > 4 << 20
    with open_workspace(replace(CFG, disk_mb=256), big) as ws:
        ws.run("sed -i 's/a - b/a + b/' calc.py && touch new.txt")
        d = ws.diff()
    assert "+    return a + b" in d and "b/new.txt" in d and d.count("diff --git") == 2


def test_non_git_directory_gets_a_base_commit(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "f.txt").write_text("a\n")
    with open_workspace(CFG, tmp_path / "plain") as ws:
        assert ws.base and ws.diff() == ""
        ws.run("echo b >> f.txt")
        assert "+b" in ws.diff()


# -- isolation -------------------------------------------------------------------------------------


def test_no_network(repo: Path) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    probe = textwrap.dedent(
        f"""
        import socket
        for addr in [("1.1.1.1", 53), ("127.0.0.1", {port})]:
            s = socket.socket(); s.settimeout(2)
            try:
                s.connect(addr); print("CONNECTED", addr)
            except OSError as e:
                print("refused", type(e).__name__)
        """
    )
    try:
        with open_workspace(CFG, repo) as ws:
            ws.write_file("/tmp/probe.py", probe, confine=False)
            out = ws.run("python /tmp/probe.py").output
            assert "CONNECTED" not in out and out.count("refused") == 2
            ifaces = ws.run("python -c 'import socket; print([n for _, n in socket.if_nameindex()])'")
            assert ifaces.output == "['lo']\n"
    finally:
        srv.close()


def test_no_host_environment_variables(repo: Path, monkeypatch) -> None:
    monkeypatch.setenv("LCRL_SECRET_TOKEN", "hunter2-secret")
    with open_workspace(CFG, repo, env={"EXTRA": "1", "PATH": "/opt/x/bin:$PATH"}) as ws:
        out = ws.run("env; cat /proc/1/environ 2>&1; cat /proc/self/environ").output
        assert "hunter2" not in out and "LCRL_SECRET" not in out
        assert "EXTRA=1" in out
        assert ws.run("echo $PATH").output.startswith("/opt/x/bin:/opt/lcrl/tools/bin:")
        assert ws.run("echo $HOME").output == "/tmp/home\n"


def test_host_filesystem_not_visible_or_writable(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        assert ws.run("ls /work").exit_code != 0
        assert ws.run(f"ls {repo.parent}").exit_code != 0  # the host-side test dir
        root = ws.run("ls -A /root").output.split()
        assert root == [".pyenv"] or root == []  # only the interpreter's own files, if under /root
        for target in (
            "/usr/evil",
            "/root/evil",
            "/etc/evil",
            "/evil",
            "/dev/evil",
            "/opt/lcrl/tools/evil",
            "/opt/lcrl/repo-src/evil",
        ):
            assert ws.run(f"touch {target}").exit_code != 0, target
        assert (
            ws.run("cat /proc/1/cmdline").exit_code != 0
            or "ws_server" in ws.run("cat /proc/1/cmdline").output
        )
        # the server's pipes to the trainer are not reachable (it is not dumpable)
        for cmd in (
            "echo forged > /proc/1/fd/1",
            "readlink /proc/1/fd/0",
            "cat /proc/1/environ",
            "cat /proc/1/mem",
        ):
            assert ws.run(cmd).exit_code != 0, cmd
        assert ws.run("id -u").output == "65534\n"


# -- resource attacks --------------------------------------------------------------------------------


def _still_works(ws: Workspace) -> None:
    r = ws.run("echo ok", timeout=10)
    assert (r.exit_code, r.output) == (0, "ok\n"), r


def _next_session_works(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        _still_works(ws)
        assert "calc.py" in ws.run("ls").output


def test_fork_bomb(repo: Path, clean_host) -> None:
    with open_workspace(replace(CFG, max_processes=64), repo) as ws:
        r = ws.run(":(){ :|:& };:", timeout=3)
        # the bomb backgrounds itself; the server ends it at command end, and only the outer
        # wall clock (which kills the whole session) could have stopped it otherwise
        assert ws.alive, r
        r = ws.run("bomb() { bomb | bomb; }; bomb", timeout=3)  # one that stays in the foreground
        assert r.timed_out or r.exit_code != 0
        _still_works(ws)
        assert ws.run("ls /proc | grep -c '^[0-9]'").output.strip() in {"1", "2", "3", "4"}
    clean_host()
    _next_session_works(repo)
    clean_host()


def test_rm_rf_root(repo: Path, clean_host) -> None:
    before = _tree_digest(repo)
    with open_workspace(CFG, repo) as ws:
        ws.run("rm -rf / --no-preserve-root", timeout=20)
        _still_works(ws)  # the shell and the toolchain are read-only
        assert ws.run("python -c 'print(2)'").output == "2\n"
        assert ws.run("git init -q /tmp/r && cd /tmp/r && git commit -q --allow-empty -m x").exit_code == 0
    clean_host()
    assert _tree_digest(repo) == before
    _next_session_works(repo)
    clean_host()


def test_command_that_never_returns(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        r = ws.run("echo start; sleep 100000", timeout=1)
        assert r.timed_out and r.exit_code is None and r.output == "start\n"
        assert ws.alive  # the inner timeout ended it, not the outer clock that kills the session
        _still_works(ws)
        assert "sleep" not in ws.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").output
    clean_host()


def test_cpu_limit_stops_a_busy_loop_not_a_sleeper(repo: Path, clean_host) -> None:
    """``cpu_s`` stops each process that burns that much CPU (an edit that loops forever), in
    about that time and not at the wall clock; a process that waits as long is not touched; the
    next command runs without the limit. Each result reports its processes' CPU time."""
    import time

    with open_workspace(CFG, repo) as ws:
        t0 = time.monotonic()
        r = ws.run("echo start; python3 -c 'while True: pass'; echo after", timeout=60, cpu_s=1)
        assert time.monotonic() - t0 < 15 and not r.timed_out, r
        assert r.output.startswith("start\n") and "CPU time limit exceeded" in r.output
        assert r.output.endswith("after\n"), "only the looping process was stopped, not the shell"
        r = ws.run("python3 -c 'while True: pass'", timeout=60, cpu_s=1)
        assert r.exit_code == CPU_LIMIT_EXIT and not r.timed_out, r
        r = ws.run("sleep 3; echo woke", timeout=60, cpu_s=1)
        assert (r.exit_code, r.output) == (0, "woke\n"), r
        assert r.cpu_s is not None and r.cpu_s < 1, "the result counts CPU time, not waiting"
        r = ws.run(
            "python3 -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 3: pass\nprint(\"done\")'",
            timeout=60,
        )
        assert (r.exit_code, r.output) == (0, "done\n"), "no cpu_s: no CPU limit left over"
        assert 3 <= r.cpu_s < 6, "the command's CPU time, its child's included"
        _still_works(ws)
    clean_host()


def test_detached_processes_are_killed_at_command_end(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        r = ws.run("nohup sleep 1001 >/dev/null 2>&1 & setsid sleep 1002 & (sleep 1003 &) ; echo started")
        assert (r.exit_code, r.output, r.timed_out) == (0, "started\n", False), r
        assert not [p for p in _host_cmdlines() if "sleep 100" in p]
        inside = ws.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '").output
        assert "sleep" not in inside
        # a background writer cannot change the tree after its command ended
        ws.run("(sleep 1; echo late > late.txt) &")
        time.sleep(1.5)
        assert ws.run("ls late.txt").exit_code != 0
    clean_host()


def _host_cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def test_gigabytes_of_output(repo: Path, clean_host) -> None:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_workspace(CFG, repo) as ws:
        r = ws.run("yes | head -c 3G", timeout=60, max_output=1000)
        assert r.exit_code == 0 and r.truncated and r.output_bytes == 3 << 30
        assert len(r.output) < 1100 and r.output.startswith("y\ny\n") and r.output.endswith("y\ny\n")
        r = ws.run("cat /dev/zero", timeout=2, max_output=1000)
        assert r.timed_out and r.truncated and r.output_bytes > 10 << 20
        _still_works(ws)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100_000  # KiB: never buffered
    clean_host()


def test_filling_the_disk(repo: Path, clean_host) -> None:
    host_free = shutil.disk_usage("/").free
    with open_workspace(CFG, repo) as ws:  # disk_mb=64
        r = ws.run("dd if=/dev/zero of=big bs=1M count=10000", timeout=30)
        assert r.exit_code != 0 and "No space left" in r.output
        assert ws.run("fallocate -l 1G big2").exit_code != 0
        assert ws.run("df -m /workspace | tail -1 | awk '{print $2}'").output.strip() in {"64", "65"}
        _still_works(ws)
        assert ws.run("rm -f big big2 && echo x > small && cat small").output == "x\n"
    assert abs(shutil.disk_usage("/").free - host_free) < 32 << 20
    clean_host()
    _next_session_works(repo)


def test_kill_everything_from_inside(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        r = ws.run("sleep 50 & kill -9 -1; echo survived")  # bash's kill spares the shell itself
        assert r.exit_code == 0 and "survived" in r.output
        r = ws.run("python -c 'import os; os.kill(-1, 9)'; echo unreachable")
        assert r.exit_code == 137 and "unreachable" not in r.output
        assert ws.run("kill -9 1; kill -STOP 1; kill -INT 1; echo still").output == "still\n"
        _still_works(ws)
        assert ws.diff() == ""
    clean_host()


def test_outer_wall_clock_kills_the_session(repo: Path, clean_host) -> None:
    # an outer limit shorter than the inner one stands in for a server that stops answering
    ws = open_workspace(replace(CFG, grace_s=-1.5), repo)
    r = ws.run("sleep 30", timeout=2)
    assert r.exit_code is None and r.timed_out and "killed" in r.output
    assert not ws.alive
    with pytest.raises(WorkspaceDead, match="did not answer"):
        ws.run("echo hi")
    with pytest.raises(WorkspaceDead):
        ws.diff()
    ws.close()  # idempotent
    clean_host()


def test_memory_limit_per_command(repo: Path) -> None:
    with open_workspace(replace(CFG, memory_mb=256), repo) as ws:
        r = ws.run("python -c 'x = bytearray(512 << 20)'")
        assert r.exit_code != 0 and "MemoryError" in r.output
        _still_works(ws)


# -- teardown ------------------------------------------------------------------------------------------


def test_close_is_idempotent_and_finalizer_cleans_up(repo: Path, clean_host) -> None:
    ws = open_workspace(CFG, repo)
    ws.run("sleep 1000 &")
    ws.close()
    ws.close()
    assert not ws.alive
    with pytest.raises(WorkspaceDead):
        ws.run("true")
    clean_host()
    ws = open_workspace(CFG, repo)
    del ws
    gc.collect()
    clean_host()


@pytest.mark.host_exclusive
def test_killed_trainer_leaves_nothing_running(repo: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace
        ws = open_workspace(WorkspaceConfig(backend="bwrap"), {str(repo)!r})
        ws.run("echo data > f.txt")
        print(ws._res.proc.pid, flush=True)
        time.sleep(1000)
        """
    )
    tmp_before = set(os.listdir("/tmp"))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    sandbox_pid = int(child.stdout.readline())
    tree = [sandbox_pid, *_descendants(sandbox_pid)]
    assert len(tree) >= 2
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.05)
    assert not [p for p in tree if _alive(p)]
    assert {n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("lcrl")} == set()
    cgroups.sweep_stale_cgroups()  # what the next open does
    made = [d for d in _cgroup_dirs() if any(f"/{k}{child.pid}-" in d for k in "mwcs")]
    assert not made, "the killed trainer's pids, memory and cpu cgroups are swept"


def _descendants(pid: int) -> list[int]:
    from lit_codeRL.sandbox._server import _descendants as desc

    return list(desc(pid))


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


# -- pool ------------------------------------------------------------------------------------------------


def test_pool_bounds_isolates_and_closes(repo: Path, clean_host) -> None:
    pool = WorkspacePool(replace(CFG, max_sessions=2))
    a, b = pool.open(repo), pool.open(repo)
    assert pool.sessions == 2
    a.run("echo secret-a > mine.txt; echo t > /tmp/a.txt")
    assert b.run("ls mine.txt /tmp/a.txt").exit_code != 0  # no shared files
    assert b.run("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").output.count("ws_server") == 1

    opened: list[Workspace] = []
    t = threading.Thread(target=lambda: opened.append(pool.open(repo)))
    t.start()
    time.sleep(1.0)
    assert not opened  # blocked: two sessions are open
    a.close()
    t.join(timeout=30)
    assert len(opened) == 1 and pool.sessions == 2
    assert opened[0].run("ls mine.txt").exit_code != 0
    # a session opened from a thread that has ended keeps working (spawned by a long-lived thread)
    _still_works(opened[0])
    pool.close()
    assert not b.alive and not opened[0].alive and pool.sessions == 0
    with pytest.raises(RuntimeError, match="closed"):
        pool.open(repo)
    clean_host()


def test_parallel_sessions_in_threads(repo: Path, clean_host) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with WorkspacePool(replace(CFG, max_sessions=4)) as pool:

        def episode(i: int) -> str:
            with pool.open(repo) as ws:
                ws.run(f"echo {i} > id.txt")
                return ws.run("cat id.txt; ls /tmp | wc -l").output

        with ThreadPoolExecutor(6) as ex:
            outs = list(ex.map(episode, range(8)))
    assert outs == [f"{i}\n1\n" for i in range(8)]  # /tmp holds only HOME
    clean_host()


# -- argv and the apptainer backend ----------------------------------------------------------------------


def test_bwrap_argv_flags(repo: Path) -> None:
    argv = bwrap_workspace_argv(
        CFG,
        str(repo),
        toolchain="/tc",
        binds={"/tools/search": "/opt/tools/search"},
        writable_binds={"/out": "/results"},
    )
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--disable-userns"):
        assert flag in argv
    i = argv.index("/workspace")
    assert argv[i - 3 : i] == ["--size", str(64 << 20), "--tmpfs"]
    assert ["--ro-bind", str(repo), "/opt/lcrl/repo-src"] == argv[
        argv.index(str(repo)) - 1 : argv.index(str(repo)) + 2
    ]
    assert "/opt/tools/search" in argv and argv[argv.index("/opt/tools/search") - 2] == "--ro-bind"
    assert argv[argv.index("/results") - 2] == "--bind"
    cfg = json.loads(argv[-1])
    assert cfg["pid1"] and cfg["env"]["HOME"] == "/tmp/home" and argv[-2] == SERVER_IN
    own = ("PATH", "HOME", "LANG", "USER", "TERM", "LOGNAME", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH",
           "PYTEST_PLUGINS")  # fmt: skip
    assert not any(k in cfg["env"] for k in os.environ if k not in own)  # nothing of the host's
    assert cfg["env"]["PYTHONDONTWRITEBYTECODE"] == "1"
    # the toolchain's and the steady plugin's, not the host's
    assert cfg["env"]["PYTHONPATH"] == f"/opt/lcrl/tools/site:{PLUGINS_IN}"
    assert cfg["env"]["PYTEST_PLUGINS"] == "lcrl_steady"
    assert argv[argv.index(f"{PLUGINS_IN}/lcrl_steady.py") - 2 :][:2] == ["--ro-bind", str(STEADY_PLUGIN)]


def _layout(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


LIB = "/workspace/repo/lib"


@pytest.mark.parametrize(
    "files, src",
    [
        ({"pyproject.toml": "", "src/pkg/__init__.py": ""}, True),
        # the root package directory the packaging declares (markdown2: lib/markdown2.py)
        ({"setup.py": "setup(package_dir={'': 'lib'}, py_modules=['md'])", "lib/md.py": ""}, LIB),
        ({"setup.cfg": "[options]\npackage_dir =\n    =lib\n", "lib/pkg/__init__.py": ""}, LIB),
        ({"pyproject.toml": "[tool.setuptools.package-dir]\n'' = 'lib'\n", "lib/pkg/__init__.py": ""}, LIB),
        ({"setup.py": "setup(package_dir={'': 'py/src'})", "py/src/m.py": ""}, "/workspace/repo/py/src"),
        ({"setup.py": "setup(package_dir={'': '../outside'})", "lib/m.py": ""}, False),
        ({"setup.py": "setup(package_dir={'': '/abs'})", "src/m.py": ""}, True),  # not in it: src
        ({"setup.py": "setup(package_dir={'': 'lib'})", "src/m.py": ""}, False),  # declared wins
        ({"setup.py": "setup(package_dir={'': 'lib'})", "lib/__init__.py": ""}, False),  # a package
        ({"setup.py": "setup(package_dir={'pkg': 'lib'})", "src/m.py": ""}, True),  # not the root's
        ({"setup.py": "setup(package_dir=dirs)", "src/m.py": ""}, True),  # not a literal: src
        ({"setup.py": "setup(\n", "src/m.py": ""}, True),  # does not parse: src
        ({"setup.py": "", "src/one.py": ""}, True),
        ({"setup.cfg": "", "src/pkg/__init__.py": "", "src/notes.txt": ""}, True),
        ({"src/pkg/__init__.py": ""}, False),  # no packaging file: not a project's own code
        ({"pyproject.toml": "", "src/__init__.py": "", "src/m.py": ""}, False),  # `src` is a package
        ({"pyproject.toml": "", "src/queue.py": "", "src/pkg/__init__.py": ""}, False),  # stdlib name
        ({"pyproject.toml": "", "src/data.json": "", "src/nopkg/x.txt": ""}, False),  # no Python
        ({"pyproject.toml": "", "pkg/__init__.py": ""}, False),  # flat layout
    ],
)
def test_src_layout_is_read_from_the_base_checkout(
    tmp_path: Path, files: dict[str, str], src: bool | str
) -> None:
    """A src-layout project's code (``src``, or the root package directory its packaging declares)
    goes on its sessions' ``PYTHONPATH`` after the toolchain, as an installed copy would import;
    anything else adds nothing (``repo_python_path``)."""
    from lit_codeRL.sandbox.repo_layout import import_root_of
    from lit_codeRL.sandbox.workspace_argv import python_path_env, repo_python_path

    repo = _layout(tmp_path / "r", files)
    root = src if isinstance(src, str) else "/workspace/repo/src"
    assert repo_python_path(repo) == ([root] if src else [])
    # synthesis reads the same layout from the files it holds (its metadata, its modules' names)
    assert import_root_of(files) == (root.removeprefix("/workspace/repo/") if src else None)
    head = ["/opt/lcrl/tools/site"]
    want = f"/opt/lcrl/tools/site:{root}" if src else "/opt/lcrl/tools/site"
    assert python_path_env(head, repo) == {"PYTHONPATH": want}
    assert python_path_env([], repo) == ({"PYTHONPATH": root} if src else {})
    exe = apptainer_server_argv(CFG, "lcrl-ws-x", python_path_env([], repo))
    assert json.loads(exe[-1])["env"].get("PYTHONPATH") == (root if src else None)


def test_src_layout_symlinked_src_is_not_followed(tmp_path: Path) -> None:
    from lit_codeRL.sandbox.workspace_argv import repo_python_path

    elsewhere = _layout(tmp_path / "elsewhere", {"pkg/__init__.py": ""})
    repo = _layout(tmp_path / "r", {"pyproject.toml": ""})
    (repo / "src").symlink_to(elsewhere)
    assert repo_python_path(repo) == []


def test_a_src_layout_package_imports_in_its_sessions_as_installed(tmp_path: Path) -> None:
    """In a real session of a src-layout repository, ``python -m pytest`` and plain ``python``
    import the package from ``src`` anywhere in the workspace, with the toolchain before it on
    ``sys.path``; a ``src`` the agent makes in a flat repository changes nothing (the layout is
    the base's)."""
    repo = _layout(
        tmp_path / "proj",
        {
            "pyproject.toml": "[project]\nname = 'shapes'\n",
            "src/shapes/__init__.py": "def area(w, h):\n    return w * h\n",
            "tests/test_shapes.py": "from shapes import area\n\ndef test_area():\n    assert area(2, 3) == 6\n",
        },
    )
    with open_workspace(CFG, repo) as ws:
        out = ws.run("python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1", timeout=60)
        assert "1 passed" in out.output, out.output
        out = ws.run("cd tests && python -c 'import shapes, sys; print(shapes.area(4, 5))'", timeout=30)
        assert out.output.strip() == "20", out.output
        out = ws.run("python -c 'import sys; print(sys.path.index(\"/workspace/repo/src\") > "
                     "[p.endswith(\"site\") for p in sys.path].index(True))'", timeout=30)  # fmt: skip
        assert out.output.strip() == "True", out.output
    flat = _layout(tmp_path / "flat", {"pyproject.toml": "", "calc.py": "X = 1\n"})
    with open_workspace(CFG, flat) as ws:
        ws.run("mkdir -p src/sneaky && touch src/sneaky/__init__.py", timeout=10)
        out = ws.run("python -c 'import sneaky' 2>&1 | tail -1", timeout=30)
        assert "ModuleNotFoundError" in out.output, out.output


STEADY_TESTS = """\
import json, os, random, time

from hypothesis import given, settings, strategies as st

AT_IMPORT = random.random()
DRAWN = []


def test_unseeded_draws():
    assert AT_IMPORT == random.Random(0).random()  # what the module drew when it was imported
    assert random.random() == random.Random(0).random()  # and this test, whatever ran before


@settings(max_examples=4)
@given(st.integers())
def test_slow_property(x):
    DRAWN.append(x)
    time.sleep(0.3)  # past Hypothesis's default deadline of 200 ms


def test_zz_keep_examples():
    with open(os.environ["DRAWN"], "w") as f:
        json.dump(DRAWN, f)
"""


def test_the_agents_pytest_draws_numbers_and_examples_as_grading_does(tmp_path: Path) -> None:
    """Every pytest the agent runs loads the steady plugin grading's child loads
    (``sandbox/pytest_steady.py``): unseeded ``random`` draws are seeded per test and at import,
    Hypothesis draws the same examples in every run and has no deadline. Without it the first
    two tests fail here and pass when graded, and the examples differ from run to run."""
    repo = _layout(tmp_path / "proj", {"test_draws.py": STEADY_TESTS})
    with open_workspace(CFG.plus_toolchain(["hypothesis"]), repo) as ws:
        runs = []
        for n in range(2):
            out = ws.run(f"DRAWN=/tmp/drawn{n} python -m pytest -q -p no:cacheprovider 2>&1 | tail -3; "
                         f"cat /tmp/drawn{n}", timeout=120)  # fmt: skip
            assert "3 passed" in out.output, out.output
            runs.append(out.output.strip().splitlines()[-1])
        assert runs[0] == runs[1] and len(json.loads(runs[0])) >= 4, runs
        out = ws.run("(cd / && DRAWN=/tmp/d python -m pytest -q -p no:cacheprovider /workspace/repo) 2>&1 | tail -1",
                     timeout=120)  # fmt: skip
        assert "3 passed" in out.output, out.output  # from `/`, where every file is under the cwd
        out = ws.run("DRAWN=/tmp/d python -m pytest -q -p no:cacheprovider -p no:lcrl_steady 2>&1 | tail -1",
                     timeout=120)  # fmt: skip
        assert "2 failed" in out.output, out.output  # the control: the plugin is what does it


PLUGIN_MISMATCH = {
    # warnings are errors; an option of pytest-timeout, which the sandbox lacks; pytest-asyncio
    # without asyncio_default_fixture_loop_scope, which it asks every repository to set
    "pyproject.toml": '[tool.pytest.ini_options]\ntimeout = 30\nfilterwarnings = ["error"]\n',
    "calc.py": "import warnings\n\n\ndef add(a, b):\n    return a + b\n\n\n"
    "def old_add(a, b):\n    warnings.warn('use add', DeprecationWarning)\n    return a + b\n",
    "test_calc.py": "import pytest\nimport pytest_asyncio\n\nfrom calc import add, old_add\n\n\n"
    "@pytest_asyncio.fixture\nasync def two():\n    return 2\n\n\n"
    "@pytest.mark.asyncio\nasync def test_add(two):\n    assert add(two, 1) == 3\n\n\n"
    "def test_old_add():\n    assert old_add(1, 1) == 2\n",
}


def test_the_agents_pytest_starts_where_only_the_sandboxs_plugins_warn(tmp_path: Path) -> None:
    """A repository whose warnings are errors starts its tests in a session (and in grading: the
    same plugin) although the sandbox lacks a plugin its config names and its pytest-asyncio asks
    for an option the repository does not set: ``pytest_steady.SANDBOX_WARNINGS``. Its code's own
    warnings are still errors. Without the plugin pytest stops before any test runs."""
    repo = _layout(tmp_path / "proj", PLUGIN_MISMATCH)
    with open_workspace(CFG.plus_toolchain(["pytest-asyncio"]), repo) as ws:
        out = ws.run("python -m pytest -q -p no:cacheprovider 2>&1 | tail -3", timeout=120)
        assert "1 failed, 1 passed" in out.output and "DeprecationWarning: use add" in out.output, out.output
        out = ws.run("python -m pytest -q -p no:cacheprovider -p no:lcrl_steady; echo exit=$?", timeout=120)
        assert "passed" not in out.output and "asyncio_default_fixture_loop_scope" in out.output, out.output
        assert "exit=0" not in out.output


def test_apptainer_argv() -> None:
    start = apptainer_start_argv(
        "/img.sif", "lcrl-ws-x", "/scratch/work", "/repo", workspace_dir="/scratch/ws",
        binds={"/tools": "/opt/tools"}, writable_binds={"/out": "/results"},
    )  # fmt: skip
    assert start[:3] == ["apptainer", "instance", "start"] and start[-2:] == ["/img.sif", "lcrl-ws-x"]
    flags = start[3:-2]
    for flag in ("--containall", "--cleanenv", "--no-home", "--net", "--writable-tmpfs"):
        assert flag in flags
    assert flags[flags.index("--network") + 1] == "none"
    assert flags[flags.index("--no-mount") + 1] == "home,tmp,bind-paths"
    assert flags[flags.index("--workdir") + 1] == "/scratch/work"
    binds = [flags[i + 1] for i, f in enumerate(flags) if f == "--bind"]
    assert "/repo:/opt/lcrl/repo-src:ro" in binds and "/tools:/opt/tools:ro" in binds
    assert "/out:/results" in binds and "/scratch/ws:/workspace" in binds
    assert any(b.endswith(f":{SERVER_IN}:ro") for b in binds)
    assert f"{STEADY_PLUGIN}:{PLUGINS_IN}/lcrl_steady.py:ro" in binds
    exe = apptainer_server_argv(CFG, "lcrl-ws-x")
    assert exe[:2] == ["apptainer", "exec"] and "instance://lcrl-ws-x" in exe and exe[-2] == SERVER_IN
    assert not json.loads(exe[-1])["pid1"]
    assert apptainer_stop_argv("lcrl-ws-x") == ["apptainer", "instance", "stop", "lcrl-ws-x"]
    names = {instance_name() for _ in range(1000)}
    assert len(names) == 1000 and all(n.startswith(f"lcrl-ws-{os.getpid()}-") for n in names)


FAKE_APPTAINER = r'''#!{python} -I
"""A fake apptainer: records its argv, keeps instances as files, runs `exec` in bwrap with the
instance's binds (bwrap's own init as PID 1, like apptainer's)."""
import json, os, sys
LOG, STATE, SYSTEM, PY = {log!r}, {state!r}, {system!r}, {py!r}
argv = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps(argv) + "\n")
if argv[:2] == ["instance", "start"]:
    if os.path.exists(os.path.join(STATE, "FAIL_START")):
        sys.exit(255)
    name = argv[-1]
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    json.dump(binds, open(os.path.join(STATE, name), "w"))
    sys.exit(0)
if argv[:2] == ["instance", "stop"]:
    try:
        os.remove(os.path.join(STATE, argv[2]))
    except FileNotFoundError:
        sys.exit(255)
    sys.exit(0)
if argv[0] == "exec":
    i = next(i for i, a in enumerate(argv) if a.startswith("instance://"))
    binds = json.load(open(os.path.join(STATE, argv[i][len("instance://"):])))
    cmd = argv[i + 1:]
    if cmd[0] == "python3":
        cmd[0] = PY
    bw = ["bwrap", "--unshare-all", "--die-with-parent", *SYSTEM, "--proc", "/proc", "--dev", "/dev",
          "--tmpfs", "/tmp", "--tmpfs", "/run"]
    for b in binds:
        src, dst, *ro = b.split(":")
        bw += ["--ro-bind" if ro else "--bind", src, dst]
    os.execvp("bwrap", bw + ["--"] + cmd)
sys.exit(64)
'''


@pytest.fixture
def fake_apptainer(tmp_path: Path, monkeypatch) -> Path:
    interp = backends.interpreter(sys.executable)
    bindir, state = tmp_path / "fakebin", tmp_path / "instances"
    bindir.mkdir()
    state.mkdir()
    fake = bindir / "apptainer"
    fake.write_text(
        FAKE_APPTAINER.format(
            python=sys.executable, log=str(tmp_path / "argv.log"), state=str(state),
            system=backends.bwrap_system_binds(interp), py=interp.executable,
        )
    )  # fmt: skip
    fake.chmod(0o755)
    (tmp_path / "image.sif").write_text("fake")
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("LIT_CODERL_SWE_SIF", str(tmp_path / "image.sif"))
    return tmp_path


def _calls(tmp: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp / "argv.log").read_text().splitlines()]


def test_apptainer_lifecycle_with_fake_binary(repo: Path, fake_apptainer: Path, clean_host) -> None:
    cfg = replace(CFG, backend="auto")  # auto picks apptainer: binary and image present
    assert workspace_image(cfg) is not None
    with open_workspace(cfg, repo) as ws:
        assert ws.backend == "apptainer"
        assert ws.run("cat calc.py").output == (repo / "calc.py").read_text()
        ws.run("cd /tmp && export A=1 && echo hi > x")
        assert ws.run("pwd; echo $A; cat x").output == "/tmp\n1\nhi\n"
        ws.run("echo new > /workspace/repo/n.txt")
        assert "+new" in ws.diff()
        r = ws.run("sleep 1000 & setsid sleep 1001 & sleep 100", timeout=1)
        assert r.timed_out
        assert "sleep" not in ws.run("ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline").output
    calls = _calls(fake_apptainer)
    kinds = [c[:2] if c[0] == "instance" else c[:1] for c in calls]
    assert kinds == [["instance", "start"], ["exec"], ["instance", "stop"]]
    name = calls[0][-1]
    assert f"instance://{name}" in calls[1] and calls[2][-1] == name
    assert list((fake_apptainer / "instances").iterdir()) == []  # stopped
    clean_host()  # the host scratch dir (--workdir, /workspace) is gone too


def test_apptainer_stop_on_start_failure(repo: Path, fake_apptainer: Path, clean_host) -> None:
    (fake_apptainer / "instances" / "FAIL_START").write_text("")
    with pytest.raises(WorkspaceError, match="instance start failed"):
        open_workspace(replace(CFG, backend="apptainer"), repo)
    assert [c[:2] for c in _calls(fake_apptainer)] == [["instance", "start"], ["instance", "stop"]]
    clean_host()


@pytest.mark.host_exclusive
def test_apptainer_stopped_when_trainer_is_killed(repo: Path, fake_apptainer: Path) -> None:
    tmp_before = set(os.listdir("/tmp"))
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace
        ws = open_workspace(WorkspaceConfig(backend="apptainer"), {str(repo)!r})
        print(ws.run("echo up").output, flush=True)
        time.sleep(1000)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "up\n"
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and list((fake_apptainer / "instances").iterdir()):
        time.sleep(0.05)
    assert list((fake_apptainer / "instances").iterdir()) == []  # the watchdog stopped it
    assert _calls(fake_apptainer)[-1][:2] == ["instance", "stop"]
    while time.monotonic() < deadline and _new_lcrl_entries(tmp_before):
        time.sleep(0.05)
    assert _new_lcrl_entries(tmp_before) == set()  # ...and removed the host scratch dir


def _new_lcrl_entries(before: set[str]) -> set[str]:
    return {n for n in set(os.listdir("/tmp")) - before if n.startswith("lcrl")}


def test_apptainer_real(repo: Path, clean_host) -> None:
    if shutil.which("apptainer") is None:
        pytest.skip("apptainer is not installed on this machine")
    cfg = replace(CFG, backend="apptainer")
    if workspace_image(cfg) is None:
        pytest.skip("no apptainer image: build env/swe.def and set LIT_CODERL_SWE_SIF")
    with open_workspace(cfg, repo) as ws:
        _still_works(ws)
        assert (
            ws.run("python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)'").exit_code
            != 0
        )
        ws.run("sed -i 's/a - b/a + b/' calc.py")
        assert "+    return a + b" in ws.diff()
        assert ws.run("python3 -m pytest -q -p no:cacheprovider").exit_code == 0
        r = ws.run("dd if=/dev/zero of=big bs=1M count=200 && rm big && echo ok", timeout=60)
        assert r.output.endswith("ok\n")  # past apptainer's 64 MiB default tmpfs
    clean_host()
