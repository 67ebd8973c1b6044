"""A program's raw control bytes never reach an observation, a dump or a terminal.

An agent's programs can print ESC sequences (a cleared screen, a window title, an OSC 52 write to
the clipboard of whoever reads the transcript), BEL, backspace, a carriage return that makes
``PASSED\\rFAILED`` show one word and tokenize as two, NUL, DEL, C1 controls and bidi overrides
(text shown in an order other than its tokens'), the line and paragraph separators (a line break to
some readers, none to Python's line numbers) and invisible characters that hide text (zero-width
ones, the BOM, the tag characters that spell an instruction nobody sees). ``envs/text.py:
clean_text`` shows each as its escape; here a real program prints every class in each env (the SWE agent's command, the debugging
gym's bash, pdb and view, code repair's error message) and ``lit-coderl episode`` prints a dump that
holds them raw (written before the envs cleaned them). Real parts throughout: bubblewrap
workspaces, the shipped tasks, the sandbox, the CLI entry point.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil

import pytest

from lit_codeRL.cli import main as cli_main
from lit_codeRL.envs import CodeRepairEnv
from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.envs.text import clean_text
from lit_codeRL.problems import Problem
from lit_codeRL.problems.debug import debug_problem
from lit_codeRL.sandbox import make_sandbox
from lit_codeRL.sandbox.workspace import WorkspaceConfig

HOSTILE = (
    "A\x1b[2JB\x1b]0;title\x07C \x1b]52;c;aGk=\x07 PASSED\rFAILED D\x00E\x7fF\x85G\u202eH\u2066I"
    " é 中\tJ\r\nK\x08L M\u2028N\u2029O\u200bP\u200dQ\u2060R\ufeffS\u180eT\U000e0068\U000e0069U"
)
"""Every class: CSI, OSC ended by BEL (a title, a clipboard write), a CR overwrite, NUL, DEL, a C1
control (NEL), a bidi override and isolate, CRLF, backspace, the line and paragraph separators,
zero-width space and joiner, word joiner, BOM, Mongolian vowel separator and two tag characters
(an invisible "hi"); and text that must stay as it is."""

SHOWN = (
    r"A\x1b[2JB\x1b]0;title\x07C \x1b]52;c;aGk=\x07 PASSED\rFAILED D\x00E\x7fF\x85G\u202eH\u2066I"
    " é 中\tJ\nK"
    r"\x08L M\u2028N\u2029O\u200bP\u200dQ\u2060R\ufeffS\u180eT\U000e0068\U000e0069U"
)
"""``HOSTILE`` as shown, written by hand: each control as the escape ``repr`` writes, CRLF a newline,
tab, newline and the letters as they were."""

RAW = ["\x1b", "\x07", "\r", "\x00", "\x7f", "\x85", "\u202e", "\u2066", "\x08", "\u2028", "\u2029"]
RAW += ["\u200b", "\u200d", "\u2060", "\ufeff", "\u180e", "\U000e0068", "\U000e0069"]
ESCAPES = [r"\x1b[2J", r"\x1b]0;title\x07", r"\x1b]52;c;", r"PASSED\rFAILED", r"\x00", r"\x7f", r"\x85"]
ESCAPES += [r"\u202e", r"\u2066", r"\x08", r"M\u2028N\u2029O", r"\u200bP\u200dQ\u2060R\ufeffS\u180eT"]
ESCAPES += [r"T\U000e0068\U000e0069U"]

# a program that writes HOSTILE's UTF-8 bytes whatever the sandbox's locale
PROGRAM = f"import sys\nsys.stdout.buffer.write({HOSTILE.encode()!r})\nsys.stdout.buffer.flush()\n"


def assert_shown(text: str, whole: bool = True) -> None:
    """``text`` holds no raw control character, every escape of ``HOSTILE``'s, the text around
    them as it was, and (``whole``) ``SHOWN`` itself: newline, tab, é and 中 unchanged in place."""
    assert [ch for ch in RAW if ch in text] == [], repr(text)
    assert [e for e in ESCAPES if e not in text] == [], repr(text)
    assert "é 中" in text
    if whole:
        assert SHOWN in text, repr(text)


# ------------------------------------------------------------------------------ the function
def test_clean_text_shows_every_control_as_its_escape():
    assert clean_text(HOSTILE) == SHOWN
    assert clean_text(SHOWN) == SHOWN  # cleaning twice is cleaning once
    cases = {
        "a\tb\nc é 中 ü \u00a0 \u00ad": "a\tb\nc é 中 ü \u00a0 \u00ad",  # plain text (a soft hyphen): as it is
        "x\r\ny\r\n": "x\ny\n",  # Windows line ends stay readable
        "x\ry": r"x\ry",  # a lone CR is shown
        "\x00\x01\x0b\x0c\x1f\x7f": r"\x00\x01\x0b\x0c\x1f\x7f",
        "\x80\x9b\x9f\xa0": r"\x80\x9b\x9f" + "\xa0",  # C1 (0x9b is CSI); U+00A0 is a letter's space
        "\u202a\u202b\u202c\u202d\u202e": r"\u202a\u202b\u202c\u202d\u202e",
        "\u2066\u2067\u2068\u2069": r"\u2066\u2067\u2068\u2069",
        # the marks: left-to-right, right-to-left, Arabic letter (bidi controls that show as nothing)
        "a\u200eb\u200fc\u061cd": r"a\u200eb\u200fc\u061cd",
        # neighbours that are not controls: Arabic letters and comma, a variation selector, a Hangul filler
        "\u061b\u061d\u0627\u060c \ufe0f \u3164": "\u061b\u061d\u0627\u060c \ufe0f \u3164",
        "caf\udce9": "caf\ufffd",  # an undecodable byte, as before
        "\\x1b": "\\x1b",  # already the escape: untouched
    }
    assert {k: clean_text(k) for k in cases} == cases


def test_clean_text_shows_separators_and_invisible_characters():
    """The line and paragraph separators and the characters that show as nothing, each as the
    escape ``repr`` writes (by hand here); their visible neighbours stay."""
    cases = {
        "a\u2028b\u2029c": r"a\u2028b\u2029c",  # one line to Python and to ``\n``-counting tools
        "\u200b\u200c\u200d": r"\u200b\u200c\u200d",  # zero-width space, non-joiner, joiner
        "\u2060\u2061\u2062\u2063\u2064": r"\u2060\u2061\u2062\u2063\u2064",  # word joiner, invisible operators
        "\ufeffimport os": r"\ufeffimport os",  # a BOM, here or mid-text (ZWNBSP)
        "x\u180ey": r"x\u180ey",  # Mongolian vowel separator
        # the tag characters: "ok" then an invisible "rm" (U+E0072 U+E006D), and the block's ends
        "ok\U000e0072\U000e006d": r"ok\U000e0072\U000e006d",
        "\U000e0000\U000e0001\U000e0020\U000e007f": r"\U000e0000\U000e0001\U000e0020\U000e007f",
        # neighbours that show: hair space, hyphenation point, narrow no-break space, superscript
        # zero, soft hyphen, and the first code point past the tag block
        "\u200a\u2027\u202f\u2070\u00ad\U000e0080": "\u200a\u2027\u202f\u2070\u00ad\U000e0080",
    }
    assert {k: clean_text(k) for k in cases} == cases
    assert [clean_text(v) for v in cases.values()] == list(cases.values())  # twice is once


def test_clean_text_search_and_table_agree():
    """The one search that lets most text through unchanged finds exactly the characters the table
    changes, over every code point: a character added to one and not the other would pass raw."""
    from lit_codeRL.envs.text import _UNSAFE, _VISIBLE

    every = "".join(map(chr, range(0x110000)))
    assert {m.start() for m in _UNSAFE.finditer(every)} == set(_VISIBLE)
    assert all(ch.isascii() for escape in _VISIBLE.values() if escape != "\ufffd" for ch in escape)


def test_clean_text_is_linear():
    import time

    for text in (HOSTILE * 4000, "\x1b" * 100_000, "a" * 100_000, "\r\n" * 50_000, "\U000e0041" * 100_000):
        t0 = time.perf_counter()
        clean_text(text)
        assert time.perf_counter() - t0 < 1.0, len(text)


# ------------------------------------------------------------------------------ the SWE agent
@pytest.fixture(scope="module")
def swe_env(tmp_path_factory):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap"),
        command_timeout_s=8,
    )
    with ContainerEnv("embedded", "train", settings=settings) as env:
        yield env


def test_swe_command_output_is_shown_not_sent(swe_env):
    swe_env.reset(swe_env.tasks()[0].instance_id)
    message, _, done, extra = swe_env.step(f"<execute>python3 -c {shlex.quote(PROGRAM)}</execute>")
    assert not done and "Exit code: 0" in message
    assert_shown(message)
    assert_shown(extra["output"])  # the per-turn dump too
    # a file written with them keeps its bytes (od shows the ESC): only the diff shown is cleaned
    message, _, _, extra = swe_env.step(
        "<execute>printf 'A\\033[2JB\\342\\200\\256C\\n' > shown.txt && od -An -c shown.txt</execute>"
    )
    assert "033" in extra["output"] and "+A\\x1b[2JB\\u202eC" in message
    assert "\x1b" not in message and "\u202e" not in message


# ------------------------------------------------------------------------------ the debugging gym
@pytest.fixture(scope="module")
def debug_env(tmp_path_factory):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    cache = tmp_path_factory.mktemp("debug-cache")
    env = DebugEnv(DebugSettings(repo_cache=str(cache), workspace={"backend": "bwrap"}, tools="full"))
    yield env
    env.close()


def debug_step(env: DebugEnv, state, text: str):
    (result,) = env.step_batch([state], [Action(text, "stop")]).result()
    return result


def test_debug_tools_show_a_programs_controls(debug_env, median):
    (start,) = debug_env.reset_batch([median])
    state = start.state
    out = debug_step(debug_env, state, f'<rewrite path="hostile.py">{PROGRAM}</rewrite>')
    assert "hostile.py now reads" in out.observation
    # bash: a program's output
    out = debug_step(debug_env, state, "<bash>python hostile.py</bash>")
    assert_shown(out.observation)
    assert_shown(out.info["dump"]["output"])
    # pdb: the same program run by the debugger, on its pseudo-terminal
    out = debug_step(debug_env, state, "<pdb>!exec(open('hostile.py').read())</pdb>")
    assert_shown(out.observation, whole=False)
    assert "B" in out.observation and "\tJ\nK" in out.observation
    # view: a file that holds the bytes
    out = debug_step(debug_env, state, "<bash>python hostile.py > shown.txt</bash>")
    out = debug_step(debug_env, state, "<view>shown.txt</view>")
    # view numbers lines as Python does (a lone CR ends one, as CRLF does: the number of its own
    # after PASSED); every other control, separator and invisible character is its escape
    assert [ch for ch in RAW if ch in out.observation] == [], repr(out.observation)
    assert "PASSED\n2| FAILED" in out.observation and r"F\x85G" in out.observation
    assert [e for e in ESCAPES if e not in out.observation] == [r"PASSED\rFAILED"]
    assert "é 中\tJ\n3| K" + SHOWN.split("\nK")[1] in out.observation
    # listdir: a file name that holds them
    out = debug_step(debug_env, state, "<bash>touch \"$(printf 'n\\033[2Jm\\342\\200\\256e')\"</bash>")
    out = debug_step(debug_env, state, "<listdir/>")
    assert r"n\x1b[2Jm\u202ee" in out.observation and "\x1b" not in out.observation


def test_debug_first_observation_shows_the_tests_controls(tmp_path, median):
    """The tests' output at reset (``show_initial_eval``) is program output too: a failing test's
    captured stdout, which pytest prints as it was written."""
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    task = median.metadata["debug_task"]
    loud = f"\n\ndef test_loud():\n    print({HOSTILE!r})\n    assert False\n"
    files = {**task.files, "test_stats.py": task.files["test_stats.py"] + loud}
    env = DebugEnv(DebugSettings(repo_cache=str(tmp_path), workspace={"backend": "bwrap"}))
    try:
        (start,) = env.reset_batch(
            [debug_problem(dataclasses.replace(task, task_id="debug/loud", files=files))]
        )
    finally:
        env.close()
    assert "test_loud" in start.observation
    assert_shown(start.observation.split("The tests now give:")[1])


# ------------------------------------------------------------------------------ code repair
def test_code_repair_feedback_shows_an_errors_controls():
    problem = Problem(
        task_id="t/sq", prompt="square(x)", entry_point="square", tests=("assert square(2) == 4",)
    )
    code = f"def square(x):\n    raise ValueError({HOSTILE!r})"
    with make_sandbox(workers=1) as sandbox:
        env = CodeRepairEnv(sandbox)
        (start,) = env.reset_batch([problem])
        (res,) = env.step_batch([start.state], [Action(f"```python\n{code}\n```")]).result()
    assert not res.terminated and "Error: ValueError: A" in res.observation
    assert_shown(res.observation)


# ------------------------------------------------------------------------------ lit-coderl episode
def test_episode_prints_an_old_dumps_controls_as_escapes(tmp_path, capsys):
    record = {
        "problem_id": f"debug/x{HOSTILE}",
        "prompt": f"<|im_start|>user\nFix it. {HOSTILE}<|im_end|>",
        "reward": 0.0,
        "verdict": "unresolved",
        "turns": [
            {
                "text": f"<bash>x</bash> {HOSTILE}",
                "tool": "bash",
                "command": f"echo {HOSTILE}",
                "path": HOSTILE,
                "observation": HOSTILE,
                "diff": f"+{HOSTILE}\n",
            }
        ],
        "diff": f"diff --git a/x b/x\n+{HOSTILE}\n",
        "grade": {
            "verdict": "unresolved",
            "reward": 0.0,
            "reason": HOSTILE,
            "fail_to_pass": {HOSTILE: "failed"},
        },
        "gateway": {"calls": 1},
        "agent_log": HOSTILE,
    }
    dump = tmp_path / "rollouts.jsonl"
    # as a run wrote it before the envs cleaned their text: JSON escapes (``\u001b``), read back raw
    dump.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    assert json.loads(dump.read_text(encoding="utf-8"))["agent_log"] == HOSTILE
    cli_main(["episode", str(dump)])
    printed = capsys.readouterr().out
    assert_shown(printed)
    assert printed.count(SHOWN) >= 8, printed  # every field that held the bytes
    out = tmp_path / "episode.md"
    cli_main(["episode", str(dump), "--out", str(out)])
    assert_shown(out.read_text(encoding="utf-8"))
