"""The static tamper scan (``grading/_scan.py``), the grade metrics and the text cleaning, by hand."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.text import clean_text
from lit_codeRL.grading._scan import (
    ALWAYS_PROTECTED,
    features,
    internals_findings,
    is_test_path,
    protected_names,
    starts_processes,
    structure_findings,
)
from lit_codeRL.grading.repo import RUNNER_FILES, patch_bytes, tamper_kind
from lit_codeRL.training.rollout_module import grade_metrics

PROTECTED = protected_names()


def packages(*dirs: str):
    return lambda d: d in dirs


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("pytest.py", "shadows pytest"),
        ("_pytest/__init__.py", "shadows _pytest"),
        ("src/pluggy/__init__.py", "shadows pluggy"),
        ("lib/difflib.py", "shadows difflib"),
        ("json/__init__.py", "shadows json"),
        ("sitecustomize.py", "shadows sitecustomize"),
        ("x-1.0.dist-info/entry_points.txt", "metadata"),
        ("deep/x.egg-info/PKG-INFO", "metadata"),
        ("zz.pth", "metadata"),
        ("calc/_speedups.cpython-311-x86_64-linux-gnu.so", "native code"),
        ("calc/__pycache__/m.cpython-311.pyc", "bytecode"),
    ],
)
def test_structure_findings_name_what_changes_loading(path, reason):
    (found,) = structure_findings([path], packages("calc"), PROTECTED)
    assert found.startswith(reason) and path in found


@pytest.mark.parametrize("runner_file", RUNNER_FILES, ids=lambda p: p.stem)
def test_every_module_of_the_grader_is_protected(runner_file):
    """A diff's ``_mirror.py`` at a ``sys.path`` root is named as the grader's own modules are:
    the runner imports each of them by its bare name."""
    name = "__main__" if runner_file == RUNNER_FILES[0] else runner_file.stem
    assert name in ALWAYS_PROTECTED
    (found,) = structure_findings([f"src/{runner_file.name}"], packages(), PROTECTED)
    assert found.startswith(f"shadows {runner_file.stem}")


@pytest.mark.parametrize(
    "path",
    [
        "calc/json.py",  # inside a package: calc.json shadows nothing
        "calc/pytest.py",
        "site/index.html",  # not a module
        "docs/queue.md",
        "helpers.py",
        "test/__init__.py",  # a repository's own test package is allowed to be called test
        "calc/new_module.py",
    ],
)
def test_structure_findings_leave_ordinary_additions_alone(path):
    assert structure_findings([path], packages("calc"), PROTECTED) == []


def test_internals_are_reasons_only_when_new_in_the_file():
    base = "import sys\n\ndef f(x):\n    return x\n"
    forged = base + "import gc\nobjs = gc.get_objects()\nsys.modules['a'] = 1\n"
    found = internals_findings("m.py", forged, base)
    assert found == [
        "internals: m.py: import gc",
        "internals: m.py: name get_objects",
        "internals: m.py: name sys.modules",
    ]
    # the same features already in the base version: not reasons
    assert internals_findings("m.py", forged + "\n", forged) == []
    # a new file: everything it has counts
    assert internals_findings("new.py", "import _pytest.reports\n", None) == [
        "internals: new.py: import _pytest"
    ]


@pytest.mark.parametrize(
    ("source", "feature"),
    [
        ("x = getattr(gc, 'get_' + 'objects')", "name getattr(gc, ...)"),
        ("m = vars(sys)['mod' + 'ules']", "name vars(sys, ...)"),
        ("f = inspect.currentframe().f_back", "name f_back"),
        ("g = __import__('g' + 'c')", "name __import__"),
        ("exec(code)", "name exec"),
        ("def pytest_runtest_makereport(item, call): pass", "hook pytest_runtest_makereport"),
        ("k = 'pluginmanager'", "string 'pluginmanager'"),
        ("p = '/tmp/x/junit.xml'", "string '/tmp/x/junit.xml'"),
        ("f.__code__ = g.__code__", "name __code__"),
        ("import ctypes", "import ctypes"),
        ("def f(:\n  _getframe", "name _getframe"),  # does not parse: identifiers still count
    ],
)
def test_features_of_suspect_sources(source, feature):
    assert feature in features(source)


@pytest.mark.parametrize(
    "source",
    [
        "model.eval()",
        "re.compile('x')",
        "import inspect\ninspect.signature(f)",
        "d = {'modules': 1}",
        "import os\nos.path.join('a')",
    ],
)
def test_ordinary_code_has_no_suspect_features(source):
    assert features(source) == set()


def test_test_paths_are_the_files_grading_restores():
    for path in ("tests/a.py", "test_x.py", "pkg/x_test.py", "conftest.py", "a/pytest.ini", "testing/h.py"):
        assert is_test_path(path)
    for path in ("pkg/x.py", "testdata.py", "latest_x.py"):
        assert not is_test_path(path)


def test_tamper_kinds_and_grade_metrics():
    assert [
        tamper_kind(r) for r in ("shadows pytest: p.py", "native code: a.so", "run time: x", "canary: y", "z")
    ] == [
        "shadows",
        "native_code",
        "run_time",
        "canary",
        "other",
    ]
    records = [
        {"instance_id": "a", "grade": {"verdict": "tamper", "tamper": ["metadata: x.pth", "canary: c"]}},
        {"instance_id": "a", "grade": {"verdict": "resolved"}},
        {"instance_id": "a", "grade": {"verdict": "workspace_broken"}, "agent_fault": True},
        {"valid": False, "verdict": "sandbox_error"},
    ]
    m = grade_metrics(records)
    assert m["train/grade/tamper_rate"] == m["train/grade/tamper"] == pytest.approx(1 / 3)
    assert m["train/grade/tamper_metadata"] == m["train/grade/tamper_canary"] == pytest.approx(1 / 3)
    assert m["train/grade/resolved"] == pytest.approx(1 / 3) and m["train/grade/rejected"] == 0.0
    assert m["train/episodes/masked"] == m["train/episodes/agent_fault"] == 0.25
    assert grade_metrics([{"verdict": "passed", "reward": 1.0}]) == {}  # not an agent env


def test_bytes_become_a_defined_replacement_and_exact_patches():
    text = b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape")
    assert clean_text(text) == "caf\ufffd \ufffd\ufffd" and clean_text("\ud800x") == "\ufffdx"
    assert clean_text("plain ü") == "plain ü"
    assert patch_bytes(text) == b"caf\xe9 \xff\xfe\n"  # the exact bytes back, newline-terminated
    assert patch_bytes("a\n") == b"a\n" and patch_bytes(b"x") == b"x\n" and patch_bytes("\ud800") == b"?\n"


def test_toolchain_plugins_are_loaded_by_name_repository_ones_never(tmp_path):
    """Autoload is off in grading: the toolchain's own pytest plugins come back as ``-p`` (only
    those of the directories given, i.e. the toolchain, never the repository)."""
    from lit_codeRL.grading._runner import toolchain_plugins

    toolchain, repo = tmp_path / "site", tmp_path / "repo"
    for root, name, module in (
        (toolchain, "pytest_good", "pytest_good.plugin"),
        (repo, "evil", "evilplugin"),
    ):
        info = root / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[pytest11]\n{name} = {module}\n")
    assert toolchain_plugins([str(toolchain)]) == ["-p", "pytest_good.plugin"]
    assert toolchain_plugins([]) == []


def test_an_episode_dump_shows_tampering_and_prints_any_bytes():
    from lit_codeRL.rollout.episode_view import render_episode

    bad = b"caf\xe9".decode("utf-8", "surrogateescape")
    record = {
        "problem_id": "t",
        "reward": 0.0,
        "verdict": "tamper",
        "turns": [{"text": "<execute>ls</execute>", "action": "execute", "output": f"{bad}.txt"}],
        "diff": f"diff --git a/{bad} b/{bad}\n",
        "grade": {"verdict": "tamper", "reward": 0.0, "tamper": ["shadows pytest: pytest.py"]},
    }
    text = render_episode(record)
    assert "Tampering found" in text and "- shadows pytest: pytest.py" in text
    assert "caf\ufffd" in text
    text.encode("utf-8")  # printable: no lone surrogate left


def test_pythonpath_inside_the_repository_is_repository_code_never_toolchain(tmp_path, monkeypatch):
    """A src layout's ``src`` reaches the grading run on ``PYTHONPATH`` beside the toolchain: it is
    imported after the repository root, and is never trusted, a plugin source or a protected name
    (or the trusted finder would refuse the repository's own package)."""
    from lit_codeRL.grading import _runner

    repo, site = tmp_path / "repo", tmp_path / "site"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "__init__.py").write_text("")
    (site / "pluggy").mkdir(parents=True)
    monkeypatch.chdir(repo)
    monkeypatch.setenv("PYTHONPATH", f"{site}:{repo}/src:{repo}")
    assert _runner.toolchain_dirs() == [str(site)]
    assert _runner.repository_roots() == [f"{repo}/src", str(repo)]
    assert "pluggy" in _runner.toolchain_names() and "pkg" not in _runner.toolchain_names()
    monkeypatch.setenv("PYTHONPATH", f"{repo}-other:{site}")  # a sibling named alike is outside
    assert _runner.toolchain_dirs() == [f"{repo}-other", str(site)] and _runner.repository_roots() == []


