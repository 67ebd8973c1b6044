"""Interactive pseudo-terminal sessions in a workspace, through real bubblewrap: a real pdb session
(on a script and on pytest), the end of the program, which requests end a session and which do
not, timeouts, detached children, output floods, the outer wall clock, and the server's own
``listdir``. Each attack leaves nothing running, in the sandbox or on the host."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

# the fake ``apptainer`` (bwrap's own init as PID 1, the server a subreaper): the other kill path
from test_workspace import fake_apptainer  # noqa: F401 - a fixture, used by name

from lit_codeRL.sandbox.workspace import (
    PtyResult,
    Workspace,
    WorkspaceConfig,
    WorkspaceDead,
    WorkspaceError,
    open_workspace,
)

CFG = WorkspaceConfig(backend="bwrap", command_timeout_s=10.0, memory_mb=1024, disk_mb=64, grace_s=5.0)
PDB = r"\(Pdb\) $"
PROG = "import sys\n\nx = 6 * 7\ny = x + 1\nz = y * 2\nprint('result', z)\n"
"""Line 4 is ``y = x + 1``: stopped there, ``x`` is 42 and ``y`` not yet set."""
TEST_PROG = "def test_triple():\n    value = 21\n    result = value * 3\n    assert result == 42\n"


@pytest.fixture(autouse=True)
def _bwrap(request) -> None:
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
    (r / "pkg" / "sub" / "deeper").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / "prog.py").write_text(PROG)
    (r / "test_prog.py").write_text(TEST_PROG)
    (r / "loop.py").write_text("n = 0\nwhile True:\n    n += 1\n")
    (r / "pkg" / "__init__.py").write_text("")
    (r / "pkg" / "sub" / "deep.py").write_text("")
    (r / "pkg" / "sub" / "deeper" / "x.txt").write_text("x\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


def _cgroup_dirs() -> set[str]:
    """This process's session cgroups (named ``<kind><pid>-``; other test runs make their own)."""
    out = set()
    for parent in Path("/sys/fs/cgroup").rglob("lit_coderl"):
        out |= {str(d) for d in parent.iterdir() if d.is_dir() and d.name[1:].startswith(f"{os.getpid()}-")}
    return out


