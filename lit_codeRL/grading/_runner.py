"""Runs inside the *grading* workspace: the trusted half of grading (stdlib only).

Started as ``python -I -S _runner.py RESULTS_DIR`` from the repository root of a fresh workspace
at the base commit; ``RESULTS_DIR`` is a size-capped tmpfs of this sandbox only, which the trusted
workspace server fills (``spec.json``, ``agent.patch``, ``test.patch``, ``key``) and reads back
once every process of the sandbox is gone. Two processes:

**The parent** (this process) never imports a line of the repository. It

1. reads and deletes the key, and makes itself undumpable (no same-uid process can read its
   memory through ``/proc`` or ptrace);
2. applies the agent's diff (``git apply``; failure -> stage ``agent_patch_failed``);
3. scans what the diff changed (``_scan.py``): added packaging metadata, native code, bytecode
   or modules shadowing the toolchain or the standard library, and reporter and interpreter
   internals new in changed source files -> the report's ``tamper`` reasons;
4. restores every test file from the base commit: files the diff changed or created whose path
   is a test path (under a ``tests``/``test``/``testing`` directory, ``test_*.py``, ``*_test.py``,
   any ``conftest.py``, ``pytest.ini``, ``pytest.toml``, ``tox.ini``...) or that hold a graded
   test (``spec.json``'s ``test_files``, whatever their names) or are the tests' own helpers
   (``test_support``) are checked out from ``HEAD`` or deleted;
5. applies the task's hidden test patch (failure -> ``test_patch_failed``);
   In the *mirror run* (``mirror.json``: the FAIL_TO_PASS tests and a salt, read and deleted as
   the key), the child changes the values those tests check equality against as pytest compiles
   their modules, the files left as they are (``_mirror.py``);
   In the *answer run* (``answers.json``: FAIL_TO_PASS test functions and the time left, read
   and deleted as the key), it stops here: no pytest; the literals the answerable tests expect
   stay in this process, the test files, ``.git`` and compiled files leave the work tree, and a
   child answers each check's computed side, compared here (``_answers.py``);
6. adds *canaries*: tests with random names that always fail, appended to every test file (one
   of them a ``unittest.TestCase`` test);
7. runs pytest in a **child** process (this file with ``--child``) that holds no key, reads the
   child's per-test reports from a pipe, watches the restored test files while it runs
   (``_fswatch.py``: one the code under test writes before pytest reads it is tampering), and
   writes ``report.json`` (the outcomes, the canary's, the junit file's hash, every tamper reason)
   signed with an HMAC under the key; it leaves with the child's exit code.

**The child** starts with no PYTHON* variable but a fixed ``PYTHONHASHSEED`` (node ids and
set order alike in every run) and loads the workspace's ``lcrl_steady`` plugin, as every pytest
the agent ran did (``sandbox/pytest_steady.py``: ``random`` seeded before each test, as
``pytest-randomly`` does; with Hypothesis in the toolchain, property tests draw the same examples
every run, with no deadline and no example database), puts the standard library and
the toolchain first on ``sys.path`` and the repository last; installs a meta-path finder that
loads every standard-library and toolchain top-level module from trusted directories only (a
repository module of the same name is never imported in its place; the repository's own ``test``/``tests`` packages, restored from the base
like every test directory, are loaded from it first, never the standard library's ``test``);
turns pytest's plugin autoload off and uses ``--import-mode=append``; imports pytest, all of
``_pytest`` and ``pluggy`` before any repository code; and installs an
audit hook (PEP 578, cannot be removed) that reports the garbage collector's object walks, frame
access, tracing, ``ctypes``, new code objects and patches of code objects or toolchain classes
(where the interpreter raises the event: CPython 3.11 does not for classes) when they are called
from a source file the diff changed, and a test module's or the toolchain's function given other
code with such a file anywhere on the stack; checks every comparison of the repository's test
modules and ``unittest`` assertions that held, for an object of the agent's code that says yes to
anything (the always-equal trick, ``_compare.py``); and records the toolchain before the first
line of the repository runs, then after each test's call checks that record and that no frame
of the diff's files is on pytest's stack, and the stack again when the report is logged
(``_guard.py``: a function of pytest replaced to forge only the failing tests); and names a test
module opening a file the diff changed that is neither source nor restored (an expected output
outside the test directories, rewritten). Its reports go to the parent as they happen, so
nothing done later in the process can take one back; before and after each write the channel's
descriptor must still hold its socket (a thread of the code under test that put a pipe there
relays every report, changed, from this very process).

What the host checks (``repo.py: judge``): the signature; the exit code it observed against the
run's; every canary failed in both records (a reporter patched to say "passed" passes it too); the
junit file is the one the parent hashed; junit and the parent's record agree test by test.
Nothing here reads what the tests print.
"""

import _thread
import functools
import hashlib
import hmac
import json
import os
import secrets
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from builtins import (  # noqa: A004, UP029 - bound here: the code under test may replace the builtins
    any,
    bool,
    bytearray,
    bytes,
    dict,
    enumerate,
    float,
    frozenset,
    getattr,
    hasattr,
    int,
    isinstance,
    len,
    list,
    max,
    memoryview,
    next,
    open,
    repr,
    set,
    sorted,
    str,
    tuple,
    type,
    vars,
)
from collections.abc import Callable
from importlib.machinery import PathFinder
from json.encoder import encode_basestring_ascii  # C, where the interpreter has _json
from types import ModuleType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves out the script's dir
import _answers  # noqa: E402 - the answer run's verdict outside the tests' process, bound beside it too
import _compare  # noqa: E402 - the comparison check of the child, bound beside it too
import _fswatch  # noqa: E402 - the parent's watch on the test files, bound beside it too
import _guard  # noqa: E402 - the child's record of the toolchain, bound beside it too
import _mirror  # noqa: E402 - the mirror run's change of the expected values, bound beside it too
import _scan  # noqa: E402 - the scanner lives beside this file, bound read-only with it
import _tests_data  # noqa: E402 - the tests' own literals kept, bound beside it too
import _version_tags  # noqa: E402 - which classes were written to, bound beside it too

HASH_SEED = "0"
"""``PYTHONHASHSEED`` of the pytest child (and of the workspace's commands: what the agent runs
orders sets as grading does)."""
CHILD_PYTHON_ENV = "LIT_CODERL_CHILD_PYTHON_ENV"
"""Carries the sandbox's PYTHON* variables past the child's interpreter start (see run_child)."""
STEADY_PLUGIN = "lcrl_steady"
"""The plugin every pytest of a workspace loads (``sandbox/workspace_argv.py: STEADY_PLUGIN_NAME``),
from a read-only directory of the sandbox's ``PYTHONPATH``: the child loads it too."""
NO_BYTECODE = "/dev/null/lcrl-no-bytecode"
"""The child's ``sys.pycache_prefix`` (and its test processes' ``PYTHONPYCACHEPREFIX``) where there
is no :data:`TRUSTED_BYTECODE`: bytecode is read from and written to a directory below a file,
which no process can ever create. A ``.pyc`` planted in a ``__pycache__`` while the tests run
(pytest takes a rewritten test module's cached code if its header holds the source's hash) is
never loaded in place of a test module."""
TRUSTED_BYTECODE = "/opt/lcrl/tools/bytecode"
"""The child's ``sys.pycache_prefix`` in a bwrap session (``sandbox/workspace_toolchain.py:
_trusted_bytecode``, bound read-only): pytest's and the standard library's modules compiled
once, outside the session. The repository's modules map to paths below it that do not exist and
that no process of the run can make, so they compile from source, as under :data:`NO_BYTECODE`.
Every module compiled from source in every run cost most of a grading run's second."""
ANSWER_MARGIN_S = 3.0
"""The answer run's child stops this long before the host's time limit, so the verdict is written."""
CHILD_DRAIN_S = 2.0
"""After the child exits: how long its reports may still arrive (a daemon holding the pipe)."""
READ_LIMIT = 64 << 20
"""Largest changed source or configuration file the scan reads; a larger one is a tamper reason
(a binary patch of a few kilobytes can write gigabytes). Every file below it is read whole: a
check that read a prefix (the first MiB of a ``pyproject.toml``, the first 4 MiB of a module)
never saw the pytest section, or the always-equal class, the diff put after padding."""
is_test_path = _scan.is_test_path


GIT = ["git", "--literal-pathspecs", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
GIT += ["-c", "core.quotepath=off"]
"""``--literal-pathspecs``: a path handed to git is a name, never a pattern or a ``:(magic)``
spec, whatever characters the base's or the diff's file names hold."""


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT, *args], capture_output=True, check=check, timeout=120)


def read_whole(path: str) -> bytes | None:
    """All of ``path``'s bytes, or ``None`` when it holds more than :data:`READ_LIMIT`; empty
    when it cannot be read (a link to ``/proc/self/mem``: nothing imports it either)."""
    try:
        with open(path, "rb") as f:
            data = f.read(READ_LIMIT + 1)
    except OSError:
        return b""
    return data if len(data) <= READ_LIMIT else None


