"""The workspace server's file requests (``read_file``, ``write_file``, ``listdir``) with the
paths an agent may choose, through real bubblewrap: confined to the repository (lexically, then
opened without following any symbolic link, against concurrent swaps too), regular files only (a
FIFO never blocks the server), errors as one clean line, and a FIFO or link planted at the
server's state file. Every refusal is a :class:`WorkspaceError` (never :class:`WorkspaceDead`)
and the session answers afterwards."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from lit_codeRL.sandbox.workspace import (
    Workspace,
    WorkspaceConfig,
    WorkspaceDead,
    WorkspaceError,
    open_workspace,
)
from tests.sandbox.conftest import require_bwrap

CFG = WorkspaceConfig(backend="bwrap", command_timeout_s=10.0, memory_mb=1024, disk_mb=64, grace_s=5.0)
CALC = "def add(a, b):\n    return a - b\n"
PROMPT = "ready\n"
"""What a helper program on the pty prints once it is set up."""


def git(cwd: Path, *args: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True)


def make_repo(root: Path) -> Path:
    r = root / "repo"
    (r / "pkg").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / "calc.py").write_text(CALC)
    (r / "pkg" / "__init__.py").write_text("")
    (r / "pkg" / "mod.py").write_text("M = 1\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    require_bwrap()
    return make_repo(tmp_path)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Iterator[Workspace]:
    """One session for the refusal checks: each leaves it as it was (and checks it answers)."""
    require_bwrap()
    with open_workspace(CFG, make_repo(tmp_path_factory.mktemp("paths"))) as w:
        yield w


def refused(ws: Workspace, call: Callable[[], object], message: str) -> None:
    """``call`` fails with exactly ``message`` (not a blocked read ended by the session's clock,
    which would be another error or a dead session), and the session still answers."""
    with pytest.raises(WorkspaceError) as info:
        call()
    assert not isinstance(info.value, WorkspaceDead), info.value
    assert str(info.value) == message
    assert ws.alive and ws.run("echo ok").output == "ok\n"


def ops(ws: Workspace, path: str, **kw) -> dict[str, Callable[[], object]]:
    return {
        "read": lambda: ws.read_file(path, **kw),
        "write": lambda: ws.write_file(path, "FORGED\n", **kw),
    }


# -- outside the repository --------------------------------------------------------------------------


OUTSIDE = ["/dev/stdout", "/dev/stdin", "/proc/self/fd/1", "/etc/passwd", "../../etc/hosts", "/tmp/x"]


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("path", OUTSIDE)
def test_bwrap_outside_the_repository_refused(ws: Workspace, path: str, op: str) -> None:
    refused(ws, ops(ws, path)[op], f"{path}: outside the repository")
    assert ws.run("test -e /tmp/x").exit_code == 1  # nothing written anywhere


@pytest.mark.parametrize("path", ["/", "/proc", "..", "../..", "/workspace", "pkg/../../repo2"])
def test_bwrap_listdir_outside_the_repository_refused(ws: Workspace, path: str) -> None:
    refused(ws, lambda: ws.listdir(path), f"{path}: outside the repository")


def test_bwrap_inside_paths_written_differently_are_allowed(ws: Workspace) -> None:
    assert ws.read_file(f"{Workspace.REPO}/calc.py") == CALC.encode()
    assert ws.read_file("pkg/../calc.py") == CALC.encode()
    assert ws.read_file("./pkg//mod.py") == b"M = 1\n"
    assert ws.listdir(f"{Workspace.REPO}/pkg/..", depth=1) == ["calc.py", "pkg/"]


# -- symbolic links -------------------------------------------------------------------------------


@pytest.fixture
def links(ws: Workspace) -> Iterator[None]:
    made = ws.run("ln -s /dev/stdout out.py && ln -s calc.py alias.py && ln -s /tmp d && ln -s pkg pkglink")
    assert made.exit_code == 0, made.output
    yield
    assert ws.run("rm -f out.py alias.py d pkglink").exit_code == 0


LINK = "is a symbolic link (open its target instead)"


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize(
    "path, message",
    [
        ("out.py", f"out.py: {LINK}"),  # to the server's own reply pipe
        ("alias.py", f"alias.py: {LINK}"),  # to a file inside the repository: refused all the same
        ("d/x", f"d/x: d {LINK}"),  # a directory component: to /tmp
        ("pkglink/mod.py", f"pkglink/mod.py: pkglink {LINK}"),
        (f"{Workspace.REPO}/d/x", f"{Workspace.REPO}/d/x: d {LINK}"),
    ],
)
def test_bwrap_symlinks_refused(ws: Workspace, links: None, path: str, message: str, op: str) -> None:
    refused(ws, ops(ws, path)[op], message)
    assert ws.read_file("calc.py") == CALC.encode()  # nothing written through alias.py
    assert ws.run("test -e /tmp/x").exit_code == 1  # nor through d


@pytest.mark.parametrize("path", ["d", "pkglink"])
def test_bwrap_listdir_symlink_refused(ws: Workspace, links: None, path: str) -> None:
    refused(ws, lambda: ws.listdir(path), f"{path}: {LINK}")
    assert {"d", "pkglink", "out.py"} <= set(ws.listdir(depth=1))  # listed, never entered


SWAPPER = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
os.mkdir("d"); os.symlink("/tmp", "e"); open("f.py", "w").close(); os.symlink("/tmp/y", "g.py")
print("ready", flush=True)
while True:  # renameat2(RENAME_EXCHANGE): "d" and "f.py" always exist, a directory or a link
    libc.renameat2(-100, b"d", -100, b"e", 2)
    libc.renameat2(-100, b"f.py", -100, b"g.py", 2)
"""


