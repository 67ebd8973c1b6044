"""Isolation holds for every interpreter (venv, venv --copies, pyenv, system), and ``auto`` never
degrades to no isolation in silence."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.sandbox import Program, SandboxConfig, backends, make_sandbox, pool
from lit_codeRL.sandbox.backends import SandboxUnavailable, interpreter, resolve_backend

# What a program inside bwrap must not see, whatever interpreter runs the worker. Returned as a
# value (the test compares it with [] outside the sandbox).
SNOOP = textwrap.dedent(
    """
    import os, sys
    def seen(paths):
        out = []
        for p in paths:
            try:
                if os.path.isdir(p):
                    if os.listdir(p):
                        out.append(p)
                elif os.path.exists(p):
                    out.append(p)
            except OSError:
                pass
        return out
    """
)


def _interpreters(tmp: Path) -> dict[str, str]:
    out = {"current": sys.executable}
    for name, flags in (("venv", []), ("venv-copies", ["--copies"])):
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(tmp / name)], check=True)
        out[name] = str(tmp / name / "bin" / "python")
    if Path("/usr/bin/python3").is_file():
        out["system"] = "/usr/bin/python3"
    return out


@pytest.fixture(scope="module")
def interpreters(tmp_path_factory) -> dict[str, str]:
    return _interpreters(tmp_path_factory.mktemp("interps"))


@pytest.mark.parametrize("kind", ["current", "venv", "venv-copies", "system"])
def test_every_interpreter_is_isolated(kind, interpreters, bwrap_ok, tmp_path):
    if kind not in interpreters:
        pytest.skip(f"no {kind} interpreter here")
    python = interpreters[kind]
    interp = interpreter(python)
    assert os.path.realpath(interp.executable) == interp.executable
    assert not any(b.endswith(("site-packages", "/bin")) for b in interp.binds), interp
    secret = tmp_path / "secret.txt"
    secret.write_text("host data")
    host_paths = [
        str(secret),
        *([str(Path(python).parent.parent)] if kind.startswith("venv") else []),  # the venv itself
        str(Path.cwd()),
        "/etc/passwd",
        "/work",
        "/home",
        *interp.masks,  # site-packages: masked, empty
    ]
    with make_sandbox(backend="bwrap", python=python, workers=1, timeout_s=5.0) as sb:
        res = sb.run(
            Program(
                code=SNOOP,
                tests=(
                    f"assert seen({host_paths!r}) == []",
                    "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)",  # must raise
                    f"assert sys.executable == {interp.executable!r}",
                    "assert os.getuid() == 65534",
                ),
            )
        )
    assert res.test_passed == [True, False, True, True], res


def test_probe_starts_the_real_worker(monkeypatch, bwrap_ok):
    """The probe is the worker: break the worker's command line and the probe reports it."""
    monkeypatch.setattr(pool, "_PROBED", {})
    real = backends.bwrap_argv

    def broken(cfg, bwrap="bwrap"):
        argv = real(cfg, bwrap)
        i = argv.index("--")
        return argv[: i + 1] + ["/nonexistent/python", *argv[i + 2 :]]

    monkeypatch.setattr(backends, "bwrap_argv", broken)
    problem = backends.bwrap_problem(SandboxConfig())
    assert problem and "did not start" in problem
    with pytest.raises(SandboxUnavailable) as err:
        make_sandbox(workers=1)  # auto
    msg = str(err.value)
    assert isinstance(err.value, ConfigError) and "\n" not in msg
    for fix in ("bubblewrap", "apptainer", "'local'"):
        assert fix in msg
    with pytest.raises(SandboxUnavailable):
        make_sandbox(backend="bwrap", workers=1)  # explicit: refuses instead of failing every program


def test_auto_without_bwrap_raises(monkeypatch):
    monkeypatch.setattr(pool, "_PROBED", {})
    monkeypatch.setattr(backends.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed"):
        resolve_backend(SandboxConfig())
    with pytest.raises(SandboxUnavailable):
        make_sandbox(workers=1)


def test_local_only_when_asked_and_loud(caplog):
    with caplog.at_level(logging.WARNING, logger="lit_codeRL.sandbox"):
        with make_sandbox(backend="local", workers=1) as sb:
            assert sb.backend == "local"
    assert any("UNISOLATED" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_unstartable_interpreter_is_a_clear_error(monkeypatch, bwrap_ok):
    monkeypatch.setattr(pool, "_PROBED", {})
    with pytest.raises(SandboxUnavailable, match="does not start|cannot run"):
        make_sandbox(backend="bwrap", python="/nonexistent/python", workers=1)


def test_ci_runs_in_a_venv_and_demands_bwrap():
    """CI proves the new user's path: a fresh venv, the README command, bwrap tests not skipped."""
    script = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "-m venv" in script and "make test" in script and "skipped" in script
    assert shutil.which("bash")
