"""Every parser of agent text in ``lit_codeRL/envs`` on adversarial inputs of ~100k characters:
linear time, not quadratic. A parse holds the GIL in the trainer's env threads, so one slow
action stalls every other sample of the batch. Each case is a shape that made a regex with a
lazy or ambiguous body retry at every position (seconds at 10-40k characters before the fix);
the bound is generous (one second, where a linear parse takes milliseconds) so that it only
catches a blowup by orders of magnitude, not a slow machine."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from lit_codeRL.envs.code_game.gate import extract_program
from lit_codeRL.envs.code_game.grading import parse_prediction
from lit_codeRL.envs.debug.behaviour import first_edit
from lit_codeRL.envs.debug.tools import PRESETS, parse_tool_call
from lit_codeRL.envs.extraction import extract_code
from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.envs.swe.locate import called_name, last_source_frame
from lit_codeRL.problems.debug_task import DebugTask

N = 100_000
BOUND_S = 1.0
TOOLS = PRESETS["full"]


def _debug(text: str) -> object:
    return parse_tool_call(text, TOOLS)


def _reason(text: str) -> object:
    # the lead-in of an action's first edit (an evaluation's behaviour counts read the policy's text)
    files = {"a.py": "x = 1\n", "test_a.py": "from a import x\n"}
    task = DebugTask("t", "d", files, fix={"a.py": "x = 2\n"})
    return first_edit(task, [text + '<rewrite path="a.py">x = 2\n</rewrite>'], TOOLS)


CASES: dict[str, tuple[Callable[[str], object], str]] = {
    "swe: <execute> repeated": (parse_action, "<execute>" * (N // 9)),
    "swe: <submit repeated": (parse_action, "<submit " * (N // 8)),
    "debug: a long word in a tag": (_debug, "<edit " + "a" * N + ">x</edit>"),
    "debug: a= repeated in a tag": (_debug, "<edit " + "a= " * (N // 3) + ">x</edit>"),
    "debug: <old> repeated": (_debug, '<replace path="a.py">' + "<old>" * (N // 5) + "</replace>"),
    "debug: <new> repeated": (
        _debug,
        '<replace path="a.py"><old>x</old>' + "<new>" * (N // 5) + "</replace>",
    ),
    "debug: spaces after a fence": (_debug, '<rewrite path="a.py">```\n' + " " * N + "</rewrite>"),
    "debug: tabs before a fence": (_debug, '<rewrite path="a.py">```\n' + "\t" * N + "``` x</rewrite>"),
    "debug: <pdb repeated": (_debug, "<pdb" * (N // 4)),
    "debug: a long line range": (_debug, "<view>a.py " + "9" * N + "</view>"),
    "debug: a lead-in of spaces": (_reason, " " * N),
    "debug: a lead-in of backticks": (_reason, "`" * N),
    "debug: a lead-in of `.": (_reason, "`." * (N // 2)),
    "extraction: <think> repeated": (extract_code, "<think>" * (N // 7)),
    "extraction: a word before a backtick": (extract_code, "```" + "a" * N + "`"),
    "extraction: dots before a backtick": (extract_code, "```" + "." * N + "`\nx"),
    "extraction: ```py lines": (extract_code, "```py\n" * (N // 6)),
    "code game: ```py lines": (extract_program, "```py\n" * (N // 6)),
    "code game: spaces after a fence": (extract_program, "```" + " " * N + "\n"),
    "code game: <think> repeated": (parse_prediction, "<think>" * (N // 7)),
    "code game: [OUTPUT] repeated": (parse_prediction, "[OUTPUT]" * (N // 8)),
    "swe reference: blank lines": (last_source_frame, "\n" * N),
    "swe reference: a long word": (lambda text: called_name(text, ("f",)), "a" * N),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_parser_takes_linear_time(case):
    parse, text = CASES[case]
    parse(text[:1000])  # warm up (imports, caches)
    t0 = time.perf_counter()
    parse(text)
    assert time.perf_counter() - t0 < BOUND_S, f"{case}: {len(text)} characters"
