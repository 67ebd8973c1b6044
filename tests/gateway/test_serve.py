"""``lit-coderl serve`` through the real OpenAI client library: chat and completions, greedy and
sampled, stop strings, ``n`` > 1, streaming, concurrent requests batched, 4xx errors, and
log-probs equal to the trainer's forward on the same tokens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request

import openai
import pytest
import torch

from lit_codeRL.gateway.records import build_rows
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import GatewayConfig
from tests.cli_process import serve_url

from .conftest import start_gateway

MESSAGES = [{"role": "user", "content": "Write a function that adds two numbers."}]


def client(gateway, key: str = "test-key") -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url, api_key=key, max_retries=0, timeout=60)


def test_models_and_greedy_chat_is_deterministic(served):
    gateway, _, _ = served
    c = client(gateway)
    assert [m.id for m in c.models.list().data] == ["tiny"]
    a = c.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=12)
    b = c.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=12)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].finish_reason in ("stop", "length")
    ids = a.model_extra["prompt_token_ids"]
    assert a.usage.prompt_tokens == len(ids) and a.usage.completion_tokens == len(
        a.choices[0].model_extra["token_ids"]
    )


def test_sampled_n_and_seed(served):
    gateway, _, _ = served
    c = client(gateway)
    r = c.chat.completions.create(
        model="tiny", messages=MESSAGES, n=3, temperature=1.0, max_tokens=16, seed=7
    )
    assert [ch.index for ch in r.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in r.choices]
    assert len(set(texts)) > 1  # three samples of a random model's 49k-token vocabulary
    again = c.chat.completions.create(
        model="tiny", messages=MESSAGES, n=3, temperature=1.0, max_tokens=16, seed=7
    )
    assert [ch.message.content for ch in again.choices] == texts


def test_a_training_runs_gateway_ignores_the_requests_seed(tiny_policy):
    """An agent program that sends a fixed ``seed`` made every episode of a GRPO group sample the
    same replies (no advantage to learn from). With a training run's sampling imposed, the seed
    is dropped: the same seeded request samples anew."""
    from lit_codeRL.policy.engine import SamplingParams  # noqa: PLC0415

    policy, tokenizer = tiny_policy
    forced = SamplingParams(max_new_tokens=16, temperature=1.0)
    gateway, _, close = start_gateway(policy, tokenizer, forced=forced)
    try:
        ask = client(gateway).chat.completions.create
        replies = [ask(model="tiny", messages=MESSAGES, max_tokens=16, seed=7) for _ in range(3)]
        assert len({r.choices[0].message.content for r in replies}) > 1
    finally:
        close()


def test_stop_string_cuts_the_reply(served):
    gateway, _, _ = served
    c = client(gateway)
    full = c.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=24)
    text = full.choices[0].message.content
    assert len(text) > 8
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut = c.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, max_tokens=24, stop=[stop]
    )
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_completions_text_and_token_prompts_with_logprobs(served):
    gateway, _, tokenizer = served
    c = client(gateway)
    r = c.completions.create(model="tiny", prompt="def add(a, b):", temperature=0, max_tokens=8, logprobs=0)
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == len(lp.tokens) == len(r.choices[0].model_extra["token_ids"])
    ids = tokenizer("def add(a, b):", add_special_tokens=False)["input_ids"]
    r2 = c.completions.create(model="tiny", prompt=ids, temperature=0, max_tokens=8)
    assert r2.choices[0].text == r.choices[0].text
    batch = c.completions.create(model="tiny", prompt=["a", "b"], temperature=0, max_tokens=4, n=2)
    assert len(batch.choices) == 4


def test_stream_equals_the_whole_reply(served):
    gateway, _, _ = served
    c = client(gateway)
    whole = c.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0, max_tokens=12)
    parts, reasons = [], []
    for chunk in c.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, max_tokens=12, stream=True
    ):
        for ch in chunk.choices:
            parts.append(ch.delta.content or "")
            reasons.append(ch.finish_reason)
    assert "".join(parts) == whole.choices[0].message.content
    assert reasons[-1] == whole.choices[0].finish_reason


def test_concurrent_requests_share_generate_calls(served):
    gateway, _, _ = served
    before_batches, before_rows = gateway.queue.batches, gateway.queue.rows
    results: list[str] = []
    errors: list[BaseException] = []

    def ask(i: int) -> None:
        try:
            r = client(gateway).chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": f"task {i}"}],
                temperature=0.7,
                max_tokens=16,
            )
            results.append(r.choices[0].message.content)
        except BaseException as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 8
    assert gateway.queue.rows - before_rows == 8
    assert gateway.queue.batches - before_batches < 8  # requests in flight together were batched


def test_an_id_past_the_models_embedding_is_a_400_of_its_own_request(tiny_policy):
    """A tokenizer holding more ids than the model embeds (tokens added without resizing): an id
    past the rows, sent as ids or as the added token's text, was an IndexError in the engine,
    which answered 500 to every call of the batch it shared with other episodes. Now the
    request is refused before it is batched, and the gateway goes on serving."""
    import copy  # noqa: PLC0415

    policy, tokenizer = tiny_policy
    rows = len(tokenizer)
    longer = copy.deepcopy(tokenizer)
    longer.add_tokens(["<lcrl_added>"])
    assert len(longer) == rows + 1 and longer.convert_tokens_to_ids("<lcrl_added>") == rows
    gateway, _, close = start_gateway(policy, longer)
    try:
        api = client(gateway)
        with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
            api.completions.create(model="tiny", prompt=[1, rows], max_tokens=2)
        with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
            api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi <lcrl_added>"}], max_tokens=2
            )
        assert api.completions.create(model="tiny", prompt=[1, rows - 1], max_tokens=2).choices
    finally:
        close()


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"logit_bias": {"1": 5}}, "logit_bias"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
        ({"max_tokens": 10**6}, "max_tokens"),
        ({"temperature": 5}, "temperature"),
        ({"top_logprobs": 3, "logprobs": True}, "top_logprobs"),
    ],
)
def test_unsupported_requests_are_400_naming_the_field(served, extra, param):
    gateway, _, _ = served
    with pytest.raises(openai.BadRequestError) as err:
        client(gateway).chat.completions.create(model="tiny", messages=MESSAGES, **extra)
    assert err.value.status_code == 400 and param in str(err.value)


def test_malformed_bodies_are_400(served):
    gateway, _, _ = served
    for body in (
        b"{not json",
        b"[1, 2]",
        json.dumps({"messages": []}).encode(),
        json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode(),
    ):
        req = urllib.request.Request(
            gateway.url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 400
        assert json.loads(err.value.read())["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="outside the vocabulary"):
        client(gateway).completions.create(model="tiny", prompt=[10**9], max_tokens=2)
    # a lone surrogate (no character) in a client string is replaced, never raised from the tokenizer
    for kind, body in (
        ("chat/completions", '{"messages": [{"role": "user", "content": "caf\\ud800 ok"}], "max_tokens": 2}'),
        ("completions", '{"prompt": "x\\udfff", "max_tokens": 2}'),
    ):
        req = urllib.request.Request(
            f"{gateway.url}/{kind}", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        assert urllib.request.urlopen(req, timeout=60).status == 200


def test_logprobs_match_the_trainer_forward(served):
    """The sampler's log-probs (temperature-scaled, as the trainer scores them) equal a plain
    forward of the policy over the served prompt + completion ids."""
    gateway, policy, _ = served
    for temperature in (1.0, 0.7):
        r = client(gateway).chat.completions.create(
            model="tiny", messages=MESSAGES, temperature=temperature, max_tokens=16, logprobs=True, seed=3
        )
        prompt = r.model_extra["prompt_token_ids"]
        completion = r.choices[0].model_extra["token_ids"]
        served_lp = torch.tensor([t.logprob for t in r.choices[0].logprobs.content])
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():
            logits = policy(ids).logits[0, len(prompt) - 1 : -1].float() / temperature
        trainer_lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
        torch.testing.assert_close(served_lp, trainer_lp, atol=2e-4, rtol=0)


def test_episode_calls_merge_into_one_row_with_exact_ids(tiny_policy):
    """A harness that appends to its history: the second call's prompt is the first prompt, the
    exact sampled ids and the rendered new message; one row, the observation masked."""
    policy, tokenizer = tiny_policy
    gateway, _, close = start_gateway(
        policy, tokenizer, GatewayConfig("tiny", ServeLimits(max_tokens=12), require_episode=True)
    )
    try:
        key = gateway.open_episode()
        c = client(gateway, key)
        history = list(MESSAGES)
        for turn in range(3):
            r = c.chat.completions.create(model="tiny", messages=history, temperature=1.0, max_tokens=12)
            history += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"output {turn}"},
            ]
        # a rewritten history (a summary) starts a row of its own
        c.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "summary"}], max_tokens=4
        )
        log = gateway.wait_settled(gateway.close_episode(key))
        with pytest.raises(openai.NotFoundError):
            c.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2)
    finally:
        close()
    assert [call.continued for call in log.calls] == [False, True, True, False]
    rows = build_rows(log.calls)
    assert (rows.merged_calls, rows.rewritten_calls, len(rows.rows)) == (2, 1, 2)
    row = rows.rows[0]
    assert [t.choice.token_ids for t in row.turns] == [call.choices[0].token_ids for call in log.calls[:3]]
    # every later prompt is exactly the row's context at that point
    for k in (1, 2):
        context = row.prompt_ids + sum((t.choice.token_ids + t.observation_ids for t in row.turns[:k]), [])
        assert log.calls[k].prompt_ids == context
    assert tokenizer.decode(row.turns[0].observation_ids).count("output 0") == 1


# The server records a call a moment after its reply is written; stretching that moment makes the
# client's stop arrive first every time, as it sometimes does on a loaded machine.
SLOW_RECORD = (
    "import time; from lit_codeRL.gateway.server import Gateway; record = Gateway._record; "
    "Gateway._record = lambda *a: (time.sleep(1.0), record(*a))[1]; "
    "from lit_codeRL.cli import main; main()"
)


def test_serve_command_answers_the_openai_client(tmp_path):
    """The real ``lit-coderl serve`` process on a free port, with ``--record``; stopped the moment
    the client has its reply, it still records the call."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RECORD, "serve", "--model", "tiny-random",
         "--port", "0", "--dtype", "model", "--record", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        url = serve_url(proc)
        c = openai.OpenAI(base_url=url, api_key="episode-1", max_retries=0, timeout=60)
        r = c.chat.completions.create(model="x", messages=MESSAGES, temperature=0, max_tokens=6)
        assert r.choices[0].message.content is not None
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    calls = [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c["episode"] for c in calls] == ["episode-1"]
    assert calls[0]["choices"][0]["token_ids"] == r.choices[0].model_extra["token_ids"]


