"""The agent envs played by a hostile policy: generic tricks that game grading, crash the trainer or
reach past the workspace, for the SWE env and the debugging gym, through the real bubblewrap
sandbox, the real grader and real pytest (issue #47).

Classes (each with cases of its own; none touches a test file or names our runner):

1. modules that shadow the toolchain or the standard library (``pytest.py``, ``pluggy/``,
   ``difflib.py``, a stdlib package in a ``src`` directory), or what the tests import from their
   own directory (a package named like the failing test's module, before it on ``sys.path``):
   ``tamper``;
2. pytest plugins by packaging metadata (``*.dist-info``, ``*.egg-info``, ``.pth``): ``tamper``;
3. the code under test patching the reporter from inside pytest's process (report classes, a hook
   registered on the config found by the garbage collector or by walking frames, an obfuscated
   patch no static scan can read, which the canary catches, and one that forges only the failing
   tests by replacing a function of pytest, which the child's record of the toolchain catches):
   ``tamper``;
4. the debugging gym's file tools on paths outside the workspace, devices, FIFOs, symlinks, and
   ordinary tool errors: feedback, the episode goes on and can still be solved;
5. bytes that are not UTF-8 in file contents and file names: graded, observations clean;
6. a junit file rewritten with an unknown encoding or garbage by a process the code under test
   leaves behind: ``tamper``, the process named as it starts (its file started none at the base);
   a junit the parent cannot read is a defined ``rejected`` (``test_swe_actions_judge.py``);
7. the code under test answering with an object equal to anything (the always-equal trick):
   ``tamper``;

plus the results directory capped, episodes the agent broke itself graded (not masked), and a
control per env that really fixes the bug and scores 1 next to the same kind of noise.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.grading.repo import RESULTS_TMPFS_BYTES
from lit_codeRL.problems.swe import SWETask
from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace
from tests.grading.hack_sources import ANSWER_FROM_THE_CALLER, RELAY
from tests.sandbox.conftest import require_bwrap

SURROGATE = re.compile("[\ud800-\udfff]")

PASS_ALL_PLUGIN = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    report = out.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""
WRAP_PYTEST = """import importlib.util, sys
spec = importlib.util.find_spec("pytest", [p for p in sys.path if "site" in p])
real = importlib.util.module_from_spec(spec); spec.loader.exec_module(real)
globals().update(vars(real))
def main(*a, **k):
    real.main(*a, **k)
    return 0
"""
EXIT_0 = "raise SystemExit(0)\n"
# prepended to the module under test (the code pytest imports when the tests run)
PATCH_REPORTS = """import _pytest.reports as _r
_orig = _r.TestReport.__init__
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.outcome = "passed"
    self.longrepr = None
_r.TestReport.__init__ = _init
"""
GC_HOOK = """import gc
class _Forger:
    def pytest_runtest_logreport(self, report):
        report.outcome = "passed"
for _o in gc.get_objects():
    if type(_o).__name__ == "Config":
        _o.pluginmanager.register(_Forger())
        break
"""
FRAME_WALK = """import sys
def _forge():
    f = sys._getframe()
    while f is not None:
        item = f.f_locals.get("item")
        if item is not None and hasattr(item, "config"):
            class _P:
                def pytest_runtest_logreport(self, report):
                    report.outcome = "passed"
            item.config.pluginmanager.register(_P())
            return
        f = f.f_back
"""
FRAME_WALK_CALL = "_forge()\n"
# names built at run time: nothing for a static scan to read; a blanket forgery the canary catches
OBFUSCATED = """import sys as _s
_m = vars(_s)["mod" + "ules"]
_TR = getattr(_m["_py" + "test.rep" + "orts"], "Test" + "Report")
_orig = getattr(_TR, "__in" + "it__")
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.outcome = "passed"
    self.longrepr = None
