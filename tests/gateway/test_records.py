"""How an episode's recorded calls become rows (pure), and retries the client marks."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from lit_codeRL.gateway.records import CallRecord, Choice, build_rows
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import GatewayConfig

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


def test_longest_matching_row_wins_and_extra_choices_are_rows():
    calls = [call(0, [1], [2], [3]), call(1, [1, 3, 4], [5])]  # n = 2; the agent went on with choice 2
    rows = build_rows(calls)
    assert len(rows.rows) == 2 and rows.merged_calls == 1
    assert rows.rows[0].context_ids() == [1, 2]
    assert rows.rows[1].context_ids() == [1, 3, 4, 5]


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
