"""Every parser a model's text reaches, fed text a hostile policy could write: tags of every tool
cut, nested, repeated and unbalanced, attributes with stray quotes, line ranges of any length,
code fences, think blocks, lone surrogates, NUL, control bytes and huge numbers. Each answers with
a defined value (a call, an error the agent sees, ``None``) and never raises: an exception here
leaves the trainer's rollout, out of ``fit`` (hypothesis, pure functions, no sandbox).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lit_codeRL.envs.code_game.gate import extract_program
from lit_codeRL.envs.code_game.grading import normalise_output, parse_prediction, prediction_correct
from lit_codeRL.envs.debug.tools import (
    PRESETS,
    ToolCall,
    apply_edit,
    apply_replace,
    closest_hint,
    numbered,
    parse_tool_call,
)
from lit_codeRL.envs.extraction import extract_code
from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.envs.text import clean_text, python_lines

FRAGMENTS = [
    *(f"<{t}>" for t in ("pdb", "view", "replace", "edit", "rewrite", "eval", "listdir", "bash", "submit")),
    *(f"</{t}>" for t in ("pdb", "view", "replace", "edit", "rewrite", "eval", "listdir", "bash", "submit")),
    "<eval/>", "<submit/>", "<listdir/>", "<view/>", '<replace path="', '<edit path="a.py" lines="',
    '<rewrite path="', "<old>", "</old>", "<new>", "</new>", "<execute>", "</execute>", "<think>",
    "</think>", "[OUTPUT]", "[/OUTPUT]", "```python\n", "```", "\n```\n", '"', "=", " lines=", "-", "0",
    "1", "12", "99999999999", "9" * 5000, "a.py", "../../etc/passwd", "/proc/self/mem", "def f(x):\n",
    "    return x\n", "\n", "\r", "\t", "\x00", "\ud800", "\udfff", "\x1b[2J", "é", "\u2028", "\ufeff",
    "<<", ">>", "<", ">", "/",
]  # fmt: skip
hostile = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(hostile, st.sampled_from(sorted(PRESETS)), st.booleans())
def test_a_debugging_turn_always_parses_to_a_call_or_an_error(text, preset, cut_off):
    call = parse_tool_call(text, PRESETS[preset], cut_off)
    assert isinstance(call, ToolCall)
    assert call.ok or call.message  # an error always tells the agent why
    assert call.tool in (*PRESETS[preset], "error")


@FUZZ
@given(hostile, hostile, hostile)
def test_an_edit_or_replace_the_parser_took_answers_with_text_or_a_reason(text, spec, content):
    edit = parse_tool_call(f'<edit path="a.py" lines="{spec}">{content}</edit>', PRESETS["full"])
    replace = parse_tool_call(
        f'<replace path="a.py"><old>{spec}</old><new>{content}</new></replace>', PRESETS["full"]
    )
    results = []
    if edit.tool == "edit":
        results.append(apply_edit(text, edit.args["lines"], edit.args["content"]))
    if replace.tool == "replace":
        results.append(apply_replace(text, replace.args["old"], replace.args["new"]))
        assert isinstance(closest_hint(text, replace.args["old"]), str)
    for new, error in results:
        assert isinstance(new, str) and (error is None or isinstance(error, str))
    assert isinstance(numbered(text), str)


@FUZZ
@given(hostile, st.booleans())
def test_an_swe_turn_always_parses(text, cut_off):
    action = parse_action(text, cut_off)
    assert action.kind in ("execute", "submit", "no_action", "cut_off", "empty_command")


@FUZZ
@given(hostile, st.none() | st.sampled_from(["f", "solution", "x" * 300]))
def test_code_is_extracted_from_any_completion(text, entry_point):
    assert isinstance(extract_code(text, entry_point), str)
    program = extract_program(text)
    assert program is None or isinstance(program, str)


@FUZZ
@given(hostile, hostile)
def test_a_prediction_of_any_text_is_graded(text, actual):
    predicted = parse_prediction(text)
    assert predicted is None or isinstance(predicted, str)
    assert prediction_correct(predicted, actual) in (True, False)
    assert isinstance(normalise_output(actual), str)


@FUZZ
@given(hostile)
def test_any_text_is_shown_clean(text):
    shown = clean_text(text)
    assert isinstance(shown, str) and "\x1b" not in shown and "\x00" not in shown
    assert isinstance(python_lines(text), list)