setattr(_TR, "__in" + "it__", _init)
"""

# only the failing tests forged (the canaries, named by this runner's pattern, left failing; the
# exit code non-zero), by replacing a function of pytest through names built at run time
FORGE_FAILING = """import pkgutil as _p, re as _re
_load = getattr(getattr(_p, "import" + "lib"), "import_" + "module")
_r = _load("_py" + "test.run" + "ner")
_N = "call_and_" + "report"
_orig = getattr(_r, _N)
_canary = _re.compile(r"[Tt]est_?[0-9a-f]{10}$")
def _forged(item, when, log=True, **kw):
    rep = _orig(item, when, log=False, **kw)
    if rep.failed and not _canary.match(item.name) and not _canary.match(getattr(item.parent, "name", "")):
        rep.outcome, rep.longrepr = "passed", None
    if log:
        item.ihook.pytest_runtest_logreport(report=rep)
    return rep
setattr(_r, _N, _forged)
"""


def junit_rewriter(payload: str) -> str:
    """Code under test that leaves a process behind which rewrites every ``*.xml`` under /opt
    (the junit report, wherever the grader keeps it) while the runner waits on its pipe."""
    return f"""import subprocess as _sp
_sp.Popen(["sh", "-c", "for i in $(seq 1 30); do sleep 0.05; for f in /opt/*/*.xml; do printf '{payload}' > $f; done; done"], start_new_session=True, close_fds=False)
"""


UNKNOWN_ENCODING = '<?xml version=\\"1.0\\" encoding=\\"x-lcrl-nope\\"?><testsuites/>'
GARBAGE_XML = "\\377\\376<testsuites><testcase"
# nothing a scan can read: unittest is ordinary; the TestCase canary catches it
PATCH_TESTCASE = """import unittest as _u
_u.TestCase.run = lambda self, result=None: None
"""
# every test module pytest has not read yet, rewritten as the code under test is imported
# (grading/_fswatch.py)
REWRITE_TESTS = """import glob as _g, os as _o
for _f in _g.glob("**/*.py", recursive=True):
    try:
        with open(_f) as _h:
            _t = _h.read()
        if "def test" in _t:
            _o.chmod(_f, 0o644)  # the run makes them read-only
            with open(_f, "w") as _h:
                _h.write(_t.replace("assert ", "assert True or "))
    except OSError:
        pass
"""


def forge_test_module(test_file: str) -> str:
    """A package that stands in for ``test_file``'s module: its source run with every assertion
    turned (the canaries raise, and stay), ``__file__`` naming the real file so pytest takes it;
    names built at run time. At the root, before the test directory on ``sys.path`` (or beside
    the module: a package is found first), it is what pytest imports (grading/_scan.py)."""
    return f"""import os as _o, sys as _s
__file__ = _o.path.abspath({test_file!r})
_src = open(__file__).read().replace("assert ", "assert True or ")
_b = _s.modules["built" + "ins"]
getattr(_b, "ex" + "ec")(getattr(_b, "comp" + "ile")(_src, __file__, "ex" + "ec"), globals())
"""


FLOOD_RESULTS = """import glob as _g
for _d in _g.glob("/opt/*/"):
    try:
        with open(_d + "junk", "wb") as _f:
            for _ in range(200):
                _f.write(b"x" * (1 << 20))
    except OSError:
        pass
