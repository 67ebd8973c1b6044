"""How a workspace session is launched: where things appear inside it, the environment its
commands start with, the server's settings, and the bwrap / apptainer command lines (pure
functions, unit-tested), plus which backend a ``WorkspaceConfig`` means on this machine."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from lit_codeRL.sandbox import backends, userns
from lit_codeRL.sandbox.repo_layout import import_roots
from lit_codeRL.sandbox.workspace_config import WorkspaceConfig

SERVER_FILE = Path(__file__).with_name("_workspace_server.py")
MOUNT = "/opt/lcrl"
"""Where the server, the toolchain and the pristine repository appear inside a session."""
SERVER_IN = f"{MOUNT}/ws_server.py"
TOOLS_IN = f"{MOUNT}/tools"
REPO_SRC_IN = f"{MOUNT}/repo-src"
STEADY_PLUGIN = Path(__file__).with_name("pytest_steady.py")
STEADY_PLUGIN_NAME = "lcrl_steady"
"""The module name every pytest of a session loads ``pytest_steady.py`` by (``PYTEST_PLUGINS``)."""
PLUGINS_IN = f"{MOUNT}/pytest-plugins"
"""A directory on every session's ``PYTHONPATH`` that holds only that plugin."""
STEADY_PLUGIN_IN = f"{PLUGINS_IN}/{STEADY_PLUGIN_NAME}.py"
STATE_DIR = "/run/lcrl"
"""The server's per-command state files and temporary git indexes: a small tmpfs of its own, so
an agent filling /tmp or the workspace does not stop the shell state from being saved."""
STATE_BYTES = 4 << 20
"""The state tmpfs's size before the room for the repository's git indexes (:func:`state_bytes`)."""
APPTAINER_PYTHON = "python3"
"""The interpreter inside an apptainer image (env/swe.def installs python3 with pytest)."""
REPO = "/workspace/repo"
"""Where the repository lives inside every session; commands start there."""


def state_bytes(repo: str | Path) -> int:
    """Size of a session's :data:`STATE_DIR` tmpfs: :data:`STATE_BYTES` plus room for three
    indexes the size of the repository's own (``.git/index``: an entry per tracked file, about 5
    MB for 20k files with long paths). ``Workspace.diff`` builds a throwaway index there (the
    base's files and what the agent added; git writes it beside its lock file), so a large
    repository's diffs fit without any agent action; the cap still bounds what can be written."""
    try:
        index = os.path.getsize(os.path.join(repo, ".git", "index"))
    except OSError:
        index = 0
    return STATE_BYTES + 3 * index


def repo_python_path(repo: str | Path) -> list[str]:
    """The directories of ``repo`` (a host checkout at the base commit) that an installed copy of
    it would import from, as sandbox paths (``repo_layout.import_roots``: ``src`` of a src layout,
    or the root package directory its packaging declares)."""
    return [f"{REPO}/{d}" for d in import_roots(repo)]


def python_path_env(head: Sequence[str], repo: str | Path) -> dict[str, str]:
    """``{"PYTHONPATH": ...}`` of a session's commands: ``head`` (the toolchain), then the
    repository's own import roots (:func:`repo_python_path`); empty when there is neither."""
    path = [*head, *repo_python_path(repo)]
    return {"PYTHONPATH": ":".join(path)} if path else {}


