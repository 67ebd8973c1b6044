"""The ``edit`` tool bundle (``env/tools/edit``: the debugging gym's ``view``, ``replace`` and
``edit`` as shell commands for the SWE env): numbered views, quoted-text replacements, line-range
replacements and insertions, and a defined refusal (nothing written) for every bad input; then
every shipped SWE task's reference trajectory made with these commands, played for real in the
sandbox, resolves."""

from __future__ import annotations

import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from lit_codeRL.envs.swe.tools import load_tools
from lit_codeRL.envs.text import python_lines
from lit_codeRL.problems.debug import load_debug_tasks
from tests.grading.repo_tasks import make_task
from tests.sandbox.conftest import require_bwrap

BIN = Path(__file__).resolve().parents[2] / "env" / "tools" / "edit" / "bin"


def tool(name: str, *args: str, stdin: bytes = b"", cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BIN / name), *args], input=stdin, cwd=cwd, capture_output=True, timeout=30
    )


@pytest.fixture
def code(tmp_path: Path) -> Path:
    (tmp_path / "m.py").write_text("def f(x):\n    y = x + 1\n    return y\n")
    return tmp_path


def test_the_bundle_loads_with_its_usage():
    (bundle,) = load_tools(["edit"])
    assert "view PATH [A-B]" in bundle.help_text() and "edit PATH A-B" in bundle.help_text()
    assert "replace PATH" in bundle.help_text()


def test_replace_changes_the_one_place_that_reads_the_quote(code):
    done = tool("replace", "m.py", stdin=b"<old>y = x + 1</old>\n<new>y = x * 2</new>\n", cwd=code)
    assert done.returncode == 0 and "2|     y = x * 2" in done.stdout.decode(), done.stderr
    block = b"<old>\n    return y\n</old>\n<new>\n    return y + 1\n</new>\n"  # blocks on lines of their own
    assert tool("replace", "m.py", stdin=block, cwd=code).returncode == 0
    assert (code / "m.py").read_text() == "def f(x):\n    y = x * 2\n    return y + 1\n"
    assert (
        tool("replace", "m.py", stdin=b"<old>    return y + 1\n</old><new></new>", cwd=code).returncode == 0
    )
    assert (code / "m.py").read_text() == "def f(x):\n    y = x * 2\n"  # an empty <new> deletes


@pytest.mark.parametrize(
    ("path", "stdin", "rc", "said"),
    [
        ("m.py", b"<old>y</old><new>z</new>", 1, "2 times (lines 2, 3)"),
        ("m.py", b"<old>y = x - 1</old><new>z</new>", 1, "copy it exactly"),
        ("m.py", b"<old>2|     y = x + 1</old><new>z</new>", 1, "line numbers"),
        ("m.py", b"<old></old><new>z</new>", 2, "is empty"),
        ("m.py", b"<new>z</new><old>y</old>", 2, "<new> is missing"),
        ("m.py", b"y = x * 2", 2, "<old> is missing"),
        ("missing.py", b"<old>y</old><new>z</new>", 1, "No such file"),
        ("bytes.py", b"<old>x</old><new>z</new>", 1, "not UTF-8"),
        (".", b"<old>x</old><new>z</new>", 1, "directory"),
    ],
)
def test_a_bad_replace_changes_nothing_and_says_why(code, path, stdin, rc, said):
    (code / "bytes.py").write_bytes(b"x = '\xff\xfe'\n")
    before = {p.name: p.read_bytes() for p in code.iterdir() if p.is_file()}
    done = tool("replace", path, stdin=stdin, cwd=code)
    assert done.returncode == rc and said in done.stderr.decode(), done.stderr
    assert {p.name: p.read_bytes() for p in code.iterdir() if p.is_file()} == before
    assert tool("replace", cwd=code).returncode == 2  # no path: usage


def test_view_numbers_the_lines(code):
    assert (
        tool("view", "m.py", cwd=code).stdout.decode() == "1| def f(x):\n2|     y = x + 1\n3|     return y\n"
    )
    assert tool("view", "m.py", "2-9", cwd=code).stdout.decode() == "2|     y = x + 1\n3|     return y\n"
    assert tool("view", "m.py", "3", cwd=code).stdout.decode() == "3|     return y\n"
    long = code / "long.py"
    long.write_text("".join(f"x{k} = {k}\n" for k in range(1, 251)))
    out = tool("view", "long.py", cwd=code).stdout.decode().splitlines()
    assert len(out) == 201 and out[0] == "  1| x1 = 1" and out[-1] == "[50 more lines: view long.py 201-250]"