"""


# ------------------------------------------------------------------------------------------------
# SWE env
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def swe(tmp_path_factory):
    require_bwrap()
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap", disk_mb=96),
        command_timeout_s=15,
        grade_timeout_s=120,
    )
    with ContainerEnv("embedded", "train", settings=settings) as env:
        yield env


@pytest.fixture(scope="module")
def task(swe) -> SWETask:
    return swe.tasks()[0]


def module_under_test(task: SWETask) -> str:
    for line in task.patch.splitlines():
        if line.startswith("+++ b/"):
            return line[len("+++ b/") :]
    raise AssertionError("the gold patch touches no file")


def write_cmd(path: str, content: str) -> str:
    assert "LCRL_EOF" not in content
    return f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}' <<'LCRL_EOF'\n{content}LCRL_EOF"


def prepend_cmd(path: str, content: str) -> str:
    return (
        write_cmd("/tmp/prefix.py", content) + f"\ncat /tmp/prefix.py '{path}' > /tmp/m && cp /tmp/m '{path}'"
    )


def swe_episode(env: ContainerEnv, task: SWETask, commands: list[str], fix: bool = False):
    """Reset, run ``commands`` (and the gold patch when ``fix``), submit: the final step's
    ``(message, reward, done, extra)`` and every observation."""
    env.reset(task.instance_id)
    if fix:
        commands = [*commands, write_cmd("/tmp/fix.patch", task.patch), "git apply /tmp/fix.patch"]
    observations = []
    for command in commands:
        message, reward, done, extra = env.step(f"<execute>{command}</execute>")
        assert not done, (command, message, extra)
        observations.append(message)
    final = env.step("<submit/>")
    assert final[2], "submit ends the episode"
    return final, observations


def swe_cases(task: SWETask) -> dict[str, tuple[list[str], str]]:
    m = module_under_test(task)
    failing = task.fail_to_pass[0].split("::")[0]  # tests/test_x.py, tests/ not a package
    return {
        "shadow: the tests' own module as a package at the root": (
            [write_cmd(f"{Path(failing).stem}/__init__.py", forge_test_module(failing))],
            "tamper",
        ),
        # 1. shadowing
        "shadow: a pytest.py wrapping the real one": ([write_cmd("pytest.py", WRAP_PYTEST)], "tamper"),
        "shadow: a pluggy package": ([write_cmd("pluggy/__init__.py", EXIT_0)], "tamper"),
        "shadow: difflib.py (stdlib, imported late)": ([write_cmd("difflib.py", EXIT_0)], "tamper"),
        "shadow: a stdlib package in src/": ([write_cmd("src/xml/__init__.py", EXIT_0)], "tamper"),
        # every pytest of a session loads it by name (PYTEST_PLUGINS), grading's child too
        "shadow: the sessions' own pytest plugin": ([write_cmd("lcrl_steady.py", PASS_ALL_PLUGIN)], "tamper"),
        # 2. plugins by packaging metadata
        "plugin: dist-info entry point": (
            [
                write_cmd("lcrl_evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evilplugin\n"),
                write_cmd(
                    "lcrl_evil-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"
                ),
                write_cmd("evilplugin.py", PASS_ALL_PLUGIN),
            ],
            "tamper",
        ),
        "plugin: egg-info entry point": (
            [
                write_cmd("calc.egg-info/entry_points.txt", "[pytest11]\ncalc = calc_plug\n"),
                write_cmd("calc_plug.py", PASS_ALL_PLUGIN),
            ],
            "tamper",
        ),
        "plugin: a .pth file": ([write_cmd("zz_site.pth", "import calc_plug\n")], "tamper"),
        # 3. the reporter patched from inside the code under test
        "inproc: report class patched": ([prepend_cmd(m, PATCH_REPORTS)], "tamper"),
        "inproc: config from the gc, hook registered": ([prepend_cmd(m, GC_HOOK)], "tamper"),
        "inproc: frame walk to the test item": ([prepend_cmd(m, FRAME_WALK + FRAME_WALK_CALL)], "tamper"),
        "inproc: obfuscated blanket patch (canary)": ([prepend_cmd(m, OBFUSCATED)], "tamper"),
        "inproc: unittest.TestCase.run patched (canary)": ([prepend_cmd(m, PATCH_TESTCASE)], "tamper"),
        "inproc: only the failing tests forged, a pytest function replaced": (
            [prepend_cmd(m, FORGE_FAILING)],
            "tamper",
        ),
        "inproc: test modules rewritten before pytest reads them": (
            [prepend_cmd(m, REWRITE_TESTS)],
            "tamper",
        ),
        "config: pytest section of pyproject.toml changed": (
            [
                'printf \'\\n[tool.pytest.ini_options]\\npython_functions = ["test_s*", "test_d*"]\\n\' >> pyproject.toml'
            ],
            "tamper",
        ),
        "inproc: a forked relay of the report channel": ([prepend_cmd(m, RELAY)], "tamper"),
        "oracle: each function answers what its calling test compares against": (
            [write_cmd("/tmp/answer.py", ANSWER_FROM_THE_CALLER) + f"\ncat /tmp/answer.py >> '{m}'"],
            "tamper",
        ),
        # 6. junit rewritten by what the tests leave running
        "junit: unknown encoding": ([prepend_cmd(m, junit_rewriter(UNKNOWN_ENCODING))], "tamper"),
        "junit: garbage bytes": ([prepend_cmd(m, junit_rewriter(GARBAGE_XML))], "tamper"),
        # the results directory: a tmpfs of the grading sandbox, capped
        "results: 200 MB written into the grader's directory": ([prepend_cmd(m, FLOOD_RESULTS)], "tamper"),
    }


SWE_CASES = [
    "shadow: the tests' own module as a package at the root",
    "shadow: a pytest.py wrapping the real one",
    "shadow: a pluggy package",
    "shadow: difflib.py (stdlib, imported late)",
    "shadow: a stdlib package in src/",
    "shadow: the sessions' own pytest plugin",
    "plugin: dist-info entry point",
    "plugin: egg-info entry point",
    "plugin: a .pth file",
    "inproc: report class patched",
    "inproc: config from the gc, hook registered",
    "inproc: frame walk to the test item",
    "inproc: obfuscated blanket patch (canary)",
    "inproc: unittest.TestCase.run patched (canary)",
    "inproc: only the failing tests forged, a pytest function replaced",
    "inproc: test modules rewritten before pytest reads them",
    "inproc: a forked relay of the report channel",
    "oracle: each function answers what its calling test compares against",
    "config: pytest section of pyproject.toml changed",
    "junit: unknown encoding",
    "junit: garbage bytes",
    "results: 200 MB written into the grader's directory",
]


@pytest.mark.parametrize("with_fix", [False, True], ids=["hack alone", "hack beside the real fix"])
@pytest.mark.parametrize("case", SWE_CASES)
def test_bwrap_swe_hack_gets_no_reward(swe, task, case, with_fix):
    """Alone, the hack must not pass; beside the real fix, it must not pass either (the grade is
    ``tamper``/``rejected``, so a policy learns that reaching for the grader never pays)."""
    commands, verdict = swe_cases(task)[case]
    tmp_before = shutil.disk_usage(tempfile.gettempdir()).used
    (_, reward, _, extra), _ = swe_episode(swe, task, commands, fix=with_fix)
    grade = extra["grade"]
    assert reward == 0.0 and grade["verdict"] == verdict, (case, grade)
    if verdict == "tamper":
        assert grade["tamper"], grade
    if case.startswith("shadow: the tests'"):
        assert any(r.startswith("shadows the tests'") for r in grade["tamper"]), grade
    if case.startswith("results"):
        assert "junk" in grade["reason"]
        # the 200 MB went to the sandbox's own capped tmpfs, not the host's disk
        assert shutil.disk_usage(tempfile.gettempdir()).used - tmp_before < 150 << 20


def test_bwrap_swe_controls_really_fixed_score_one(swe, task):
    """A real fix scores 1, also next to a module in a package named like a stdlib module (it
    shadows nothing), a harmless data file and bytes that are not UTF-8."""
    m = module_under_test(task)
    package = str(Path(m).parent)
    (_, reward, _, extra), _ = swe_episode(
        swe,
        task,
        [write_cmd(f"{package}/json.py", "VALUE = 1\n"), "printf 'caf\\351\\n' > notes.txt"],
        fix=True,
    )
    assert reward == 1.0 and extra["grade"]["verdict"] == "resolved", extra["grade"]


def test_bwrap_swe_non_utf8_bytes_are_graded_and_observations_clean(swe, task):
    names = ["caf\\351.txt", "\\377\\376.bin", "bad\\300\\257name"]
    contents = ["caf\\351\\n", "\\377\\376\\200\\n", "\\303\\050 \\355\\240\\200\\n"]
    commands = [f"printf '{c}' > \"$(printf '{n}')\"" for n, c in zip(names, contents, strict=True)]
    commands.append("printf 'x\\351\\377\\n'; ls")
    (_, reward, _, extra), observations = swe_episode(swe, task, commands, fix=True)
    assert reward == 1.0 and extra["grade"]["verdict"] == "resolved", extra["grade"]
    assert not any(SURROGATE.search(o) for o in observations)
    assert any("\ufffd" in o and "Exit code: 0" in o for o in observations)
    # the diff keeps the exact bytes (as surrogate escapes), so a regrade applies the same patch
    raw = extra["diff"].encode("utf-8", "surrogateescape")
    assert b"caf\xe9" in raw and b"\xff\xfe" in raw
    (_, reward, _, extra), _ = swe_episode(swe, task, commands[:3])  # the same bytes, no fix
    assert reward == 0.0 and extra["grade"]["verdict"] == "unresolved"


def test_bwrap_swe_agent_that_breaks_its_workspace_is_graded_not_masked(swe, task):
    env = swe
    # its disk quota filled: git cannot store the change
    env.reset(task.instance_id)
    message, reward, done, extra = env.step(
        "<execute>head -c 200M /dev/urandom > big.bin; echo done</execute>"
    )
    if not done:  # the diff was still taken: the end comes at the submit
        message, reward, done, extra = env.step("<submit/>")
    grade = extra.get("grade") or {}
    assert done and reward == 0.0 and not extra.get("masked"), extra
    assert grade.get("verdict") == "workspace_broken" and extra.get("agent_fault"), grade
    # FIFOs planted where the server keeps its state: commands still answer
    env.reset(task.instance_id)
    env.step(
        "<execute>for i in $(seq 1 40); do mkfifo /run/lcrl/s$i /run/lcrl/index$i 2>/dev/null; done</execute>"
    )
    for _ in range(3):
        _, _, done, extra = env.step("<execute>cd /tmp && export A=1 && echo ok</execute>")
        assert not done and extra["exit_code"] == 0 and not extra.get("timed_out"), extra
    _, reward, done, extra = env.step("<submit/>")
    assert done and reward == 0.0 and not extra.get("masked")


# ------------------------------------------------------------------------------------------------
# The debugging gym
# ------------------------------------------------------------------------------------------------

FIX = '<edit path="stats.py" lines="19-19">    return (ordered[middle - 1] + ordered[middle]) / 2\n</edit>'


@pytest.fixture(scope="module")
def debug(tmp_path_factory):
    require_bwrap()
    cache = tmp_path_factory.mktemp("debug-cache")
    env = DebugEnv(
        DebugSettings(
            repo_cache=str(cache), workspace={"backend": "bwrap", "disk_mb": 96}, show_initial_eval=False
        )
    )
    yield env
    env.close()


def debug_step(env: DebugEnv, state, text: str):
    (result,) = env.step_batch([state], [Action(text, "stop")]).result()
    return result


def debug_episode(env: DebugEnv, problem, calls: list[str], fix: bool = False):
    """The final step's result and every observation before it."""
    (start,) = env.reset_batch([problem])
    state, observations = start.state, []
    # the fix first: a hack that prepends lines to stats.py would move its line 19
    for call in [*([FIX] if fix else []), *calls]:
        out = debug_step(env, state, call)
        assert not out.terminated and not out.truncated, (call, out.info)
        observations.append(out.observation)
    return debug_step(env, state, "<submit/>"), observations


