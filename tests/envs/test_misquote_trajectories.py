"""Misquote trajectories (``demonstrations.misquotes``): the first change tried with a quote that has
one line written wrong, the tool's refusal showing the file's closest lines, then the change quoting
them. The wrong quote: one the file lacks, of the kinds a model writes from memory, whose refusal
shows the quote's own lines. Played for real in both envs (bubblewrap workspaces, the real
grader); BC imitates the quote made again, not the misquote."""

from __future__ import annotations

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.debug.reference import MISQUOTED, misquote_actions, reference_actions
from lit_codeRL.envs.debug.reference import reference_episodes as debug_episodes
from lit_codeRL.envs.debug.tools import PRESETS, apply_replace, parse_tool_call, stop_strings
from lit_codeRL.envs.reference import misquote
from lit_codeRL.envs.replacement import closest_lines, occurrences
from lit_codeRL.envs.settings import EnvSettings
from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.debug import load_debug_tasks
from lit_codeRL.problems.registry import load_problems
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.demonstrations import (
    DemonstrationSettings,
    episode_segments,
    reference_demonstrations,
)
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

DEBUG = PRESETS["debug"]
SOURCE = (
    "def total(values, start=0):\n"
    "    result = start\n"
    "    for value in values:\n"
    '        if value is not None and value != "":\n'
    "            result = result + value\n"
    "    return result\n"
)


@pytest.fixture(scope="module")
def chat() -> ChatFormat:
    from lit_codeRL.policy.loading import load_tokenizer

    return ChatFormat(load_tokenizer("tiny-random"))


def first_replace(actions: list[str]) -> tuple[int, dict]:
    for k, action in enumerate(actions):
        call = parse_tool_call(action, DEBUG)
        if call.tool == "replace":
            return k, call.args
    raise AssertionError("no <replace>")


@pytest.mark.parametrize(
    "quote",
    [
        'if value is not None and value != "":',  # quote marks, spacing
        "result = result + value\n    return result",  # two lines, operators
        "for value in values:",  # a name to misspell
        "def total(values, start=0):",  # commas
    ],
)
def test_a_misquote_is_not_in_the_file_and_its_refusal_shows_the_quote(quote: str) -> None:
    wrong = misquote(SOURCE, quote, "seed")
    assert wrong is not None and wrong != quote
    assert occurrences(SOURCE, wrong) == []  # the tool refuses it
    assert len(wrong.splitlines()) == len(quote.splitlines())
    assert sum(a != b for a, b in zip(wrong.splitlines(), quote.splitlines(), strict=True)) == 1
    first = SOURCE[: SOURCE.index(quote)].count("\n") + 1
    shown = closest_lines(SOURCE, wrong)
    assert shown is not None and shown[0] == first
    assert [line.strip() for line in shown[1]] == [line.strip() for line in quote.splitlines()]
    assert misquote(SOURCE, quote, "seed") == wrong  # the same seed, the same misquote


def test_a_misquote_whose_refusal_would_show_a_look_alike_line_is_passed_over() -> None:
    """Line 7 with its spaces dropped reads most like line 2: a trajectory that then quoted what
    the refusal showed would edit the wrong place, so that misquote is never the one written."""
    text = (
        "def f(first_value, second):\n    result=first_value-second\n    return result\n\n\n"
        "def g(first_value, second):\n    result = first_value + second\n    return result\n"
    )
    quote = "result = first_value + second"
    assert closest_lines(text, "result=first_value+second")[0] == 2
    for seed in range(12):
        wrong = misquote(text, quote, str(seed))
        assert wrong is not None and closest_lines(text, wrong)[0] == 7, (seed, wrong)


def test_no_misquote_of_what_the_refusal_cannot_show() -> None:
    long = "".join(f"x{k} = {k}\n" for k in range(12))
    assert misquote(long, long.strip(), "seed") is None  # more lines than the refusal shows
    assert misquote(SOURCE, "not in it", "seed") is None
    assert misquote(SOURCE, "   ", "seed") is None


def test_every_shipped_program_has_a_misquote_trajectory_whose_refusal_shows_the_lines() -> None:
    """Without playing: for each shipped debugging task whose first change is a ``<replace>``, the
    misquoted call is refused by the gym's own ``apply_replace``, the refusal shows the quote's
    lines, and the next action is the reference's call after a lead-in."""
    made = 0
    for task in load_debug_tasks("embedded", "all"):
        reference = reference_actions(task, DEBUG)
        k, args = first_replace(reference)
        actions, wrong_at = misquote_actions(task, DEBUG)
        assert wrong_at == k
        assert actions[:k] == reference[:k] and actions[k + 2 :] == reference[k + 1 :]
        assert actions[k + 1] == MISQUOTED + reference[k]
        wrong = parse_tool_call(actions[k], DEBUG).args
        assert wrong["path"] == args["path"] and wrong["new"] == args["new"] and wrong["old"] != args["old"]
        text = task.files[args["path"]]
        after, error = apply_replace(text, wrong["old"], wrong["new"])
        assert after == text and error is not None and "closest text is at" in error, (task.task_id, error)
        first_line = args["old"].splitlines()[0].strip()
        assert first_line in error, (task.task_id, error)  # the refusal does not echo the misquote
        made += 1
    assert made >= 15