def base_env(path_head: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment every command starts with: nothing from the trainer. ``$PATH`` inside an
    ``extra`` value stands for the default PATH (``{"PATH": "/tools/bin:$PATH"}``). ``PYTHONPATH``
    comes in ``extra`` (:func:`python_path_env`; it holds :data:`PLUGINS_IN`)."""
    path = f"{path_head}:/usr/local/bin:/usr/bin:/bin" if path_head else "/usr/local/bin:/usr/bin:/bin"
    env = {
        "PATH": path,
        "HOME": "/tmp/home",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "USER": "agent",
        "LOGNAME": "agent",
        "TERM": "dumb",
        "PAGER": "cat",
        "GIT_PAGER": "cat",
        "GIT_CONFIG_NOSYSTEM": "1",
        # No bytecode cache in the workspace: a .pyc counts as fresh while its source keeps its
        # size and its mtime's second, so an edit that swaps `+` for `*` within a second of the
        # last test run would run the old code (the tests' output lied; only the fresh grade saw).
        "PYTHONDONTWRITEBYTECODE": "1",
        # grading's pytest runs with this seed (grading/_runner.py: HASH_SEED): the agent's own
        # test runs order a set of strings, and name a parametrization over one, as grading does
        "PYTHONHASHSEED": "0",
        # and as grading's child does, every pytest loads the plugin that seeds `random`, NumPy
        # and Hypothesis (pytest_steady.py): a test that draws numbers or examples does what it
        # will do when graded
        "PYTEST_PLUGINS": STEADY_PLUGIN_NAME,
    }
    for k, v in extra.items():
        env[k] = str(v).replace("$PATH", path)
    return env


def server_config(
    config: WorkspaceConfig,
    env: Mapping[str, str],
    *,
    pid1: bool,
    repo_src: str | None,
    drop_to: int | None = None,
) -> str:
    """The JSON the in-sandbox server reads: where things are and the per-command limits;
    ``drop_to``: the uid it becomes first (a session in a user namespace of its own)."""
    return json.dumps(
        {
            "drop_to": drop_to,
            "repo": REPO,
            "repo_src": repo_src,
            "state_dir": STATE_DIR,
            "env": dict(env),
            "pid1": pid1,
            "memory_mb": int(config.memory_mb),
            "disk_mb": int(config.disk_mb),
            "max_open_files": int(config.max_open_files),
            # RLIMIT_NPROC counts the uid's processes and is ignored for root: only then useful
            "nproc": int(config.max_processes) if os.getuid() != 0 or drop_to is not None else 0,
        }
    )


def bwrap_workspace_argv(
    config: WorkspaceConfig,
    repo: str,
    *,
    toolchain: str,
    binds: Mapping[str, str] = {},
    writable_binds: Mapping[str, str] = {},
    scratch: Mapping[str, int] = {},
    env: Mapping[str, str] = {},
    bwrap: str | None = None,
    userns_fd: int | None = None,
) -> list[str]:
    """bubblewrap command line of one session: the program sandbox's isolation flags and system
    binds, the server as PID 1, the workspace, /tmp and every ``scratch`` path (sandbox path ->
    bytes) on size-capped tmpfs; ``userns_fd``: in that user namespace, the server dropping to
    its sandbox uid (``backends.bwrap_isolation``)."""
    interp = backends.interpreter(config.python)
    cmd_env = base_env(f"{TOOLS_IN}/bin", {**python_path_env([f"{TOOLS_IN}/site", PLUGINS_IN], repo), **env})
    own = userns_fd is not None
    argv = [
        bwrap or backends.bwrap_executable(),
        *backends.bwrap_isolation(userns_fd),
        "--as-pid-1",
        *backends.bwrap_system_binds(
            interp,
            open_parents=[SERVER_IN, STEADY_PLUGIN_IN, *binds.values(), *writable_binds.values()]
            if own
            else None,
        ),
    ]
    argv += ["--ro-bind", f"{toolchain}/etc", "/etc", "--ro-bind", toolchain, TOOLS_IN]
    argv += ["--ro-bind", str(SERVER_FILE), SERVER_IN, "--ro-bind", repo, REPO_SRC_IN]
    argv += ["--ro-bind", str(STEADY_PLUGIN), STEADY_PLUGIN_IN]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for size, path in (
        (backends.SHM_BYTES, "/dev/shm"),
        (int(config.tmp_mb) << 20, "/tmp"),
        (state_bytes(repo), STATE_DIR),
        (int(config.disk_mb) << 20, "/workspace"),
        *((int(n), p) for p, n in scratch.items()),
    ):
        argv += backends.bwrap_tmpfs(userns_fd, size, path)
    for host, inside in binds.items():
        argv += ["--ro-bind", str(host), inside]
    for host, inside in writable_binds.items():
        argv += ["--bind", str(host), inside]
    if Path("/etc/alternatives").is_dir():  # Debian's /usr/bin/awk etc. point into it
        argv += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
    # bwrap's root and /dev are tmpfs of its own without a size: read-only, or the agent could
    # fill memory through them and delete /bin (a symlink bwrap made there)
    argv += [
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        "/",
        "--",
        interp.executable,
        "-I",
        "-S",
        "-B",
        SERVER_IN,
    ]
    drop_to = userns.SANDBOX_ID if own else None
    argv.append(server_config(config, cmd_env, pid1=True, repo_src=REPO_SRC_IN, drop_to=drop_to))
    return argv


def instance_name() -> str:
    """A name no other session (of this or another process) uses."""
    return f"lcrl-ws-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def apptainer_start_argv(
    image: str,
    name: str,
    workdir: str,
    repo: str,
    *,
    workspace_dir: str,
    binds: Mapping[str, str] = {},
    writable_binds: Mapping[str, str] = {},
    apptainer: str = "apptainer",
) -> list[str]:
    """``apptainer instance start`` with every isolation flag (later ``exec``s join this
    instance's namespaces and cannot add isolation of their own)."""
    argv = [
        apptainer,
        "instance",
        "start",
        "--containall",  # private PID/IPC namespaces, no host /tmp or $HOME, minimal /dev
        "--cleanenv",
        "--no-home",
        "--net",
        "--network",
        "none",  # loopback only
        "--no-mount",
        "home,tmp,bind-paths",
        "--writable-tmpfs",
        "--workdir",
        workdir,  # the instance's /tmp and scratch on host disk, past the 64 MiB default tmpfs
        "--bind",
        f"{SERVER_FILE}:{SERVER_IN}:ro",
        "--bind",
        f"{repo}:{REPO_SRC_IN}:ro",
        "--bind",
        f"{STEADY_PLUGIN}:{STEADY_PLUGIN_IN}:ro",
        "--bind",
        f"{workspace_dir}:/workspace",
    ]
    for host, inside in binds.items():
        argv += ["--bind", f"{host}:{inside}:ro"]
    for host, inside in writable_binds.items():
        argv += ["--bind", f"{host}:{inside}"]
    return [*argv, image, name]


def apptainer_server_argv(
    config: WorkspaceConfig, name: str, env: Mapping[str, str] = {}, apptainer: str = "apptainer"
) -> list[str]:
    cmd_env = base_env("", env)
    cfg = server_config(config, cmd_env, pid1=False, repo_src=REPO_SRC_IN)
    return [
        apptainer,
        "exec",
        "--cleanenv",
        "--pwd",
        "/",
        f"instance://{name}",
        APPTAINER_PYTHON,
        "-I",
        "-S",
        "-B",
        SERVER_IN,
        cfg,
    ]


def apptainer_stop_argv(name: str, apptainer: str = "apptainer") -> list[str]:
    return [apptainer, "instance", "stop", name]


# -- backend choice ----------------------------------------------------------------------------


def workspace_image(config: WorkspaceConfig) -> str | None:
    image = config.apptainer_image or os.environ.get("LIT_CODERL_SWE_SIF")
    return image if image and Path(image).is_file() else None


def resolve_backend(config: WorkspaceConfig) -> str:
    """``auto``: apptainer with binary and image, else bwrap; raises when neither isolates."""
    if config.backend in ("auto", "apptainer") and shutil.which("apptainer") and workspace_image(config):
        return "apptainer"
    if config.backend == "apptainer":
        raise backends.SandboxUnavailable(
            "workspace backend 'apptainer' needs the apptainer binary and an image "
            "(WorkspaceConfig.apptainer_image or $LIT_CODERL_SWE_SIF, built from env/swe.def)"
        )
    if shutil.which("bwrap") is None:
        raise backends.SandboxUnavailable(f"no isolating workspace backend works here; {backends.FIX}")
    return "bwrap"