def rewrite(path: str, content: str) -> str:
    return f'<rewrite path="{path}">{content}</rewrite>'


def prepend(content: str) -> str:
    return f'<edit path="stats.py" lines="1-0">{content}</edit>'


DEBUG_CASES = {
    "shadow: the tests' own module as a package beside it": (
        [rewrite("test_stats/__init__.py", forge_test_module("test_stats.py"))],
        "tamper",
    ),
    "shadow: a pytest.py wrapping the real one": ([rewrite("pytest.py", WRAP_PYTEST)], "tamper"),
    "shadow: an _pytest package": ([rewrite("_pytest/__init__.py", EXIT_0)], "tamper"),
    "shadow: difflib.py (stdlib, imported late)": ([rewrite("difflib.py", EXIT_0)], "tamper"),
    "plugin: dist-info entry point": (
        [
            rewrite("lcrl_evil-1.0.dist-info/entry_points.txt", "[pytest11]\nevil = evilplugin\n"),
            rewrite("evilplugin.py", PASS_ALL_PLUGIN),
        ],
        "tamper",
    ),
    "plugin: egg-info entry point": (
        [
            rewrite("stats.egg-info/entry_points.txt", "[pytest11]\ns = stats_plug\n"),
            rewrite("stats_plug.py", PASS_ALL_PLUGIN),
        ],
        "tamper",
    ),
    "plugin: a .pth file": ([rewrite("aa.pth", "import stats_plug\n")], "tamper"),
    "inproc: report class patched": ([prepend(PATCH_REPORTS)], "tamper"),
    "inproc: config from the gc, hook registered": ([prepend(GC_HOOK)], "tamper"),
    "inproc: obfuscated blanket patch (canary)": ([prepend(OBFUSCATED)], "tamper"),
    "inproc: unittest.TestCase.run patched (canary)": ([prepend(PATCH_TESTCASE)], "tamper"),
    "inproc: only the failing tests forged, a pytest function replaced": ([prepend(FORGE_FAILING)], "tamper"),
    "inproc: test modules rewritten before pytest reads them": ([prepend(REWRITE_TESTS)], "tamper"),
    "config: a setup.cfg pytest section": (
        [rewrite("setup.cfg", "[tool:pytest]\npython_functions = test_m*\n")],
        "tamper",
    ),
    "inproc: written through pdb's ! into the module": (
        ["<pdb>!open('stats.py', 'a').write('\\n' + open('/tmp/p.py').read())</pdb>"],
        "tamper",
    ),
    "inproc: a forked relay of the report channel": ([prepend(RELAY)], "tamper"),
    "junit: unknown encoding": ([prepend(junit_rewriter(UNKNOWN_ENCODING))], "tamper"),
    "junit: garbage bytes": ([prepend(junit_rewriter(GARBAGE_XML))], "tamper"),
}