def test_a_task_whose_first_change_is_by_line_numbers_has_none() -> None:
    task = load_debug_tasks("embedded", "all")[0]
    with pytest.raises(ValueError, match="not a <replace>"):
        misquote_actions(task, PRESETS["lines"])


def test_misquotes_are_played_refused_shown_the_lines_and_resolve(tmp_path_factory, chat) -> None:
    """The real gym: each chosen task's misquote trajectory follows its reference one; the
    misquoted call changes nothing and is answered with the closest lines, the quote made again
    resolves the task, and BC imitates every action but the misquote."""
    require_bwrap()
    settings = DebugSettings(
        repo_cache=str(tmp_path_factory.mktemp("debug-cache")), workspace={"backend": "bwrap"}
    )
    problems = [p for p in load_problems("debug", "all") if p.task_id in ("debug/median", "debug/cart")]
    with DebugEnv(settings) as env:
        episodes = debug_episodes(env, problems, misquotes=1.0)
    assert [(e.task_id, e.context) for e in episodes] == [
        ("debug/cart", ()),
        ("debug/cart", (1,)),
        ("debug/median", ()),
        ("debug/median", (1,)),
    ]
    for reference, misquoted in (episodes[:2], episodes[2:]):
        assert reference.resolved and misquoted.resolved, misquoted.verdict
        refusal = misquoted.observations[1]
        assert "was not found" in refusal and "closest text is at" in refusal, refusal
        assert misquoted.actions[2] == MISQUOTED + reference.actions[1]
        assert misquoted.actions[3:] == reference.actions[2:]
        row = episode_segments(misquoted, chat, stop_strings(DEBUG))
        assert [s.trainable for s in row[1::2]] == [True, False, True, True, True]
    median = episodes[3]
    assert "19|" in median.observations[1]  # the line the reference quotes, numbered as view shows it
    # the BC source: a misquote row beside each reference row; misquotes 0 gives none
    env = EnvSettings(debug=settings)
    assert len(reference_demonstrations(problems, chat, env, misquotes=1.0)) == 4
    assert len(reference_demonstrations(problems, chat, env)) == 2
    with pytest.raises(ConfigError, match="misquotes"):
        DemonstrationSettings(source="debug", misquotes=-0.1)


def test_swe_misquotes_with_the_edit_bundle_are_refused_shown_the_lines_and_resolve(tmp_path_factory, chat):
    """The SWE env with the edit bundle: the misquoted ``replace`` command exits 1, prints the
    file's closest lines, and the task resolves after the quote made again; the misquote is
    context wherever the first look put it."""
    require_bwrap()
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.envs.swe.reference import MISQUOTED as SWE_MISQUOTED
    from lit_codeRL.envs.swe.reference import reference_episodes as swe_episodes

    settings = SWESettings(
        tools=["edit"],
        repo_cache=str(tmp_path_factory.mktemp("swe-cache")),
        workspace=WorkspaceConfig(backend="bwrap"),
    )
    problems = [
        p
        for p in load_problems("swe", "all")
        if p.task_id in ("lit-coderl__numkit-1", "lit-coderl__numkit-2")
    ]
    with ContainerEnv(None, settings=settings) as env:
        episodes = swe_episodes(env, problems, misquotes=1.0)
    assert [e.task_id for e in episodes] == [p.task_id for p in problems for _ in range(2)]
    for reference, misquoted in (episodes[:2], episodes[2:]):
        assert reference.resolved and misquoted.resolved, misquoted.verdict
        (at,) = misquoted.context
        assert "<execute>replace " in misquoted.actions[at]
        assert (
            "closest text is at" in misquoted.observations[at]
            and "Exit code: 1" in misquoted.observations[at]
        )
        assert misquoted.actions[at + 1].startswith(SWE_MISQUOTED)
        assert misquoted.actions[at + 1].removeprefix(SWE_MISQUOTED) in reference.actions
        row = episode_segments(misquoted, chat, list(ContainerEnv.stop_strings))
        assert [s.trainable for s in row[1::2]] == [k != at for k in range(len(misquoted.actions))]


def test_the_misquote_share_is_chosen_apart_from_the_recovery_share() -> None:
    from lit_codeRL.envs.reference import wants_recovery

    ids = [f"task-{k}" for k in range(2000)]
    both = sum(wants_recovery(i, 0.5) and wants_recovery(f"{i}:misquote", 0.5) for i in ids) / len(ids)
    assert 0.2 < both < 0.3  # independent halves
