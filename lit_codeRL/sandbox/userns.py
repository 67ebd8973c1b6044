"""A user namespace of its own for each bwrap sandbox, so that a trainer running as root runs
model-written programs as a host uid that is not root, and RLIMIT_NPROC bounds their processes.

The kernel does not apply RLIMIT_NPROC to host uid 0, and bwrap's ``--unshare-user`` maps the
sandbox's uid to the uid of bwrap's caller: a root trainer's programs run as host root. Where no
pids cgroup is writable either (most containers, the GPU machines), nothing bounded a fork bomb
but its timeout. Here the trainer makes the namespace itself (:func:`make`, with ``unshare`` and
the map written from outside, which only a privileged caller may): host root stays the
namespace's root, so bwrap still sets the sandbox up with root's view of the host's files, and
the sandbox uid 65534 becomes a host uid of its own. bwrap joins it (``--userns``) and keeps only
``CAP_SETUID``/``CAP_SETGID`` for the in-sandbox server, which drops to that uid before it reads
anything (its ``drop_to`` setting): every capability goes with the switch, and the kernel's
RLIMIT_NPROC binds the server and every program. The namespace also allows no nested user
namespace (``user.max_user_namespaces`` 0 inside it; bwrap's ``--disable-userns`` needs
``--unshare-user``), and its tmpfs mounts are made ``1777`` (they belong to the namespace's root).
"""

from __future__ import annotations

import itertools
import os
import select
import shutil
import subprocess
import time

SANDBOX_ID = 65534
"""The uid and gid a sandbox runs as inside its namespace (bwrap's ``--uid``/``--gid`` elsewhere)."""

_SEQUENCE = itertools.count()

# The holder waits until its map is written, then execs a shell again: a process gets its
# capabilities in the new namespace at exec, and only as the namespace's root, which it is only
# once the map says so.
_HOLDER = "read go; exec /bin/sh -c 'echo 0 > /proc/sys/user/max_user_namespaces && echo ok && exec sleep 60'"


MAX_BASE_UID = (1 << 32) - 2 - 4096 * 256
"""The highest ``root_program_uid``: its sandboxes' uids stay below 2**32 - 1 (no uid)."""


def check_base_uid(key: str, base: int | None) -> None:
    """A config's ``root_program_uid`` is ``None`` or a host uid above root's with room for every
    offset :func:`host_uid` adds; raises ``ValueError`` naming ``key`` otherwise."""
    if base is not None and not 0 < base <= MAX_BASE_UID:
        raise ValueError(f"{key} must be null or in 1..{MAX_BASE_UID}, got {base}")


def host_uid(base: int) -> int:
    """The host uid of the next sandbox: ``base`` plus an offset per process and per sandbox, so
    that kernels before 5.14 (which count RLIMIT_NPROC per host uid, not per namespace) do not
    make two sandboxes share one budget."""
    return base + (os.getpid() % 4096) * 256 + next(_SEQUENCE) % 256


def make(outer: int, timeout_s: float = 10.0) -> int:
    """An fd of a new user namespace where host root is root, :data:`SANDBOX_ID` is host uid and
    gid ``outer``, and no user namespace can be made; raises ``OSError`` saying why not. The
    caller passes it to bwrap (``pass_fds``) and closes it."""
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is None:
        raise OSError("no unshare binary (util-linux) on /usr/bin:/bin")
    holder = subprocess.Popen(
        [unshare, "--user", "/bin/sh", "-c", _HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin"},
        cwd="/",
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    try:
        own = os.readlink("/proc/self/ns/user")
        while os.readlink(f"/proc/{holder.pid}/ns/user") == own:
            if holder.poll() is not None or time.monotonic() > deadline:
                raise OSError(f"unshare --user did not make a user namespace (exit {holder.poll()})")
            time.sleep(0.0005)
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as f:
                f.write(f"0 0 1\n{SANDBOX_ID} {outer} 1\n")
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.write(b"go\n")
        holder.stdin.flush()
        ready = select.select([holder.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]
        if not ready or holder.stdout.readline() != b"ok\n":
            raise OSError("the new user namespace did not take user.max_user_namespaces = 0")
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


def bwrap_isolation(fd: int) -> list[str]:
    """bwrap's namespace and identity flags for a sandbox in the namespace ``fd`` (what
    ``backends.BWRAP_ISOLATION`` is for the others): every namespace but the user one unshared,
    that one joined, and the two capabilities the server needs to drop to :data:`SANDBOX_ID`."""
    return [
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--userns",
        str(fd),
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the caller's terminal
        "--hostname",
        "sandbox",
    ]
