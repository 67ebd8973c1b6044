"""What a debugging episode's first edit did against the task's fix (``envs/debug/behaviour.py``):
hand-made episodes of each kind, the reference trajectories of every shipped task (whose first
edit is right and names the bug by construction), and episodes read back from a dumped transcript."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.debug.behaviour import FirstEdit, behaviour_counts, first_edit, transcript_actions
from lit_codeRL.envs.debug.reference import reference_actions
from lit_codeRL.envs.debug.tools import PRESETS
from lit_codeRL.problems.debug import debug_task
from lit_codeRL.problems.registry import load_problems
from tests.envs.test_reference_trajectories import BANNER_TASK, BUG_LINE, RECOVERY_TASK

TOOLS = PRESETS["debug"]
VIEW = "I will look at calc.py.\n<view>calc.py</view>"


def edit(lines: str, content: str, lead: str = "") -> str:
    return f'{lead}I will change lines {lines} of calc.py.\n<edit path="calc.py" lines="{lines}">\n{content}\n</edit>'


def replace(old: str, new: str, lead: str = "") -> str:
    return f'{lead}I will change calc.py.\n<replace path="calc.py">\n<old>{old}</old>\n<new>{new}</new>\n</replace>'


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([VIEW, "<eval/>"], FirstEdit()),
        (
            [VIEW, edit("2-2", "    return [v * factor for v in values]", "In line 2, `+` should be `*`. ")],
            FirstEdit(edited=True, on_bug_line=True, right=True, named=True, named_right=True),
        ),
        (  # the right line without a reason
            [VIEW, edit("2-2", "    return [v * factor for v in values]")],
            FirstEdit(edited=True, on_bug_line=True, right=True),
        ),
        (  # the buggy line, the wrong fix, a wrong reason
            [edit("2-2", "    return [v - factor for v in values]", "In line 2, `+` should be `-`. ")],
            FirstEdit(edited=True, on_bug_line=True, named=True),
        ),
        (  # the wrong line; only the first edit counts
            [
                edit("1-1", "def scale(values, factor=1):"),
                edit("2-2", "    return [v * factor for v in values]"),
            ],
            FirstEdit(edited=True),
        ),
        ([edit("9-9", "    pass")], FirstEdit(edited=True)),  # outside the file
        (  # a whole-file rewrite with the fix
            [
                '<rewrite path="calc.py">\ndef scale(values, factor):\n'
                "    return [v * factor for v in values]\n</rewrite>"
            ],
            FirstEdit(edited=True, on_bug_line=True, right=True),
        ),
        (['<edit path="other.py" lines="1-1">\nx = 1\n</edit>'], FirstEdit(edited=True)),  # not a fixed file
        (  # knew what, not where: the right change named, another line edited
            [edit("1-1", "def scale(values, factor):", "In line 1, `+` should be `*`. ")],
            FirstEdit(edited=True, named=True, named_right_elsewhere=True),
        ),
        (  # a replace quoting the buggy line, with the fix and its name (no line number)
            [replace("v + factor", "v * factor", "`+` should be `*`. ")],
            FirstEdit(edited=True, on_bug_line=True, right=True, named=True, named_right=True),
        ),
        (  # a replace quoting another line, the right change named
            [replace("(values, factor)", "(values, factor=1)", "`+` should be `*`. ")],
            FirstEdit(edited=True, named=True, named_right=True, named_right_elsewhere=True),
        ),
        ([replace("not in the file", "x")], FirstEdit(edited=True)),  # found nowhere: changed nothing
    ],
)
def test_the_first_edit_is_measured_against_the_fix(actions, expected):
    assert first_edit(RECOVERY_TASK, actions, TOOLS) == expected


def test_the_first_edit_is_placed_by_pythons_line_numbers():
    """:data:`BANNER_TASK`'s bug is Python's line 20 (what view, pdb and a traceback number it; line
    28 to ``str.splitlines``): an edit of line 20 or a replace quoting it is on the bug line, an
    edit of line 28 is not."""
    fixed = BUG_LINE.replace("// 2", "/ 2")

    def change(lines: str, lead: str = "") -> str:
        return f'{lead}I will change lines {lines} of stats.py.\n<edit path="stats.py" lines="{lines}">\n{fixed}</edit>'

    quote = '<replace path="stats.py">\n<old>ordered[middle]) // 2</old>\n<new>ordered[middle]) / 2</new>\n</replace>'
    measured = {
        "20": first_edit(BANNER_TASK, [change("20-20", "In line 20, `//` should be `/`. ")], TOOLS),
        "28": first_edit(BANNER_TASK, [change("28-28")], TOOLS),
        "quote": first_edit(BANNER_TASK, [quote], TOOLS),
    }
    assert measured == {
        "20": FirstEdit(edited=True, on_bug_line=True, right=True, named=True, named_right=True),
        "28": FirstEdit(edited=True),
        "quote": FirstEdit(edited=True, on_bug_line=True, right=True),
    }


def test_every_shipped_reference_trajectory_edits_right_and_names_the_bug():
    """The reference trajectories with ``explain``: the first edit of a one-edit fix is the fix
    and its lead-in is the reason the reference gives (the measure agrees with what BC imitates)."""
    seen = 0
    for problem in load_problems("debug", "all"):
        task = debug_task(problem)
        actions = reference_actions(task, TOOLS, output_shown=True, explain=True)
        edits = [a for a in actions if "<edit" in a or "<replace" in a or "<rewrite" in a]
        measured = first_edit(task, actions, TOOLS)
        assert measured.edited and measured.on_bug_line, task.task_id
        if len(edits) == 1:
            seen += 1
            assert measured.right, task.task_id
            assert measured.named_right == edits[0].startswith(("`", "The line")), task.task_id
            assert not measured.named_right_elsewhere, task.task_id
    assert seen >= 8


def test_actions_come_back_from_a_dumped_transcript_and_are_counted():
    right = edit("2-2", "    return [v * factor for v in values]")
    transcript = (
        f"[turn 1]\n{VIEW}\n[feedback]\n1| def scale(values, factor):\n[turn 2]\n{right}\n[feedback]\nok"
    )
    assert transcript_actions(transcript) == [VIEW, right]
    assert transcript_actions("<eval/>") == ["<eval/>"]
    counts = behaviour_counts(
        [
            first_edit(RECOVERY_TASK, transcript_actions(transcript), TOOLS),
            FirstEdit(),
            FirstEdit(edited=True),
        ]
    )
    assert counts == {
        "episodes": 3,
        "edited": 2,
        "on_bug_line": 1,
        "right": 1,
        "named": 0,
        "named_right": 0,
        "named_right_elsewhere": 0,
    }
