"""How a worker (the trusted fork server) is launched for each backend, and which backend is usable.

Every backend runs the same ``_server.py`` fork server; they differ only in the wrapper around it:

- ``local``: a plain ``python -I -S`` process. Resource limits and process cleanup only; the program
  shares the host's filesystem, network and uid. NOT isolation; used only when asked for.
- ``bwrap``: bubblewrap with all namespaces unshared (no network, private PID/IPC/UTS namespaces),
  a read-only view of ``/usr`` and exactly the files the real interpreter needs (:func:`interpreter`:
  venv, conda, pyenv or system), no ``/etc``, ``$HOME``, repo or host ``/tmp``; size-capped private
  tmpfs ``/tmp`` and ``/dev/shm`` as the only writable places (bwrap's own tmpfs root and ``/dev``
  are remounted read-only after the last mount); ``--die-with-parent``.
- ``apptainer``: ``apptainer exec --containall --cleanenv --net --network none`` on a ``.sif`` image
  (``env/sandbox.def``), the server directory bound read-only.

Whether a backend works is decided by starting a real worker with the pool's own command line
(``pool.probe_backend``, ``pool.resolve_backend``), never by a look-alike command: those live
in ``pool.py``, which imports this module and never the other way round.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lit_codeRL.errors import ConfigError
from lit_codeRL.sandbox import userns
from lit_codeRL.sandbox.config import SandboxConfig

if TYPE_CHECKING:
    from lit_codeRL.sandbox.cgroups import Cgroup


SERVER_PATH = Path(__file__).with_name("_server.py")
SERVER_MOUNT = "/opt/lcrl"
"""Where the server directory appears inside bwrap/apptainer containers."""
CONTAINER_WORK_ROOT = "/tmp/work"
BWRAP_TMPFS_BYTES = 256 << 20
"""Size cap of the private /tmp in a bwrap worker (tmpfs lives in RAM)."""
SHM_BYTES = 16 << 20
"""Size cap of the private /dev/shm in a bwrap worker."""


def server_config(
    cfg: SandboxConfig, work_root: str, scratch: tuple[str, ...] = (), drop_to: int | None = None
) -> str:
    """The JSON argument the fork server reads (limits it applies to every child). ``scratch``:
    directories that belong to this worker alone (a container's /tmp): emptied after every
    program except for ``work_root``, and part of the worker's health check. ``drop_to``: the
    uid the server becomes first (a sandbox in a user namespace of its own: ``userns.py``)."""
    return json.dumps(
        {
            "drop_to": drop_to,
            "work_root": work_root,
            "scratch": list(scratch),
            "memory_mb": int(cfg.memory_mb),
            "max_output_bytes": int(cfg.max_output_bytes),
            "max_capture_bytes": int(cfg.max_capture_bytes),
            "max_processes": int(cfg.max_processes),
            "max_open_files": int(cfg.max_open_files),
        }
    )


SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin")
"""Bound read-only wholesale in every bwrap worker (the C library, the loader, /usr/bin tools)."""
_LAYOUT_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The environment every worker (and the layout probe) starts with: nothing from the trainer."""


class SandboxUnavailable(ConfigError):
    """The requested isolation cannot run here; the message names the fix."""


@dataclass(frozen=True)
class Interpreter:
    """What a bwrap worker execs and exactly which host paths it needs to see (read-only)."""

    executable: str
    """The real interpreter binary: a venv's ``bin/python`` is only a symlink (or a copy reading
    ``pyvenv.cfg``) that the sandbox does not show, so the worker runs the base interpreter."""
    binds: tuple[str, ...]
    """Read-only binds outside :data:`SYSTEM_DIRS`: the binary, the stdlib directories and the
    directories of the shared libraries it maps (libpython, conda's lib/)."""
    masks: tuple[str, ...]
    """``site-packages`` directories under those binds, hidden behind an empty read-only tmpfs:
    the worker runs ``-I -S`` and never needs them, the program has no business reading them."""


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _system(path: str) -> bool:
    real = os.path.realpath(path)
    return _under(path, SYSTEM_DIRS) and _under(real, SYSTEM_DIRS)


def _layout(python: str) -> dict:
    """Ask ``python`` itself (run exactly like a worker: ``-I -S -B``, the worker's environment)
    where its stdlib is and which files it maps once the server's imports are loaded."""
    argv = [python, "-I", "-S", "-B", str(SERVER_PATH), "--layout"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=_LAYOUT_ENV, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxUnavailable(f"cannot run the sandbox interpreter {python!r}: {e}") from e
    if out.returncode != 0:
        err = out.stderr.strip().splitlines()[-1:] or [f"exit status {out.returncode}"]
        raise SandboxUnavailable(f"the sandbox interpreter {python!r} does not start: {err[0]}")
    return json.loads(out.stdout)


@functools.cache
def interpreter(python: str) -> Interpreter:
    """Resolve ``python`` (venv, conda, pyenv or system) to the binary and paths a bwrap worker needs.

    A venv's interpreter reports its base (``sys._base_executable``); the worker runs that, and
    the layout is then taken from the base itself, so what is bound is what actually runs.
    """
    info = _layout(python)
    real = os.path.realpath(info["base_executable"] or info["executable"])
    if real != os.path.realpath(info["executable"]):
        info = _layout(real)
        real = os.path.realpath(info["executable"])
    server_dir = str(SERVER_PATH.parent)
    wanted = [real]
    wanted += [p for p in info["path"] if p != server_dir and os.path.exists(p)]
    # shared libraries' directories (an extension module loaded later may need a sibling library,
    # e.g. conda's lib/libffi next to libpython); the binary itself is bound alone, not its bin/
    wanted += [os.path.dirname(m) for m in info["maps"] if os.path.isfile(m) and os.path.realpath(m) != real]
    binds: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted if not _system(p)}, key=len):
        if not _under(path, binds):  # a parent directory is bound already
            binds.append(path)
    masks = [
        p
        for p in dict.fromkeys(os.path.realpath(s) for s in info["site"])
        if os.path.isdir(p) and _under(p, binds) and p not in binds
    ]
    return Interpreter(executable=real, binds=tuple(binds), masks=tuple(masks))


