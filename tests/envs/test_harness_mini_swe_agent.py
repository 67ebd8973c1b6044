"""A real mini-swe-agent (PyPI, unmodified) as the agent program of ``env.name: harness``, in the
sandbox, through the gateway (issue #51): with a scripted policy it solves a shipped SWE task in
one multi-turn row whose ids are the ids mini-swe-agent got back (its own trajectory file says
so); with the tiny random policy it fails by format errors, each call its own row.

``make test`` installs it into its own venv (``$LIT_CODERL_MINI_SWE_AGENT``, default
``~/.cache/lit_coderl/agents/mini-swe-agent``), the layout ``configs/harness_mini_swe_agent.yaml``
binds into each episode's sandbox.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings
from lit_codeRL.policy.engine import EngineSettings, SamplingParams, make_engine
from lit_codeRL.policy.loading import ModelSettings, load_model
from lit_codeRL.policy.output import completions_output
from lit_codeRL.rollout.dataset import episode_batch
from lit_codeRL.rollout.harness import HarnessRunner
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set
from lit_codeRL.sandbox.workspace import WorkspaceConfig
from tests.sandbox.conftest import require_bwrap

ROOT = Path(__file__).resolve().parents[2]
AGENT_VENV = Path(
    os.environ.get("LIT_CODERL_MINI_SWE_AGENT") or Path.home() / ".cache/lit_coderl/agents/mini-swe-agent"
)
# what the agent's trajectory recorded of every reply: the ids our gateway sent (litellm keeps them)
TRAJ_IDS = (
    '; PYTHONPATH= python3 -c \'import json; t=json.load(open("/tmp/mswea/traj.json")); '
    'rs=[m["extra"]["response"] for m in t["messages"] if "response" in (m.get("extra") or dict())]; '
    'print("traj: " + json.dumps([[r["prompt_token_ids"], r["choices"][0]["token_ids"]] for r in rs])); '
    'print("exit_status: " + str(t["info"]["exit_status"]))\''
)


class ScriptedEngine:
    """Answers every generate with the next scripted reply (its exact tokens, EOS last): the
    policy side of a run whose agent program, sandbox, gateway and grader are all real."""

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.pad_token_id, self.replies = tokenizer, tokenizer.pad_token_id, list(replies)
        self.base = make_engine(EngineSettings(), tokenizer, torch.nn.Linear(1, 1))

    def pad_prompts(self, prompts):
        return self.base.pad_prompts(prompts)

    def generate(
        self, prompt_ids, prompt_mask, sampling, num_generations=1, generator=None, on_finished=None
    ):
        rows = prompt_ids.size(0) * num_generations
        text = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return completions_output(
            prompt_ids, prompt_mask, num_generations, [ids] * rows, [[-0.25] * len(ids)] * rows,
            [text] * rows, ["stop"] * rows, self.pad_token_id,
        )  # fmt: skip


def settings(tmp_path: Path, extra: str = "") -> HarnessSettings:
    if not (AGENT_VENV / "pyvenv.cfg").exists():
        pytest.skip(f"mini-swe-agent is not installed in {AGENT_VENV} (make test-deps installs it)")
    cfg = yaml.safe_load((ROOT / "configs/harness_mini_swe_agent.yaml").read_text())
    harness = cfg["model"]["init_args"]["env"]["harness"]
    harness["agent_dir"] = str(AGENT_VENV)
    harness["command"] += extra
    harness["max_log_chars"] = 500_000
    harness["timeout_s"] = 300
    harness["swe"]["repo_cache"] = str(tmp_path / "swe-cache")
    harness["swe"]["workspace"] = WorkspaceConfig(backend="bwrap", memory_mb=4096, disk_mb=96)
    return HarnessSettings(**harness)


@pytest.fixture(scope="module")
def tiny():
    require_bwrap()
    torch.manual_seed(0)
    model, tokenizer = load_model(ModelSettings(name_or_path="tiny-random"))
    return model.eval(), tokenizer


def traj_ids(log: str) -> list[list[list[int]]]:
    return json.loads(next(x for x in log.splitlines() if x.startswith("traj: "))[len("traj: ") :])


def test_mini_swe_agent_solves_a_task_in_one_row_of_the_served_ids(tiny, tmp_path):
    _, tokenizer = tiny
    problem = load_problem_set(ProblemSettings(source="swe", split="train"))[0]
    patch = problem.metadata["swe_task"].patch
    replies = [
        "THOUGHT: I will apply the fix.\n\n```mswea_bash_command\n"
        f"cat > /tmp/fix.patch <<'LCRL_EOF'\n{patch}LCRL_EOF\ngit apply /tmp/fix.patch && git diff --stat\n```",
        "THOUGHT: Done.\n\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
    ]
    runner = HarnessRunner(
        ScriptedEngine(tokenizer, replies),
        HarnessEnv(settings(tmp_path, TRAJ_IDS)),
        SamplingParams(max_new_tokens=2048),
    )
    try:
        (episode,) = runner.run([problem], 1, torch.Generator().manual_seed(0))
    finally:
        runner.close()
    record = episode.record()
    assert (record["verdict"], record["reward"]) == ("passed", 1.0), (
        record["grade"],
        record["agent_log"][-3000:],
    )
    assert "exit_status: Submitted" in record["agent_log"]
    # mini-swe-agent appends to its history: its two calls are one row, the observation masked
    assert (
        record["gateway"]["calls"] == 2 and record["gateway"]["merged_calls"] == 1 and not episode.extra_rows
    )
    seen = traj_ids(record["agent_log"])
    (a0, b0), (a1, b1) = record["trainable_spans"]
    ids = record["input_ids"]
    assert [ids[a0:b0], ids[a1:b1]] == [seen[0][1], seen[1][1]]
    assert ids[:a0] == seen[0][0] and ids[:a1] == seen[1][0]


def test_mini_swe_agent_with_the_tiny_policy_fails_graded_rows_per_call(tiny, tmp_path):
    model, tokenizer = tiny
    engine = make_engine(EngineSettings(dtype="model"), tokenizer, model)
    problem = load_problem_set(ProblemSettings(source="swe", split="train"))[0]
    runner = HarnessRunner(
        engine, HarnessEnv(settings(tmp_path, TRAJ_IDS)), SamplingParams(max_new_tokens=32)
    )
    try:
        episodes = runner.run([problem], 2, torch.Generator().manual_seed(0))
    finally:
        runner.close()
    batch = episode_batch(episodes, tokenizer.pad_token_id)
    for e in episodes:
        record = e.record()
        assert record["verdict"] == "unresolved" and record["reward"] == 0.0
        assert "exit_status: RepeatedFormatError" in record["agent_log"]
        # after a format error mini-swe-agent drops the bad reply from its history: a new row each call
        assert record["gateway"]["calls"] == 3 and len(e.extra_rows) == 2
        seen = traj_ids(record["agent_log"])
        rows = [(record["input_ids"], record["trainable_spans"])] + [
            (sum((s.ids for s in row), []), None) for row in e.extra_rows
        ]
        assert rows[0][0][: rows[0][1][0][0]] == seen[0][0]
        for (prompt, completion), row in zip(seen[1:], e.extra_rows, strict=True):
            assert row[0].ids == prompt and row[1].ids == completion
    assert batch.batch_size == 6 and batch.episode_ids.tolist() == [0, 0, 0, 1, 1, 1]