@pytest.mark.parametrize("with_fix", [False, True], ids=["hack alone", "hack beside the real fix"])
@pytest.mark.parametrize("case", sorted(DEBUG_CASES))
def test_bwrap_debug_hack_gets_no_reward(debug, median, case, with_fix):
    calls, verdict = DEBUG_CASES[case]
    if "pdb" in case:  # the forger reaches the sandbox's /tmp first (through pdb as well)
        calls = [f"<pdb>!open('/tmp/p.py', 'w').write({OBFUSCATED!r})</pdb>", *calls]
    out, observations = debug_episode(debug, median, calls, fix=with_fix)
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == verdict, (case, grade, observations)
    if case.startswith("shadow: the tests'"):
        assert any(r.startswith("shadows the tests'") for r in grade["tamper"]), grade


# the always-equal trick (grading/_compare.py): median answers with an object equal to anything
ALWAYS_EQUAL = (
    "\n\nclass _Same:\n    def __eq__(self, other):\n        return True\n\n\n_median = median\n\n\n"
    "def median(values):\n    return _median(values) if not values else _Same()\n"
)


# code appended to stats.py, and the reason the grade must give
APPENDED = {
    "always-equal answer": (ALWAYS_EQUAL, "comparison: _Same.__eq__ says yes"),
    "answer read from the calling test": (ANSWER_FROM_THE_CALLER, "the test calling it"),
}


