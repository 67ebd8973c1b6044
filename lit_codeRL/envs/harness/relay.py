"""TCP -> unix socket relay, run inside a workspace sandbox (stdlib only, no lit_codeRL imports).

Why: a workspace sandbox has no network (only its own loopback), yet the program in it must
reach one HTTP server of the host. That server listens on a unix socket whose directory is bound
read-only into the sandbox; programs speak plain TCP (``http://127.0.0.1:PORT``), so this relay
listens on ``127.0.0.1:PORT`` inside and pipes each connection's bytes to a fresh connection to
that socket. Nothing else of the host becomes reachable: the relay only ever opens that one path.

Usage: ``python3 -I -S relay.py SOCKET_PATH PORT``. It prints one line ``ready`` (flushed) once
listening, so the caller can wait for it, then lets go of its stdout; SIGTERM or SIGINT end it
cleanly (exit 0). Exit 2: bad arguments, no socket at SOCKET_PATH, or the port cannot be bound.

Each direction is copied with ``StreamReader.read`` + ``drain``: at most a chunk plus the
transports' flow-control watermarks are buffered per direction, however slow the other side.
A half-close (EOF one way) is passed on as ``write_eof`` while the other direction keeps flowing;
the connection ends when both directions have ended, or at once when either side fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys

CHUNK = 64 * 1024
"""Bytes read per step of one direction."""


def _log(msg: str) -> None:
    """One line on stderr (the caller's log); never raises, the relay must keep serving."""
    try:
        sys.stderr.write(f"relay: {msg}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _close(writer: asyncio.StreamWriter, *, abort: bool = False) -> None:
    """Close one side's transport; ``abort`` drops unsent data (a failed connection)."""
    if abort:
        writer.transport.abort()
    else:
        writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy ``src`` to ``dst`` until EOF, then half-close ``dst``. Raises on a failed side."""
    while True:
        data = await src.read(CHUNK)
        if not data:
            break
        dst.write(data)
        await dst.drain()  # waits while the other side is slow: no unbounded buffering
    if dst.can_write_eof() and not dst.is_closing():
        try:
            dst.write_eof()
        except OSError:  # the peer is already gone: nothing left to tell it
            pass


async def _relay(
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    up_r: asyncio.StreamReader,
    up_w: asyncio.StreamWriter,
) -> None:
    """Both directions at once; the first failure aborts both sides (so the other copy, maybe
    blocked in a read, ends too), a clean end waits for the other direction."""
    tasks = [asyncio.ensure_future(_pipe(client_r, up_w)), asyncio.ensure_future(_pipe(up_r, client_w))]
    failed = False
    try:
        for fut in asyncio.as_completed(tasks):
            try:
                await fut
            except (OSError, asyncio.IncompleteReadError):
                failed = True
                break
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for writer in (client_w, up_w):
            _close(writer, abort=failed)


def _handler(socket_path: str):
    """The per-connection callback: connect to the host socket, then relay until both ends."""

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            try:
                up_r, up_w = await asyncio.open_unix_connection(socket_path)
            except OSError as e:
                _log(f"cannot connect to {socket_path}: {e}")
                _close(client_w, abort=True)
                return
            await _relay(client_r, client_w, up_r, up_w)
        except asyncio.CancelledError:
            # only asyncio.run cancels a connection, at shutdown; ending quietly keeps 3.11's
            # stream callback from logging a traceback for it (the finally blocks closed both)
            _close(client_w, abort=True)

    return handle


def _release_stdout() -> None:
    """Point fd 1 at /dev/null after ``ready``: the caller may close its reading end, and the
    relay must hold no pipe that a caller waits on for EOF."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


async def serve(socket_path: str, port: int) -> None:
    """Listen on 127.0.0.1:``port`` until SIGTERM/SIGINT, then stop accepting and return."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_server(_handler(socket_path), "127.0.0.1", port)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    _release_stdout()
    try:
        await stop.wait()
    finally:
        # no wait_closed(): since 3.12 it waits for open connections; asyncio.run cancels their
        # tasks on return, and each closes its two sides
        server.close()


def _check_socket(path: str) -> str | None:
    """Why ``path`` is not a unix socket, or None: fail at start rather than per request."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return f"no socket at {path}: {e.strerror}"
    return None if stat.S_ISSOCK(mode) else f"{path} is not a unix socket"


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit() or not 0 < int(argv[2]) < 65536:
        _log("usage: relay.py SOCKET_PATH PORT")
        return 2
    problem = _check_socket(argv[1])
    if problem:
        _log(problem)
        return 2
    try:
        asyncio.run(serve(argv[1], int(argv[2])))
    except OSError as e:  # the port is taken, or loopback is down
        _log(f"cannot listen on 127.0.0.1:{argv[2]}: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
