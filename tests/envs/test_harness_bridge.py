"""The gateway bridge through real bubblewrap: a program in a workspace sandbox reaches one host
HTTP server (a unix socket bound in, ``relay.py`` on the sandbox's loopback) and nothing else of
the host; the relay passes bulk data and half-closes intact, fails loudly when it cannot start,
and leaves nothing running after the wrapped command."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from lit_codeRL.envs.harness.bridge import (
    RELAY_FAILED_EXIT,
    RELAY_FILE,
    RELAY_IN,
    SOCKET_DIR_IN,
    SOCKET_IN,
    bridge_binds,
    socket_path,
    wrap_command,
)
from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.pool import bwrap_problem
from lit_codeRL.sandbox.workspace import Workspace, WorkspaceConfig, open_workspace

CFG = WorkspaceConfig(backend="bwrap", command_timeout_s=20.0, memory_mb=1024, disk_mb=64, grace_s=5.0)
BLOB = bytes(range(256)) * (12 << 10)  # 3 MiB the host serves
BODY_BYTES = 2 << 20  # what the agent posts
SECRET = "lcrl-host-secret-5b1f0c"


@pytest.fixture(scope="module", autouse=True)
def _bwrap() -> None:
    """Skip without bubblewrap; fail (not skip) when it is installed but cannot sandbox."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    problem = bwrap_problem(SandboxConfig())
    if problem:
        pytest.fail(f"bubblewrap is installed but the sandbox cannot use it: {problem}")


# -- host servers, each on its own event loop in a thread ----------------------------------------


class LoopThread:
    """An event loop running in a daemon thread, so a host server keeps serving while the test's
    thread blocks in ``Workspace.run``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Awaitable) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@contextmanager
def serving(start: Callable[[], Awaitable], stop: Callable[[object], Awaitable]) -> Iterator[None]:
    """Run ``start()`` on a loop thread, then ``stop(its result)`` and end the thread."""
    lt = LoopThread()
    try:
        handle = lt.call(start())
        try:
            yield
        finally:
            lt.call(stop(handle))
    finally:
        lt.stop()


def gateway_app() -> web.Application:
    """GET /ping (JSON), POST /echo (length and digest of the body), GET /blob (3 MiB)."""

    async def ping(request: web.Request) -> web.Response:
        return web.json_response({"pong": True, "path": request.path})

    async def echo(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"length": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    async def blob(request: web.Request) -> web.Response:
        return web.Response(body=BLOB)

    app = web.Application(client_max_size=16 << 20)
    app.router.add_get("/ping", ping)
    app.router.add_post("/echo", echo)
    app.router.add_get("/blob", blob)
    return app


@contextmanager
def http_gateway(socket_dir: Path) -> Iterator[None]:
    """The aiohttp gateway on ``socket_dir/gateway.sock`` for as long as the block runs."""

    async def start() -> web.AppRunner:
        runner = web.AppRunner(gateway_app())
        await runner.setup()
        await web.UnixSite(runner, str(socket_path(socket_dir))).start()
        return runner

    async def stop(runner: web.AppRunner) -> None:
        await runner.cleanup()

    with serving(start, stop):
        yield


@contextmanager
def echo_gateway(socket_dir: Path) -> Iterator[None]:
    """A raw unix-socket server that reads to EOF, then sends everything back and closes: it
    only answers once the client's half-close has come through the relay."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        writer.write(data[::-1])
        await writer.drain()
        writer.close()

    async def start() -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(handle, str(socket_path(socket_dir)))

    async def stop(server: asyncio.AbstractServer) -> None:
        server.close()

    with serving(start, stop):
        yield


@contextmanager
def socket_dir() -> Iterator[Path]:
    """A short host directory (a unix socket path must fit in 108 bytes; pytest's tmp_path may
    not), private to this test."""
    with tempfile.TemporaryDirectory(prefix="gwtest-") as d:
        yield Path(d)


# -- workspaces ----------------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", *ident, *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("bridge") / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "README").write_text("bridge test\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "base")
    return r


@contextmanager
def workspace(repo: Path, sock_dir: Path) -> Iterator[Workspace]:
    ws = open_workspace(CFG, repo, binds=bridge_binds(sock_dir))
    try:
        yield ws
    finally:
        ws.close()