def test_bwrap_symlink_swapped_in_concurrently(ws: Workspace) -> None:
    """A program left running on the pty swaps ``d`` between a directory and a link to /tmp, and
    ``f.py`` between a file and a link to /tmp/y, as fast as it can, while the server writes
    ``d/x`` and ``f.py``: nothing may ever land in /tmp."""
    r = ws.pty_start(["python", "-c", SWAPPER], PROMPT, timeout=10)
    assert r.alive, r
    want = {"d/x written", f"d/x: d {LINK}", "f.py written", f"f.py: {LINK}"}
    outcomes: set[str] = set()
    end = time.monotonic() + 10
    try:
        while time.monotonic() < end and not want <= outcomes:
            for path in ("d/x", "f.py"):
                try:
                    ws.write_file(path, "FORGED\n")
                    outcomes.add(f"{path} written")
                except WorkspaceDead:
                    raise
                except WorkspaceError as e:
                    outcomes.add(str(e))
        assert not {"x", "y"} & set(ws.listdir("/tmp", depth=1, confine=False))  # the pty keeps running
    finally:
        ws.pty_stop()
    assert want <= outcomes  # the race really ran: both sides of each swap were seen
    assert ws.run("test -e /tmp/x || test -e /tmp/y").exit_code == 1
    assert ws.run("rm -rf d e f.py g.py").exit_code == 0


def test_bwrap_unconfined_still_refuses_links_and_devices(ws: Workspace) -> None:
    for path in ("/dev/stdout", "/dev/stdin", "/proc/self/fd/1"):
        for call in ops(ws, path, confine=False).values():
            refused(ws, call, f"{path}: {LINK}")
    for call in ops(ws, "/dev/null", confine=False).values():
        refused(ws, call, "/dev/null: not a regular file")


# -- FIFOs ------------------------------------------------------------------------------------------------


@pytest.fixture
def fifo(ws: Workspace) -> Iterator[None]:
    assert ws.run("mkfifo p").exit_code == 0
    yield
    ws.run("rm -f p")


@pytest.mark.parametrize("op", ["read", "write"])
def test_bwrap_fifo_refused_promptly(ws: Workspace, fifo: None, op: str) -> None:
    refused(ws, ops(ws, "p")[op], "p: not a regular file")


@pytest.mark.parametrize("op", ["read", "write"])
def test_bwrap_fifo_with_a_peer_refused(ws: Workspace, fifo: None, op: str) -> None:
    """A program on the pty holds the FIFO open at both ends, so opening it succeeds: the check
    after the open refuses it, before anything is read or written."""
    r = ws.pty_start(["bash", "-c", "exec 3<>p; echo ready; exec sleep 60"], PROMPT, timeout=10)
    assert r.alive, r
    try:
        refused(ws, ops(ws, "p")[op], "p: not a regular file")
    finally:
        ws.pty_stop()


# -- missing files, directories, other errors --------------------------------------------------------------


@pytest.mark.parametrize(
    "op, path, message",
    [
        ("read", "missing.py", "missing.py: no such file or directory"),
        ("read", "x/y.py", "x/y.py: no such file or directory"),
        ("read", "pkg", "pkg: is a directory"),
        ("write", "pkg", "pkg: is a directory"),
        ("read", ".", ".: is a directory"),
        ("write", "", "'': is a directory"),
        ("read", "calc.py/x", "calc.py/x: calc.py is not a directory"),
        ("write", "calc.py/x", "calc.py/x: calc.py is not a directory"),
        ("read", "a\nb", "'a\\nb': no such file or directory"),  # one line, whatever the path
    ],
)
def test_bwrap_clean_error_messages(ws: Workspace, op: str, path: str, message: str) -> None:
    refused(ws, ops(ws, path)[op], message)
    assert ws.read_file("calc.py") == CALC.encode()


@pytest.mark.parametrize(
    "path, message",
    [("missing", "missing: no such file or directory"), ("calc.py", "calc.py: not a directory")],
)
def test_bwrap_listdir_clean_error_messages(ws: Workspace, path: str, message: str) -> None:
    refused(ws, lambda: ws.listdir(path), message)