HERMES = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'system' and tools %}Tools: {{ tools | tojson }}\n{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_tools_where_the_template_renders_them(tiny_policy):
    """A template that renders ``tools``: a request with tools and a history holding a tool call
    and a tool result is rendered (200); a Hermes-style reply comes back as ``tool_calls``."""
    import copy

    from lit_codeRL.gateway.requests import parse_tool_calls

    policy, tokenizer = tiny_policy
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = HERMES
    gateway, _, close = start_gateway(policy, tok)
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    history = [
        {"role": "system", "content": "You run commands."},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "a.py"},
    ]  # fmt: skip
    try:
        r = client(gateway).chat.completions.create(model="tiny", messages=history, tools=tools, max_tokens=4)
    finally:
        close()
    text = tok.decode(r.model_extra["prompt_token_ids"])
    assert (
        'Tools: [{"type": "function"' in text
        and '<tool_call>{"name": "run", "arguments": {"cmd": "ls"}}' in text
    )
    assert "a.py" in text
    content, calls = parse_tool_calls(
        'Sure.<tool_call>{"name": "run", "arguments": {"cmd": "pwd"}}</tool_call>'
    )
    assert content == "Sure." and calls[0]["function"] == {"name": "run", "arguments": '{"cmd": "pwd"}'}
    assert parse_tool_calls("<tool_call>not json</tool_call>") == ("<tool_call>not json</tool_call>", [])


