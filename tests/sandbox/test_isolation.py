"""Isolation holds for every interpreter (venv, venv --copies, pyenv, system), and ``auto`` never
degrades to no isolation in silence."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.sandbox import Program, SandboxConfig, backends, cgroups, make_sandbox, pool
from lit_codeRL.sandbox.backends import SandboxUnavailable, interpreter
from lit_codeRL.sandbox.pool import resolve_backend

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


# Tries to leave a file (and a new directory) in each place outside the scratch mounts and to
# remount the root writable; prints what it managed as JSON.
WRITE_OUTSIDE_SCRATCH = textwrap.dedent(
    """
    import ctypes, json, os
    made = {}
    for d in %r:
        for path in (os.path.join(d, "x_probe"), os.path.join(d, "x_probe_dir", "f")):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write("x")
                made[path] = "written"
            except OSError as e:
                made[path] = e.errno
    libc = ctypes.CDLL(None, use_errno=True)
    MS_REMOUNT, MS_BIND = 32, 4096
    made["remount"] = libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None)
    print(json.dumps(made))
    """
)
OUTSIDE_SCRATCH = ("/", "/root", "/etc", "/opt", "/usr", "/home", "/var", "/dev")


def test_nothing_outside_scratch_is_writable_or_survives(bwrap_ok):
    """bwrap's root (and /dev) are tmpfs mounts owned by the sandbox uid and without a size: unless
    read-only, a program could fill memory through them and leave files the next program on the
    same worker sees. Only /tmp and /dev/shm (size-capped, emptied after every program) take
    writes."""
    with make_sandbox(backend="bwrap", workers=1, timeout_s=5.0) as sb:
        first = sb.run(Program(code=WRITE_OUTSIDE_SCRATCH % (OUTSIDE_SCRATCH + ("/tmp", "/dev/shm"),)))
        made = json.loads(first.stdout)
        assert made.pop("remount") == -1, "the program remounted / writable"
        written = sorted(p for p, r in made.items() if r == "written")
        scratch = sorted(p for p in made if p.startswith(("/tmp/", "/dev/shm/")))
        assert written == scratch, f"written outside /tmp and /dev/shm: {sorted(set(written) - set(scratch))}"
        later = sb.run(
            Program(
                code="import os",
                tests=(f"assert [p for p in {sorted(made)!r} if os.path.lexists(p)] == []",),
            )
        )
        assert later.test_passed == [True], later


def test_probe_starts_the_real_worker(monkeypatch, bwrap_ok):
    """The probe is the worker: break the worker's command line and the probe reports it."""
    monkeypatch.setattr(pool, "_PROBED", {})
    real = backends.bwrap_argv

    def broken(cfg, bwrap="bwrap", userns_fd=None):
        argv = real(cfg, bwrap, userns_fd)
        i = argv.index("--")
        return argv[: i + 1] + ["/nonexistent/python", *argv[i + 2 :]]

    monkeypatch.setattr(backends, "bwrap_argv", broken)
    problem = pool.bwrap_problem(SandboxConfig())
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


def test_root_without_a_pids_cgroup_says_so_once(monkeypatch, caplog):
    """As root (RLIMIT_NPROC does not apply) without a writable pids cgroup nothing bounds a fork
    bomb: the first pool of the process warns, later pools do not; with the cgroup, or as another
    user, nothing is said."""
    monkeypatch.setattr(pool, "_ANNOUNCED", set())
    monkeypatch.setattr(os, "getuid", lambda: 0)
    monkeypatch.setattr(cgroups, "pids_cgroup_writable", lambda: False)

    def warnings_after_two_pools() -> list[logging.LogRecord]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="lit_codeRL.sandbox"):
            for _ in range(2):
                with make_sandbox(backend="local", workers=1):
                    pass
        return [r for r in caplog.records if "nothing bounds the processes" in r.getMessage()]

    said = warnings_after_two_pools()
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "no writable pids cgroup" in said[0].getMessage()
    monkeypatch.setattr(pool, "_ANNOUNCED", set())
    monkeypatch.setattr(cgroups, "pids_cgroup_writable", lambda: True)
    assert warnings_after_two_pools() == []
    monkeypatch.setattr(cgroups, "pids_cgroup_writable", lambda: False)
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    assert warnings_after_two_pools() == []
    assert cgroups.unbounded_processes(SandboxConfig(use_pids_cgroup=False)) is None
    monkeypatch.setattr(os, "getuid", lambda: 0)
    assert "use_pids_cgroup is off" in cgroups.unbounded_processes(SandboxConfig(use_pids_cgroup=False))


def test_unstartable_interpreter_is_a_clear_error(monkeypatch, bwrap_ok):
    monkeypatch.setattr(pool, "_PROBED", {})
    with pytest.raises(SandboxUnavailable, match="does not start|cannot run"):
        make_sandbox(backend="bwrap", python="/nonexistent/python", workers=1)


_JUNIT_CASE = '<testcase classname="{classname}" name="{name}">{body}</testcase>'


