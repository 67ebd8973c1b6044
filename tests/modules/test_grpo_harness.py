"""``lit-coderl fit`` with ``env.name: harness``: two GRPO steps on an agent program's episodes,
through the real CLI, sandbox, gateway and grader (issue #51). The rows trained on hold exactly the
ids the agent program received over HTTP, the rewards reach the gradient, the dump renders with
``lit-coderl episode``."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_codeRL.envs.harness.env import AGENTS_DIR
from lit_codeRL.problems.swe import load_swe_tasks
from tests.sandbox.conftest import require_bwrap

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from lit_codeRL.cli import main; main()"]


def fit(config: str, run: Path, tmp_path: Path, *extra: str) -> None:
    """``lit-coderl fit`` of ``config`` for 2 steps on the tiny model, 1 group of 2 episodes."""
    args = [
        "fit", "--config", str(ROOT / "configs" / config),
        "--model.init_args.model.name_or_path", "tiny-random",
        "--trainer.max_steps", "2", "--trainer.default_root_dir", str(run),
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(run), "--trainer.logger.name", "",
        "--trainer.callbacks", "null",
        "--model.init_args.num_generations", "2", "--model.init_args.prompts_per_step", "1",
        "--model.init_args.env.harness.swe.repo_cache", str(tmp_path / "swe-cache"),
        *extra,
    ]  # fmt: skip
    out = subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=900, cwd=tmp_path, env=os.environ
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_two_grpo_steps_on_a_scripted_agent(tmp_path):
    require_bwrap()
    agent = tmp_path / "agent"
    shutil.copytree(AGENTS_DIR, agent)
    (agent / "fixes").mkdir()
    for task in load_swe_tasks("embedded", split="train"):
        (agent / "fixes" / f"{task.instance_id}.patch").write_text(task.patch)
    # sample 0 of every group also applies the real fix: each group has a solved and a failed
    # episode, so the advantages are not zero and the step really moves the policy
    command = (
        "python3 /opt/lcrl-agent/simple_agent.py --task {task_file} --base-url {base_url} "
        "--api-key {api_key} --max-steps 3 --rewrite-after 2 --log-ids; "
        "if [ {sample} = 0 ]; then git apply /opt/lcrl-agent/fixes/{instance_id}.patch; fi"
    )
    run = tmp_path / "run"
    fit(
        "grpo_harness.yaml", run, tmp_path,
        "--model.init_args.sampling.max_new_tokens", "16",
        "--model.init_args.optimizer.learning_rate", "1e-3",
        "--model.init_args.engine.dtype", "model",
        "--model.init_args.env.harness.command", command,
        "--model.init_args.env.harness.agent_dir", str(agent),
        "--model.init_args.env.harness.max_log_chars", "200000",
        "--model.init_args.env.harness.swe.workspace.disk_mb", "96",
    )  # fmt: skip
    dumps = list(run.rglob("rollouts.jsonl"))
    assert len(dumps) == 1
    records = [json.loads(x) for x in dumps[0].read_text().splitlines()]
    episodes = [r for r in records if not r.get("extra_row")]
    extra = [r for r in records if r.get("extra_row")]
    assert len({r["step"] for r in episodes}) == 2 and len(episodes) == 4 and len(extra) == 4
    assert sorted(r["reward"] for r in episodes) == [0.0, 0.0, 1.0, 1.0]
    for r in episodes:
        seen = [json.loads(x[5:]) for x in r["agent_log"].splitlines() if x.startswith("ids: ")]
        (row2,) = [
            x
            for x in extra
            if x["step"] == r["step"]
            and x["group"] == r["group"]
            and x["problem_id"] == r["problem_id"]
            and x["reward"] == r["reward"]
        ]
        trained = [r["input_ids"][a:b] for a, b in r["trainable_spans"]] + [
            row2["input_ids"][a:b] for a, b in row2["trainable_spans"]
        ]
        assert trained == [s["completion"] for s in seen]  # the ids the agent got are the ids trained on
        assert r["input_ids"][: r["trainable_spans"][0][0]] == seen[0]["prompt"]
        assert row2["input_ids"][: row2["trainable_spans"][0][0]] == seen[2]["prompt"]
        assert [c["choices"][0]["token_ids"] for c in r["calls"]] == [s["completion"] for s in seen]
        # sampled after step - 1 optimizer steps (the dump's step is logged after the update)
        assert {c["policy_version"] for c in r["calls"]} == {r["step"] - 1}
    metrics = list(csv.DictReader((run / "version_0" / "metrics.csv").open()))
    signal = [float(m["train/groups_with_signal"]) for m in metrics if m.get("train/groups_with_signal")]
    assert signal == [1.0, 1.0]
    # the policy moved: the exported weights differ from the tiny model's initial ones
    from transformers import AutoModelForCausalLM

    from lit_codeRL.policy.loading import ModelSettings, load_model

    initial, _ = load_model(ModelSettings(name_or_path="tiny-random"))
    trained = AutoModelForCausalLM.from_pretrained(next(run.rglob("hf_model"))).state_dict()
    moved = [k for k, v in initial.state_dict().items() if not torch.equal(v, trained[k].to(v.dtype))]
    assert moved, "no weight changed in two steps with a solved and a failed episode per group"
    view = subprocess.run(
        [*CLI, "episode", str(dumps[0]), "--best"], capture_output=True, text=True, timeout=120
    )
    assert view.returncode == 0, view.stderr
    assert "## Agent program" in view.stdout and "Grade: `resolved`" in view.stdout


@pytest.mark.slow
def test_two_grpo_steps_on_mini_swe_agent(tmp_path):
    """The shipped mini-swe-agent config, unmodified but for the test's model and sizes."""
    require_bwrap()
    from tests.envs.test_harness_mini_swe_agent import AGENT_VENV, TRAJ_IDS

    if not (AGENT_VENV / "pyvenv.cfg").exists():
        pytest.skip(f"mini-swe-agent is not installed in {AGENT_VENV} (make test-deps installs it)")
    import yaml

    cfg = yaml.safe_load((ROOT / "configs/harness_mini_swe_agent.yaml").read_text())
    command = cfg["model"]["init_args"]["env"]["harness"]["command"] + TRAJ_IDS
    run = tmp_path / "run"
    fit(
        "harness_mini_swe_agent.yaml", run, tmp_path,
        "--model.init_args.sampling.max_new_tokens", "24",
        "--model.init_args.env.harness.agent_dir", str(AGENT_VENV),
        "--model.init_args.env.harness.command", command,
        "--model.init_args.env.harness.max_log_chars", "500000",
    )  # fmt: skip
    (dump,) = list(run.rglob("rollouts.jsonl"))
    records = [json.loads(x) for x in dump.read_text().splitlines()]
    episodes = [r for r in records if not r.get("extra_row")]
    assert len(episodes) == 4 and all(r["verdict"] == "unresolved" for r in episodes)
    for r in episodes:
        seen = json.loads(next(x for x in r["agent_log"].splitlines() if x.startswith("traj: "))[6:])
        assert r["gateway"]["calls"] == len(seen) >= 1
        assert [c["choices"][0]["token_ids"] for c in r["calls"]] == [s[1] for s in seen]
        assert r["input_ids"][: r["trainable_spans"][0][0]] == seen[0][0]
        a, b = r["trainable_spans"][0]
        assert r["input_ids"][a:b] == seen[0][1]
    view = subprocess.run([*CLI, "episode", str(dump)], capture_output=True, text=True, timeout=120)
    assert view.returncode == 0 and "## Agent program" in view.stdout, view.stderr


