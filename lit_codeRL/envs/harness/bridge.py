"""Host side of the gateway bridge: what to bind into a workspace sandbox and how to wrap the
agent's command so it can reach one host HTTP server, and nothing else.

Why a relay: a workspace sandbox has no network (``--unshare-net``: its own loopback only). The
host server listens on a unix socket instead of a TCP port; its *directory* is bound read-only at
:data:`SOCKET_DIR_IN` (a directory, not the socket file, so a server that restarts and makes a
new socket is still seen), next to ``relay.py`` at :data:`RELAY_IN`. :func:`wrap_command` starts
the relay on ``127.0.0.1:port`` inside the sandbox before the agent's command and stops it after,
so the agent speaks plain HTTP to ``http://127.0.0.1:port``.

Layout inside the sandbox::

    /opt/lcrl-gateway/relay.py            <- lit_codeRL/envs/harness/relay.py (read-only)
    /opt/lcrl-gateway/sock/               <- the host's socket directory (read-only)
    /opt/lcrl-gateway/sock/gateway.sock   <- the host server's unix socket
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

GATEWAY_DIR_IN = "/opt/lcrl-gateway"
"""Where the bridge's files appear inside the sandbox."""
SOCKET_DIR_IN = f"{GATEWAY_DIR_IN}/sock"
SOCKET_NAME = "gateway.sock"
"""The file name the host server must listen on inside the directory given to :func:`bridge_binds`."""
SOCKET_IN = f"{SOCKET_DIR_IN}/{SOCKET_NAME}"
RELAY_IN = f"{GATEWAY_DIR_IN}/relay.py"
RELAY_FILE = Path(__file__).with_name("relay.py")
RELAY_PORT = 8000
"""Default port of the relay on the sandbox's loopback."""
RELAY_START_TIMEOUT_S = 10.0
"""How long :func:`wrap_command` waits for the relay's ``ready`` line."""
RELAY_FAILED_EXIT = 97
"""Exit code of a wrapped command whose relay never became ready (the agent did not run)."""

_WRAPPER = r"""
sock=$1 relay=$2 port=$3 wait_s=$4 agent=$5
dir=$(mktemp -d "${TMPDIR:-/tmp}/lcrl-relay.XXXXXX") || { echo "lcrl-gateway: no temporary directory for the relay" >&2; exit @FAIL@; }
mkfifo "$dir/ready" || { rm -rf "$dir"; exit @FAIL@; }
python3 -I -S -B "$relay" "$sock" "$port" </dev/null >"$dir/ready" 2>"$dir/log" &
relay_pid=$!
exec 3<"$dir/ready"
line=
IFS= read -r -t "$wait_s" line <&3
exec 3<&-
stop_relay() {
  kill -TERM "$relay_pid" 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    kill -0 "$relay_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$relay_pid" 2>/dev/null
  wait "$relay_pid" 2>/dev/null
  rm -rf "$dir"
}
if [ "$line" != ready ]; then
  echo "lcrl-gateway: the relay to the host gateway did not start within ${wait_s}s" >&2
  head -c 2000 "$dir/log" >&2
  stop_relay
  exit @FAIL@
fi
/bin/bash -c "$agent"
rc=$?
stop_relay
exit "$rc"
"""
"""The wrapped command (``bash -c`` with arguments sock, relay, port, wait, agent command): the
relay's stdout is a FIFO read with a timeout, so a relay that dies early is seen at once (EOF)
and one that hangs is given up on after ``wait_s``; the agent runs in a fresh shell (none of these variables,
no open FIFO), and the relay is stopped (TERM, KILL after 2 s) and reaped before the exit."""
_WRAPPER = _WRAPPER.replace("@FAIL@", str(RELAY_FAILED_EXIT))


def socket_path(socket_dir: str | Path) -> Path:
    """Host path where the server must listen for the bridge to reach it."""
    return Path(socket_dir) / SOCKET_NAME


def bridge_binds(socket_dir: str | Path) -> dict[str, str]:
    """Read-only binds (host path -> sandbox path) for ``open_workspace(binds=...)``: the host
    directory holding ``gateway.sock`` and the relay script."""
    return {str(Path(socket_dir).resolve()): SOCKET_DIR_IN, str(RELAY_FILE): RELAY_IN}


def let_in(socket_dir: str | Path, gid: int) -> None:
    """Let the host group ``gid`` (a sandbox's programs, ``Workspace.host_uid``) reach the socket
    in ``socket_dir`` and read the files beside it, and nobody else but its owner: the directory
    traverse and read (``0750``), the socket connect (``0660``: connecting needs write), the files
    read (``0640``). The directory stays the trainer's, bound read-only: nothing can be added."""
    socket_dir = Path(socket_dir)
    for path in socket_dir.iterdir():
        os.chown(path, -1, gid, follow_symlinks=False)
        os.chmod(path, 0o660 if path.is_socket() else 0o640)
    os.chown(socket_dir, -1, gid)
    os.chmod(socket_dir, 0o750)


def wrap_command(
    agent_cmd: str, port: int = RELAY_PORT, *, start_timeout_s: float = RELAY_START_TIMEOUT_S
) -> str:
    """A bash command line for :meth:`Workspace.run`: start the relay on ``127.0.0.1:port``,
    wait for its ``ready`` (at most ``start_timeout_s``; else a message on stderr and exit
    :data:`RELAY_FAILED_EXIT` without running the agent), run ``agent_cmd`` in its own
    ``bash -c`` (any quoting survives), stop the relay, and exit with the agent's exit code."""
    if not 0 < int(port) < 65536:
        raise ValueError(f"relay port {port} is not a TCP port")
    args = [SOCKET_IN, RELAY_IN, str(int(port)), f"{float(start_timeout_s):g}", agent_cmd]
    return shlex.join(["/bin/bash", "-c", _WRAPPER, "lcrl-gateway", *args])