def test_bwrap_permission_denied(ws: Workspace) -> None:
    assert ws.run("touch locked.py && chmod 000 locked.py && mkdir ro && chmod 555 ro").exit_code == 0
    try:
        for call in ops(ws, "locked.py").values():
            refused(ws, call, "locked.py: permission denied")
        refused(ws, lambda: ws.write_file("ro/new.py", "x"), "ro/new.py: permission denied")
        refused(ws, lambda: ws.write_file("ro/sub/new.py", "x"), "ro/sub/new.py: permission denied")
    finally:
        ws.run("chmod 755 ro && rm -rf ro locked.py")


def test_bwrap_disk_full(repo: Path) -> None:
    with open_workspace(replace(CFG, disk_mb=8), repo) as ws:
        refused(
            ws,
            lambda: ws.write_file("big.bin", b"\0" * (12 << 20)),
            "big.bin: no space left on the workspace disk",
        )
        ws.write_file("small.py", "S = 1\n")  # the partial file was emptied: the disk is usable again
        assert ws.read_file("small.py") == b"S = 1\n"
        assert ws.run("cat small.py").output == "S = 1\n"


# -- the server's state file ------------------------------------------------------------------------


def test_bwrap_fifos_planted_at_the_next_state_files(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        # (this command's own state file is one of them: its EXIT trap blocks, it times out)
        ws.run("for i in $(seq 1 50); do mkfifo /run/lcrl/s$i 2>/dev/null; done", timeout=2)
        for _ in range(4):
            r = ws.run("cd /tmp && export A=1")
            assert r.exit_code == 0 and not r.timed_out, r  # a blocked state read would time out
        assert ws.run('echo "$PWD $A"').output == "/tmp 1\n"  # the state carried over
        assert ws.alive


@pytest.mark.parametrize(
    "plant",
    [
        'mkfifo "$__lcrl_state"',  # an open for reading would wait for a writer forever
        'ln -s /dev/stdin "$__lcrl_state"',  # the server's request pipe
        'ln -s /dev/zero "$__lcrl_state"',
        'printf "/etc\\0A=2\\0" > /tmp/st; ln -s /tmp/st "$__lcrl_state"',
    ],
)
def test_bwrap_state_file_replaced_after_the_trap(repo: Path, plant: str) -> None:
    """The command drops the EXIT trap and leaves something else at its own state file, which
    the server reads once the command is over."""
    with open_workspace(CFG, repo) as ws:
        r = ws.run(f"cd /tmp && export A=1; trap - EXIT; {plant}")
        assert r.exit_code == 0 and not r.timed_out, r
        assert ws.alive
        # nothing was read from it: the previous state holds
        assert ws.run('echo "$PWD ${A:-unset}"').output == f"{Workspace.REPO} unset\n"


# -- what works ---------------------------------------------------------------------------------------


def test_bwrap_inside_the_repository_works(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        assert ws.read_file("calc.py") == CALC.encode()
        assert ws.read_file("calc.py", max_bytes=3) == b"def"
        ws.write_file("new/nested/dir/f.py", "F = 1\n")  # missing directories are made
        assert ws.read_file("new/nested/dir/f.py") == b"F = 1\n"
        assert ws.listdir("new", depth=5) == ["nested/", "nested/dir/", "nested/dir/f.py"]
        ws.write_file("calc.py", "short\n")  # replaced, not appended to
        assert ws.read_file(f"{Workspace.REPO}/calc.py") == b"short\n"
        ws.write_file(f"{Workspace.REPO}/pkg/abs.py", b"\x00\xff")
        assert (
            ws.run("cat new/nested/dir/f.py; stat -c %a pkg/abs.py new/nested").output == "F = 1\n644\n755\n"
        )
        assert ws.listdir() == [
            "calc.py",
            "new/",
            "new/nested/",
            "pkg/",
            "pkg/__init__.py",
            "pkg/abs.py",
            "pkg/mod.py",
        ]
        assert "pkg/abs.py" in ws.diff()


def test_bwrap_unconfined_absolute_paths_work(repo: Path) -> None:
    with open_workspace(CFG, repo) as ws:
        ws.write_file("/tmp/z", b"\x00z", confine=False)
        assert ws.read_file("/tmp/z", confine=False) == b"\x00z"
        ws.write_file("/tmp/made/deep/z", "deep", confine=False)
        assert ws.read_file("/tmp/made/deep/z", confine=False) == b"deep"
        assert {"z", "made/"} <= set(ws.listdir("/tmp", depth=1, confine=False))
        assert {"bin/", "site/"} <= set(ws.listdir("/opt/lcrl/tools", depth=1, confine=False))
        assert ws.run("cat /tmp/z | tr -d '\\0'").output == "z"
        assert ws.read_file("calc.py", confine=False) == CALC.encode()  # relative: to the repository