def source_text(data: bytes) -> str:
    """Python source bytes as the interpreter reads them: the encoding of their coding cookie (a
    module declared ``utf-7`` reads as comments in UTF-8 and runs as code), universal newlines.
    Bytes the interpreter cannot decode either (it does not import them) read as UTF-8 with
    replacements."""
    import importlib.util  # noqa: PLC0415

    try:
        return importlib.util.decode_source(data)
    except (SyntaxError, LookupError, UnicodeError, ValueError):
        return data.decode("utf-8", "replace")


def _too_large(path: str) -> str:
    return f"internals: {path}: larger than {READ_LIMIT} bytes, more than grading reads"


def _names(data: bytes) -> list[str]:
    return [p for p in data.decode("utf-8", "surrogateescape").split("\0") if p]


def changed_paths(patch_file: str | None = None) -> tuple[list[str], list[str]]:
    """``(changed, added)``: every path that differs from ``HEAD`` (untracked included) and every
    path the diff in ``patch_file`` writes (:func:`patch_paths`), and those of them that ``HEAD``
    does not have. The revision ends at ``--``: a file the diff named ``HEAD`` made it a path."""
    tracked = _names(git("diff", "--name-only", "-z", "--no-renames", "HEAD", "--").stdout)
    added = _names(git("diff", "--name-only", "-z", "--no-renames", "--diff-filter=A", "HEAD", "--").stdout)
    untracked = _names(git("ls-files", "-z", "--others").stdout)
    written = patch_paths(patch_file) if patch_file is not None else []
    return sorted(set(tracked + untracked + written)), sorted(set(added + untracked))


def patch_paths(patch_file: str) -> list[str]:
    """Every path the diff writes, as ``git apply`` reads it (``--numstat``), whatever git says of
    the work tree after: ``git diff`` compares a file to ``HEAD`` through the conversions of its
    attributes (``working-tree-encoding``, ``ident``, ``text``), so a file whose bytes Python runs
    differently could compare equal (a test helper's ``a + b`` written ``a +- b``, which UTF-7
    reads back as ``a + b``: never restored, ``resolved`` with the bug in place)."""
    if os.path.getsize(patch_file) == 0:
        return []
    fields = git("apply", "--numstat", "-z", patch_file, check=False).stdout.split(b"\0")
    paths, pending = [], 0
    for field in fields:
        if pending:  # a rename's or copy's two names follow its counts
            paths.append(field)
            pending -= 1
            continue
        counts = field.split(b"\t", 2)
        if len(counts) == 3 and counts[2]:
            paths.append(counts[2])
        elif len(counts) == 3:
            pending = 2
    return _names(b"\0".join(paths))


ATTRIBUTES = ".gitattributes"
"""The file git reads conversions from in the work tree (``$GIT_DIR/info/attributes``, which no
diff can write, outranks it)."""


def restore_attributes() -> list[str]:
    """Put every ``.gitattributes`` the diff added, changed or removed back as the base has it (an
    added one removed, also a directory of that name), before grading asks git anything else.
    Its conversions decide what git reports as changed and what ``git checkout`` writes when a
    test file is restored: ``tests/b/helpers.py working-tree-encoding=UTF-7`` alone, and the
    helper's ``return a + b`` was restored as UTF-7 writes it, ``return a +- b`` (``resolved``
    with the bug in place). No test reads it; git's view of the files is the base's again."""
    listed = _names(git("ls-files", "-z", "--cached", "--others").stdout)
    found = set()
    for path in listed:
        parts = path.split("/")
        if ATTRIBUTES in parts:
            found.add("/".join(parts[: parts.index(ATTRIBUTES) + 1]))
    changed = []
    for path in sorted(found):
        plain = os.path.isfile(path) and not os.path.islink(path)
        if plain and read_whole(path) == base_bytes(path):
            continue
        changed.append(path)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
    in_base = [p for p in changed if base_bytes(p) is not None]
    if in_base:
        git("checkout", "HEAD", "--", *in_base)
    return changed


def is_restored(path: str, graded: frozenset[str]) -> bool:
    """Is ``path`` put back as the base has it before the run? Every test path, and every file
    the task's tests are in (``graded``: the files of its FAIL_TO_PASS and PASS_TO_PASS node ids)
    whatever its name: a row may grade tests in ``checks.py``, or in a ``tests.py`` its
    ``python_files`` names, and the agent's diff must not rewrite what decides its reward."""
    return is_test_path(path) or os.path.normpath(path) in graded


def graded_files(test_files: list[str]) -> frozenset[str]:
    """The files of the task's tests, as :func:`is_restored` compares paths."""
    return frozenset(os.path.normpath(p) for p in test_files)


def restore_test_files(changed: list[str], graded: frozenset[str]) -> list[str]:
    restored = []
    paths = [p for p in changed if is_restored(p, graded)]
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


def _python_path() -> list[tuple[str, bool]]:
    """The sandbox's ``PYTHONPATH`` (``-I`` ignores it; read by hand), each entry with whether it
    lies in the repository (the working directory)."""
    repo = os.path.realpath(os.getcwd())
    entries = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    return [(p, os.path.commonpath([repo, os.path.realpath(p)]) == repo) for p in entries]


def toolchain_dirs() -> list[str]:
    """Where pytest lives: the ``PYTHONPATH`` entries outside the repository. One inside it (a
    src layout's ``src``, ``workspace_argv.repo_python_path``) is repository code: never trusted,
    never a source of plugins or protected names."""
    return [p for p, inside in _python_path() if not inside]


def repository_roots() -> list[str]:
    """The ``PYTHONPATH`` entries inside the repository: imported from after the repository root,
    as an installed copy of a src-layout project would be."""
    return [p for p, inside in _python_path() if inside]


def own_test_packages(repo: str) -> frozenset[str]:
    """The repository's top-level test packages (``test/__init__.py``, ``tests/__init__.py``,
    ``testing/__init__.py``), loaded from the repository first. Otherwise a package of that name
    earlier on ``sys.path`` hides them and no test module under them imports (``No module named
    'test.unit'``): CPython's own test suite is ``test``, and some wheels install a top-level
    ``tests``. They are test directories, restored from the base commit before the run, so the
    diff can neither bring nor change one."""
    return frozenset(d for d in _scan.TEST_DIRS if os.path.isfile(os.path.join(repo, d, "__init__.py")))


def toolchain_names() -> set[str]:
    names = set(_scan.TOOLCHAIN_NAMES)
    for d in toolchain_dirs():
        try:
            names |= _scan.top_level_names(os.listdir(d))
        except OSError:
            continue
    return names


def load_toolchain() -> None:
    """Import pytest, all of ``_pytest`` and ``pluggy``: all of the toolchain is loaded before any
    repository code (``lit_codeRL/problems/synth/installed.py`` runs this too, to learn what
    pytest has imported by then)."""
    import pkgutil  # noqa: PLC0415

    import _pytest  # noqa: PLC0415
    import pluggy  # noqa: PLC0415
    import pytest  # noqa: PLC0415, F401

    for package in (_pytest, pluggy):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                __import__(info.name)
            except Exception:  # noqa: BLE001, S110 - optional parts (e.g. needing extra packages)
                pass


def toolchain_plugins(dirs: list[str]) -> list[str]:
    """``-p MODULE`` for every pytest plugin *the toolchain* declares (``pytest11`` entry points
    of the distributions in ``dirs``): autoload is off, so a plugin the user put in the grading
    toolchain (``WorkspaceConfig.toolchain``) is loaded by name, while one declared by the
    repository's own metadata never is."""
    from importlib.metadata import distributions  # noqa: PLC0415

    args = []
    for dist in distributions(path=list(dirs)):
        for ep in dist.entry_points:
            if ep.group == "pytest11" and ep.module:
                args += ["-p", ep.module]
    return args


def steady_plugin(dirs: list[str]) -> dict[str, str]:
    """``PYTEST_PLUGINS`` of the child: the steady plugin when a toolchain directory holds it (every
    workspace binds it there), read by the child's pytest before any conftest and by the pytest
    runs its tests start (pytester, a subprocess), as in the agent's session; nothing else."""
    found = any(os.path.isfile(os.path.join(d, STEADY_PLUGIN + ".py")) for d in dirs)
    return {"PYTEST_PLUGINS": STEADY_PLUGIN} if found else {}


CONFIG_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
"""The files pytest reads its configuration from, in its order of precedence within a directory."""
CHANGEABLE_CONFIGS = ("pyproject.toml", "setup.cfg")
"""The files of :data:`CONFIG_NAMES` grading does not restore (they hold the project's metadata
too): a change to their pytest configuration is a tamper reason, read here and, as pytest reads
it, in the child (:func:`config_changes`)."""
SELECTING = ("-m", "-k", "--deselect")
"""The ``addopts`` options that choose which of the collected tests run."""