def test_edit_replaces_inserts_and_deletes_lines(code):
    done = tool("edit", "m.py", "2-2", stdin=b"    y = x * 2\n", cwd=code)
    assert done.returncode == 0 and "2|     y = x * 2" in done.stdout.decode()
    assert (code / "m.py").read_text() == "def f(x):\n    y = x * 2\n    return y\n"
    assert tool("edit", "m.py", "2-1", stdin=b"    # doubled\n", cwd=code).returncode == 0  # insert
    assert (
        tool("edit", "m.py", "5-4", stdin=b"print(f(1))", cwd=code).returncode == 0
    )  # append, newline added
    assert tool("edit", "m.py", "2-2", cwd=code).returncode == 0  # no lines: the range is deleted
    assert (code / "m.py").read_text() == "def f(x):\n    y = x * 2\n    return y\nprint(f(1))\n"


@pytest.mark.parametrize(
    ("args", "rc", "said"),
    [
        (("m.py", "0-1"), 1, "has 3 lines"),
        (("m.py", "3-9"), 1, "has 3 lines"),
        (("m.py", "x-y"), 2, "is not A-B"),
        (("m.py",), 2, "usage"),
        (("missing.py", "1-1"), 1, "No such file"),
        (("bytes.py", "1-1"), 1, "not UTF-8"),
        ((".", "1-1"), 1, "directory"),
    ],
)
def test_a_bad_edit_changes_nothing_and_says_why(code, args, rc, said):
    (code / "bytes.py").write_bytes(b"x = '\xff\xfe'\n")
    before = {p.name: p.read_bytes() for p in code.iterdir() if p.is_file()}
    done = tool("edit", *args, stdin=b"y = 1\n", cwd=code)
    assert done.returncode == rc and said in done.stderr.decode(), done.stderr
    assert {p.name: p.read_bytes() for p in code.iterdir() if p.is_file()} == before


def test_view_shows_bytes_that_are_not_utf8_and_refuses_bad_ranges(code):
    (code / "bytes.py").write_bytes(b"x = '\xff'\n")
    assert tool("view", "bytes.py", cwd=code).stdout.decode() == "1| x = '\ufffd'\n"
    assert tool("view", "m.py", "7-9", cwd=code).returncode == 1
    assert tool("view", "nope.py", cwd=code).returncode == 1


@pytest.mark.parametrize("spec", ["1-" + "9" * 5000, "9" * 5000, "1-\u00b2", "\u00b2", "1" * 10])
@pytest.mark.parametrize("name", ["view", "edit"])
def test_a_line_number_of_any_length_is_a_usage_error_not_a_traceback(code, name, spec):
    # isdigit() took these, then int() raised (4300-digit limit, or "²" is no number to int())
    before = (code / "m.py").read_bytes()
    done = tool(name, "m.py", spec, stdin=b"y = 1\n", cwd=code)
    assert done.returncode == 2 and "at most 9 digits" in done.stderr.decode(), done.stderr
    assert "Traceback" not in done.stderr.decode() and (code / "m.py").read_bytes() == before


