"""The SWE reference trajectory's first look at the code follows what the first test run printed
(``envs/swe/locate.py``): the traceback's last frame in the file being fixed, else a ``grep`` for a
function the output shows being called, else the plain view. Hand-written outputs check each
reading; three bugs in a small repository, played for real in bubblewrap, check that every path
the trajectory opens is one its observations showed first and that each trajectory resolves."""

from __future__ import annotations

import subprocess

import pytest

from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.envs.swe.locate import (
    FirstLook,
    called_name,
    defined_functions,
    last_source_frame,
)
from lit_codeRL.envs.swe.reference import reference_episodes
from lit_codeRL.grading._scan import is_test_path as is_test_file
from lit_codeRL.problems.swe import SWETask, to_problem
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

PYTEST_RAISED = """F                                                                        [100%]
=================================== FAILURES ===================================
_______________________________ test_parentheses _______________________________

    def test_parentheses():
>       assert evaluate("(1 + 2) * 3") == 9

tests/test_evaluator.py:16:
_ _ _ _ _ _ _ _
[... 543 characters cut ...]
>           raise CalcError("malformed expression")
E           calckit.tokens.CalcError: malformed expression

calckit/evaluator.py:63: CalcError
=========================== short test summary info ============================
"""

PYTEST_ASSERTED = """    def test_parentheses():
>       assert evaluate("(1 + 2) * 3") == 9
E       AssertionError: assert -3.0 == 9
E        +  where -3.0 = evaluate('(1 + 2) * 3')

tests/test_evaluator.py:16: AssertionError
"""

PYTHON_TRACEBACK = """Traceback (most recent call last):
  File "/workspace/repo/tests/test_m.py", line 4, in <module>
    f()
  File "/workspace/repo/pkg/m.py", line 7, in f
    return 1 / 0
  File "/usr/lib/python3.11/fractions.py", line 3, in g
ZeroDivisionError: division by zero
"""


def test_the_last_frame_in_a_source_file_is_read_from_pytest_and_python_tracebacks():
    assert last_source_frame(PYTEST_RAISED) == ("calckit/evaluator.py", 63)
    assert last_source_frame(PYTHON_TRACEBACK) == (
        "pkg/m.py",
        7,
    )  # the library frame after it is not the repo's
    assert last_source_frame(PYTEST_ASSERTED) is None  # only the test file
    assert last_source_frame("../outside.py:3: in f\n/etc/x.py:1: E\n") is None
    assert last_source_frame("./pkg/a.py:2: in f\npkg/b.py:9: ValueError\n") == ("pkg/b.py", 9)
    for path in ("tests/test_a.py", "pkg/tests/helpers.py", "test_a.py", "a_test.py", "conftest.py"):
        assert is_test_file(path)
    assert not is_test_file("pkg/testkit.py") and not is_test_file("pkg/contest.py")


def test_the_called_function_is_one_the_file_defines_the_changed_one_first():
    source = "def evaluate(e):\n    return _apply(e)\n\n\ndef _apply(e):\n    return -e\n\n\nclass C:\n    def get(self):\n        return 1\n\n    def __len__(self):\n        return 0\n"
    assert defined_functions(source, 6) == ("_apply", "evaluate", "get")
    assert defined_functions(source, 11) == ("get", "evaluate", "_apply")
    assert defined_functions("def f(:\n", 1) == ()
    names = defined_functions(source, 6)
    assert called_name(PYTEST_ASSERTED, names) == "evaluate"  # _apply is not shown, evaluate is
    assert called_name("E  where get = <pkg.C object at 0x1>.get\nE  None = get()", names) == "get"
    assert called_name("reevaluate(1) and x.evaluatex(2)", names) is None


def test_the_first_look_reads_the_output_and_falls_back_to_the_plain_view():
    look = FirstLook("calckit/evaluator.py", 60, 57, 63, True, ("_apply", "evaluate"), (60, 60), 70)
    (near,) = look(PYTEST_RAISED)  # the frame is line 63: the view is 63 - 7 to 63 + 3
    assert near.startswith(
        "The traceback ends in calckit/evaluator.py at line 63. I will look at lines 56-66,"
    )
    assert parse_action(near).command == "view calckit/evaluator.py 56-66"
    at_the_end = FirstLook("calckit/evaluator.py", 63, 60, 64, True, (), (63, 63), 64)(PYTEST_RAISED)[0]
    assert parse_action(at_the_end).command == "view calckit/evaluator.py 56-64"  # not past the last line
    far = FirstLook("calckit/evaluator.py", 28, 25, 31, False, (), (28, 28), 70)
    (action,) = far(PYTEST_RAISED)  # the change is outside the frame's window: the change's own
    assert action.startswith("The traceback ends in calckit/evaluator.py at line 63. I will look at")
    assert (
        "around line 28" in action and parse_action(action).command == "sed -n '25,31p' calckit/evaluator.py"
    )
    below = FirstLook("calckit/evaluator.py", 66, 63, 69, True, (), (66, 67), 70)(PYTEST_RAISED)[0]
    assert parse_action(below).command == "view calckit/evaluator.py 63-69"  # line 67 is past 63 + 3
    find, view = look(PYTEST_ASSERTED)
    assert (
        parse_action(find).command == "grep -rn --include='*.py' 'def evaluate(' ." and "`evaluate`" in find
    )
    assert view == look.fallback()
    assert look("Exit code: 1\nOutput:\nFailed: DID NOT RAISE\n") == [look.fallback()]
    spaced = FirstLook("my pkg/m.py", 3, 1, 5, True)
    assert parse_action(spaced.fallback()).command == "view 'my pkg/m.py' 1-5"