def _run_ci(
    tmp_path: Path, cases: list[tuple[str, bool]], make_status: int = 0
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``.ci/run`` with a stub interpreter (its ``-m venv`` links the real one), a stub
    ``make`` that records how it was called and writes a junit report with ``cases`` (name, or
    ``classname::name``; skipped), and a ``bwrap`` on PATH. Returns the run and what ``make`` saw."""
    stubs = tmp_path / "bin"
    stubs.mkdir(parents=True)
    junit = (
        "<testsuite>"
        + "".join(
            _JUNIT_CASE.format(
                classname=name.split("::")[0] if "::" in name else "tests.sandbox",
                name=name.split("::")[-1],
                body="<skipped/>" if skipped else "",
            )
            for name, skipped in cases
        )
        + "</testsuite>"
    )
    (tmp_path / "report.xml").write_text(junit)
    seen = tmp_path / "make.json"
    scripts = {
        "python-base": f"""\
            #!/bin/sh
            # "-m venv DIR": a venv whose python is the real one
            mkdir -p "$3/bin" && ln -s "{sys.executable}" "$3/bin/python" && echo "$3" > "{tmp_path / "venv"}"
            """,
        "make": f"""\
            #!{sys.executable}
            import json, os, shutil, sys
            args = dict(a.split("=", 1) for a in sys.argv[2:])
            junit = next(a for a in args["PYTEST_ARGS"].split() if a.startswith("--junitxml="))
            shutil.copy("{tmp_path / "report.xml"}", junit.removeprefix("--junitxml="))
            json.dump({{"target": sys.argv[1], "args": args, "python": shutil.which("python"),
                       "virtual_env": os.environ.get("VIRTUAL_ENV")}}, open("{seen}", "w"))
            sys.exit({make_status})
            """,
        "bwrap": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (stubs / name).write_text(textwrap.dedent(text).lstrip())
        (stubs / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "BASE_PYTHON": str(stubs / "python-base")}
    env.pop("PYTEST_ARGS", None)
    script = Path(__file__).resolve().parents[2] / ".ci" / "run"
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    if (tmp_path / "venv").exists():  # .ci/run leaves its venv in /tmp
        shutil.rmtree((tmp_path / "venv").read_text().strip(), ignore_errors=True)
    return out, json.loads(seen.read_text()) if seen.exists() else {}


def test_ci_runs_make_test_in_a_fresh_venv_and_fails_on_skipped_bwrap_tests(tmp_path):
    """CI proves the new user's path: ``make test`` with a fresh venv's python first on PATH, and
    with bubblewrap installed it fails when a bwrap test was skipped or none ran (the silent-skip
    failure of issue #21); a failing ``make test`` fails it."""
    hacks = "tests.envs.test_agent_hacks::test_bwrap_swe_hack_gets_no_reward[x]"
    out, made = _run_ci(
        tmp_path / "ok",
        [("test_a[bwrap]", False), ("test_b[bwrap]", False), ("test_c", True), (hacks, False)],
    )
    assert out.returncode == 0, out.stderr
    assert "bwrap sandbox tests: 3 ran, 0 skipped" in out.stdout
    assert "agent env hack suites: 1 ran, 0 skipped" in out.stdout
    venv = made["virtual_env"]
    assert made["target"] == "test" and made["args"]["PYTHON"] == f"{venv}/bin/python"
    assert made["python"] == f"{venv}/bin/python"  # the venv's bin/ comes first on PATH

    out, _ = _run_ci(tmp_path / "skipped", [("test_a[bwrap]", False), ("test_b[bwrap]", True)])
    assert out.returncode != 0 and "skipped or missing" in out.stderr and "test_b[bwrap]" in out.stderr
    out, _ = _run_ci(tmp_path / "none", [("test_c", False)])
    assert out.returncode != 0 and "skipped or missing" in out.stderr
    # the agent envs' hack suites (issue #47) skipped or absent: red as well
    skipped_hack = "tests.envs.test_swe_env::test_reward_hack_scores_zero[edit_tests]"
    out, _ = _run_ci(tmp_path / "hack-skipped", [("test_a[bwrap]", False), (skipped_hack, True)])
    assert out.returncode != 0 and "agent env hack suites" in out.stderr and "edit_tests" in out.stderr
    out, _ = _run_ci(tmp_path / "hack-missing", [("test_a[bwrap]", False)])
    assert out.returncode != 0 and "agent env hack suites were skipped or missing" in out.stderr
    out, made = _run_ci(tmp_path / "red", [("test_a[bwrap]", False)], make_status=2)
    assert out.returncode == 2 and made["target"] == "test"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_bwrap_outside_the_sandbox_path_is_started_by_its_absolute_path(tmp_path, monkeypatch):
    """Workers start with PATH=/usr/bin:/bin, and subprocess looks the executable up there: a
    bubblewrap unpacked elsewhere (a user prefix, a GPU image without root) must still start, and
    grade a program, by the absolute path found on the caller's PATH."""
    prefix = tmp_path / "bin"
    prefix.mkdir()
    (prefix / "bwrap").symlink_to(shutil.which("bwrap"))
    real_which = shutil.which

    def which(name, mode=os.F_OK | os.X_OK, path=None):
        if name == "bwrap":  # as if bwrap were installed only under the prefix
            return real_which(name, path=str(prefix)) if path is None else None
        return real_which(name, mode, path)

    monkeypatch.setattr(backends.shutil, "which", which)
    assert backends.bwrap_executable() == str(prefix / "bwrap")
    assert backends.bwrap_argv(SandboxConfig())[0] == str(prefix / "bwrap")
    with make_sandbox(backend="bwrap", workers=1, timeout_s=5.0) as box:
        result = box.run(Program("print(6 * 7)", expected_stdout="42"))
    assert result.passed, result
