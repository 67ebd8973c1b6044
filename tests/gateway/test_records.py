"""How an episode's recorded calls become rows (pure, then through the harness runner and its dump),
and retries the client marks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings, HarnessState
from lit_codeRL.envs.protocol import StepResult
from lit_codeRL.envs.swe.env import SWESettings
from lit_codeRL.gateway.records import CallRecord, Choice, build_rows
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import EpisodeLog, GatewayConfig
from lit_codeRL.policy.engine import EngineSettings, SamplingParams, make_engine
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.episode_view import render_episode
from lit_codeRL.rollout.harness import HarnessRunner

from .conftest import start_gateway


def call(index: int, prompt: list[int], *completions: list[int]) -> CallRecord:
    choices = [Choice(list(c), [-0.5] * len(c), "x", "stop") for c in completions]
    return CallRecord("e", index, "chat", prompt, choices)


def test_extension_merges_and_a_rewrite_starts_a_row():
    calls = [
        call(0, [1, 2], [3, 4]),
        call(1, [1, 2, 3, 4, 5], [6]),  # extends row 1: observation [5]
        call(2, [1, 9], [7]),  # a rewritten history
        call(3, [1, 2, 3, 4, 5, 6, 8, 8], [9]),  # extends row 1 again
    ]
    rows = build_rows(calls)
    assert (rows.merged_calls, rows.rewritten_calls, len(rows.rows)) == (2, 1, 2)
    first = rows.rows[0]
    assert [t.choice.token_ids for t in first.turns] == [[3, 4], [6], [9]]
    assert [t.observation_ids for t in first.turns] == [[5], [8, 8], []]
    assert first.context_ids() == [1, 2, 3, 4, 5, 6, 8, 8, 9]
    assert rows.rows[1].prompt_ids == [1, 9]


def test_a_call_without_choices_makes_no_row_and_the_next_is_not_counted_rewritten():
    """A first call that returned nothing (``n`` choices of which none were recorded) leaves no
    row: the call after it starts the first row, not a rewritten one."""
    rows = build_rows([call(0, [1, 2]), call(1, [1, 2, 3], [4]), call(2, [1, 2, 3, 4, 5], [6])])
    assert (rows.merged_calls, rows.rewritten_calls, len(rows.rows)) == (1, 0, 1)


def test_longest_matching_row_wins_and_extra_choices_are_rows_with_all_choices():
    calls = [call(0, [1], [2], [3]), call(1, [1, 3, 4], [5])]  # n = 2; the agent went on with choice 2
    rows = build_rows(calls, train_choices="all")
    assert len(rows.rows) == 2 and rows.merged_calls == 1 and rows.dropped_choices == 0
    assert rows.rows[0].context_ids() == [1, 2]
    assert rows.rows[1].context_ids() == [1, 3, 4, 5]


def layout(rows) -> list[tuple[list[int], list[tuple[int, list[int], list[int]]]]]:
    """Each row as (prompt, [(call, completion, observation) per turn])."""
    return [
        (row.prompt_ids, [(t.call, t.choice.token_ids, t.observation_ids) for t in row.turns])
        for row in rows.rows
    ]


def test_the_choice_a_later_call_continues_is_the_one_trained():
    calls = [
        call(0, [1, 2], [3], [4, 4], [5]),  # n = 3: the agent went on with choice 2
        call(1, [1, 2, 4, 4, 6], [7]),
    ]
    rows = build_rows(calls)
    assert layout(rows) == [([1, 2], [(0, [4, 4], [6]), (1, [7], [])])]
    assert (rows.merged_calls, rows.rewritten_calls, rows.dropped_choices) == (1, 0, 2)


def test_nobody_continues_the_last_call_so_its_first_choice_is_trained():
    rows = build_rows([call(0, [1], [2]), call(1, [1, 2, 3], [4], [5])])
    assert layout(rows) == [([1], [(0, [2], [3]), (1, [4], [])])]
    assert (rows.merged_calls, rows.dropped_choices) == (1, 1)


def test_a_rewritten_history_continues_no_choice_so_the_first_is_trained():
    rows = build_rows([call(0, [1], [2], [3]), call(1, [9, 3], [4])])  # a summary: extends neither choice
    assert layout(rows) == [([1], [(0, [2], [])]), ([9, 3], [(1, [4], [])])]
    assert (rows.merged_calls, rows.rewritten_calls, rows.dropped_choices) == (0, 1, 1)


def test_choices_later_calls_both_continue_are_both_trained():
    """An agent exploring two branches acted on both; a third choice it never took is dropped."""
    calls = [call(0, [1], [2], [3], [4]), call(1, [1, 3, 5], [6]), call(2, [1, 2, 7], [8])]
    rows = build_rows(calls)
    assert layout(rows) == [([1], [(0, [2], [7]), (2, [8], [])]), ([1], [(0, [3], [5]), (1, [6], [])])]
    assert (rows.merged_calls, rows.rewritten_calls, rows.dropped_choices) == (2, 0, 1)


def test_an_agent_asking_n_16_on_200_calls_trains_one_row_not_3001():
    n, calls, prompt = 16, [], [1]
    for k in range(200):
        choices = [[1000 + 16 * k + j] for j in range(n)]
        calls.append(call(k, list(prompt), *choices))
        prompt += choices[k % n] + [2]  # the agent acts on a different choice each call, then observes
    chosen = build_rows(calls)
    assert len(chosen.rows) == 1 and len(chosen.rows[0].turns) == 200
    acted_on = [[1000 + 16 * k + k % n] for k in range(199)] + [[1000 + 16 * 199]]  # the last: its first
    assert [t.choice.token_ids for t in chosen.rows[0].turns] == acted_on
    assert (chosen.merged_calls, chosen.dropped_choices) == (199, 200 * 15)
    every = build_rows(calls, train_choices="all")
    assert len(every.rows) == 1 + 200 * 15 and every.dropped_choices == 0


def test_all_choices_keeps_the_old_layout():
    """``train_choices="all"`` lays a mixed episode out as every choice was before ``chosen`` (rows
    recorded from the code before it), where ``chosen`` keeps only the choices acted on."""
    calls = [
        call(0, [1], [2], [3]),  # n = 2, continued at choice 2
        call(1, [1, 3, 4], [5], [6]),  # n = 2, continued at choice 1
        call(2, [1, 9], [7]),  # a rewritten history
        call(3, [1, 3, 4, 5, 8], [10], [11], [12]),  # n = 3, the last call
    ]
    every = build_rows(calls, train_choices="all")
    assert layout(every) == [
        ([1], [(0, [2], [])]),
        ([1], [(0, [3], [4]), (1, [5], [8]), (3, [10], [])]),
        ([1, 3, 4], [(1, [6], [])]),
        ([1, 9], [(2, [7], [])]),
        ([1, 3, 4, 5, 8], [(3, [11], [])]),
        ([1, 3, 4, 5, 8], [(3, [12], [])]),
    ]
    assert (every.merged_calls, every.rewritten_calls, every.dropped_choices) == (2, 1, 0)
    chosen = build_rows(calls)
    assert layout(chosen) == [([1], [(0, [3], [4]), (1, [5], [8]), (3, [10], [])]), ([1, 9], [(2, [7], [])])]
    assert (chosen.merged_calls, chosen.rewritten_calls, chosen.dropped_choices) == (2, 1, 4)


LAYOUTS = {
    "chosen": ([[4], [6]], 1, 3),  # choice 2, continued, then the last call's first; 3 dropped
    "all": ([[3]], 4, 0),  # as before: choice 1 is the episode, every other choice an extra row
}
"""Per ``train_choices``: the episode's turns, its rows and its dropped choices."""


