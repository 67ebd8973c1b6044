"""The read-only toolchain a bwrap workspace sees: the installed files of a few distributions
(pytest and its dependencies, never the whole site-packages), launchers for the real interpreter, a
minimal ``/etc`` and the trusted bytecode grading reads, built once per machine in the user's cache
directory."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from lit_codeRL.errors import ConfigError
from lit_codeRL.sandbox import backends
from lit_codeRL.sandbox.workspace_argv import TOOLS_IN

_TOOLCHAIN_SCRIPT = r"""
import json, sys, importlib.metadata as md
from packaging.requirements import Requirement
todo, seen, files = list(sys.argv[1:]), set(), {}
while todo:
    name = todo.pop()
    dist = md.distribution(name)
    key = dist.metadata["Name"].lower().replace("_", "-")
    if key in seen:
        continue
    seen.add(key)
    root = str(dist.locate_file(""))
    files.setdefault(root, []).extend(str(f) for f in dist.files or ())
    for req in dist.requires or ():
        r = Requirement(req)
        if r.marker is None or r.marker.evaluate({"extra": ""}):
            todo.append(r.name)
print(json.dumps({"dists": sorted(seen), "files": files}))
"""

_TOOLCHAIN_LAYOUT = 3
"""Part of the cache key: bump when what a toolchain directory holds changes."""
BYTECODE_DIR = "bytecode"
"""The toolchain's tree of trusted bytecode (:func:`_trusted_bytecode`); grading's pytest child
reads it as ``TOOLS_IN/bytecode`` (``grading/_runner.py: TRUSTED_BYTECODE``)."""
_NOT_IMPORTED_BY_TESTS = frozenset(
    {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo", "lib2to3", "ensurepip"}
)
"""Standard-library directories whose bytecode the tree leaves out (installed packages, CPython's
own test suite, GUIs): a module without it is compiled from its source, as before."""
_TOOLCHAIN_LOCK = threading.Lock()
_TOOLCHAINS: dict[tuple[str, tuple[str, ...]], Path] = {}


def with_test_deps(test_deps: str) -> tuple[str, ...]:
    """``WorkspaceConfig.toolchain`` for a command line's ``--test-deps hypothesis,six``: pytest
    and each named distribution, which must be installed for this interpreter (a bwrap sandbox
    copies the installed files). Raises ``ConfigError`` naming those that are not."""
    names = [name.strip() for name in test_deps.split(",") if name.strip()]
    missing = missing_distributions(sys.executable, names)
    if missing:
        raise ConfigError(
            f"--test-deps: {', '.join(missing)} not installed for {sys.executable} "
            f"(pip install {' '.join(missing)})"
        )
    return tuple(dict.fromkeys(["pytest", *names]))


_MISSING_SCRIPT = r"""
import json, sys, importlib.metadata as md
missing = []
for name in sys.argv[1:]:
    try:
        md.distribution(name)
    except md.PackageNotFoundError:
        missing.append(name)