@pytest.mark.parametrize(
    "reports, status",
    [
        # unittest's skipTest inside subTest, or pytest's subtests fixture: junit keeps the skip
        ([("setup", "passed"), ("call", "skipped"), ("call", "passed"), ("call", "passed")], "skipped"),
        ([("setup", "passed"), ("call", "passed"), ("call", "skipped"), ("call", "passed")], "skipped"),
        # a failing subtest fails the test, whatever follows
        ([("setup", "passed"), ("call", "failed"), ("call", "skipped"), ("call", "passed")], "failed"),
        ([("setup", "passed"), ("call", "skipped"), ("call", "failed"), ("call", "passed")], "failed"),
        # plain tests keep their one call's outcome
        ([("setup", "passed"), ("call", "passed"), ("teardown", "passed")], "passed"),
        ([("setup", "skipped"), ("teardown", "passed")], "skipped"),
        ([("setup", "passed"), ("call", "passed"), ("teardown", "failed")], "error"),
    ],
)
def test_runner_outcomes_agree_with_junit_on_subtests(reports, status):
    from lit_codeRL.grading._runner import Outcomes

    out = Outcomes()
    for when, outcome in reports:
        out.feed({"t": "log", "nodeid": "t.py::T::test_a", "when": when, "outcome": outcome})
    assert out.outcomes["t.py::T::test_a"] == status