@pytest.mark.parametrize("train_choices", list(LAYOUTS))
def test_env_harness_train_choices_decides_an_episodes_rows(tiny_policy, tmp_path, train_choices):
    """The harness runner lays an episode out with ``env.harness.train_choices`` and reports the
    choices it dropped next to the merged and rewritten calls."""
    policy, tokenizer = tiny_policy
    repos = str(tmp_path / "repos")
    settings = HarnessSettings(train_choices=train_choices, swe=SWESettings(repo_cache=repos))
    engine = make_engine(EngineSettings(name="hf", dtype="model"), tokenizer, policy)
    runner = HarnessRunner(engine, HarnessEnv(settings), SamplingParams(max_new_tokens=4))
    log = EpisodeLog("e", calls=[call(0, [1, 2], [3], [4]), call(1, [1, 2, 4, 5], [6], [7], [8])], requests=2)
    try:
        problem, graded = Problem("t", "task"), StepResult("", 1.0, terminated=True)
        episode = runner._episode(problem, 0, "task", log, HarnessState(None), graded)
    finally:
        runner.close()
    turns, rows, dropped = LAYOUTS[train_choices]
    assert [t.action_ids for t in episode.turns] == turns and len(episode.extra_rows) == rows - 1
    gateway = episode.turns[-1].info["episode"]["gateway"]
    assert (gateway["rows"], gateway["merged_calls"], gateway["dropped_choices"]) == (rows, 1, dropped)