@pytest.fixture(scope="module")
def host_secret_file() -> Iterator[Path]:
    """A host file outside every bind, which the sandbox must not read."""
    with tempfile.TemporaryDirectory(prefix="gwsecret-") as d:
        path = Path(d) / "secret.txt"
        path.write_text(SECRET)
        yield path


@pytest.fixture(scope="module")
def ws(repo: Path, host_secret_file: Path) -> Iterator[Workspace]:
    """One session bound to the HTTP gateway, opened while the host process holds a secret
    environment variable (which must not reach the sandbox)."""
    with socket_dir() as d, http_gateway(d):
        os.environ["LCRL_HOST_SECRET"] = SECRET
        try:
            session = open_workspace(CFG, repo, binds=bridge_binds(d))
        finally:
            del os.environ["LCRL_HOST_SECRET"]
        try:
            yield session
        finally:
            session.close()


def python_cmd(code: str) -> str:
    """``python3 -c CODE`` as one shell word: the code's quotes go through wrap_command intact."""
    return f"python3 -c {shlex.quote(code)}"


def last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


SCAN_RELAYS = f"""
import os
n = 0
for pid in os.listdir("/proc"):
    try:
        argv = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    n += bool(argv and b"python" in argv[0] and {RELAY_IN.encode()!r} in argv)
print("relays", n)
"""
"""Counts running relay processes (an exact argv element, so no shell quoting the path counts)."""


# -- pure parts ----------------------------------------------------------------------------------


def test_bind_layout(tmp_path: Path) -> None:
    binds = bridge_binds(tmp_path)
    assert binds == {str(tmp_path.resolve()): SOCKET_DIR_IN, str(RELAY_FILE): RELAY_IN}
    assert SOCKET_IN == "/opt/lcrl-gateway/sock/gateway.sock"
    assert socket_path(tmp_path) == tmp_path / "gateway.sock"
    assert RELAY_FILE.is_file()
    with pytest.raises(ValueError):
        wrap_command("true", port=0)


# -- through the sandbox -------------------------------------------------------------------------


CLIENT = """
import concurrent.futures, hashlib, json, urllib.request
base = "http://127.0.0.1:8000"
ping = json.loads(urllib.request.urlopen(base + "/ping", timeout=5).read())
body = bytes(range(256)) * (%d // 256)
req = urllib.request.Request(base + "/echo", data=body, method="POST")
echo = json.loads(urllib.request.urlopen(req, timeout=10).read())
blob = urllib.request.urlopen(base + "/blob", timeout=10).read()
with concurrent.futures.ThreadPoolExecutor(8) as pool:
    many = list(pool.map(lambda i: urllib.request.urlopen(base + "/ping", timeout=5).status, range(16)))
print(json.dumps({"ping": ping, "echo": echo, "body_sha": hashlib.sha256(body).hexdigest(),
                  "blob_len": len(blob), "blob_sha": hashlib.sha256(blob).hexdigest(), "many": many}))
"""


def test_http_gateway_round_trips(ws: Workspace) -> None:
    """GET, a 2 MiB POST, a 3 MiB response and 16 concurrent requests, all intact."""
    r = ws.run(wrap_command(python_cmd(CLIENT % BODY_BYTES)), timeout=20)
    assert r.exit_code == 0, r.output
    got = last_json(r.output)
    assert got["ping"] == {"pong": True, "path": "/ping"}
    assert got["echo"] == {"length": BODY_BYTES, "sha256": got["body_sha"]}
    assert (got["blob_len"], got["blob_sha"]) == (len(BLOB), hashlib.sha256(BLOB).hexdigest())
    assert got["many"] == [200] * 16


HALF_CLOSE_CLIENT = """
import hashlib, json, socket
data = bytes(range(251)) * 8000
s = socket.create_connection(("127.0.0.1", 8000), timeout=10)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
back = bytearray()
while chunk := s.recv(1 << 16):
    back += chunk
print(json.dumps({"sent": len(data), "ok": bytes(back) == data[::-1], "got": len(back)}))
"""


