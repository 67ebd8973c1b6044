"""An SWE turn through the real llama.cpp server: the OpenAI engine samples the action with the env's
stop string (``</execute>``), and the ids it keeps decode to the whole tag, so the real env (a
bubblewrap workspace on a shipped task) parses and runs the command. llama.cpp asked to stop on a
string trims that string's tokens from the ids it returns; kept as they came, every turn would
parse as "no action" (issue #48)."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_openai_engine import real_server  # noqa: F401 - the fixture that starts llama-server

from lit_codeRL.envs.swe.actions import parse_action
from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
from lit_codeRL.policy.openai_engine import OpenAIEngine
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.sandbox.workspace import WorkspaceConfig

pytestmark = pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed")

# The 135M model rarely writes a command cold: one demonstrated turn shows it the format.
DEMO_COMMAND = "ls"
NEXT_ASK = "Exit code: 0\nOutput:\nREADME.md\nCurrent git diff:\n(no changes yet)\nNow show the git log with one command."


def test_an_swe_turn_through_llama_server_runs_its_command(real_server, smollm2, tmp_path):  # noqa: F811
    url, _ = real_server
    _, tok = smollm2
    engine = OpenAIEngine(tok, url, timeout_s=120)
    settings = SWESettings(
        repo_cache=str(tmp_path / "swe-cache"),
        workspace=WorkspaceConfig(backend="bwrap"),
        command_timeout_s=8,
    )
    with ContainerEnv("embedded", "train", settings=settings) as env:
        first = env.reset(0)
        messages = [
            {"role": "user", "content": first["prompt"]},
            {"role": "assistant", "content": f"<execute>{DEMO_COMMAND}</execute>"},
            {"role": "user", "content": NEXT_ASK},
        ]
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        sampling = SamplingParams(max_new_tokens=48, temperature=0.7, stop=list(env.stop_strings))
        actions, runnable = [], []
        # Up to 3 rounds of 4 samples: the server's 2 slots batch requests as they arrive, so even
        # seeded samples vary between runs, and a round of 4 sometimes holds no command at all.
        for seed in range(3):
            generator = torch.Generator().manual_seed(seed)
            out = engine.generate(*engine.encode_prompts([prompt]), sampling, 4, generator)
            assert engine.exact
            for r in range(4):
                n = int(out.completion_mask[r].sum())
                text = tok.decode(out.completion_ids[r, :n])  # the ids, not the server's text
                if out.finish_reasons[r] == "stop_string":  # what the issue is about: the tag is kept
                    assert text.endswith("</execute>"), text
                actions.append((text, out.finish_reasons[r]))
            runnable = [(t, f) for t, f in actions if parse_action(t, f == "length").kind == "execute"]
            if runnable:
                break
        assert runnable, f"no sample wrote a complete command: {actions}"
        text, finish = runnable[0]
        assert finish == "stop_string"  # the server stopped on the tag and the ids kept it
        observation, reward, done, extra = env.step(text, finish)
        assert extra["action"] == "execute" and extra["exit_code"] is not None, observation
        assert observation.startswith(("Exit code:", "The command timed out")) and not done