def test_an_episode_dump_shows_the_choices_left_untrained():
    gateway = {"calls": 2, "rows": 1, "merged_calls": 1, "rewritten_calls": 0}
    record = {"problem_id": "t", "reward": 1.0, "turns": [], "gateway": gateway}
    assert "untrained" not in render_episode(record)
    text = " ".join(render_episode({**record, "gateway": {**gateway, "dropped_choices": 3}}).split())
    assert "3 choices the agent did not act on left untrained" in text


def test_harness_settings_refuse_an_unknown_train_choices():
    with pytest.raises(ValueError, match="train_choices"):
        HarnessSettings(train_choices="best")


def test_a_marked_retry_gets_the_same_reply_unrecorded(tiny_policy):
    policy, tokenizer = tiny_policy
    gateway, _, close = start_gateway(
        policy, tokenizer, GatewayConfig("tiny", ServeLimits(max_tokens=8), require_episode=True)
    )
    try:
        key = gateway.open_episode()
        body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()

        def post(retry: str) -> dict:
            req = urllib.request.Request(
                gateway.url + "/chat/completions",
                data=body,
                headers={
                    "Authorization": f"Bearer {key}",
                    "x-stainless-retry-count": retry,
                    "Content-Type": "application/json",
                },
            )
            return json.loads(urllib.request.urlopen(req, timeout=60).read())

        first = post("0")
        again = post("1")
        fresh = post("0")  # an unmarked identical body is a new call (e.g. a compaction)
        log = gateway.wait_settled(gateway.close_episode(key))
    finally:
        close()
    assert again == first
    assert len(log.calls) == 2 and log.replayed_retries == 1 and log.requests == 3
    assert fresh["id"] != first["id"]


def test_an_episode_past_its_call_limit_gets_404(tiny_policy):
    policy, tokenizer = tiny_policy
    limits = ServeLimits(max_tokens=4, max_calls_per_episode=2)
    gateway, _, close = start_gateway(policy, tokenizer, GatewayConfig("tiny", limits, require_episode=True))
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        key = gateway.open_episode()
        codes = []
        for _ in range(3):
            req = urllib.request.Request(
                gateway.url + "/chat/completions", data=body,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )  # fmt: skip
            try:
                codes.append(urllib.request.urlopen(req, timeout=60).status)
            except urllib.error.HTTPError as err:
                codes.append(err.code)
        log = gateway.wait_settled(gateway.close_episode(key))
    finally:
        close()
    assert codes == [200, 200, 404] and len(log.calls) == 2