def local_argv(cfg: SandboxConfig, work_root: str) -> list[str]:
    return [cfg.python, "-I", "-S", "-B", str(SERVER_PATH), server_config(cfg, work_root)]


BWRAP_ISOLATION = (
    "--unshare-all",  # user, ipc, pid, net (loopback only), uts, cgroup
    "--unshare-user",
    "--disable-userns",  # the program cannot build nested namespaces
    "--die-with-parent",
    "--new-session",  # no TIOCSTI into the caller's terminal
    "--uid",
    "65534",
    "--gid",
    "65534",
    "--hostname",
    "sandbox",
)
"""The namespace and identity flags every bwrap sandbox starts with (program workers and
workspaces alike)."""


def bwrap_open_parents(targets: Iterable[str]) -> list[str]:
    """Directories ``0755`` made in bwrap's root before ``targets`` are bound under them: bwrap
    would give them the host's modes (``/root`` is ``0700``), which only a sandbox uid that is
    host root can pass, not one in a user namespace of its own (``userns.py``). Those under
    :data:`SYSTEM_DIRS` are the host's own, bound whole."""
    made: dict[str, None] = {}
    for target in targets:
        parts = Path(target).parent.parts[1:]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if not _under(d, SYSTEM_DIRS):
                made[d] = None
    return [arg for d in made for arg in ("--perms", "0755", "--dir", d)]