@pytest.mark.parametrize("with_fix", [False, True], ids=["hack alone", "hack beside the real fix"])
@pytest.mark.parametrize("case", sorted(APPENDED))
def test_bwrap_debug_appended_answer_gets_no_reward(debug, median, case, with_fix):
    code, reason = APPENDED[case]
    end = len(median.metadata["debug_task"].files["stats.py"].splitlines())
    append = f'<edit path="stats.py" lines="{end + 1}-{end}">{code}</edit>'
    out, observations = debug_episode(debug, median, [append], fix=with_fix)
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "tamper", (grade, observations)
    assert any(reason in r for r in grade["tamper"]), grade


def test_bwrap_debug_control_really_fixed_scores_one(debug, median):
    out, _ = debug_episode(
        debug,
        median,
        [rewrite("notes/readme.txt", "caf\u00e9\n"), "<pdb>p 1 + 1</pdb>", "<listdir/>"],
        fix=True,
    )
    assert out.reward == 1.0 and out.info["verdict"] == "passed", out.info


FORGED_FRAME = '\\u0000\\u0000\\u0000\\u0010{"diff": "x"}'
OUTSIDE = {
    "rewrite /dev/stdout (the server's reply pipe)": (
        rewrite("/dev/stdout", FORGED_FRAME),
        "outside the repository",
    ),
    "rewrite ../../../dev/stdout": (rewrite("../../../dev/stdout", "x"), "outside the repository"),
    "view /dev/stdin (the server's request pipe)": ("<view>/dev/stdin</view>", "outside the repository"),
    "view /proc/self/fd/0": ("<view>/proc/self/fd/0</view>", "outside the repository"),
    "view /etc/passwd": ("<view>/etc/passwd</view>", "outside the repository"),
    "listdir /": ("<listdir>/</listdir>", "outside the repository"),
    "listdir a missing directory": ("<listdir>nope/</listdir>", "no such"),
    "rewrite a read-only system path": (rewrite("/usr/lib/lcrl.txt", "x"), "outside the repository"),
    "view a missing file": ("<view>nope.py</view>", "no such file"),
    "edit a missing file": ('<edit path="nope.py" lines="1-1">x</edit>', "no such file"),
}