def pytest_config(path: str, data: bytes) -> object:
    """The pytest configuration in a file of :data:`CONFIG_NAMES` (``[pytest]``, ``[tool.pytest]``
    with its ``ini_options``, ``[tool:pytest]``; a ``pytest.ini`` without one is ``{}``: it still
    is the configuration), or ``None`` when it has none or does not parse."""
    text = data.decode("utf-8", "replace")
    name = os.path.basename(path)
    if not name.endswith(".toml"):
        # lines as pytest's iniconfig splits them (``str.splitlines``: ``\r`` alone, ``\x85``...),
        # where ``configparser`` splits at ``\n`` only: a ``setup.cfg`` with ``\r`` line ends was
        # one line here, its ``[tool:pytest]`` unseen (its ``-m``, its ``pythonpath``) and pytest
        # ran with it
        text = "\n".join(text.removeprefix("\ufeff").splitlines())
    try:
        if name.endswith(".toml"):
            import tomllib  # noqa: PLC0415

            table = tomllib.loads(text)
            return table.get("pytest") if name != "pyproject.toml" else table.get("tool", {}).get("pytest")
        import configparser  # noqa: PLC0415

        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(text)
        section = "tool:pytest" if name == "setup.cfg" else "pytest"
        if parser.has_section(section):
            return dict(parser[section])
        return {} if name.endswith("pytest.ini") else None
    except Exception:  # noqa: BLE001 - a file that does not parse configures nothing
        return None


def repository_selection(test_files: list[str]) -> list[str]:
    """The options of the repository's ``addopts`` that choose which tests run (``-m "not stress"``,
    ``-k``, ``--deselect``), from the configuration pytest finds for the first test file (a
    ``CONFIG_NAMES`` file in its directory or the nearest one above it). ``addopts`` itself is
    ignored (it could load plugins, or add a coverage run), but without these grading ran what the
    repository leaves out by default: click's 31,000 stress tests took its clean suite past any
    time limit. The configuration is the base's: test configuration files are restored before
    this, and a changed pytest section in ``pyproject.toml`` or ``setup.cfg`` is tampering."""
    found = found_config(test_files[0] if test_files else "", _working_bytes)
    return _selecting(found[1].get("addopts")) if found is not None else []


def found_config(first: str, read: Callable[[str], bytes | None]) -> tuple[str, dict] | None:
    """The pytest configuration pytest finds for the test file ``first``: the first
    :data:`CONFIG_NAMES` file that holds one, in its directory or the nearest one above it, each
    file's bytes as ``read`` gives them (``None``: no such file); its directory and its options
    (``[tool.pytest.ini_options]`` unwrapped). ``None``: there is none."""
    where = os.path.dirname(first)
    while True:
        for name in CONFIG_NAMES:
            path = os.path.join(where, name)
            data = read(path)
            config = pytest_config(path, data) if data is not None else None
            if config is None:
                continue
            if isinstance(config, dict) and isinstance(config.get("ini_options"), dict):
                config = config["ini_options"]
            return where, config if isinstance(config, dict) else {}
        if not where:
            return None
        where = os.path.dirname(where)


def _working_bytes(path: str) -> bytes | None:
    """``path``'s bytes in the work tree, a link read through as pytest reads it (``None`` where
    there is no regular file, or it is larger than :data:`READ_LIMIT`): a ``pytest.ini`` that is
    a link to ``config/pytest.ini`` was skipped, and its ``-m "not slow"`` with it."""
    return read_whole(path) if os.path.isfile(path) else None


def _selecting(addopts: object) -> list[str]:
    import shlex  # noqa: PLC0415

    try:
        args = shlex.split(addopts) if isinstance(addopts, str) else [str(a) for a in addopts or ()]
    except (ValueError, TypeError):
        return []
    kept, take = [], False
    for arg in args:
        if take:
            kept.append(arg)
            take = False
        elif arg in SELECTING:
            kept.append(arg)
            take = True
        elif arg.startswith("--deselect=") or (arg[:2] in ("-m", "-k") and len(arg) > 2):
            kept.append(arg)
    return kept if not take else kept[:-1]


def import_roots(test_files: list[str] | None = None) -> list[str]:
    """The repository's directories on ``sys.path`` before the test directories, relative: the
    root (``"."``), the ``PYTHONPATH`` entries inside it (a ``src``) and the ``pythonpath`` of the
    base's pytest configuration for ``test_files`` (:func:`base_pythonpath`), which pytest puts
    first on ``sys.path``: a helper the tests import, forged there, came first."""
    repo = os.path.realpath(os.getcwd())
    roots = [".", *(os.path.relpath(os.path.realpath(p), repo) for p in repository_roots())]
    return roots + [r for r in base_pythonpath(test_files or []) if r not in roots]


@functools.cache
def _base_pythonpath(first: str) -> tuple[str, ...]:
    # read from the work tree before the diff is applied (``main`` asks first; kept here): the
    # base's files as pytest reads them, a configuration that is a link read through
    found = found_config(first, _working_bytes)
    if found is None:
        return ()
    where, config = found
    entries = config.get("pythonpath")
    if isinstance(entries, str):
        entries = entries.split()
    roots = []
    for entry in entries if isinstance(entries, list) else []:
        root = os.path.normpath(os.path.join(where, str(entry)))
        if root != ".." and not root.startswith(("../", "/")) and root != ".":
            roots.append(root)
    return tuple(roots)


def base_pythonpath(test_files: list[str]) -> list[str]:
    """The ``pythonpath`` entries inside the repository of the base's pytest configuration that
    pytest finds for the first test file (as :func:`repository_selection` finds it), relative.
    Read from the work tree the first time it is asked, which ``main`` does before it applies
    the diff (the base's files as checked out: a configuration that is a link read through)."""
    return list(_base_pythonpath(test_files[0])) if test_files else []


def tests_import(graded: frozenset[str], test_patch: str) -> frozenset[str]:
    """The top-level names the tests import from their own directories (``helpers`` for
    ``tests/helpers.py``, ``test_x`` for ``tests/test_x.py``: ``_scan.imported_by_tests``), of the
    base's test files and those the task's test patch adds. Nothing of the diff may give one of
    them from a directory earlier on ``sys.path``."""
    files = set(_names(git("ls-tree", "-r", "-z", "--name-only", "HEAD").stdout))
    try:
        with open(test_patch, "rb") as f:
            lines = f.read(64 << 20).decode("utf-8", "surrogateescape").splitlines()
    except OSError:
        lines = []
    files |= {line[len("+++ b/") :] for line in lines if line.startswith("+++ b/")}
    packages = {os.path.dirname(p) for p in files if os.path.basename(p) == "__init__.py"}
    restored = [p for p in files if is_restored(p, graded)]
    return _scan.imported_by_tests(restored, lambda d: d in packages)


def tamper_scan(
    changed: list[str],
    added: list[str],
    graded: frozenset[str],
    names: frozenset[str] = frozenset(),
    test_files: list[str] | None = None,
) -> tuple[list[str], list[str], list[str]]:
    """Every static tamper reason of the applied diff (``_scan.py``), test files left out (they
    are restored before anything runs: :func:`is_restored`), the files the run-time monitor
    watches: changed source files whose base version used none of the suspect internals, and the
    changed source files whose base version started no process (``_scan.starts_processes``).
    ``names``: what the tests import from their own directories (:func:`tests_import`)."""
    protected = _scan.protected_names(frozenset(toolchain_names()))
    candidates = [p for p in added if not is_restored(p, graded)]
    found = _scan.structure_findings(
        candidates,
        lambda d: os.path.isfile(os.path.join(d, "__init__.py")),
        protected,
        tests_import=names,
        roots=import_roots(test_files),
    )
    watched, quiet = [], []
    for path in changed:  # pytest.ini, tox.ini and conftest.py are restored; these two are not
        if os.path.basename(path) in CHANGEABLE_CONFIGS:
            new_config = None  # deleted: its pytest section went with it
            if os.path.isfile(path):
                data = read_whole(path)
                if data is None:
                    found.append(_too_large(path))
                    continue
                new_config = pytest_config(path, data)
            old = base_bytes(path)
            old_config = pytest_config(path, old) if old is not None else None
            if new_config != old_config:
                found.append(f"metadata: {path}: its pytest configuration changed")
    for path in changed:
        # a link is read through, as the interpreter imports it: ``calc.py`` made a link to a file
        # of another name hid what it runs from this scan and the comparison check
        if is_restored(path, graded) or not _scan.is_source(path) or not os.path.isfile(path):
            continue
        data = read_whole(path)
        if data is None:
            found.append(_too_large(path))
            continue
        new = source_text(data)
        base = base_text(path)
        found += _scan.internals_findings(path, new, base)
        if base is None or not _scan.features(base):
            watched.append(path)
        if base is None or not _scan.starts_processes(base):
            quiet.append(path)
    return found, watched, quiet