def bwrap_system_binds(interp: Interpreter, open_parents: Iterable[str] | None = None) -> list[str]:
    """Read-only ``/usr`` (``/bin``, ``/lib*``, ``/sbin`` as the symlinks or dirs they are here)
    plus exactly the interpreter's own files, with its ``site-packages`` masked; ``open_parents``
    (in a user namespace of its own): the directories above those files and above these other
    sandbox paths made passable first (:func:`bwrap_open_parents`)."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), str(p)]
    if open_parents is not None:
        argv += bwrap_open_parents([*interp.binds, *open_parents])
    for path in interp.binds:
        argv += ["--ro-bind", path, path]
    for path in interp.masks:
        argv += ["--tmpfs", path, "--remount-ro", path]
    return argv


SANDBOX_PATH = "/usr/bin:/bin"
"""The only ``PATH`` a sandbox wrapper is started with (nothing of the caller's environment)."""


def bwrap_executable() -> str:
    """``bwrap`` as the wrapper's sanitized ``PATH`` finds it, else its absolute path on the
    caller's ``PATH`` (bubblewrap unpacked or built outside ``/usr``, e.g. in a user's prefix):
    ``subprocess`` looks an executable up on the ``PATH`` of the environment it is given."""
    if shutil.which("bwrap", path=SANDBOX_PATH):
        return "bwrap"
    return shutil.which("bwrap") or "bwrap"


def bwrap_isolation(userns_fd: int | None) -> list[str]:
    """:data:`BWRAP_ISOLATION`, or with ``userns_fd`` the flags of a sandbox in that user
    namespace (``userns.py``: a root trainer's programs as a host uid that is not root)."""
    return list(BWRAP_ISOLATION) if userns_fd is None else userns.bwrap_isolation(userns_fd)


def bwrap_tmpfs(userns_fd: int | None, size: int, path: str) -> list[str]:
    """A size-capped tmpfs at ``path``; in a user namespace of its own it belongs to the
    namespace's root, so it is made world-writable (sticky) for the sandbox uid."""
    return [*(["--perms", "1777"] if userns_fd is not None else []), "--size", str(size), "--tmpfs", path]


def bwrap_argv(cfg: SandboxConfig, bwrap: str | None = None, userns_fd: int | None = None) -> list[str]:
    """bubblewrap command line for one worker (unit-tested; see the module docstring);
    ``userns_fd``: in that user namespace (:func:`bwrap_isolation`)."""
    interp = interpreter(cfg.python)
    argv = [
        bwrap or bwrap_executable(),
        *bwrap_isolation(userns_fd),
        *bwrap_system_binds(interp, open_parents=None if userns_fd is None else [SERVER_MOUNT]),
    ]
    argv += [
        "--ro-bind",
        str(SERVER_PATH.parent),
        SERVER_MOUNT,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # /dev is bwrap's own unbounded tmpfs: give shared memory a small one of its own (the
        # server empties it after every program)
        *bwrap_tmpfs(userns_fd, SHM_BYTES, "/dev/shm"),
        *bwrap_tmpfs(userns_fd, BWRAP_TMPFS_BYTES, "/tmp"),
        # bwrap's root and /dev are tmpfs mounts of its own, writable by the sandbox uid and without
        # a size: read-only once every mount point above exists, or a program could fill memory
        # through them and leave files there for the next program (the server empties only its
        # scratch dirs). /tmp and /dev/shm are separate mounts and stay writable.
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--",
        interp.executable,
        "-I",
        "-S",
        "-B",
        f"{SERVER_MOUNT}/{SERVER_PATH.name}",
        server_config(
            cfg,
            CONTAINER_WORK_ROOT,
            scratch=("/tmp", "/dev/shm"),
            drop_to=None if userns_fd is None else userns.SANDBOX_ID,
        ),
    ]
    return argv


def apptainer_argv(cfg: SandboxConfig, image: str, apptainer: str = "apptainer") -> list[str]:
    """``apptainer exec`` command line for one worker (unit-tested; runs where apptainer exists)."""
    return [
        apptainer,
        "exec",
        "--containall",  # private PID/IPC namespaces, empty /tmp and $HOME, minimal /dev
        "--cleanenv",
        "--no-home",
        "--net",
        "--network",
        "none",  # loopback-only network namespace
        "--no-mount",
        "home,tmp,bind-paths",
        "--writable-tmpfs",
        "--bind",
        f"{SERVER_PATH.parent}:{SERVER_MOUNT}:ro",
        "--pwd",
        "/tmp",
        image,
        cfg.apptainer_python,
        "-I",
        "-S",
        "-B",
        f"{SERVER_MOUNT}/{SERVER_PATH.name}",
        server_config(cfg, CONTAINER_WORK_ROOT, scratch=("/tmp",)),
    ]


def apptainer_image(cfg: SandboxConfig) -> str | None:
    image = cfg.apptainer_image or os.environ.get("LIT_CODERL_SANDBOX_SIF")
    return image if image and Path(image).is_file() else None


FIX = (
    "install bubblewrap (apt-get install bubblewrap; unprivileged user namespaces must be allowed), "
    "or build the apptainer image (apptainer build sandbox.sif env/sandbox.def) and set "
    "LIT_CODERL_SANDBOX_SIF, or set the sandbox backend to 'local' explicitly to accept running "
    "untrusted code without isolation"
)


def kill_sandbox(proc: subprocess.Popen, cgroups: Iterable[Cgroup]) -> None:
    """Kill a sandbox's wrapper process, its whole tree and every process in ``cgroups`` (escaped
    stragglers), close the pipes to it and reap it."""
    from lit_codeRL.sandbox._server import _kill_tree

    _kill_tree(proc.pid, pgid=proc.pid, also={p for cg in cgroups for p in cg.pids()})
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream:
                stream.close()
        except OSError:
            pass
    proc.wait()
