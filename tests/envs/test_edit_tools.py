"""The ``edit`` tool bundle (``env/tools/edit``: the debugging gym's ``view``, ``replace`` and
``edit`` as shell commands for the SWE env): numbered views, quoted-text replacements, line-range
replacements and insertions, and a defined refusal (nothing written) for every bad input; then
every shipped SWE task's reference trajectory made with these commands, played for real in the
sandbox, resolves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lit_codeRL.envs.swe.tools import load_tools
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