def written_functions(changed: list[str], graded: frozenset[str]) -> dict[str, list[int]]:
    """Per changed source file that is not restored: the first lines of the functions, lambdas
    and classes the diff wrote there (``_compare.written``), for the child's comparison check."""
    out = {}
    for path in changed:
        if is_restored(path, graded) or not _scan.is_source(path) or not os.path.isfile(path):
            continue  # a link is read through (the code it runs names the link's path)
        data = read_whole(path)  # a file too large to read is a tamper reason of the scan
        out[path] = _compare.written(source_text(data), base_text(path)) if data is not None else []
    return out


@functools.cache
def base_bytes(path: str) -> bytes | None:
    """``path`` as the base commit has it (the diff is applied to the work tree, never
    committed); ``None`` where the base has no such file. Read once a run: the static scan, the
    comparison check, the configuration checks and the import roots all ask."""
    # cat-file, not show: ``git show HEAD:x`` is ambiguous, and fails, when the diff adds a file
    # named ``HEAD:x`` (the base's pytest configuration read as absent, its ``pythonpath`` no
    # root of the import path: a helper forged there was imported, ``resolved``)
    old = git("cat-file", "blob", f"HEAD:{path}", check=False)
    return old.stdout if old.returncode == 0 else None


@functools.cache
def base_text(path: str) -> str | None:
    """:func:`base_bytes` decoded as the interpreter decodes a module."""
    old = base_bytes(path)
    return source_text(old) if old is not None else None


def changed_configs(changed: list[str], graded: frozenset[str]) -> dict[str, str | None]:
    """Per changed ``pyproject.toml``/``setup.cfg`` that grading leaves in place: its base bytes
    (base64; ``None`` where the base has no such file), for the child to read both as pytest
    does (:func:`config_changes`)."""
    import base64  # noqa: PLC0415

    out: dict[str, str | None] = {}
    for path in changed:
        # a link is read through, as pytest reads it
        if os.path.basename(path) not in CHANGEABLE_CONFIGS or is_restored(path, graded):
            continue
        if not os.path.isfile(path):
            continue
        old = base_bytes(path)
        out[path] = base64.b64encode(old).decode() if old is not None else None
    return out


def config_changes(configs: dict[str, str | None]) -> list[str]:
    """The files of ``configs`` (:func:`changed_configs`) whose pytest configuration, *as pytest
    reads it* (``_pytest.config.findpaths``: iniconfig for ``setup.cfg``, which reads a file
    ``configparser`` rejects (a BOM, an empty key, lines ended by ``\\r`` or ``\\x85``), and
    ``tomllib``), is not the base's: the parent's stdlib reading could be told a file has no
    pytest section while pytest ran with the ``pythonpath`` it put there (a directory ahead of
    the tests' own, where a helper they import is forged). Run in the child after pytest is
    imported, before any line of the repository."""
    import base64  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from _pytest.config.findpaths import load_config_dict_from_file  # noqa: PLC0415

    def read(path: str) -> object:
        try:
            config = load_config_dict_from_file(Path(path))
        except BaseException as e:  # noqa: BLE001 - pytest's fail() is an OutcomeException
            return f"does not load: {type(e).__name__}"
        if config is None:
            return None
        return sorted((str(k), repr(getattr(v, "value", v))) for k, v in config.items())

    found = []
    for path, old in configs.items():
        new = read(path)
        base = None
        if old is not None:
            with tempfile.TemporaryDirectory() as tmp:
                copy = os.path.join(tmp, os.path.basename(path))
                with open(copy, "wb") as f:
                    f.write(base64.b64decode(old))
                base = read(copy)
        if new != base and not isinstance(new, str):  # one pytest does not load stops it before any test
            found.append(f"metadata: {path}: its pytest configuration changed (as pytest reads it)")
    return found


def data_files(changed: list[str], graded: frozenset[str]) -> list[str]:
    """The files the diff changed that are neither source nor restored: expected outputs, golden
    files, fixtures outside the test directories. A test module that reads one is tampering
    (``_guard.read_by_tests``)."""
    return [
        p for p in changed
        if not is_restored(p, graded) and not _scan.is_source(p) and os.path.isfile(p) and not os.path.islink(p)
    ]  # fmt: skip


def watch_test_files(
    graded: frozenset[str], run: list[str], names: frozenset[str] = frozenset()
) -> tuple[_fswatch.TestFileWatch, list[str]]:
    """The watch on every file the run restored (as they stand now, canaries and the test patch
    in), their directories, every directory from the root down to the files pytest runs and the
    repository's other ``sys.path`` roots (``_fswatch.py``: a test file the code under test writes
    while the tests run, a module it makes where one of ``names``, what the tests import from
    their own directories, would be found first), and every restored path there is now, links
    included (what the child's audit hook may see opened)."""
    listed = git("ls-files", "-z", "--cached", "--others", check=False).stdout.decode(
        "utf-8", "surrogateescape"
    )
    present = [p for p in listed.split("\0") if p and is_restored(p, graded) and os.path.lexists(p)]
    files = [p for p in present if os.path.isfile(p) and not os.path.islink(p)]
    dirs = {os.path.dirname(p) or "." for p in files}
    dirs.add(".")
    for path in run:
        parent = os.path.dirname(os.path.normpath(path))
        while parent:
            dirs.add(parent)
            parent = os.path.dirname(parent)
    roots = [r for r in import_roots(run) if os.path.isdir(r)]
    dirs.update(roots)
    _fswatch.read_only(files)
    return _fswatch.TestFileWatch(files, dirs, lambda p: is_restored(p, graded), names, roots), present


def write_canaries(test_files: list[str]) -> tuple[list[str], list[str]]:
    """Tests that always fail, with random names: ``(extra files to run, node ids)``.

    One plain test function appended to every test file that exists (so a forger that passes
    every report of "its" files passes a canary too), one ``unittest.TestCase`` test in the first
    (a forger that patches ``TestCase.run`` passes it), or, when no test file exists, one file of
    its own. A reporter patched to pass everything passes them too."""
    present = [p for p in test_files if os.path.isfile(p) and not os.path.islink(p)]
    extra, nodes = [], []
    if not present:
        name = f"test_{secrets.token_hex(5)}"
        path = os.path.join(os.path.dirname(test_files[0]) if test_files else "", f"{name}.py")
        with open(path, "w") as f:
            f.write(f'def {name}():\n    raise AssertionError("always fails")\n')
        return [path], [f"{path}::{name}"]
    for k, path in enumerate(present):
        name = f"test_{secrets.token_hex(5)}"
        code = f'\n\n\ndef {name}():\n    raise AssertionError("always fails")\n'
        nodes.append(f"{path}::{name}")
        if k == 0:
            case, method = f"Test{secrets.token_hex(5)}", f"test_{secrets.token_hex(5)}"
            code += (
                f"\n\nimport unittest as _lcrl_unittest_{case}\n\n\n"
                f"class {case}(_lcrl_unittest_{case}.TestCase):\n"
                f'    def {method}(self):\n        raise AssertionError("always fails")\n'
            )
            nodes.append(f"{path}::{case}::{method}")
        with open(path, "a") as f:
            f.write(code)
    return extra, nodes