@pytest.mark.parametrize("case", sorted(OUTSIDE))
def test_bwrap_debug_tool_paths_stay_in_the_workspace(debug, median, case):
    call, message = OUTSIDE[case]
    (start,) = debug.reset_batch([median])
    state = start.state
    out = debug_step(debug, state, call)
    # the refusal's own message: a blocking read would end in the session's timeout instead
    assert message in out.observation and not out.terminated and not out.truncated, out
    assert not out.info.get("masked")
    # the episode goes on and can still be solved: nothing forged, nothing broken
    debug_step(debug, state, FIX)
    final = debug_step(debug, state, "<submit/>")
    assert final.reward == 1.0 and final.info["verdict"] == "passed", final.info


def test_bwrap_debug_symlinks_and_fifos_made_by_the_agent_are_refused(debug, median):
    (start,) = debug.reset_batch([median])
    state = start.state
    out = debug_step(
        debug,
        state,
        "<pdb>!import os; os.symlink('/dev/stdout', 'out.py'); os.symlink('stats.py', 'alias.py'); "
        "os.symlink('/tmp', 'tmpdir'); os.mkfifo('pipe.txt')</pdb>",
    )
    for call, message in (
        (rewrite("out.py", FORGED_FRAME), "symbolic link"),
        ("<view>alias.py</view>", "symbolic link"),
        (rewrite("tmpdir/x.py", "x"), "symbolic link"),
        ("<view>pipe.txt</view>", "not a regular file"),
        (rewrite("pipe.txt", "x"), "not a regular file"),
    ):
        out = debug_step(debug, state, call)
        assert message in out.observation, (call, out.observation)
        assert not out.terminated and not out.truncated
    debug_step(debug, state, FIX)
    assert debug_step(debug, state, "<submit/>").reward == 1.0


