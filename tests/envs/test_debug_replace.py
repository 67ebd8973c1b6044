"""``<replace>``: an edit that names its place by the text there, not by line numbers.

The tool call as the gym reads it (the text taken as written, one newline after an opening tag
dropped; a call missing a part or with an empty quote runs nothing), the replacement itself (found
once: replaced; found nowhere or several times, overlapping ones included: nothing changes and the
message says where), the reference trajectory's quote of an edit (``text_replacement``: unique,
grown by whole lines when a line repeats, checked over every line of every shipped program), and
the tool played for real in a bubblewrap workspace against hostile input: a path outside the
repository, a file that is not UTF-8 (never re-encoded), a quote of the tests (restored for the
grade)."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.debug.reference import reference_actions
from lit_codeRL.envs.debug.tools import MAX_MATCHES, PRESETS, apply_replace, parse_tool_call, stop_strings
from lit_codeRL.envs.protocol import Action
from lit_codeRL.envs.reference import MAX_QUOTE_LINES, LineEdit, edit_reason, line_edits, text_replacement
from lit_codeRL.problems.debug import load_debug_tasks
from tests.sandbox.conftest import require_bwrap

TOOLS = PRESETS["debug"]


# ------------------------------------------------------------------------------ the call
def test_a_replace_call_is_read_as_written():
    call = parse_tool_call('Fix it. <replace path="a.py"><old>x - 1</old><new>x + 1</new></replace>', TOOLS)
    assert call.tool == "replace" and call.args == {"path": "a.py", "old": "x - 1", "new": "x + 1"}
    block = '<replace path="a.py">\n<old>\n    a = 1\n    b = 2\n</old>\n<new>\n    a = 2\n</new>\n</replace>'
    call = parse_tool_call(block, TOOLS)
    assert call.args["old"] == "    a = 1\n    b = 2\n" and call.args["new"] == "    a = 2\n"
    # an empty <new> deletes; a "<new>" inside the quote is part of it (<new> is looked for after </old>)
    assert parse_tool_call('<replace path="a.py"><old>y</old><new></new></replace>', TOOLS).args["new"] == ""
    call = parse_tool_call('<replace path="a.py"><old>s = "<new>"</old><new>s = ""</new></replace>', TOOLS)
    assert call.args["old"] == 's = "<new>"' and call.args["new"] == 's = ""'
    assert "</replace>" in stop_strings(TOOLS) and "</replace>" not in stop_strings(PRESETS["lines"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<replace path="a.py"><new>x</new></replace>', "<old> is missing"),
        ('<replace path="a.py"><old>x</old></replace>', "<new> is missing"),
        ('<replace path="a.py"><new>x</new><old>y</old></replace>', "<new> is missing"),
        ('<replace path="a.py"><old></old><new>x</new></replace>', "was empty"),
        ("<replace><old>x</old><new>y</new></replace>", "needs a path"),
        ('<replace path="a.py"><old>x</old><new>y</new>', "was not closed"),
    ],
)
def test_a_malformed_replace_runs_nothing_and_says_why(text, expected):
    call = parse_tool_call(text, TOOLS)
    assert not call.ok and expected in call.message, call.message


def test_replace_is_off_in_the_line_number_preset_and_a_cut_off_call_is_not_run():
    off = parse_tool_call('<replace path="a.py"><old>x</old><new>y</new></replace>', PRESETS["lines"])
    assert "The tool 'replace' is not available" in off.message
    cut = parse_tool_call('<replace path="a.py"><old>x</old><new>y', TOOLS, cut_off=True)
    assert cut.args["kind"] == "cut_off"


# ------------------------------------------------------------------------------ the replacement
def test_text_found_once_is_replaced_and_anything_else_changes_nothing():
    text = "def f(n):\n    total = 0\n    for i in range(n - 1):\n        total += i - 1\n    return total\n"
    assert apply_replace(text, "range(n - 1)", "range(n)") == (text.replace("range(n - 1)", "range(n)"), None)
    same, error = apply_replace(text, "- 1", "+ 1")
    assert same == text and "found 2 times (lines 3, 4)" in error
    same, error = apply_replace(text, "range(n - 2)", "range(n)")
    assert same == text and "not found" in error and "exactly" in error
    same, error = apply_replace(text, "3|     for i in range(n - 1):", "x")
    assert same == text and "line numbers" in error  # a quote copied with the view's numbers
    # overlapping occurrences are two places, not one
    same, error = apply_replace("a\na\na\n", "a\na", "b")
    assert same == "a\na\na\n" and "found 2 times (lines 1, 2)" in error
    # a one-letter quote in a large file: counted up to a cap, the message says so
    same, error = apply_replace("x" * 100_000, "x", "y")
    assert f"{MAX_MATCHES} times or more" in error
    # deleting a line
    assert apply_replace(text, "    total = 0\n", "")[0] == text.replace("    total = 0\n", "")


# ------------------------------------------------------------------------------ the reference's quote
def quote(old: str, new: str) -> tuple[str, str] | None:
    (edit,) = line_edits(old.splitlines(keepends=True), new.splitlines(keepends=True))
    return text_replacement(old, edit)


def test_the_quote_is_the_changed_line_without_its_indentation():
    old = "def f(s):\n    s = s[0 : 1] + s[i - 1:]\n    return s\n"
    assert quote(old, old.replace("i - 1", "i + 1")) == (
        "s = s[0 : 1] + s[i - 1:]",
        "s = s[0 : 1] + s[i + 1:]",
    )
    # a change of the indentation quotes the whole line, its indentation included
    old = "def f(s):\n    if s:\n        return s\n    return 0\n"
    assert quote(old, old.replace("        return s", "    return s")) == ("        return s", "    return s")


def test_a_repeated_line_is_quoted_with_the_lines_around_it_until_it_is_unique():
    old = "def f(a):\n    if a:\n        a += 1\n    if a > 2:\n        a += 1\n    return a\n"
    new = old.replace("    if a > 2:\n        a += 1\n", "    if a > 2:\n        a += 2\n")
    q = quote(old, new)
    assert q == ("if a > 2:\n        a += 1", "if a > 2:\n        a += 2"), q
    assert apply_replace(old, *q) == (new, None)
    # identical blocks everywhere: no quote within MAX_QUOTE_LINES is unique, so there is none and the
    # reference falls back to an <edit> by line numbers
    block = "x = 1\n" * (2 * MAX_QUOTE_LINES + 4)
    lines = block.splitlines(keepends=True)
    middle = len(lines) // 2
    assert text_replacement(block, LineEdit(middle, middle, (lines[middle - 1],), ("x = 2\n",))) is None
    # and an edit that does not match the text it is given has none either
    assert text_replacement("a = 1\n", LineEdit(1, 1, ("b = 1\n",), ("b = 2\n",))) is None


def test_every_line_of_every_shipped_program_changed_is_quoted_so_that_replacing_makes_the_change():
    checked = 0
    for task in load_debug_tasks("embedded", "all"):
        for path, text in task.files.items():
            if path.startswith("test_"):
                continue
            lines = text.splitlines(keepends=True)
            for k, line in enumerate(lines):
                if not line.strip():
                    continue
                changed = line.replace(line.strip(), line.strip() + "  # changed", 1)
                new = "".join(lines[:k]) + changed + "".join(lines[k + 1 :])
                q = text_replacement(text, LineEdit(k + 1, k + 1, (line,), (changed,)))
                if q is None:  # only when the line repeats within its neighbourhood
                    assert text.count(line) > 1, (task.task_id, k)
                    continue
                assert apply_replace(text, *q) == (new, None), (task.task_id, k, q)
                checked += 1
    assert checked > 300


def test_the_lead_in_of_a_replace_names_the_bug_without_a_line_number():
    (edit,) = line_edits(["    return n // 2\n"], ["    return n / 2\n"])
    assert edit_reason(edit) == "In line 1, `//` should be `/`."
    assert edit_reason(edit, numbered=False) == "`//` should be `/`."
    (edit,) = line_edits(["a = 1\n", "return a\n"], ["a = 1\n", "a += 1\n", "return a\n"])
    assert edit_reason(edit, numbered=False) == "The line `a += 1` is missing."
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median"]
    actions = reference_actions(task, TOOLS, output_shown=True, explain=True)
    assert actions[1].startswith("`//` should be `/`. I will change stats.py.\n<replace")


# ------------------------------------------------------------------------------ played for real
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    require_bwrap()
    with DebugEnv(
        DebugSettings(repo_cache=str(tmp_path_factory.mktemp("debug-cache")), workspace={"backend": "bwrap"})
    ) as env:
        yield env


def step(env: DebugEnv, state, text: str) -> object:
    (result,) = env.step_batch([state], [Action(text, "stop")]).result()
    return result


def test_a_replace_fixes_the_task_and_a_failed_one_changes_nothing(env, median):
    (first,) = env.reset_batch([median])
    state = first.state
    assert '<replace path="FILE">' in first.observation  # the prompt's tool list has it
    out = step(env, state, '<replace path="stats.py"><old>ordered[middle</old><new>x</new></replace>')
    assert "found 3 times (lines 18, 19)" in out.observation and state.edits == 0
    out = step(env, state, '<replace path="stats.py"><old>no such text</old><new>x</new></replace>')
    assert "not found" in out.observation and state.edits == 0 and "closest" not in out.observation
    # a quote written from memory (spacing, indentation): the refusal shows what the file has there
    out = step(
        env,
        state,
        '<replace path="stats.py"><old>return (ordered[middle-1]+ordered[middle])//2</old><new>x</new></replace>',
    )
    assert "not found" in out.observation and state.edits == 0
    assert "closest text is at line 19" in out.observation
    assert "19|     return (ordered[middle - 1] + ordered[middle]) // 2" in out.observation
    out = step(env, state, '<replace path="missing.py"><old>a</old><new>b</new></replace>')
    assert "failed" in out.observation and "no such file" in out.observation
    out = step(
        env,
        state,
        '<replace path="stats.py"><old>ordered[middle]) // 2</old><new>ordered[middle]) / 2</new></replace>',
    )
    assert "stats.py now reads" in out.observation and "ordered[middle]) / 2" in out.observation
    assert out.info["dump"]["diff"].count("\n+    return") == 1 and state.edits == 1
    out = step(env, state, "<submit/>")
    assert out.terminated and out.reward == 1.0


@pytest.mark.parametrize("path", ["../escape.py", "/etc/hostname", "/workspace/../../etc/passwd", "."])
def test_a_replace_outside_the_repository_or_of_no_file_is_refused(env, median, path):
    (first,) = env.reset_batch([median])
    out = step(env, first.state, f'<replace path="{path}"><old>a</old><new>b</new></replace>')
    assert "failed" in out.observation and not out.terminated and first.state.edits == 0
    assert step(env, first.state, "<submit/>").reward == 0.0


def test_a_file_that_is_not_utf8_is_never_re_encoded_by_an_edit(env, median):
    """``replace`` and ``edit`` read the file strictly and refuse; writing back the lenient view of
    it would turn every bad byte into U+FFFD. ``rewrite`` (the whole file) still works."""
    (first,) = env.reset_batch([median])
    state = first.state
    raw = b"# caf\xe9 \xff\xfe\nx = 1\n"
    state.workspace.run("printf '# caf\\351 \\377\\376\\nx = 1\\n' > latin.py", timeout=10)
    assert state.workspace.read_file("latin.py") == raw
    for call in (
        '<replace path="latin.py"><old>x = 1</old><new>x = 2</new></replace>',
        '<edit path="latin.py" lines="2-2">x = 2\n</edit>',
    ):
        out = step(env, state, call)
        assert "is not UTF-8 text: nothing changed" in out.observation, out.observation
        assert state.workspace.read_file("latin.py") == raw
    assert "\ufffd" in step(env, state, "<view>latin.py</view>").observation  # view shows it, leniently
    out = step(env, state, '<rewrite path="latin.py">x = 2\n</rewrite>')
    assert state.workspace.read_file("latin.py") == b"x = 2\n"


def test_replacing_in_the_tests_gains_nothing(env, median):
    """The failing test's assertion quoted and replaced: the agent's own eval passes, the grade
    restores the tests and fails the unfixed program."""
    (first,) = env.reset_batch([median])
    state = first.state
    out = step(
        env,
        state,
        '<replace path="test_stats.py"><old>assert median([7, 1, 5, 3]) == 4</old><new>pass</new></replace>',
    )
    assert "test_stats.py now reads" in out.observation
    out = step(env, state, "<submit/>")
    assert out.terminated and out.reward == 0.0 and out.info["verdict"] != "passed"


def test_a_quote_that_starts_with_a_newline_survives_being_written_and_read_back():
    """A repeated last line is quoted with the blank lines above it, so the quote starts with a
    newline; the reader drops one newline after ``<old>``, so the writer puts one more there."""
    from lit_codeRL.problems.debug import DebugTask

    old = "y = 1\n\n\ny = 1\n"
    task = DebugTask(
        "test/blank", "f", {"f.py": old, "test_f.py": "import f\n"}, fix={"f.py": "y = 1\n\n\ny = 2\n"}
    )
    actions = reference_actions(task, TOOLS, output_shown=True)
    call = parse_tool_call(actions[1], TOOLS)
    assert call.tool == "replace" and call.args["old"] == "\ny = 1", call.args
    assert "<old>\n\ny = 1</old>" in actions[1]
    assert apply_replace(old, call.args["old"], call.args["new"]) == (task.fix["f.py"], None)
