"""Runs inside the *grading* workspace, before any code of the agent's: the trusted half of grading.

Started as ``python -I -S _grade_runner.py RESULTS_DIR`` from the repository root of a fresh
workspace at the base commit, with ``RESULTS_DIR`` a host directory bound into this sandbox only.
It reads what the host put there (``spec.json``, ``agent.patch``, ``test.patch``, ``key``), and:

1. applies the agent's diff (``git apply``; failure -> stage ``agent_patch_failed``);
2. restores every test file from the base commit: files the diff changed or created whose path
   is a test path (under a ``tests``/``test``/``testing`` directory, ``test_*.py``, ``*_test.py``,
   any ``conftest.py``, ``pytest.ini``, ``tox.ini``) are checked out from ``HEAD`` or deleted;
3. applies the task's hidden test patch (failure -> ``test_patch_failed``);
4. runs pytest in this process on the files of the FAIL_TO_PASS and PASS_TO_PASS tests, with the
   repository's ``addopts`` neutralised and no cache, writing junit XML to ``RESULTS_DIR`` and a
   second, independent record of every outcome collected by a plugin registered here;
5. writes ``report.json``, authenticated with an HMAC under the key it deleted in step 0, and
   leaves with ``os._exit(pytest's exit code)``: no ``atexit`` hook of the code under test runs.

Nothing here reads what the tests print. The host cross-checks junit, this report and the exit
code it observed itself (``grading.py``). ``-I -S``: no ``PYTHONPATH``, user site, ``.pth`` or
``sitecustomize`` from the repository is loaded before this file runs; the toolchain path (where
pytest lives) is taken from ``PYTHONPATH`` by hand, then the repository root.
"""

import hashlib
import hmac
import json
import os
import subprocess
import sys

TEST_DIRS = {"tests", "test", "testing"}
TEST_CONFIG_FILES = {"conftest.py", "pytest.ini", "tox.ini"}


def is_test_path(path: str) -> bool:
    """Is ``path`` (relative, ``/``-separated) a test file or pytest configuration file?"""
    parts = path.split("/")
    name = parts[-1]
    if name in TEST_CONFIG_FILES or any(p in TEST_DIRS for p in parts[:-1]) or name in TEST_DIRS:
        return True
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.quotepath=off"]


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT, *args], capture_output=True, check=check, timeout=120)


def changed_paths() -> list[str]:
    tracked = git("diff", "--name-only", "-z", "--no-renames", "HEAD").stdout
    untracked = git("ls-files", "-z", "--others").stdout
    names = [p for p in (tracked + untracked).decode("utf-8", "surrogateescape").split("\0") if p]
    return sorted(set(names))


def restore_test_files() -> list[str]:
    restored = []
    paths = [p for p in changed_paths() if is_test_path(p)]
    for path in paths:  # removals first: a file may have replaced a directory or the reverse
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
            os.remove(path)
    for path in paths:
        if git("cat-file", "-e", f"HEAD:{path}", check=False).returncode == 0:
            git("checkout", "HEAD", "--", path)
        restored.append(path)
    return restored


def apply(patch_file: str) -> str | None:
    if os.path.getsize(patch_file) == 0:
        return None
    out = git("apply", "--binary", "--whitespace=nowarn", patch_file, check=False)
    return None if out.returncode == 0 else out.stderr.decode("utf-8", "replace")[-2000:]


class Recorder:
    """The second record of outcomes: one final status per test node id."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []
        self.exitstatus: int | None = None
        self.collected = 0

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            self.collect_errors.append(report.nodeid)

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001
        previous = self.outcomes.get(report.nodeid)
        if report.when == "call":
            if hasattr(report, "wasxfail"):
                status = "xfailed" if report.skipped else "failed"  # strict xpass fails
            else:
                status = report.outcome  # passed / failed / skipped
        elif report.failed:
            status = "error"  # setup or teardown failed
        elif report.skipped:
            status = "skipped"
        else:
            status = previous or "setup_passed"
        if previous in ("error", "failed") and status not in ("error", "failed"):
            status = previous  # a failure is final
        self.outcomes[report.nodeid] = status

    def pytest_sessionfinish(self, session, exitstatus) -> None:  # noqa: ANN001
        self.exitstatus = int(exitstatus)
        self.collected = int(session.testscollected)


def main() -> None:
    results = sys.argv[1]
    key_file = os.path.join(results, "key")
    with open(key_file, "rb") as f:
        key = f.read()
    os.unlink(key_file)
    with open(os.path.join(results, "spec.json")) as f:
        spec = json.load(f)
    report: dict = {"stage": "started"}

    def finish(code: int) -> None:
        payload = json.dumps(report, sort_keys=True)
        sig = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        with open(os.path.join(results, "report.json"), "w") as f:
            json.dump({"payload": payload, "sig": sig}, f)
        os._exit(code)

    error = apply(os.path.join(results, "agent.patch"))
    if error is not None:
        report.update(stage="agent_patch_failed", detail=error)
        finish(0)
    report["restored"] = restore_test_files()
    error = apply(os.path.join(results, "test.patch"))
    if error is not None:
        report.update(stage="test_patch_failed", detail=error)
        finish(0)
    sys.path[:0] = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    import pytest  # noqa: PLC0415 - only now: the toolchain path was just added

    recorder = Recorder()
    report["stage"] = "tests_started"
    args = [
        "-p", "no:cacheprovider",
        "-o", "addopts=",
        "-q",
        "--junitxml", os.path.join(results, "junit.xml"),
        "-o", "junit_family=xunit2",
        *spec["test_files"],
    ]  # fmt: skip
    code = int(pytest.main(args, plugins=[recorder]))
    report.update(
        stage="tests_finished",
        returned=code,
        exitstatus=recorder.exitstatus,
        collected=recorder.collected,
        outcomes=recorder.outcomes,
        collect_errors=recorder.collect_errors,
    )
    finish(code)


if __name__ == "__main__":
    main()