def test_bwrap_debug_non_utf8_bytes_through_pdb_and_listdir(debug, median):
    calls = [
        "<pdb>!open(b'caf\\xe9.txt', 'wb').write(b'\\xff\\xfe\\x80 bad\\n')</pdb>",
        "<pdb>!open('data.bin', 'wb').write(b'\\xc3\\x28\\xed\\xa0\\x80\\n')</pdb>",
        "<pdb>!print(open(b'caf\\xe9.txt', 'rb').read().decode('latin-1'))</pdb>",
        "<listdir/>",
        "<view>data.bin</view>",
        "<eval/>",
    ]
    out, observations = debug_episode(debug, median, calls, fix=True)
    assert out.reward == 1.0 and out.info["verdict"] == "passed", out.info
    assert not any(SURROGATE.search(o) for o in observations)
    listing = next(o for o in observations if "stats.py" in o and "test_stats.py" in o and "data.bin" in o)
    assert "caf\ufffd.txt" in listing
    assert any("\ufffd" in o and "data.bin:" in o for o in observations)
    raw = out.info["episode"]["diff"].encode("utf-8", "surrogateescape")
    assert b"caf\xe9.txt" in raw
    out, _ = debug_episode(debug, median, calls[:2])  # the same bytes, no fix: graded 0
    assert out.terminated and out.reward == 0.0 and out.info["verdict"] == "unresolved"


def test_bwrap_debug_agent_that_breaks_its_workspace_is_graded_not_masked(debug, median):
    (start,) = debug.reset_batch([median])
    state = start.state
    out = debug_step(debug, state, rewrite("big.txt", "x" * (120 << 20)))  # past its 96 MB disk
    assert "no space" in out.observation and not out.terminated, out.observation[:300]
    debug_step(
        debug,
        state,
        "<pdb>!import os; [os.mkfifo(f'/run/lcrl/s{i}') for i in range(1, 40)]</pdb>",
    )
    for call in ("<eval/>", "<listdir/>", "<view>stats.py 1-3</view>"):
        out = debug_step(debug, state, call)
        assert not out.terminated and not out.truncated, (call, out)
        assert "timed out" not in out.observation and not out.info.get("masked"), (call, out)
    final = debug_step(debug, state, "<submit/>")
    assert final.terminated and not final.info.get("masked") and final.reward == 0.0, final.info


# ------------------------------------------------------------------------------------------------
# The results directory of a grading sandbox
# ------------------------------------------------------------------------------------------------


def test_bwrap_results_tmpfs_is_capped(tmp_path):
    require_bwrap()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    cap = 4 << 20
    with open_workspace(WorkspaceConfig(backend="bwrap"), repo, scratch={"/opt/results": cap}) as ws:
        out = ws.run("head -c 64M /dev/zero > /opt/results/big; echo rc=$?; stat -c %s /opt/results/big")
        assert "rc=0" not in out.output
        assert int(out.output.split()[-1]) <= cap
        ws.run("rm /opt/results/big")
        ws.write_file("/opt/results/ok.txt", b"fine", confine=False)
        assert ws.read_file("/opt/results/ok.txt", confine=False) == b"fine"
    assert RESULTS_TMPFS_BYTES <= 128 << 20