def test_half_close_passes_through(repo: Path) -> None:
    """The server answers only after the client's EOF: the relay forwards the half-close and
    still carries the whole reply the other way."""
    with socket_dir() as d, echo_gateway(d), workspace(repo, d) as session:
        r = session.run(wrap_command(python_cmd(HALF_CLOSE_CLIENT)), timeout=20)
    assert r.exit_code == 0, r.output
    got = last_json(r.output)
    assert got == {"sent": 251 * 8000, "ok": True, "got": 251 * 8000}


ISOLATION = """
import json, os, socket, urllib.request
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=2).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
def read(path):
    try:
        return open(path).read()
    except OSError as e:
        return type(e).__name__
def write(path):
    try:
        open(path, "w").write("x")
        return "written"
    except OSError as e:
        return type(e).__name__
print(json.dumps({
    "gateway": json.loads(urllib.request.urlopen("http://127.0.0.1:8000/ping", timeout=5).read()),
    "host_port": connect("127.0.0.1", %d),
    "external": [connect("1.1.1.1", 80), connect("10.0.0.1", 80)],
    "env": dict(os.environ),
    "secret_file": read(%r),
    "write_sock_dir": write("%s/planted"),
    "write_relay": write(%r),
}))
"""


def test_only_the_gateway_is_reachable(ws: Workspace, host_secret_file: Path) -> None:
    """With the relay up, a host TCP port, outside addresses, the host's environment and its
    files stay out of reach, and the bridge's own files are read-only."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    try:
        port = listener.getsockname()[1]
        code = ISOLATION % (port, str(host_secret_file), SOCKET_DIR_IN, RELAY_IN)
        r = ws.run(wrap_command(python_cmd(code)), timeout=20)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing from the sandbox ever arrived
    finally:
        listener.close()
    assert r.exit_code == 0, r.output
    got = last_json(r.output)
    assert got["gateway"]["pong"] is True  # the relay was up while the rest failed
    assert got["host_port"] != "connected"
    assert all(e != "connected" for e in got["external"]), got["external"]
    assert "LCRL_HOST_SECRET" not in got["env"]
    assert SECRET not in json.dumps(got["env"]) and SECRET not in r.output
    assert got["secret_file"] in ("FileNotFoundError", "PermissionError")
    assert got["write_sock_dir"] != "written" and got["write_relay"] != "written"


def test_exit_code_passes_and_relay_is_gone(ws: Workspace) -> None:
    """The agent's exit code comes back; the relay runs during the agent's command and is
    stopped by the wrapper itself (checked in the same command, before the server's cleanup),
    and none is left for the next command."""
    agent = f'{python_cmd(SCAN_RELAYS)}; echo "it\'s" \'"quoted"\' "$HOME"; exit 3'
    assert ws.run(wrap_command("exit 3"), timeout=20).exit_code == 3
    r = ws.run(f"({wrap_command(agent)}); echo rc=$?; {python_cmd(SCAN_RELAYS)}", timeout=20)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines == ["relays 1", 'it\'s "quoted" /tmp/home', "rc=3", "relays 0"], r.output
    later = ws.run(python_cmd(SCAN_RELAYS), timeout=20)
    assert later.output.strip() == "relays 0"
    assert ws.run("ls /tmp | grep -c lcrl-relay", timeout=20).output.strip() == "0"


def test_relay_that_cannot_listen_fails_with_97(ws: Workspace) -> None:
    """A second relay on a port the first holds never says ready: the inner agent never runs
    and the wrapper exits 97 with the relay's reason."""
    r = ws.run(wrap_command(wrap_command("echo AGENT-RAN")), timeout=20)
    assert r.exit_code == RELAY_FAILED_EXIT, r.output
    assert "AGENT-RAN" not in r.output
    assert "did not start" in r.output and "cannot listen on 127.0.0.1:8000" in r.output


def test_missing_gateway_socket_fails_with_97(repo: Path) -> None:
    """No server behind the bind: the relay refuses to start instead of failing every request."""
    with socket_dir() as d, workspace(repo, d) as session:
        r = session.run(wrap_command("echo AGENT-RAN"), timeout=20)
    assert r.exit_code == RELAY_FAILED_EXIT, r.output
    assert "AGENT-RAN" not in r.output
    assert f"no socket at {SOCKET_IN}" in r.output