@pytest.mark.parametrize(
    ("files", "selected"),
    [
        # pytest's own files, in its order within a directory, the first with a section wins
        ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = \"-q -m 'not stress' --cov=pkg\"\n"},
         ["-m", "not stress"]),
        ({"pyproject.toml": "[tool.pytest]\naddopts = ['-p', 'xdist', '-k', 'not net', '--deselect=t/a.py::x']\n"},
         ["-k", "not net", "--deselect=t/a.py::x"]),
        ({"pytest.toml": "[pytest]\naddopts = ['-mnot slow']\n", "pytest.ini": "[pytest]\naddopts = -k x\n"},
         ["-mnot slow"]),
        ({".pytest.ini": "[pytest]\naddopts = --deselect t/test_a.py::test_b -x\n"},
         ["--deselect", "t/test_a.py::test_b"]),
        ({"tox.ini": "[tox]\n[pytest]\naddopts =\n    -m 'not slow'\n    --strict-markers\n"}, ["-m", "not slow"]),
        ({"setup.cfg": "[tool:pytest]\naddopts = -k 'a or b'\n", "tox.ini": "[tox]\nenvlist = py3\n"},
         ["-k", "a or b"]),
        # a pytest.ini without a section is the configuration all the same: nothing selected
        ({"pytest.ini": "", "setup.cfg": "[tool:pytest]\naddopts = -m x\n"}, []),
        # the file nearest the first test file, then the directories above it
        ({"tests/tox.ini": "[pytest]\naddopts = -m near\n", "pyproject.toml": "[tool.pytest.ini_options]\naddopts = \"-m far\"\n"},
         ["-m", "near"]),
        ({"tests/setup.cfg": "[metadata]\nname = x\n", "setup.cfg": "[tool:pytest]\naddopts = -m far\n"}, ["-m", "far"]),
        # nothing that selects, an option without its value, a file that does not parse
        ({"pyproject.toml": "[tool.pytest.ini_options]\naddopts = \"--cov -p no:warnings -m\"\n"}, []),
        ({"pyproject.toml": "[tool.pytest.ini_options\n", "tox.ini": "[pytest]\naddopts = -m 'unclosed\n"}, []),
        ({}, []),
    ],
)  # fmt: skip
def test_grading_runs_the_tests_the_repositorys_addopts_select(tmp_path, monkeypatch, files, selected):
    from lit_codeRL.grading._runner import repository_selection

    for path, text in {"tests/test_a.py": "def test_a():\n    pass\n", **files}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    monkeypatch.chdir(tmp_path)
    assert repository_selection(["tests/test_a.py", "other/test_b.py"]) == selected


