"""Reference trajectories that name the bug before the edit (``explain``): the reason of every
mutation kind the synthesizer injects, checked against hand-written sentences and, over every
site of real code, against the lines themselves; played for real in the debugging gym and the SWE
env, the trajectories still resolve and only the lead-ins differ; the cache tells them apart."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.debug.reference import STILL_FAILING, recovery_actions
from lit_codeRL.envs.debug.reference import reference_actions as debug_actions
from lit_codeRL.envs.debug.reference import reference_episodes as debug_episodes
from lit_codeRL.envs.debug.tools import PRESETS, parse_tool_call
from lit_codeRL.envs.reference import LineEdit, edit_reason, line_edits
from lit_codeRL.problems.synth.mutations import MUTATION_KINDS, apply_mutation, mutation_sites
from tests.envs.test_reference_trajectories import RECOVERY_TASK
from tests.sandbox.conftest import require_bwrap


def reason(bug: str, fix: str, start: int = 7) -> str | None:
    (edit,) = line_edits(bug.splitlines(keepends=True), fix.splitlines(keepends=True))
    return edit_reason(LineEdit(start + edit.start - 1, start + edit.end - 1, edit.old, edit.new))


@pytest.mark.parametrize(
    ("bug", "fix", "said"),
    [  # one per mutation kind (the bug is the mutant, the fix the original), then the edge cases
        ("    return n // 11 == 0\n", "    return n % 11 == 0\n", "In line 7, `//` should be `%`."),
        ("    if x <= 1:\n", "    if x < 1:\n", "In line 7, `<=` should be `<`."),
        ("    if a or b:\n", "    if a and b:\n", "In line 7, `or` should be `and`."),
        ("    for i in range(n + 1):\n", "    for i in range(n):\n", "In line 7, `+ 1` should not be there."),
        (
            "    for i in range(n):\n",
            "    for i in range(n + 1):\n",
            "In line 7, `+ 1` is missing after `n`.",
        ),
        ("    x = f(a, b)\n", "    x = f(b, a)\n", "In line 7, `a, b` should be `b, a`."),
        ("    if not (2 * L <= R):\n", "    if (2 * L <= R):\n", "In line 7, `not` should not be there."),
        ("    return None\n", "    return res\n", "In line 7, `None` should be `res`."),
        ("    total = 0\n", "    total = 1\n", "In line 7, `0` should be `1`."),
        (
            "    while i < n:\n        j = 1\n",
            "    while i < n:\n        i += 2\n        j = 1\n",
            "After line 7, the line `i += 2` is missing.",
        ),
        (
            "    a = 1\n    b = 2\n    c = 3\n",
            "    a = 1\n    c = 3\n",
            "In line 8, `b = 2` should not be there.",
        ),
        ("    a = 1\n", "      a = 1\n", None),  # whitespace alone
        ("    s = '`'\n", "    s = '``'\n", None),  # a backtick cannot be quoted
        ("    s = ''\n", "    s = '<eval/>'\n", None),  # nothing that reads as a tag
        ("    x = 1\n", "    x = " + "+".join(["y"] * 40) + "\n", None),  # too long to quote
        ("    a = 1\n    b = 2\n", "    a = 2\n    b = 1\n", None),  # across lines
    ],
)
def test_the_reason_names_the_smallest_changed_span(bug, fix, said):
    assert reason(bug, fix) == said


SOURCES = [
    "def f(xs, k):\n    total = 0\n    for i in range(len(xs) - 1):\n        if xs[i] > k and i % 2 == 0:\n"
    "            total += xs[i] * 2\n    return total\n",
    "def g(a, b):\n    if not a:\n        return max(a, b)\n    while b < 10:\n        b += 3\n"
    "    return pow(a, b) // 7\n",
]


def test_every_injected_bug_of_every_kind_is_named_by_what_the_lines_hold():
    """Every mutation site of every kind in real functions: where there is a reason, its wrong
    span is in the buggy lines and its right span in the fixed ones, at the line it names."""
    said = Counter()
    for source in SOURCES:
        for site in mutation_sites(source, MUTATION_KINDS):
            bug = apply_mutation(source, site)
            (edit,) = line_edits(bug.splitlines(keepends=True), source.splitlines(keepends=True))
            text = edit_reason(edit)
            if text is None:
                continue
            said[site.kind] += 1
            spans = text.split("`")[1::2]
            line = int(text.split("line ")[1].split(",")[0].split(" ")[0])
            bug_line, fix_lines = bug.splitlines()[line - 1], "".join(edit.new)
            if "should be" in text:
                assert spans[0] in bug_line and spans[1] in fix_lines, (site, text)
            elif "should not be there" in text:
                assert spans[0] in bug_line, (site, text)
            else:  # missing
                assert spans[0] in fix_lines and spans[0] not in "".join(edit.old), (site, text)
    assert set(said) >= set(MUTATION_KINDS) - {"drop_branch"}, said


# ------------------------------------------------------------------------------ in the envs
TASK = RECOVERY_TASK  # scale: `+` where the fix has `*`


@pytest.mark.parametrize(("preset", "where"), [("lines", "In line 2, "), ("debug", "")])
def test_explained_actions_differ_from_the_plain_ones_only_by_the_reason(preset, where):
    """With line-number edits the reason says the line; before a ``<replace>`` (which quotes the
    place) it does not."""
    tools = PRESETS[preset]
    plain, explained = (debug_actions(TASK, tools, explain=e) for e in (False, True))
    assert explained[2] == f"{where}`+` should be `*`. " + plain[2]
    assert [a for k, a in enumerate(explained) if k != 2] == [a for k, a in enumerate(plain) if k != 2]
    assert parse_tool_call(explained[2], tools).args == parse_tool_call(plain[2], tools).args
    (wrong_plain, fix_plain), (wrong, fix) = (
        [recovery_actions(TASK, tools, explain=e)[0][k] for k in (2, 4)] for e in (False, True)
    )
    args = parse_tool_call(wrong, tools).args
    bad = (args["content"] if preset == "lines" else args["new"]).strip()
    # the wrong edit says what it (wrongly) changes; the fix after it, what it changes back
    assert wrong.startswith(f"{where}`+` should be `") and wrong.endswith(wrong_plain)
    assert fix.startswith(f"{STILL_FAILING}{where}`") and fix.endswith(
        "` should be `*`. " + fix_plain[len(STILL_FAILING) :]
    )
    assert bad != "return [v * factor for v in values]"


@pytest.fixture(scope="module")
def debug_settings(tmp_path_factory) -> DebugSettings:
    return DebugSettings(
        repo_cache=str(tmp_path_factory.mktemp("debug-cache")), workspace={"backend": "bwrap"}
    )


def test_mbpp_debugging_trajectories_with_reasons_resolve_and_name_the_fixed_line(
    mbpp_dir, tmp_path, monkeypatch, debug_settings
):
    """Synthesized MBPP debugging tasks played for real with ``explain``: every trajectory that
    resolves without reasons resolves with them, and each reason's code is in the ``<replace>``
    after it: what it calls wrong in the quote, what it calls right (or missing) in the new text."""
    require_bwrap()
    from lit_codeRL.problems.registry import load_problems

    monkeypatch.setenv("LIT_CODERL_SYNTH_CACHE", str(tmp_path / "cache"))
    lines = (mbpp_dir / "mbpp.jsonl").read_text().splitlines()
    subset = tmp_path / "mbpp.jsonl"
    subset.write_text("\n".join(x for x in lines if 601 <= json.loads(x)["task_id"] <= 605) + "\n")
    problems = load_problems(f"debug:mbpp:{subset}?per_problem=2", "train")
    assert len(problems) >= 8, len(problems)
    with DebugEnv(debug_settings) as env:
        plain = debug_episodes(env, problems, recoveries=1.0)
        explained = debug_episodes(env, problems, recoveries=1.0, explain=True)
    assert [e.resolved for e in explained] == [e.resolved for e in plain]
    assert sum(e.resolved for e in explained) >= 8
    reasons = 0
    for ep in explained:
        for action in ep.actions:
            call = parse_tool_call(action, PRESETS["debug"])
            lead = action.removeprefix(STILL_FAILING).split(" I will change", 1)[0]
            if call.tool != "replace" or "`" not in lead:
                continue
            reasons += 1
            assert "line" not in lead.replace("The line ", ""), action  # no line number
            spans = lead.split("`")[1::2]
            if "is missing" in lead:
                assert spans[0] in call.args["new"] and spans[0] not in call.args["old"], action
            else:
                assert spans[0] in call.args["old"], action
                assert "should not be there" in lead or spans[1] in call.args["new"], action
    assert reasons >= len(explained) // 2


def test_swe_trajectories_with_reasons_resolve(tmp_path_factory):
    require_bwrap()
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.envs.swe.reference import reference_episodes as swe_episodes
    from lit_codeRL.problems.registry import load_problems
    from lit_codeRL.sandbox.workspace import WorkspaceConfig

    settings = SWESettings(
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")), workspace=WorkspaceConfig(backend="bwrap")
    )
    problems = [p for p in load_problems("swe", "all") if p.task_id == "lit-coderl__numkit-2"]
    with ContainerEnv(None, settings=settings) as env:
        (episode,) = swe_episodes(env, problems, explain=True)
    assert episode.resolved, episode.verdict
    (edit,) = [a for a in episode.actions if "I will edit" in a]
    assert edit.split("\n")[0] == "In line 8, `<` should be `<=`. I will edit numkit/intervals.py."