def test_validate_reports_a_harness_resolve_rate(tmp_path):
    """``lit-coderl validate`` with a harness: one agent run per task, resolve rate = pass@1."""
    require_bwrap()
    agent = tmp_path / "agent"
    shutil.copytree(AGENTS_DIR, agent)
    (agent / "fixes").mkdir()
    tasks = load_swe_tasks("embedded", split="train")
    for task in tasks[:1]:  # only the first task gets its fix applied
        (agent / "fixes" / f"{task.instance_id}.patch").write_text(task.patch)
    command = (
        "python3 /opt/lcrl-agent/simple_agent.py --task {task_file} --base-url {base_url} --max-steps 1; "
        "f=/opt/lcrl-agent/fixes/{instance_id}.patch; if [ -f $f ]; then git apply $f; fi"
    )
    harness = json.dumps(
        {"command": command, "agent_dir": str(agent), "swe": {"repo_cache": str(tmp_path / "c")}}
    )
    out = subprocess.run(
        [*CLI, "validate", "--model", "lit_codeRL.modules.evaluate.EvaluationModule",
         "--model.model.name_or_path", "tiny-random", "--model.source", "swe", "--model.split", "train",
         "--model.limit", "2", "--model.max_new_tokens", "16", "--model.harness", harness,
         "--model.output_dir", str(tmp_path / "eval"), "--trainer.logger", "false"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (result,) = list((tmp_path / "eval").glob("*.json"))
    data = json.loads(result.read_text())
    problems = data["problems"] if isinstance(data, dict) and "problems" in data else data
    solved = {p["task_id"]: p["num_correct"] for p in problems}
    assert solved == {tasks[0].instance_id: 1, tasks[1].instance_id: 0}, solved