def test_every_file_pytest_reads_its_configuration_from_is_restored_or_watched():
    from _pytest.config import findpaths

    from lit_codeRL.grading._runner import CONFIG_NAMES

    if not hasattr(findpaths, "CONFIG_LOADERS_BY_NAME"):
        pytest.skip("pytest < 9 keeps no list of its configuration files")
    assert tuple(findpaths.CONFIG_LOADERS_BY_NAME) == CONFIG_NAMES  # pytest's own list, in its order
    # restored from the base before the run; the other two are read, and a change is tampering
    assert {name for name in CONFIG_NAMES if is_test_path(f"pkg/{name}")} == set(CONFIG_NAMES) - {
        "pyproject.toml",
        "setup.cfg",
    }


def test_a_pytest_section_changed_or_deleted_with_its_file_is_tampering(tmp_path, monkeypatch):
    """``pyproject.toml`` and ``setup.cfg`` are not restored (they hold the project's metadata
    too): a changed pytest section is tampering. Deleting the whole file took the section (its
    ``filterwarnings = error``, its ``-m 'not stress'``) with it and was not."""
    import subprocess

    from lit_codeRL.grading import _runner

    section = "[tool.pytest.ini_options]\naddopts = \"-m 'not stress'\"\nfilterwarnings = ['error']\n"
    files = {"pyproject.toml": "[project]\nname = 'p'\n" + section, "setup.cfg": "[metadata]\nname = p\n"}
    for path, text in files.items():
        (tmp_path / path).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "")

    def findings(changed: list[str]) -> list[str]:
        return [f for f in _runner.tamper_scan(changed, [], frozenset())[0] if "pytest configuration" in f]

    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "setup.cfg").unlink()  # it had no pytest section: nothing went with it
    assert findings(["pyproject.toml", "setup.cfg"]) == [
        "metadata: pyproject.toml: its pytest configuration changed"
    ]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n" + section.replace("error", "ignore"))
    assert findings(["pyproject.toml"]) == ["metadata: pyproject.toml: its pytest configuration changed"]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'q'\n" + section)  # metadata only
    assert findings(["pyproject.toml"]) == []


def test_grading_loads_the_plugin_every_workspace_pytest_loads(tmp_path) -> None:
    """The runner (standard library only) names the workspace's steady plugin by hand: the same
    name, given to the child's pytest only where a toolchain directory holds it."""
    from lit_codeRL.grading import _runner
    from lit_codeRL.sandbox.workspace_argv import STEADY_PLUGIN, STEADY_PLUGIN_NAME

    assert _runner.STEADY_PLUGIN == STEADY_PLUGIN_NAME
    assert _runner.steady_plugin([str(tmp_path)]) == {}
    (tmp_path / f"{STEADY_PLUGIN_NAME}.py").write_bytes(STEADY_PLUGIN.read_bytes())
    assert _runner.steady_plugin(["/nonexistent", str(tmp_path)]) == {"PYTEST_PLUGINS": STEADY_PLUGIN_NAME}


@pytest.mark.parametrize(
    "source,starts",
    [
        ("import subprocess\n", True),
        ("from multiprocessing import Pool\n", True),
        ("import os\nos.system('ls')\n", True),
        ("import os\nos.popen('ls')\n", True),
        ("from os import fork\n", True),
        ("from concurrent.futures import ProcessPoolExecutor\n", True),
        ("import os\nos.posix_spawn('/bin/ls', ['ls'], {})\n", True),
        ("def f(:\n", True),  # unparseable: nothing of it is known
        ("import os\n\n\ndef add(a, b):\n    return a + b\n", False),
        ("from concurrent.futures import ThreadPoolExecutor\n", False),
        ("import threading\nthreading.Thread(target=print).start()\n", False),
    ],
)
def test_starts_processes_reads_whether_a_base_file_starts_processes(source, starts):
    """Where the base starts none, a process started by the diff's code is named in the child
    (``_guard.started_process``); a file that started processes may go on doing so."""
    assert starts_processes(source) is starts
