"""How a worker (the trusted fork server) is launched for each backend, and which backend is usable.

Every backend runs the same ``_server.py`` fork server; they differ only in the wrapper around it:

- ``local``: a plain ``python -I -S`` process. Resource limits and process cleanup only; the program
  shares the host's filesystem, network and uid. NOT isolation.
- ``bwrap``: bubblewrap with all namespaces unshared (no network, private PID/IPC/UTS namespaces),
  a read-only view of ``/usr`` and the Python prefix only (no ``/etc``, ``$HOME``, repo or host
  ``/tmp``), a size-capped private tmpfs ``/tmp`` as the only writable place, ``--die-with-parent``.
- ``apptainer``: ``apptainer exec --containall --cleanenv --net --network none`` on a ``.sif`` image
  (``env/sandbox.def``), the server directory bound read-only.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from lit_codeRL.sandbox.config import SandboxConfig

logger = logging.getLogger(__name__)

SERVER_PATH = Path(__file__).with_name("_server.py")
SERVER_MOUNT = "/opt/lcrl"
"""Where the server directory appears inside bwrap/apptainer containers."""
CONTAINER_WORK_ROOT = "/tmp/work"
BWRAP_TMPFS_BYTES = 256 << 20
"""Size cap of the private /tmp in a bwrap worker (tmpfs lives in RAM)."""


def server_config(cfg: SandboxConfig, work_root: str) -> str:
    """The JSON argument the fork server reads (limits it applies to every child)."""
    return json.dumps(
        {
            "work_root": work_root,
            "memory_mb": int(cfg.memory_mb),
            "max_output_bytes": int(cfg.max_output_bytes),
            "max_capture_bytes": int(cfg.max_capture_bytes),
            "max_processes": int(cfg.max_processes),
            "max_open_files": int(cfg.max_open_files),
        }
    )


def _python_prefixes(python: str) -> list[str]:
    """Directories a bwrap sandbox must see read-only for ``python`` and its stdlib to work."""
    real = os.path.realpath(python)
    prefix = str(Path(real).parent.parent)
    out = [] if prefix in ("/usr", "/") else [prefix]
    if prefix != sys.base_prefix and Path(real) == Path(os.path.realpath(sys.executable)):
        out.append(sys.base_prefix)
    return [p for p in dict.fromkeys(out) if not p.startswith("/usr/")]


def local_argv(cfg: SandboxConfig, work_root: str) -> list[str]:
    return [cfg.python, "-I", "-S", "-B", str(SERVER_PATH), server_config(cfg, work_root)]


def bwrap_argv(cfg: SandboxConfig, bwrap: str = "bwrap") -> list[str]:
    """bubblewrap command line for one worker (unit-tested; see the module docstring)."""
    argv = [
        bwrap,
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
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), str(p)]
    for prefix in _python_prefixes(cfg.python):
        argv += ["--ro-bind", prefix, prefix]
    argv += [
        "--ro-bind",
        str(SERVER_PATH.parent),
        SERVER_MOUNT,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--size",
        str(BWRAP_TMPFS_BYTES),
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--",
        cfg.python,
        "-I",
        "-S",
        "-B",
        f"{SERVER_MOUNT}/{SERVER_PATH.name}",
        server_config(cfg, CONTAINER_WORK_ROOT),
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
        server_config(cfg, CONTAINER_WORK_ROOT),
    ]


def apptainer_image(cfg: SandboxConfig) -> str | None:
    image = cfg.apptainer_image or os.environ.get("LIT_CODERL_SANDBOX_SIF")
    return image if image and Path(image).is_file() else None


@functools.cache
def bwrap_works(python: str = sys.executable) -> bool:
    """Probe once: does a bwrap sandbox with our flags start Python here (user namespaces allowed)?"""
    if shutil.which("bwrap") is None:
        return False
    argv = bwrap_argv(SandboxConfig(python=python))
    argv = argv[: argv.index("--") + 1] + [python, "-I", "-S", "-c", "print(6*7)"]
    try:
        out = subprocess.run(argv, capture_output=True, timeout=20, text=True)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if out.returncode != 0 or out.stdout.strip() != "42":
        logger.warning("bwrap probe failed (rc=%s): %s", out.returncode, out.stderr.strip()[:300])
        return False
    return True


def resolve_backend(cfg: SandboxConfig) -> str:
    """The backend ``cfg.backend`` means on this machine (``auto`` -> the safest available)."""
    if cfg.backend != "auto":
        return cfg.backend
    if shutil.which("apptainer") and apptainer_image(cfg):
        return "apptainer"
    if bwrap_works(cfg.python):
        return "bwrap"
    return "local"


class PidsCgroup:
    """A per-worker pids cgroup (v1 ``pids`` hierarchy or v2 with the pids controller), if writable.

    RLIMIT_NPROC is not enforced for uid 0, so when the trainer runs as root this is the only
    bound on a fork bomb besides the server's kill loop. Absent (``path is None``) when unavailable.
    """

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
            if not (root / "cgroup.procs").exists():
                continue
            if root == Path("/sys/fs/cgroup") and "pids" not in _read(root / "cgroup.subtree_control"):
                continue
            path = root / "lit_coderl" / f"w{os.getpid()}-{uuid.uuid4().hex[:8]}"
            try:
                path.mkdir(parents=True)
                (path / "pids.max").write_text(str(limit))
            except OSError:
                try:
                    path.rmdir()
                except OSError:
                    pass
                continue
            self.path = path
            break

    @property
    def procs(self) -> str | None:
        return str(self.path / "cgroup.procs") if self.path else None

    def pids(self) -> list[int]:
        if self.path is None:
            return []
        return [int(x) for x in _read(self.path / "cgroup.procs").split()]

    def remove(self) -> None:
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""