print(json.dumps(missing))
"""


def missing_distributions(python: str, names: list[str]) -> list[str]:
    """Those of ``names`` not installed for the interpreter ``python`` (the one whose installed
    files a toolchain copies), in order."""
    if not names:
        return []
    out = subprocess.run([python, "-c", _MISSING_SCRIPT, *names], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise ConfigError(f"cannot ask {python} which distributions it has: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)


def toolchain_dir(python: str, dists: tuple[str, ...]) -> Path:
    """A read-only toolchain for bwrap sessions, built once per (interpreter, distributions):
    ``site/`` with the installed files of ``dists`` and their dependencies (never the whole
    site-packages), ``bin/`` with python/python3/pytest launchers for the real interpreter, and
    ``etc/`` with a minimal passwd/group/hosts (no host /etc is shown). Kept in the user's cache
    dir (not /tmp) and reused across processes when nothing changed."""
    key = (python, tuple(dists))
    with _TOOLCHAIN_LOCK:
        if key not in _TOOLCHAINS:
            _TOOLCHAINS[key] = _build_toolchain(python, tuple(dists))
        return _TOOLCHAINS[key]


def _build_toolchain(python: str, dists: tuple[str, ...]) -> Path:
    exe = backends.interpreter(python).executable
    found: dict = {"dists": [], "files": {}}
    if dists:
        out = subprocess.run(
            [python, "-c", _TOOLCHAIN_SCRIPT, *dists], capture_output=True, text=True, timeout=120
        )
        if out.returncode != 0:
            raise backends.SandboxUnavailable(
                f"workspace toolchain {dists} is not installed for {python}: {out.stderr.strip()[-300:]}"
            )
        found = json.loads(out.stdout)
    listing = json.dumps([_TOOLCHAIN_LAYOUT, exe, found], sort_keys=True)
    cache = (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "lit_coderl"
        / "workspace-toolchain"
    )
    dest = cache / hashlib.sha256(listing.encode()).hexdigest()[:16]
    if (dest / ".complete").exists():
        if dest.stat().st_mode & 0o755 != 0o755:  # built before it was opened to every uid
            dest.chmod(0o755)
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        site = build / "site"
        for root, rel_files in found["files"].items():
            for rel in rel_files:
                src = Path(root) / rel
                if rel.startswith("..") or "__pycache__" in rel or not src.is_file():
                    continue  # console scripts outside site-packages; launchers replace them
                target = site / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)
        if site.is_dir():  # read-only inside: without bytecode every import would recompile
            subprocess.run([exe, "-I", "-m", "compileall", "-q", str(site)], capture_output=True, timeout=300)
        _trusted_bytecode(exe, site, build / BYTECODE_DIR)
        _write_launchers(build / "bin", exe, "pytest" in [d.lower() for d in found["dists"]])
        _write_etc(build / "etc")
        (build / ".complete").write_text(listing)
        # mkdtemp's 0700 would hide it from a session whose uid is not the trainer's
        # (``WorkspaceConfig.root_program_uid``); it is read-only inside and holds nothing private
        build.chmod(0o755)
        try:
            build.rename(dest)
        except OSError:  # another process finished first
            shutil.rmtree(build, ignore_errors=True)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return dest


def _trusted_bytecode(exe: str, site: Path, out: Path) -> None:
    """``out``: the compiled modules of the toolchain (``site``) and of the interpreter's
    standard library, each at the path a session sees its source under (``TOOLS_IN/site/...``;
    the standard library is bound where it is), as ``sys.pycache_prefix`` lays them out.

    Grading's pytest child may read no bytecode from the repository (a ``.pyc`` planted beside a
    test module would run in its place), so it sets a ``sys.pycache_prefix``: a path where no
    process of the run can write. Pointed at nowhere, every module of pytest and of the standard
    library it imports was compiled from source in every run, most of a grading run's second on a
    small repository. Pointed here (read-only in the session), those load as compiled once, by
    us; a repository's modules map to paths under it that do not exist and cannot be made, so
    they still compile from source. A ``.pyc`` counts only while its source keeps the size and
    mtime it records: after an upgrade, the stale ones are ignored, not run."""
    probe = "import json, sys; print(json.dumps([sys.implementation.cache_tag, sys.path]))"
    found = subprocess.run([exe, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=60)
    if found.returncode != 0:
        return  # no tree: the child compiles everything, as it did before
    tag, path = json.loads(found.stdout)
    roots = [(site, f"{TOOLS_IN}/site")]
    roots += [(Path(p), os.path.realpath(p)) for p in path if p and os.path.isdir(p)]
    for root, inside in roots:
        for here, dirs, _ in os.walk(root):
            if root != site:
                dirs[:] = [d for d in dirs if d not in _NOT_IMPORTED_BY_TESTS]
            cache = Path(here) / "__pycache__"
            if "__pycache__" not in dirs:
                continue
            dirs.remove("__pycache__")
            target = out / inside.lstrip("/") / Path(here).relative_to(root)
            for pyc in cache.glob(f"*.{tag}.pyc"):
                target.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(pyc, target / pyc.name)  # read-only on both sides: one copy on disk
                except OSError:
                    try:
                        shutil.copyfile(pyc, target / pyc.name)
                    except OSError:  # unreadable here: that module compiles from source, as before
                        continue


def _write_launchers(bin_dir: Path, exe: str, pytest: bool) -> None:
    bin_dir.mkdir(parents=True)
    launchers = {"python": f'exec {exe} "$@"', "python3": f'exec {exe} "$@"'}
    if pytest:
        launchers["pytest"] = f'exec {exe} -m pytest "$@"'
    for name, line in launchers.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_dir / name).chmod(0o755)


def _write_etc(etc: Path) -> None:
    etc.mkdir(parents=True)
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nagent:x:65534:65534:agent:/tmp/home:/bin/bash\n"
    )
    (etc / "group").write_text("root:x:0:\nagent:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (etc / "alternatives").mkdir()  # mount point for the host's (symlinks into /usr only)
    if Path("/etc/ld.so.cache").is_file():  # the loader finds multiarch libraries without it, slower
        shutil.copy2("/etc/ld.so.cache", etc / "ld.so.cache")