def _my_sandbox_processes() -> list[str]:
    """Live sandbox processes below this test process (other test runs on the machine have their
    own sandboxes: a machine-wide match on ``ws_server.py`` would see theirs)."""
    parent, cmd = {}, {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            fields = stat[stat.rfind(b")") + 2 :].split()
            if fields[0] != b"Z":
                parent[int(name)] = int(fields[1])
                cmd[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    out, frontier = [], {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        out += [
            f"{p}: {cmd[p][:200]}" for p in frontier if "ws_server.py" in cmd[p] or cmd[p].startswith("bwrap")
        ]
    return out


@pytest.fixture
def clean_host(leak_check):
    """Yields a check that no process, host scratch dir or cgroup the test made is left behind."""
    tmp_before = set(os.listdir("/tmp"))
    cg_before = _cgroup_dirs()
    # sandboxes that other tests keep for the whole session (a session-scoped sandbox executor)
    # are not this test's
    sandboxes_before = set(_my_sandbox_processes())

    def new_sandboxes() -> list[str]:
        return [p for p in _my_sandbox_processes() if p not in sandboxes_before]

    def check() -> None:
        leak_check("sleep 730")  # the children tests start, wherever they were reparented
        deadline = time.monotonic() + 2.5
        while new_sandboxes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert new_sandboxes() == []
        assert {n for n in set(os.listdir("/tmp")) - tmp_before if n.startswith("lcrl-ws-")} == set()
        assert _cgroup_dirs() - cg_before == set()

    return check


def _host_cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def _inside_pids(ws: Workspace) -> list[str]:
    """The sandbox's processes, seen through ``listdir`` (which, unlike ``run``, kills nothing)."""
    listing = ws.listdir("/proc", depth=1, max_entries=10_000, confine=False)  # the trainer's own look
    return [e for e in listing if re.fullmatch(r"\d+/", e)]


def _pdb(ws: Workspace, *args: str, timeout: float = 20.0, python: str = "python") -> PtyResult:
    r = ws.pty_start([python, "-m", "pdb", *args], prompt=PDB, timeout=timeout)
    assert r.alive and not r.timed_out and r.output.endswith("(Pdb) "), r
    return r


def _ended(ws: Workspace) -> None:
    with pytest.raises(WorkspaceError, match="no interactive session is running"):
        ws.pty_send("p 1", PDB)


# -- a real debugger -----------------------------------------------------------------------------------


def test_pdb_session_breakpoint_print_step(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        r = _pdb(ws, "prog.py")
        assert r.output == f"> {Workspace.REPO}/prog.py(1)<module>()\n-> import sys\n(Pdb) "
        assert "\r" not in r.output and r.exit_code is None
        r = ws.pty_send("b 4", PDB)
        assert r.output == f"Breakpoint 1 at {Workspace.REPO}/prog.py:4\n(Pdb) "  # no echo of "b 4"
        r = ws.pty_send("c", PDB)
        assert r.output == f"> {Workspace.REPO}/prog.py(4)<module>()\n-> y = x + 1\n(Pdb) "
        assert ws.pty_send("p x", PDB).output == "42\n(Pdb) "
        assert "NameError" in ws.pty_send("p y", PDB).output  # line 4 has not run yet
        r = ws.pty_send("n", PDB)
        assert r.output == f"> {Workspace.REPO}/prog.py(5)<module>()\n-> z = y * 2\n(Pdb) "
        assert ws.pty_send("p y", PDB).output == "43\n(Pdb) "
        assert ws.pty_send("p 'héllo ' * 2", PDB).output == "'héllo héllo '\n(Pdb) "
        # to the end: pdb restarts the program and stays alive
        r = ws.pty_send("c", PDB)
        assert r.alive and r.output.startswith("result 86\nThe program finished and will be restarted\n")
        assert ws.pty_send("p x", PDB).alive
    clean_host()


def test_pdb_on_pytest(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        r = _pdb(ws, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "test_prog.py")
        assert "(Pdb) " in r.output
        r = ws.pty_send("c", PDB, timeout=30)  # pytest runs to its end; pdb restarts it
        assert r.alive and "1 failed" in r.output and "Exit status: 1" in r.output
        assert "assert 63 == 42" in r.output
        # a breakpoint inside a test (-s: pytest's capture would swallow the debugger's terminal)
        r = _pdb(ws, "-m", "pytest", "-x", "-q", "-s", "-p", "no:cacheprovider", "test_prog.py")
        assert ws.pty_send(f"b {Workspace.REPO}/test_prog.py:4", PDB).output.startswith("Breakpoint 1")
        r = ws.pty_send("c", PDB, timeout=30)
        assert f"{Workspace.REPO}/test_prog.py(4)test_triple()" in r.output, r.output
        assert ws.pty_send("p result", PDB).output == "63\n(Pdb) "
        assert ws.pty_send("p value", PDB).output == "21\n(Pdb) "
        # q inside the test: pytest reports BdbQuit, exits, and pdb restarts it; q again ends pdb
        r = ws.pty_send("q", PDB, timeout=30)
        assert r.alive and "bdb.BdbQuit" in r.output and "Exit status: 1" in r.output
        r = ws.pty_send("q", PDB)
        assert (r.alive, r.exit_code) == (False, 0)
        # pytest's own post-mortem debugger on the same terminal
        r = ws.pty_start(["pytest", "-x", "-q", "-p", "no:cacheprovider", "--pdb", "test_prog.py"], PDB)
        assert r.alive and r.output.endswith(
            f"{Workspace.REPO}/test_prog.py(4)test_triple()\n-> assert result == 42\n(Pdb) "
        )
        assert ws.pty_send("p result", PDB).output == "63\n(Pdb) "
        r = ws.pty_send("q", PDB)
        assert (r.alive, r.exit_code) == (False, 2) and "1 failed" in r.output
    clean_host()


def test_environment_and_cwd_follow_the_shell(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        ws.run("cd pkg && export FOO=bar")
        show = (
            "import os; print(os.getcwd(), os.environ['FOO'], os.environ['TERM'], os.isatty(0)); input('> ')"
        )
        r = ws.pty_start(["python", "-c", show], prompt="> $")
        assert r.alive and r.output == f"{Workspace.REPO}/pkg bar dumb True\n> "
        r = ws.pty_start(["python", "-c", show], prompt="> $", cwd="pkg/sub")
        assert r.output.startswith(f"{Workspace.REPO}/pkg/sub ")
        r = ws.pty_start(["python", "-c", show], prompt="> $", cwd="/tmp")
        assert r.output.startswith("/tmp ")
        with pytest.raises(WorkspaceError, match="not a directory"):
            ws.pty_start(["python"], prompt="> $", cwd="missing")
        with pytest.raises(ValueError):
            ws.pty_start("python -m pdb prog.py", prompt=PDB)  # type: ignore[arg-type]


def test_output_after_the_prompt_does_not_answer_the_next_command(repo: Path, clean_host) -> None:
    """Hole (fixed): a second prompt printed after a request ended (``!os.fork()`` in pdb: parent
    and child both print one) waited in the terminal, and the next command was answered by it at
    once, before the program read the command: every answer after it came one command late."""
    late_prompt = (
        "import sys, threading, time\n"
        "def late():\n    time.sleep(0.3); sys.stdout.write('> '); sys.stdout.flush()\n"
        "while True:\n"
        "    line = input('> ')\n"
        "    if line == 'twice':\n        threading.Thread(target=late).start()\n"
        "    else:\n        print('echo', line)\n"
    )
    with open_workspace(CFG, repo) as ws:
        assert ws.pty_start(["python", "-c", late_prompt], prompt="> $").output == "> "
        assert ws.pty_send("twice", "> $").output == "> "
        time.sleep(1.0)  # the late prompt is in the terminal now
        r = ws.pty_send("a", "> $")
        assert r.output == "> echo a\n> ", r.output  # the stale prompt is kept, not taken as the answer
        assert ws.pty_send("b", "> $").output == "echo b\n> "
        ws.pty_stop()
    clean_host()


# -- the end of a session ---------------------------------------------------------------------------------


def test_program_end_reports_exit_and_later_sends_fail(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        _ended(ws)  # never started
        ws.pty_stop()  # a no-op without a session
        _pdb(ws, "prog.py")
        r = ws.pty_send("q", PDB)
        assert (r.alive, r.exit_code, r.timed_out) == (False, 0, False)
        _ended(ws)
        # a program that reads a line and exits with a status of its own
        code = "import sys; print('got', input('name? ')); sys.exit(3)"
        r = ws.pty_start(["python", "-c", code], prompt=r"name\? $")
        assert r.alive and r.output == "name? "
        r = ws.pty_send("bob", PDB)
        assert (r.alive, r.exit_code, r.output) == (False, 3, "got bob\n")
        _ended(ws)
        # killed by a signal: the shell's 128+N, as run reports it
        r = ws.pty_start(["python", "-c", "import os; os.kill(os.getpid(), 9)"], prompt=PDB)
        assert (r.alive, r.exit_code) == (False, 137)
        r = ws.pty_start(["no-such-program"], prompt=PDB)
        assert (r.alive, r.exit_code) == (False, 127) and "cannot run no-such-program" in r.output
        _ended(ws)
        assert _inside_pids(ws) == ["1/"]
    clean_host()


def test_run_and_diff_end_the_session_files_and_listdir_do_not(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        _pdb(ws, "prog.py")
        assert ws.read_file("prog.py") == PROG.encode()
        ws.write_file("notes.txt", "n\n")
        assert "notes.txt" in ws.listdir()
        assert ws.pty_send("p x", PDB).alive  # still the same session
        assert ws.run("true").exit_code == 0
        _ended(ws)
        _pdb(ws, "prog.py")
        assert "+n" in ws.diff()
        _ended(ws)
        # a new session ends the previous one and everything it started
        _pdb(ws, "prog.py")
        ws.pty_send("!import os; os.fork() or os.execvp('sleep', ['sleep', '7301'])", PDB)
        assert len(_inside_pids(ws)) == 3
        _pdb(ws, "prog.py")
        assert len(_inside_pids(ws)) == 2  # the server and the new pdb
        ws.pty_stop()
        ws.pty_stop()  # idempotent
        assert _inside_pids(ws) == ["1/"]
    clean_host()


# -- hostile programs ------------------------------------------------------------------------------------


def test_timeout_kills_the_session(repo: Path, clean_host) -> None:
    with open_workspace(CFG, repo) as ws:
        _pdb(ws, "loop.py")
        r = ws.pty_send("c", PDB, timeout=1.5)  # an endless loop
        assert r.timed_out and not r.alive and r.exit_code is None
        assert ws.alive  # the inner timeout ended it, not the outer clock that kills the session
        assert _inside_pids(ws) == ["1/"]
        _ended(ws)
        _pdb(ws, "prog.py")
        r = ws.pty_send("!while True: pass", PDB, timeout=1)
        assert r.timed_out and not r.alive
        # a program that never reads its input: the write does not block the server
        r = ws.pty_start(["sleep", "7305"], prompt=PDB, timeout=1)
        assert r.timed_out and not r.alive
        r = ws.pty_start(["python", "-c", "import time; print('ready'); time.sleep(7306)"], prompt="ready\n")
        assert r.alive
        r = ws.pty_send("\n".join(["x" * 100] * 10_000), PDB, timeout=1.5)  # 1 MB into a full terminal
        assert r.timed_out and not r.alive
        assert ws.alive  # the server answered itself: it was not stuck writing (the outer clock)
        assert _inside_pids(ws) == ["1/"]
        assert ws.run("echo ok").output == "ok\n"
        _pdb(ws, "prog.py")  # the next session starts normally
    clean_host()


CHILDREN = [
    # a forked child that execs: plain background process
    "!import os, signal, time; os.fork() or os.execvp('sleep', ['sleep', '7301'])",
    # its own session (out of the pty's session and process group)
    "!os.fork() or (os.setsid(), os.execvp('sleep', ['sleep', '7302']))",
    # SIGHUP ignored, double fork: an orphan of the server
    "!os.fork() or (signal.signal(signal.SIGHUP, signal.SIG_IGN), os.fork() or os.execvp('sleep', "
    "['sleep', '7303']), os._exit(0))",
    # a copy of the debugger itself, asleep
    "!os.fork() or time.sleep(7304)",
]


@pytest.mark.parametrize("end", ["pty_stop", "run", "close"])
def test_background_children_are_all_killed(repo: Path, clean_host, end: str) -> None:
    ws = open_workspace(CFG, repo)
    _pdb(ws, "prog.py")
    for line in CHILDREN:
        assert ws.pty_send(line, PDB).alive
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len([c for c in _host_cmdlines() if "sleep 730" in c]) < 3:
        time.sleep(0.05)
    assert len([c for c in _host_cmdlines() if "sleep 730" in c]) == 3  # they ran
    assert len(_inside_pids(ws)) >= 5
    if end == "pty_stop":
        ws.pty_stop()
        assert _inside_pids(ws) == ["1/"]
    elif end == "run":
        # counted by the shell itself (a pipeline's `ls` may read /proc before its `grep` exists)
        r = ws.run("n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n")
        assert r.output == "2\n"  # the server and the command's shell: no debugger beside it
        assert _inside_pids(ws) == ["1/"]
    else:
        ws.close()
    assert not [c for c in _host_cmdlines() if "sleep 730" in c]
    ws.close()
    clean_host()


@pytest.mark.usefixtures("fake_apptainer")
def test_subreaper_mode_apptainer_path(repo: Path, clean_host) -> None:
    """Under apptainer the server is not PID 1 but a subreaper that kills its process tree: the
    same session and the same kills (the fake runs the server in bwrap with its own init)."""
    with open_workspace(replace(CFG, backend="apptainer"), repo) as ws:
        assert ws.backend == "apptainer"
        _pdb(ws, "prog.py", python="python3")  # the image's interpreter (no toolchain launchers)
        ws.pty_send("b 4", PDB)
        assert ws.pty_send("c", PDB).output.endswith("-> y = x + 1\n(Pdb) ")
        assert ws.pty_send("p x", PDB).output == "42\n(Pdb) "
        for line in CHILDREN:
            assert ws.pty_send(line, PDB).alive
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len([c for c in _host_cmdlines() if "sleep 730" in c]) < 3:
            time.sleep(0.05)
        assert len([c for c in _host_cmdlines() if "sleep 730" in c]) == 3
        ws.pty_stop()
        assert not [c for c in _host_cmdlines() if "sleep 730" in c]
        _pdb(ws, "loop.py", python="python3")
        r = ws.pty_send("c", PDB, timeout=1.5)
        assert r.timed_out and not r.alive and ws.alive
        assert ws.run("echo ok").output == "ok\n"
    clean_host()


def test_output_flood_is_capped(repo: Path, clean_host) -> None:
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_workspace(CFG, repo) as ws:
        _pdb(ws, "prog.py")
        r = ws.pty_send("!print('x' * 30_000_000)", PDB, timeout=60, max_output=1000)
        assert r.alive and r.truncated and r.output_bytes == 30_000_000 + len("\n(Pdb) ")
        head, _, rest = r.output.partition("\n[... ")
        assert head == "x" * 500
        cut, _, tail = rest.partition(" characters cut ...]\n")
        assert int(cut) == r.output_bytes - 1000 and tail == "x" * 493 + "\n(Pdb) "
        assert ws.pty_send("p 6 * 7", PDB).output == "42\n(Pdb) "
        # an endless flood: killed at its timeout all the same
        r = ws.pty_send("!while True: print('y' * 10000)", PDB, timeout=2, max_output=1000)
        assert r.timed_out and not r.alive and r.output_bytes > 1 << 20 and len(r.output) < 1100
        assert _inside_pids(ws) == ["1/"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 100_000  # KiB: never buffered
    clean_host()


def test_outer_wall_clock_kills_the_session(repo: Path, clean_host) -> None:
    # an outer limit shorter than the inner one stands in for a server that stops answering
    ws = open_workspace(replace(CFG, grace_s=-1.5), repo)
    _pdb(ws, "loop.py", timeout=20)
    r = ws.pty_send("c", PDB, timeout=2)
    assert not r.alive and r.timed_out and r.exit_code is None and "killed" in r.output
    assert not ws.alive
    with pytest.raises(WorkspaceDead, match="did not answer"):
        ws.pty_send("p 1", PDB)
    with pytest.raises(WorkspaceDead):
        ws.pty_start(["python"], PDB)
    with pytest.raises(WorkspaceDead):
        ws.listdir()
    ws.close()
    clean_host()


# -- listdir --------------------------------------------------------------------------------------------


def test_listdir(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        assert ws.listdir() == ["loop.py", "pkg/", "pkg/__init__.py", "pkg/sub/", "prog.py", "test_prog.py"]
        assert ws.listdir(depth=1) == ["loop.py", "pkg/", "prog.py", "test_prog.py"]
        assert ws.listdir("pkg", depth=5) == [
            "__init__.py",
            "sub/",
            "sub/deep.py",
            "sub/deeper/",
            "sub/deeper/x.txt",
        ]
        assert ws.listdir(f"{Workspace.REPO}/pkg/sub", depth=1) == ["deep.py", "deeper/"]
        assert ws.listdir(max_entries=2) == ["loop.py", "pkg/", "[... 4 more ...]"]
        assert ws.listdir(max_entries=0) == ["[... 6 more ...]"]
        # a symlinked directory is listed, never entered (a loop), and .git is left out anywhere
        ws.run("ln -s .. pkg/up && mkdir -p pkg/.git && touch pkg/.git/x .hidden")
        assert ws.listdir("pkg", depth=10) == [
            "__init__.py",
            "sub/",
            "sub/deep.py",
            "sub/deeper/",
            "sub/deeper/x.txt",
            "up",
        ]
        assert ".hidden" in ws.listdir(depth=1)
        assert {"bin/", "site/"} <= set(ws.listdir("/opt/lcrl/tools", depth=1, confine=False))
        with pytest.raises(WorkspaceError, match="not a directory"):
            ws.listdir("prog.py")
        with pytest.raises(WorkspaceError, match="no such file or directory"):
            ws.listdir("missing")
        big = ws.run("mkdir many && cd many && seq 1 3000 | xargs touch")
        assert big.exit_code == 0
        listing = ws.listdir("many", max_entries=10)
        assert len(listing) == 11 and listing[-1] == "[... 2990 more ...]"
        assert listing[:3] == ["1", "10", "100"]  # sorted as strings