class Outcomes:
    """One final status per test node id, from the child's raw reports (trusted code)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.collect_errors: list[str] = []
        self.audit: list[str] = []
        self.exitstatus: int | None = None
        self.collected = 0
        self.garbled = 0
        self.foreign: set[int | None] = set()  # pids other than the child's that wrote reports

    def feed(self, msg: dict) -> None:
        kind = msg.get("t")
        if kind == "log":
            self._log(str(msg["nodeid"]), str(msg["when"]), str(msg["outcome"]), bool(msg.get("xfail")))
        elif kind == "collect_error":
            self.collect_errors.append(str(msg["nodeid"]))
        elif kind == "finish":
            self.exitstatus, self.collected = int(msg["exitstatus"]), int(msg["collected"])
        elif kind == "audit":
            self.audit.append(f"run time: {msg.get('event')} from {msg.get('where')}"[:300])
        elif kind == "config":
            self.audit.append(str(msg["reason"])[:300])
        else:
            self.garbled += 1

    def _log(self, nodeid: str, when: str, outcome: str, xfail: bool) -> None:
        previous = self.outcomes.get(nodeid)
        if when == "call" and previous == "skipped" and outcome == "passed":
            # a skipped subtest (``skipTest`` in ``subTest``, pytest's ``subtests``), then the test
            # passing: junit keeps the skip on the test's one case, and the two records must agree
            status = "skipped"
        elif when == "call" and xfail:
            # an expected failure that failed (xfailed), or passed (xpassed: a non-strict xfail
            # mark; junit writes it as passed): never "passed", which the test was not meant to
            status = {"skipped": "xfailed", "passed": "xpassed"}.get(outcome, "failed")
        elif when == "call":
            status = outcome
        elif outcome == "failed":
            status = "error"  # setup or teardown failed
        elif outcome == "skipped":
            status = "skipped"
        else:
            status = previous or "setup_passed"
        if previous in ("error", "failed") and status not in ("error", "failed"):
            status = previous  # a failure is final
        self.outcomes[nodeid] = status


def child_env() -> dict[str, str]:
    """The environment of a child that runs the repository's code: no PYTHON* variable but the
    fixed hash seed (see :func:`run_child`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = HASH_SEED
    return env


def run_child(
    results: str, args: list[str], out: Outcomes, watch: _fswatch.TestFileWatch, mirror: dict
) -> int:
    """Run pytest in the child, feed its reports to ``out`` and the test files' events to
    ``watch``, return its exit code. ``mirror`` (``{"tests", "salt"}``, no tests but in the
    mirror run) reaches the child as the first line on the socket: in every run, so neither its
    arguments, its environment nor the files tell the mirror run from the first."""
    # A socket rather than a pipe: the kernel stamps each write with the writer's pid
    # (SO_PASSCRED), and only the child's count. A process the code under test forked keeps the
    # child's end and can write forged reports (a relay that turns "failed" into "passed" and
    # rewrites junit to match), but never as the child.
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    r, w = parent_end.fileno(), child_end.fileno()
    creds = socket.CMSG_SPACE(struct.calcsize("3i"))
    # Not -I: its -E would ignore PYTHONHASHSEED. The same isolation by hand: no PYTHON* variable
    # reaches the child's interpreter (PYTHONPATH may name the repository's src, which would be
    # searched before the standard library at startup), and -s -S; the child gives them back to
    # the processes its tests start. A fixed hash seed gives a parametrization over a set of
    # strings (ids that hold indices) the same node ids in every run, and a test that depends on
    # set order the same outcome: grading measures the task, not the seed.
    python_env = {k: v for k, v in os.environ.items() if k.startswith("PYTHON")}
    env = child_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env[CHILD_PYTHON_ENV] = json.dumps(python_env)
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_PLUGINS", None)
    env.update(steady_plugin(toolchain_dirs()))
    argv = [sys.executable, "-s", "-S", os.path.abspath(__file__), "--child", str(w), results, *args]
    child = subprocess.Popen(argv, pass_fds=(w,), env=env, start_new_session=True)
    child_end.close()
    try:  # read by the child before any line of the repository runs
        parent_end.sendall((json.dumps(mirror) + "\n").encode())
    except OSError:  # the child is gone already: its exit code says the rest
        pass
    buf = bytearray()
    deadline = None
    while True:
        if deadline is None and child.poll() is not None:
            deadline = time.monotonic() + CHILD_DRAIN_S
        wait = 0.2 if deadline is None else max(0.0, deadline - time.monotonic())
        if deadline is not None and wait == 0.0:
            break
        ready = select.select([r] + ([watch.fd] if watch.fd is not None else []), [], [], wait)[0]
        if watch.fd is not None and watch.fd in ready:
            watch.drain()
        if r in ready:
            chunk, ancillary, _, _ = parent_end.recvmsg(1 << 16, creds)
            if not chunk:
                break
            sender = next(
                (
                    struct.unpack("3i", d[:12])[0]
                    for lvl, kind, d in ancillary
                    if kind == socket.SCM_CREDENTIALS
                ),
                None,
            )
            if sender != child.pid:  # the kernel never merges two writers' bytes in one read
                out.foreign.add(sender)
                continue
            buf += chunk
            if len(buf) > 1 << 20:  # a flood without line ends: not ours
                out.garbled += 1
                buf.clear()
            *lines, rest = bytes(buf).split(b"\n")
            buf = bytearray(rest)
            for line in lines:
                try:
                    out.feed(json.loads(line))
                except Exception:  # noqa: BLE001 - any line that is not one of ours (Infinity, huge ints)
                    out.garbled += 1
    parent_end.close()
    code = child.wait()
    try:  # what the tests left running in the child's session must not touch the results
        os.killpg(child.pid, 9)
    except OSError:
        pass
    return code


RESULT_FILES = {"spec.json", "agent.patch", "test.patch", "watched.json", "restored.json", "junit.xml"}
"""What the results directory holds when the child is done; anything else the tests wrote."""


def clear_results(results: str) -> list[str]:
    """Remove what the code under test wrote into the results directory (it would also fill the
    room the report needs) and name it: the grader's directory is nothing the code has any business with."""
    found = []
    for name in sorted(os.listdir(results)):
        if name in RESULT_FILES:
            continue
        path = os.path.join(results, name)
        found.append(f"run time: the tests wrote {name!r} into the grader's results directory")
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass
    return found[:20]


def read_once(results: str, name: str) -> dict | None:
    """The JSON file ``name`` of the results directory, deleted as read (``None``: there is none)."""
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        found = json.load(f)
    os.unlink(path)
    return found


def answer_run(answers: dict, test_files: list[str], deadline: float) -> dict[str, str]:
    """The answer run's verdicts (``_answers.py``): the child's ``sys.path`` after the standard
    library is the pytest child's (the toolchain, the repository and its roots), its environment
    that child's (no PYTHON* variable but the fixed hash seed: set order as in the first run)."""
    repo = os.path.realpath(os.getcwd())
    roots = [os.path.join(repo, r) for r in import_roots(test_files)]
    tests = [str(t) for t in answers["tests"]]
    rows = answers.get("rows")
    return _answers.answer(
        tests,
        test_files,
        [*toolchain_dirs(), *roots],
        child_env(),
        deadline - time.monotonic(),
        {str(t): int(n) for t, n in rows.items()} if isinstance(rows, dict) else None,
    )


def main() -> None:
    started = time.monotonic()
    results = sys.argv[1]
    _undumpable()
    key_file = os.path.join(results, "key")
    with open(key_file, "rb") as f:
        key = f.read()
    os.unlink(key_file)
    # read and gone, as the key: no test can tell the runs apart by it
    mirror = read_once(results, "mirror.json")
    answers = read_once(results, "answers.json")
    with open(os.path.join(results, "spec.json")) as f:
        spec = json.load(f)
    report: dict = {"stage": "started", "tamper": []}

    def finish(code: int) -> None:
        payload = json.dumps(report, sort_keys=True)
        sig = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        with open(os.path.join(results, "report.json"), "w") as f:
            json.dump({"payload": payload, "sig": sig}, f)
        os._exit(code)

    test_files = list(spec["test_files"])
    base_pythonpath(test_files)  # read (and kept) while the work tree is still the base's
    agent_patch = os.path.join(results, "agent.patch")
    error = apply(agent_patch)
    if error is not None:
        report.update(stage="agent_patch_failed", detail=error)
        finish(0)
    # a helper the tests import counts as theirs (restored, watched): rewritten to assert nothing,
    # it made a failing test pass with the bug in place
    graded = graded_files(test_files + [str(p) for p in spec.get("test_support", [])])
    attributes = restore_attributes()  # first: what git says changed goes through them
    changed, added = ([p for p in paths if p not in attributes] for paths in changed_paths(agent_patch))
    names = tests_import(graded, os.path.join(results, "test.patch"))
    report["tamper"], watched, quiet = tamper_scan(changed, added, graded, names, test_files)
    with open(os.path.join(results, "watched.json"), "w") as f:
        json.dump(
            {
                "watched": watched,
                "quiet": quiet,
                "written": written_functions(changed, graded),
                "data": data_files(changed, graded),
                "configs": changed_configs(changed, graded),
            },
            f,
        )
    report["restored"] = attributes + restore_test_files(changed, graded)
    error = apply(os.path.join(results, "test.patch"))
    if error is not None:
        report.update(stage="test_patch_failed", detail=error)
        finish(0)
    os.unlink(os.path.join(results, "test.patch"))  # its text holds the tests' values as written
    if answers is not None:  # no pytest: the tests' values stay here, the code answers without them
        deadline = started + float(answers["timeout_s"]) - ANSWER_MARGIN_S
        report.update(stage="answered", answers=answer_run(answers, test_files, deadline))
        finish(0)
    # the mirror run's change happens in the child as pytest compiles the test modules
    # (``_mirror.install``); what the files allow is known here, from the files themselves
    mirror_tests = [str(t) for t in mirror["tests"]] if mirror is not None else []
    salt = int(mirror["salt"]) if mirror is not None else 0
    if mirror is not None:
        report["mirror"] = {"armable": _mirror.armable(mirror_tests, salt)}
    canary_files, canaries = write_canaries(test_files)
    watch, present = watch_test_files(graded, [*test_files, *canary_files], names)
    with open(os.path.join(results, "restored.json"), "w") as f:
        json.dump(present, f)  # the child's audit hook: a Python file among the tests not in it
    junit = os.path.join(results, "junit.xml")
    plugins = toolchain_plugins(toolchain_dirs())
    args = [
        "-p", "no:cacheprovider",
        "-o", "addopts=",
        *repository_selection(test_files),
        "-q",
        "--rootdir", os.getcwd(),
        "--import-mode=append",
        "--junitxml", junit,
        "-o", "junit_family=xunit2",
        # synthesis writes problem statements from the failure messages: whole values, not the
        # few characters of each side pytest keeps by default (``Version(major...') == ...``)
        *(["-o", "verbosity_assertions=2"] if spec.get("full_assertions") else []),
        *plugins,
        *test_files,
        *canary_files,
    ]  # fmt: skip
    out = Outcomes()
    report["stage"] = "tests_started"
    code = run_child(results, args, out, watch, {"tests": mirror_tests, "salt": salt})
    if mirror is not None:
        # the child arms these as their modules compile, from the same parse of the same restored
        # files, and says nothing of it: any message of the mirror run's own (the armed tests, even
        # sent last) told the code under test, relaying the channel, which run it was in, so it
        # forged the first run's reports and left the mirror run's alone. A module loaded past the
        # rewriter is named in every run (``_Reporter.pytest_collection_finish``).
        report["mirror"]["armed"] = report["mirror"]["armable"]
    report["tamper"] += watch.close()
    if watch.unwatched:
        report["unwatched"] = watch.unwatched
    report["tamper"] += clear_results(results)
    try:
        with open(junit, "rb") as f:
            report["junit_sha256"] = hashlib.sha256(f.read(16 << 20)).hexdigest()
    except OSError:
        report["junit_sha256"] = None
    report["canaries"] = [{"nodeid": c, "status": out.outcomes.pop(c, "absent")} for c in canaries]
    report["tamper"] += out.audit
    if code == CHANNEL_TAKEN:
        report["tamper"].append(
            "run time: the report channel's descriptor held something else (a relay in pytest's"
            " process), or a report could not be written on it"
        )
    if out.foreign:
        pids = ", ".join(sorted(str(p) for p in out.foreign))
        report["tamper"].append(f"run time: reports written by a process other than pytest's (pid {pids})")
    if out.garbled:
        report["tamper"].append(f"run time: {out.garbled} garbled report(s) on the reporting pipe")
    report.update(
        stage="tests_finished",
        returned=code,
        exitstatus=out.exitstatus,
        collected=out.collected,
        outcomes=out.outcomes,
        collect_errors=out.collect_errors,
    )
    finish(code)


def _undumpable() -> None:
    """PR_SET_DUMPABLE 0: the child (same uid) cannot ptrace us or read ``/proc/<pid>/mem``."""
    try:
        import ctypes  # noqa: PLC0415

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the key is also gone from the disk
        pass


# -- the child -----------------------------------------------------------------------------------


CHANNEL_TAKEN = 117
"""The child's exit code when its channel's descriptor no longer holds its socket or a report could
not be written (pytest's own codes are 0 to 5): see :meth:`_Channel.send`."""


def _json_line(  # noqa: ANN001
    msg: dict,
    _quote=encode_basestring_ascii,
    _int=int.__repr__,
    _isinstance=isinstance,
    _type=type,
    _join=",".join,
    _list=list,
    _str=str,
    _int_type=int,
    _bool=bool,
) -> str:
    """``msg`` (text, integer, boolean or ``None`` values: every message the child sends) as one
    line of JSON, made by C functions bound when this was defined. ``json.dumps`` encodes through
    ``json._default_encoder``, an instance whose ``encode`` the code under test could replace
    (the records hold functions and classes, not what a module's data object holds): every report
    forged as it was written, through the real socket."""
    parts = _list()
    for key, value in msg.items():
        if value is None or _type(value) is _bool:
            text = "null" if value is None else "true" if value else "false"
        elif _isinstance(value, _int_type):
            text = _int(value)
        elif _isinstance(value, _str):
            text = _quote(value)
        else:  # not a value the child sends: nothing of it is read
            text = "null"
        parts.append(_quote(key) + ":" + text)
    return "{" + _join(parts) + "}"


def _identity(fd: int, _fstat=os.fstat) -> tuple[int, int] | None:  # noqa: ANN001
    """The device and inode ``fd`` holds (``None``: closed)."""
    try:
        st = _fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _sender(fd: int) -> Callable[[dict], None]:
    """The function that sends one message to the parent on the socket ``fd``: newline-delimited
    JSON, one locked write per message. Everything it writes with is in its own defaults, bound as
    it is made (the encoder and ``os.write``: the code under test may replace them; the descriptor,
    the socket it held and the lock): none of it is an attribute of an object, which the code under
    test, finding the object through pytest's plugins, could set to a pipe of its own relayed to the
    socket with every finding taken out. Its defaults replaced is an audited write, named before it
    takes effect (``_guard.swapped_recorded``)."""
    held, lock = _identity(fd), threading.Lock()  # defaults, not closed over: no cell to set

    def send(  # noqa: ANN001
        msg: dict,
        _fd=fd,
        _socket=held,
        _lock=lock,
        _dumps=_json_line,
        _write=os.write,
        _view=memoryview,
        _exit=os._exit,
        _identity=_identity,
        _taken=CHANNEL_TAKEN,
    ) -> None:
        data = _view((_dumps(msg) + "\n").encode("utf-8", "replace"))
        with _lock:
            while data:
                # A thread of the code under test can put a pipe of its own in the socket's place
                # (``dup2``), read every report and pass it on, changed, to the socket from this
                # very process, which the kernel stamps with this pid. Before and after each write
                # the descriptor must still hold the socket; when it does not, no report of this run
                # is ours.
                if _identity(_fd) != _socket:
                    _exit(_taken)
                try:
                    data = data[_write(_fd, data) :]
                except OSError:
                    # the parent reads until the child is gone, so only the code under test makes
                    # a write fail (the socket set non-blocking and kept full by a thread of its
                    # own): a report dropped in silence, which it could then write as it likes
                    _exit(_taken)
                if _identity(_fd) != _socket:
                    _exit(_taken)

    return send


class _Channel:
    """The child's report channel to the parent: :func:`_sender`'s function, as ``send``."""

    def __init__(self, fd: int) -> None:
        self.send = _sender(fd)


_realpath, _relpath, _normpath = os.path.realpath, os.path.relpath, os.path.normpath  # bound, as the builtins


class _Reporter:
    """The child's pytest plugin: every raw report straight to the parent, each test's call and
    report checked for a changed toolchain (``_guard.Watch``) first."""

    def __init__(self, channel: _Channel, watch: _guard.Watch, compiled: set[str]) -> None:
        self.channel, self.watch, self.send = channel, watch, channel.send
        self.compiled = compiled  # every module pytest's rewriter compiled (``_mirror.install``)

    def around_loop(self, session):  # noqa: ANN001, ANN201 - pytest_runtestloop, outermost wrapper
        # the collection is done (the code under test imported) and its warnings capture is over
        self.watch.check_trusted("the collection")
        yield
        self.watch.check_trusted("the end of the session")

    def around_test(self, item, nextitem):  # noqa: ANN001, ANN201 - pytest_runtest_protocol, outermost
        # read before the test runs: a pytest session run in process writes to pytest's classes
        names = getattr(getattr(item, "_fixtureinfo", None), "names_closure", ())
        runs_pytest = not _guard.IN_PROCESS_FIXTURES.isdisjoint(names)
        self.watch.test_starts()
        yield
        # the test's own patches (monkeypatch, mock.patch) and pytest's per-test hooks are undone
        self.watch.check_trusted(item.nodeid, whole=False, runs_pytest=runs_pytest)

    def after_call(self, item):  # noqa: ANN001, ANN201 - pytest_runtest_call, outermost wrapper
        yield
        self.watch.check(item.nodeid, record=True, stack=True, codes=False)
        self.watch.check_hooks(item.config.pluginmanager, item.nodeid)
        self.watch.check_item(item, item.nodeid)

    def pytest_collection_finish(self, session) -> None:  # noqa: ANN001
        # what was patched only while the tests were collected is in place here
        self.watch.check("the collection", record=True, stack=False, codes=True, constants=True)
        self.watch.check_hooks(session.config.pluginmanager, "the collection")
        # a test module compiled past pytest's rewriter (its import hook taken off
        # ``sys.meta_path``) runs its asserts unchecked (``_compare.py``) and unmirrored
        modules = {_realpath(str(item.path)) for item in session.items}
        for path in sorted(p for p in modules if p.endswith(".py") and p not in self.compiled)[:5]:
            where = _relpath(path)
            self.send(
                {"t": "audit", "event": "a test module not compiled by pytest's rewriter", "where": where}
            )

    def pytest_collectreport(self, report) -> None:  # noqa: ANN001
        if report.failed:
            self.send({"t": "collect_error", "nodeid": report.nodeid})

    def pytest_runtest_logreport(self, report) -> None:  # noqa: ANN001
        if report.when == "call":
            self.watch.check(report.nodeid, record=False, stack=True)
        self.send(
            {
                "t": "log",
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_sessionfinish(self, session, exitstatus) -> None:  # noqa: ANN001
        self.watch.check("the end of the session", record=True, stack=False)
        self.watch.check_hooks(session.config.pluginmanager, "the end of the session")
        self.send({"t": "finish", "exitstatus": int(exitstatus), "collected": int(session.testscollected)})


class _TrustedFinder:
    """Loads standard-library and toolchain top-level modules from trusted directories only: a
    repository module with such a name is never imported in their place. ``own``: top-level
    names loaded from the repository (``roots``) first (:func:`own_test_packages`)."""

    def __init__(
        self, paths: list[str], names: frozenset[str], roots: list[str], own: frozenset[str]
    ) -> None:
        self.paths, self.names, self.roots, self.own = list(paths), names, list(roots), own

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if path is None and name in self.own:
            return PathFinder.find_spec(name, self.roots)
        if path is not None or name.split(".")[0] not in self.names:
            return None
        spec = PathFinder.find_spec(name, self.paths)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return spec

    def invalidate_caches(self) -> None:
        pass


_WATCHED = {
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe",
    "sys._current_frames", "sys.settrace", "sys.setprofile", "object.__getattr__",
    "object.__setattr__", "object.__delattr__", "code.__new__", "sys.addaudithook",
}  # fmt: skip
_PROCESS_STARTS = _guard.PROCESS_EVENTS | {_guard.FORK_EXEC_EVENT}
_ALSO = _PROCESS_STARTS | {_guard.THREAD_START_EVENT, "compile", "import"}
"""The hook's events beside :data:`_WATCHED` and ``open``: a process started, a thread started, code
compiled (under a test module's name), a module loaded (a wrapped one again)."""
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals"}
_READS_WATCHED = frozenset(_FRAME_ATTRS | {"f_code"})
"""The attributes whose read (``object.__getattr__``) any check of the hook can name: the others
(``__code__``, ``__defaults__``, ``__kwdefaults__``, ``__globals__`` ...) name nothing, and the
guard's own record reads three of them for each of its ~7,000 functions every time it is taken
(about a fifth of a grading run when each read took the hook's whole path)."""


def _watch_thread_starts() -> None:
    """Every thread started raises :data:`_guard.THREAD_START_EVENT` with its target (CPython 3.11
    raises no audit event for it), and the audit hook tells :class:`_guard.Threads` with the stack
    that starts it: ``_thread.start_new_thread`` wrapped, in ``_thread`` and where ``threading``
    bound it, before the standard library's record is taken (the wrappers are the record). The
    wrapper holds the original and ``sys.audit``, nothing of the hook's: a set of the threads the
    hook was busy on, reached through the wrapper's closure, let the code under test put its own
    thread in it, and every check passed over what it did."""
    original = _thread.start_new_thread

    def start_new_thread(function, args, kwargs=None, _audit=sys.audit, _event=_guard.THREAD_START_EVENT):  # noqa: ANN001, ANN202
        _audit(_event, function)
        return original(function, args) if kwargs is None else original(function, args, kwargs)

    _thread.start_new_thread = start_new_thread
    if getattr(_thread, "start_new", None) is original:  # its old name
        _thread.start_new = start_new_thread
    if getattr(threading, "_start_new_thread", None) is original:
        threading._start_new_thread = start_new_thread  # type: ignore[attr-defined]


def _watch_fork_exec() -> None:
    """``_posixsubprocess.fork_exec`` raises :data:`_guard.FORK_EXEC_EVENT` (it raises no audit event
    of its own, and ``multiprocessing.util.spawnv_passfds`` calls it directly, past
    ``subprocess.Popen``'s): wrapped before the standard library's record is taken."""
    try:
        import _posixsubprocess  # noqa: PLC0415
    except ImportError:  # not POSIX
        return
    original = _posixsubprocess.fork_exec

    def fork_exec(*args, _audit=sys.audit, _event=_guard.FORK_EXEC_EVENT):  # noqa: ANN002, ANN202
        _audit(_event)
        return original(*args)

    _posixsubprocess.fork_exec = fork_exec


def _install_monitor(
    channel: _Channel,
    repo: str,
    watched: set[str],
    changed: frozenset[str],
    toolchain: frozenset[str],
    guarded: Callable[[str], bool],
    data: frozenset[str],
    in_tests: Callable[[str], bool],
    known: frozenset[str] = frozenset(),
    recorded: Callable[[object], bool] = lambda value: False,
    pytest_dirs: tuple[str, ...] = (),
    quiet: frozenset[str] = frozenset(),
    test_module: Callable[[str], bool] = lambda path: False,
) -> None:
    """The audit hook (see the module docstring). Calls made directly from ``watched`` files
    count: the non-test source files the diff changed whose base version used none of these
    internals (so a repository that walks frames in its own untouched code grades as usual).
    So does a patch of a toolchain class, or of the code of a function of a ``guarded`` file
    (a test module, the toolchain), with a frame of any ``changed`` file on the stack, through
    whatever helper (``_guard.patched_from``), and a test module opening one of ``data``, the
    files the diff changed that are neither source nor restored (``_guard.read_by_tests``), and
    a Python file among the test files, not one of ``known`` (the restored files as the run
    started), opened (``_guard.made_among_tests``). It reports; it does not refuse (the report
    is what decides, and it is out of this process before the call returns). The code or
    defaults of a function of the toolchain's or the standard library's record (``recorded``)
    set or deleted count from anywhere (``_guard.swapped_recorded``), the channel's ``send``
    among them. A process started with a frame of a ``quiet`` file on the stack, or from a thread
    the diff's code started (``_guard.started_process``); a ``test_module`` opened, or named in
    ``compile``, by code of a changed file (``_guard.reads_its_caller``,
    ``_guard.compiled_as_test``)."""
    prefix = repo.rstrip("/") + "/"
    busy: set[int] = set()  # the threads in the hook now (a flag for all let one thread's walk pass
    # unseen while another ran the hook)
    ident = _thread.get_ident
    send = channel.send  # bound now, as the reporter's
    getframe = sys._getframe  # and this: the code under test may put another in sys's place

    def suspicious(event: str, args: tuple) -> bool:
        if event == "object.__getattr__":
            return args[1] in _FRAME_ATTRS
        if event in ("object.__setattr__", "object.__delattr__"):
            obj, attr = args[0], args[1]
            module = getattr(obj, "__module__", "") if isinstance(obj, type) else ""
            return attr == "__code__" or (isinstance(module, str) and module.split(".")[0] in toolchain)
        return True

    sent: set[tuple[str, str]] = set()
    threads = _guard.Threads(repo, frozenset(watched), threading.Thread._bootstrap.__code__, pytest_dirs)
    _watch_thread_starts()
    _watch_fork_exec()

    def recorded_or_sender(value: object) -> bool:  # the sender's defaults are the channel itself
        return value is send or recorded(value)

    def hook(event: str, args: tuple) -> None:
        if not (event == "open" or event in _WATCHED or event in _ALSO or event.startswith("ctypes.")):
            return
        if (  # a read no check below can name (each returns None for it): the usual case, at once
            event == "object.__getattr__"
            and len(args) == 2
            and type(args[1]) is str
            and args[1] not in _READS_WATCHED
        ):
            return
        me = ident()
        if me in busy:  # the hook's own calls; another thread's events are its own
            return
        busy.add(me)
        try:
            try:
                frame = getframe(1)  # what raised the event
            except ValueError:  # none: a builtin run as a raw thread's target
                if event in _guard.WALKS:
                    found = (event, "no frame (a builtin run as a raw thread's target)")
                    if found not in sent:
                        sent.add(found)
                        send({"t": "audit", "event": found[0], "where": found[1]})
                return
            if event == _guard.THREAD_START_EVENT:
                threads.started(args, frame)
                return
            if event == "sys._getframe" and frame.f_code in _compare.FRAME_READERS:
                # the comparison check reading its caller's globals: a test's callback (a
                # predicate ``lambda x: x > 2``) the code under test calls compares through it,
                # and the frame it takes never leaves it
                return
            checks: list[Callable[[], tuple[str, str] | None]] = [
                # the answer read from the calling test (its source, its code, its frame)
                lambda: _guard.reads_its_caller(event, args, frame, repo, changed, in_tests, test_module)
            ]
            if event in _PROCESS_STARTS:  # a second interpreter to read the test files with
                checks = [lambda: _guard.started_process(event, frame, repo, quiet, threads, in_tests)]
            elif event == "import":
                checks = [lambda: _guard.loaded_again(args, frame, repo)]
            elif event == "compile":
                checks = [lambda: _guard.compiled_as_test(args, frame, repo, changed, test_module)]
            elif event == "open":
                checks.append(lambda: _guard.made_among_tests(args, frame, repo, known, in_tests))
                if data:
                    checks.append(lambda: _guard.read_by_tests(args, frame, repo, data, in_tests))
            else:
                where = frame.f_code.co_filename
                if where.startswith(prefix) and where[len(prefix) :] in watched and suspicious(event, args):
                    checks.append(lambda: (event, f"{where[len(prefix) :]}:{frame.f_lineno}"))
                else:
                    checks.append(lambda: _guard.patched_from(event, args, frame, repo, changed, guarded))
                if event in _guard.WALKS:  # through a trusted helper, a thread, an executor
                    checks.append(lambda: _guard.walked_from(event, frame, threads))
                if len(args) > 1 and args[1] in _guard.FUNCTION_SLOTS:  # a function's code or defaults
                    checks.append(
                        lambda: _guard.swapped_recorded(event, args, frame, repo, changed, recorded_or_sender)
                    )
            for check in checks:
                try:
                    found = check()
                except Exception:  # noqa: BLE001, S112 - the hook must never break the code it watches
                    continue
                if found is not None and found not in sent:
                    sent.add(found)
                    send({"t": "audit", "event": found[0], "where": found[1]})
        except Exception:  # noqa: BLE001, S110 - the hook must never break the code it watches
            pass
        finally:
            busy.discard(me)

    sys.addaudithook(hook)


def _receive_line(fd: int) -> dict:
    """The first line on the socket ``fd``, as JSON (the parent sends one, then only reads)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return json.loads(data)


def _hide_the_grader() -> None:
    """The grader's own modules in the child out of reach by name, and its classes immutable, as
    the repository's first line is about to run. Every check reads its module's globals and its
    classes' methods as it runs: two ``setattr`` calls on modules found by name
    (``_version_tags._Versions.changed`` to say nothing changed, ``_guard.is_`` to say every object
    is the one recorded) blinded them all, and ``assertTrue`` made a no-op for good graded the bug
    ``resolved`` (the mirror run reaches the end of a test with no check it can arm, and fails it
    there as it fails an honest fix). Now ``sys.modules`` holds none of them (``__main__`` is a
    module of the runner's file and nothing else, as ``multiprocessing`` needs) and no directory of
    the import path holds their files (``import _guard`` is refused, ``_scan.ALWAYS_PROTECTED``);
    ``setattr`` on one of their classes raises ``TypeError`` (``_version_tags.freeze``). What the
    grader hands pytest (its plugin, its wrappers of ``monkeypatch``) still leads to its functions'
    globals through their ``__globals__``, which CPython 3.11 does not audit: a diff written against
    this grader's internals, which no test output shows it."""
    modules = sys.modules
    grader = [modules[name] for name in _guard.GRADER_MODULES if name in modules]
    _version_tags.freeze(
        value
        for module in grader
        for value in list(vars(module).values())
        if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__
    )
    main = modules["__main__"]
    stub = ModuleType("__main__")
    for key in ("__file__", "__spec__", "__loader__", "__package__", "__cached__", "__builtins__"):
        if key in vars(main):
            vars(stub)[key] = vars(main)[key]
    for name in _guard.GRADER_MODULES:
        modules.pop(name, None)
    modules["__main__"] = stub


def child_main() -> None:
    # the sandbox's PYTHON* variables, for the processes the tests start (and PYTHONPATH for
    # toolchain_dirs): the interpreter has started, so they no longer reach this one
    os.environ.update(json.loads(os.environ.pop(CHILD_PYTHON_ENV, "{}")))
    prefix = TRUSTED_BYTECODE if os.path.isdir(TRUSTED_BYTECODE) else NO_BYTECODE
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = prefix
    fd, results, args = int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    mirror = _receive_line(fd)  # the parent's first line, in every run (``run_child``)
    with open(os.path.join(results, "watched.json")) as f:
        changes = json.load(f)
    watched = set(changes["watched"])
    quiet = frozenset(changes["quiet"])
    repo = os.getcwd()
    here = os.path.dirname(os.path.abspath(__file__))
    trusted = [p for p in sys.path if p and p != here] + toolchain_dirs()
    sys.path[:] = [*trusted, repo, *repository_roots()]
    toolchain = frozenset(toolchain_names())
    names = _scan.protected_names(toolchain)
    roots = [repo, *repository_roots()]
    finder = _TrustedFinder(trusted, names, roots, own_test_packages(repo))
    at = next((i for i, f in enumerate(sys.meta_path) if f is PathFinder), len(sys.meta_path))
    sys.meta_path.insert(at, finder)
    channel = _Channel(fd)
    load_toolchain()
    _guard.import_common_modules()  # before the audit hook: no repository code has run, none to watch
    import pytest  # noqa: PLC0415

    changed = frozenset(changes["written"])  # every source file the diff changed, not restored

    send = channel.send  # bound now: a method replaced on the class later sends nothing of ours
    for reason in config_changes(changes.get("configs", {})):  # sent before the repository runs
        send({"t": "config", "reason": reason})

    def claim(what: str, where: str) -> None:
        send({"t": "audit", "event": what, "where": where})

    @functools.lru_cache(maxsize=1 << 14)  # the audit hook asks it of every frame it reads
    def in_tests(path: str) -> bool:  # a test file of the repository: the base's, restored
        return path.startswith(repo + "/") and is_test_path(path[len(repo) + 1 :])

    _compare.install(_compare.Checker(repo, changes["written"], claim), in_tests, frozenset(_scan.TEST_DIRS))
    import _pytest.assertion.rewrite as rewrite  # noqa: PLC0415

    tests_data = _tests_data.TestsData()  # fed the test modules' trees as compiled (mirrored or not)
    compiled = _mirror.install(
        rewrite.AssertionRewriter,
        repo,
        mirror["tests"],
        mirror["salt"],
        lambda armed: None,  # nothing sent: see main
        tests_data.compiled,
    )
    # the toolchain's record: after everything trusted has loaded (and _compare patched pytest's
    # rewriter), before the first line of the repository runs (conftests, test modules)
    with open(os.path.join(results, "restored.json")) as f:
        known = frozenset(os.path.normpath(os.path.join(repo, p)) for p in json.load(f))

    # the test modules: pytest's own pattern among the test files, and every file it is asked to run
    run_files = frozenset(
        _normpath(os.path.join(repo, a.split("::", 1)[0]))
        for a in args
        if a.split("::", 1)[0].endswith(".py")
    )  # node ids and files: an option's value (``--junitxml PATH``) is neither

    def test_module(path: str) -> bool:
        name = os.path.basename(path)
        pattern = name == "conftest.py" or _scan.is_test_module_name(name)
        return (pattern and in_tests(path)) or path in run_files

    # the tests' own modules: test paths, and every file restored (a graded file, a helper of the
    # tests whatever its name)
    def tests_file(path: str) -> bool:
        return in_tests(path) or _normpath(path) in known

    # the tests' own monkeypatch and mock.patch, told apart from the diff's writes to the classes the
    # tests check with: wrapped before the toolchain's record is taken, which holds the wrappers
    patches = _guard.TestsPatches(repo, changed, tests_file)
    patches.install()
    watch = _guard.Watch(
        repo,
        changed,
        claim,
        trusted,
        tests_file,
        tests_data,
        _version_tags.TypeTags,
        _version_tags.DictTags,
        patches,
    )
    dirs = watch.guard.package_dirs  # pytest's and pluggy's own files, not all trusted ones
    data = frozenset(os.path.join(repo, p) for p in changes["data"])
    _install_monitor(
        channel,
        repo,
        watched,
        changed,
        toolchain,
        lambda p: in_tests(p) or p.startswith(dirs),
        data,
        in_tests,
        known,
        watch.recorded_function,
        dirs,
        quiet,
        functools.lru_cache(maxsize=1 << 14)(test_module),
    )
    _Reporter.pytest_runtest_call = pytest.hookimpl(hookwrapper=True, tryfirst=True)(_Reporter.after_call)
    _Reporter.pytest_runtest_protocol = pytest.hookimpl(hookwrapper=True, tryfirst=True)(
        _Reporter.around_test
    )
    _Reporter.pytest_runtestloop = pytest.hookimpl(hookwrapper=True, tryfirst=True)(_Reporter.around_loop)
    reporter = _Reporter(channel, watch, compiled)
    watch.record_objects(
        {"__main__.reporter": reporter, "__main__.channel": channel, "__main__.finder": finder}
    )
    # the standard library's and the grader's record: the last step before the repository's
    # first line (a conftest, a test module, the code they import) can run
    watch.record_trusted(trusted)
    _hide_the_grader()
    code = int(pytest.main(args, plugins=[reporter]))
    for stream in (sys.stdout, sys.stderr):  # os._exit does not flush: pytest's last lines
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed or replaced stream: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child_main()
    else:
        main()