def test_logprob_bytes_are_each_tokens_own_and_join_to_the_text(served):
    """Hole (fixed): a token that is part of a character decodes to U+FFFD alone, and its
    ``bytes`` were U+FFFD's: joined, they gave '\ufffd\ufffd本' for '日本'. Each token's bytes
    now come from the tokenizer's byte alphabet (a SentencePiece byte token as its byte)."""
    from lit_codeRL.gateway.requests import token_bytes, token_strings

    _, _, tokenizer = served
    text = "日本😀 héllo\n\tx"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    texts = token_strings(tokenizer, ids)
    assert "\ufffd" in "".join(texts)  # the byte-level tokens of 日 and 😀
    assert b"".join(token_bytes(tokenizer, ids, texts)) == text.encode()

    class Pieces:  # a SentencePiece-like tokenizer: byte tokens, and "é" as itself in a piece
        def convert_ids_to_tokens(self, ids):
            return ["<0xE6>", "<0x97>", "<0xA5>", "caf\u00e9"]

    assert token_bytes(Pieces(), [0, 1, 2, 3], ["\ufffd", "\ufffd", "\ufffd", "café"]) == [
        b"\xe6",
        b"\x97",
        b"\xa5",
        "café".encode(),
    ]
    reply = client(served[0]).chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=1.0, seed=11, max_tokens=24, logprobs=True
    )
    content = reply.choices[0].logprobs.content
    joined = b"".join(bytes(t.bytes) for t in content).decode("utf-8", "replace")
    assert joined == tokenizer.decode(reply.choices[0].model_extra["token_ids"])


@pytest.mark.parametrize(
    "block",
    [
        '{"name": "run", "arguments": {"x": ' + "7" * 5000 + "}}",
        '{"name": "run", "arguments": ' + "[" * 5000 + "]" * 5000 + "}",
    ],
    ids=["a 5,000-digit integer", "nested 5,000 deep"],
)
def test_a_tool_call_json_cannot_read_stays_text(block):
    """Hole (fixed): only JSONDecodeError was caught, so a policy reply whose tool call held a
    5,000-digit integer (ValueError) or nested deep (RecursionError) was a 500 that lost the call
    (about 1,000 tokens of ``[`` in a reply with tools)."""
    from lit_codeRL.gateway.requests import parse_tool_calls

    text = f"<tool_call>{block}</tool_call>"
    assert parse_tool_calls(text) == (text, [])
    content, calls = parse_tool_calls(text + '<tool_call>{"name": "run", "arguments": {"x": 1}}</tool_call>')
    assert content == text and [c["function"]["arguments"] for c in calls] == ['{"x": 1}']