@pytest.mark.parametrize(
    ("name", "args", "stdin"),
    [("edit", ("1-1",), b"y = 1\n"), ("replace", (), b"<old>x = 1</old><new>x = 2</new>")],
)
def test_a_file_over_the_limit_is_too_large_even_when_a_character_straddles_it(code, name, args, stdin):
    # the read stops at MAX_BYTES + 1, inside the last (two-byte) character: that is not a bad byte
    data = b"x = 1\n" * ((1 << 20) // 6) + b"#" * ((1 << 20) % 6) + "\u00e9".encode()
    assert len(data) == (1 << 20) + 2
    (code / "big.py").write_bytes(data)
    done = tool(name, "big.py", *args, stdin=stdin, cwd=code)
    assert done.returncode == 1 and "larger than" in done.stderr.decode(), done.stderr
    assert (code / "big.py").read_bytes() == data


def test_replace_reads_a_repeated_tag_in_linear_time(code):
    done = tool("replace", "m.py", stdin=b"<old>" * 200_000, cwd=code)
    assert done.returncode == 2 and "<old> is missing" in done.stderr.decode()


def test_swe_reference_trajectories_with_the_line_tools_resolve(tmp_path_factory):
    """Every shipped SWE task, its fix made with ``view`` and ``replace`` (the lead-ins naming the
    bug), played in the real sandbox with the bundle on PATH: each one resolves."""
    require_bwrap()
    from lit_codeRL.envs.swe.actions import parse_action
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.envs.swe.reference import reference_episodes
    from lit_codeRL.problems.registry import load_problems
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    settings = SWESettings(
        tools=["edit"],
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap"),
    )
    problems = load_problems("swe", "all")
    with ContainerEnv(None, settings=settings) as env:
        episodes = reference_episodes(env, problems, explain=True)
    assert all(e.resolved for e in episodes), [(e.task_id, e.verdict) for e in episodes if not e.resolved]
    commands = [parse_action(a).command or "" for e in episodes for a in e.actions]
    edits = [c for c in commands if c.startswith("replace ")]
    assert len(edits) >= 8 and not any(c.startswith(("sed ", "python3 -")) for c in commands)
    numkit = next(e for e in episodes if e.task_id == "lit-coderl__numkit-2")
    assert any(a.startswith("`<` should be `<=`. I will change numkit/intervals.py.") for a in numkit.actions)
    assert any("<old>if merged and start < merged[-1][1]:</old>" in a for a in numkit.actions)
    view = next(o for a, o in zip(numkit.actions, numkit.observations, strict=False) if "<execute>view " in a)
    assert " 8|         if merged and start < merged[-1][1]:" in view


# ------------------------------------------------------------------------------ Python's line numbers
# Inside a string on line 1: a form feed, U+2028 and the other characters ``str.splitlines`` breaks a
# line at and Python does not (NEL, vertical tab, the file/group/record separators, U+2029).
BANNER = 'BANNER = "form\x0cfeed, line\u2028separator, next\x85line, \x0b\x1c\x1d\x1e\u2029end"\n'
MEDIAN = next(t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median")
STATS, FIXED_STATS = BANNER + MEDIAN.files["stats.py"], BANNER + MEDIAN.fix["stats.py"]
BUG = "    return (ordered[middle - 1] + ordered[middle]) // 2"  # line 20 to Python, 28 to str.splitlines
FIX = "    return (ordered[middle - 1] + ordered[middle]) / 2"


def test_view_edit_and_replace_number_lines_as_python_does(tmp_path):
    """The bundle's numbers are Python's: ``view 20`` shows the line a traceback calls 20, ``edit
    20-20`` changes it (every other byte kept), ``replace`` names and shows it by that number."""
    assert python_lines(STATS)[19] == BUG and STATS.splitlines()[27] == BUG
    path = tmp_path / "stats.py"
    path.write_bytes(STATS.encode())
    namespace: dict = {}
    exec(compile(STATS, "stats.py", "exec"), namespace)
    with pytest.raises(TypeError) as raised:  # a traceback from the bug line names line 20
        namespace["median"](["a", "b"])
    assert traceback.extract_tb(raised.value.__traceback__)[-1].lineno == 20
    assert tool("view", "stats.py", "20", cwd=tmp_path).stdout.decode() == f"20| {BUG}\n"
    shown = tool("view", "stats.py", cwd=tmp_path).stdout.decode()
    assert shown.split("\n")[0] == f" 1| {BANNER[:-1]}"  # one line, its breaks inside it
    assert shown.count("\n") == len(python_lines(STATS)) == 25
    # replace: the lines a quote is found on, the closest lines to a misquote, the changed region
    done = tool("replace", "stats.py", stdin=b"<old>ordered[middle]</old><new>x</new>", cwd=tmp_path)
    assert "(lines 19, 20)" in done.stderr.decode(), done.stderr
    misquote = b"<old>return (ordered[middle-1]+ordered[middle])//2</old><new>x</new>"
    said = tool("replace", "stats.py", stdin=misquote, cwd=tmp_path).stderr.decode()
    assert "closest text is at line 20" in said and f"20| {BUG}" in said, said
    assert path.read_bytes() == STATS.encode()
    done = tool("replace", "stats.py", stdin=f"<old>{BUG}</old><new>{FIX}</new>".encode(), cwd=tmp_path)
    assert done.returncode == 0 and f"20| {FIX}\n" in done.stdout.decode(), done.stdout
    assert path.read_bytes() == FIXED_STATS.encode()
    # edit: Python's line 20 changes, every other byte stays (the banner's breaks included)
    path.write_bytes(STATS.encode())
    done = tool("edit", "stats.py", "20-20", stdin=f"{FIX}\n".encode(), cwd=tmp_path)
    assert done.returncode == 0 and f"20| {FIX}\n" in done.stdout.decode(), done.stdout
    assert path.read_bytes() == FIXED_STATS.encode()
    assert tool("edit", "stats.py", "26-25", stdin=b"# end", cwd=tmp_path).returncode == 0  # append
    assert path.read_bytes() == (FIXED_STATS + "# end\n").encode()


def test_a_lone_carriage_return_ends_a_line_for_every_tool(tmp_path):
    """Python ends a line at a lone ``\\r`` too: ``replace`` named the lines of a twice-found quote
    by counting ``\\n`` only; an append after a last line ended by ``\\r`` keeps that byte as it is."""
    path = tmp_path / "m.py"
    path.write_bytes(b"x = 1\ry = 2\nx = 1\r")
    assert tool("view", "m.py", cwd=tmp_path).stdout.decode() == "1| x = 1\n2| y = 2\n3| x = 1\n"
    done = tool("replace", "m.py", stdin=b"<old>x = 1</old><new>x = 3</new>", cwd=tmp_path)
    assert done.returncode == 1 and "(lines 1, 3)" in done.stderr.decode(), done.stderr
    done = tool("edit", "m.py", "4-3", stdin=b"z = 3\n", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.decode().endswith("3| x = 1\n4| z = 3\n"), done.stdout
    assert path.read_bytes() == b"x = 1\ry = 2\nx = 1\rz = 3\n"


# the tests of an even count's median, which `// 2` fails
FAILING = ("test_median_of_even_count", "test_median_of_floats", "test_median_of_negative_numbers")


def banner_task(tmp_path):
    """An SWE task on a repository of :data:`STATS` and its tests; the reference patch fixes line 20."""
    tests = [n for n in MEDIAN.files["test_stats.py"].split() if n.startswith("test_") and n.endswith("():")]
    nodes = [f"test_stats.py::{n[:-3]}" for n in tests]
    f2p = [n for n in nodes if n.split("::")[1] in FAILING]
    files = {"stats.py": STATS, "test_stats.py": MEDIAN.files["test_stats.py"]}
    return make_task(
        tmp_path, "banner", files, {"stats.py": FIXED_STATS}, f2p, [n for n in nodes if n not in f2p]
    )


def test_in_the_swe_env_view_edit_and_the_traceback_agree_on_line_numbers(tmp_path):
    """The real SWE env (bubblewrap, the bundle on PATH): the traceback of the bug names stats.py's
    line 20, ``view stats.py 20`` shows it, ``edit stats.py 20-20`` changes it, and the fix resolves."""
    require_bwrap()
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    task = banner_task(tmp_path)
    settings = SWESettings(
        tools=["edit"], repo_cache=str(tmp_path / "cache"), workspace=WorkspaceConfig(backend="bwrap")
    )
    crash = '<execute>python -c \'import stats; stats.median(["a", "b"])\'</execute>'
    with ContainerEnv(None, settings=settings) as env:
        env.reset(task)
        _, _, _, extra = env.step(crash)
        assert 'stats.py", line 20, in median' in extra["output"], extra["output"]
        _, _, _, extra = env.step("<execute>view stats.py 20</execute>")
        assert extra["output"].strip() == f"20| {BUG}", extra["output"]
        _, _, _, extra = env.step(f"<execute>edit stats.py 20-20 <<'EOF'\n{FIX}\nEOF</execute>")
        assert extra["exit_code"] == 0 and f"20| {FIX}" in extra["output"], extra["output"]
        changed = [
            line
            for line in extra["diff"].split("\n")
            if line[:1] in ("+", "-") and line[:3] not in ("+++", "---")
        ]
        assert changed == [f"-{BUG}", f"+{FIX}"], extra["diff"]
        _, _, _, extra = env.step(crash)  # the edited line is the one the traceback names
        assert "unsupported operand type(s) for /: 'str' and 'int'" in extra["output"], extra["output"]
        _, reward, done, _ = env.step("<submit/>")
    assert done and reward == 1.0


@pytest.mark.parametrize("tools", [["edit"], []])
def test_the_swe_reference_of_a_file_with_line_breaks_python_does_not_count_resolves(tmp_path, tools):
    """:func:`banner_task`'s reference trajectory: targeted edits (no ``git apply``) at Python's line
    20, which its view shows, played in the real sandbox: it resolves."""
    require_bwrap()
    from lit_codeRL.envs.swe.actions import parse_action
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.envs.swe.reference import reference_episodes
    from lit_codeRL.problems.swe import to_problem
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    settings = SWESettings(
        tools=tools, repo_cache=str(tmp_path / "cache"), workspace=WorkspaceConfig(backend="bwrap")
    )
    with ContainerEnv(None, settings=settings) as env:
        (episode,) = reference_episodes(env, [to_problem(banner_task(tmp_path))], explain=True)
    assert episode.resolved and episode.reward == 1.0, episode.verdict
    commands = [parse_action(a).command or "" for a in episode.actions]
    edits = [c for c in commands if c.startswith(("replace ", "edit ", "python3 - "))]
    assert len(edits) == 1 and not any(c.startswith("git apply") for c in commands), commands
    views = [o for c, o in zip(commands, episode.observations, strict=False) if c.startswith(("view", "sed"))]
    assert len(views) == 1 and (f"20| {BUG}" if tools else BUG) in views[0], views
    assert any("line 20" in a for a in episode.actions), episode.actions