# ------------------------------------------------------------------------------ played
LIB = '''"""Shapes."""


def _scale(values, factor):
    return [v * factor for v in values]


def normalise(values):
    """The values divided by their total."""
    total = sum(values)
    return _scale(values, 1 / total)


def ratio(a, b):
    """a over b."""
    return a / b


def check(x):
    """Raise ValueError for a negative x."""
    if x < 0:
        raise ValueError("negative")
'''

TESTS = """import pytest

from shapes.lib import check, normalise, ratio


def test_normalise():
    assert normalise([1, 3]) == [0.25, 0.75]


def test_ratio():
    assert ratio(6, 3) == 2


def test_check():
    with pytest.raises(ValueError):
        check(-1)


def test_check_ok():
    check(1)
"""

BUGS = {  # (the bug, what the first look must do)
    "helper": (("return [v * factor", "return [v + factor"), "grep"),  # wrong value from a helper
    "raises": (("return a / b", "return a / (b - 3)"), "traceback"),  # ZeroDivisionError inside lib
    "silent": (("if x < 0:", "if x < -5:"), "plain"),  # DID NOT RAISE: nothing names the code
}


def _git(cwd, *args) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def _task(tmp_path, name: str) -> SWETask:
    (old, new), _ = BUGS[name]
    repo = tmp_path / name
    (repo / "shapes").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "shapes" / "__init__.py").write_text("")
    (repo / "tests" / "test_lib.py").write_text(TESTS)
    (repo / "shapes" / "lib.py").write_text(LIB.replace(old, new))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "bug")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "shapes" / "lib.py").write_text(LIB)
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    failing = {"helper": "test_normalise", "raises": "test_ratio", "silent": "test_check"}[name]
    tests = ["test_normalise", "test_ratio", "test_check", "test_check_ok"]
    return SWETask(
        instance_id=f"local/shapes-{name}",
        repo="local/shapes",
        base_commit=base,
        problem_statement=f"`tests/test_lib.py::{failing}` fails, and it should pass.",
        patch=patch,
        test_patch="",
        fail_to_pass=(f"tests/test_lib.py::{failing}",),
        pass_to_pass=tuple(f"tests/test_lib.py::{t}" for t in tests if t != failing),
        repo_source=str(repo),
    )


@pytest.mark.parametrize("tools", [["edit"], []])
def test_played_trajectories_open_only_paths_their_observations_showed(tmp_path, tools):
    require_bwrap()
    tasks = {name: _task(tmp_path, name) for name in BUGS}
    settings = SWESettings(
        repo_cache=str(tmp_path / "cache"), workspace=WorkspaceConfig(backend="bwrap"), tools=tools
    )
    with ContainerEnv(None, settings=settings) as env:
        episodes = reference_episodes(env, [to_problem(t) for t in tasks.values()], explain=True)
    for (name, (_, look)), episode in zip(BUGS.items(), episodes, strict=True):
        assert episode.resolved and episode.reward == 1.0, (name, episode.verdict)
        commands = [parse_action(a).command for a in episode.actions]
        # one failing node first, the tests' file again before submitting
        assert commands[0] == f"python -m pytest -q {tasks[name].fail_to_pass[0]}"
        assert commands[-2] == "python -m pytest -q tests/test_lib.py"
        opened = 2 if look == "grep" else 1
        assert commands[opened].split()[:2] in (["view", "shapes/lib.py"], ["sed", "-n"])
        if look == "plain":
            assert episode.actions[1].startswith("I will look at shapes/lib.py around line")
            continue
        shown = episode.observations[opened - 1]
        assert "shapes/lib.py" in shown, (name, shown)  # the path opened is the one just printed
        if look == "grep":
            assert commands[1] == "grep -rn --include='*.py' 'def normalise(' ."
            assert "normalise(" in episode.observations[0] and "shapes/lib.py" not in episode.observations[0]
        else:
            assert episode.actions[1].startswith(
                "The traceback ends in shapes/lib.py at line 16. I will look at lines 9-19,"
            )
