"""The agent recipe script end to end on a tiny random policy: BC on the generated reference
trajectories of MBPP debugging tasks (made at run time from a 12-problem MBPP copy) and of SWE
tasks together, one GRPO step in the debugging gym from the BC policy, and every policy scored by
`lit-coderl validate` on held-out debugging tasks (MBPP test), held-out SWE tasks and the same
MBPP-test bugs as one-file SWE tasks, with the verdicts and what the episodes did counted, the
McNemar comparisons, a picture, and finished evaluations reused on a rerun (only those of the same
tasks, env and config)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sandbox.conftest import require_bwrap

REPO = Path(__file__).resolve().parents[2]
MBPP = REPO.parent / "shared" / "data" / "mbpp"
TINY = "--trainer.max_steps 2 --trainer.accelerator cpu --trainer.devices 1"
BC = f"{TINY} --model.init_args.demonstrations.limit 2 --model.init_args.batch_size 2"
RL = (
    "--trainer.max_steps 1 --trainer.accelerator cpu --trainer.devices 1 "
    "--model.init_args.sampling.max_new_tokens 8 --model.init_args.prompts_per_step 1 "
    "--model.init_args.num_generations 2 --model.init_args.env.max_turns 2"
)
EVAL = (
    "--model.init_args.max_new_tokens 8 --model.init_args.max_turns 2 --model.init_args.batch_size 2 "
    "--trainer.accelerator cpu --trainer.devices 1"
)


def run_recipe(tmp_path: Path, data: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "scripts/agent_recipe.py",
            *("--data", str(data)),
            *("--out-dir", str(tmp_path / "runs")),
            *("--out", str(tmp_path / "recipe.json")),
            *("--base-model", "tiny-random"),
            *("--swe-tasks", str(REPO / "data" / "swe" / "tasks.jsonl")),
            *("--debug-heldout", "2", "--swe-heldout", "2", "--swe-mbpp-heldout", "2"),
            *("--eval-args", EVAL),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={
            **__import__("os").environ,
            "LIT_CODERL_SYNTH_CACHE": str(tmp_path / "synth-cache"),
            "LIT_CODERL_DEBUG_CACHE": str(tmp_path / "debug-cache"),
        },
    )


def small_mbpp(tmp_path: Path) -> Path:
    """MBPP problems 11-16 (test: held out) and 601-606 (train)."""
    lines = (MBPP / "mbpp.jsonl").read_text().splitlines()
    wanted = {*range(11, 17), *range(601, 607)}
    data = tmp_path / "mbpp.jsonl"
    data.write_text("\n".join(line for line in lines if json.loads(line)["task_id"] in wanted) + "\n")
    return data


@pytest.mark.slow
@pytest.mark.skipif(not (MBPP / "mbpp.jsonl").is_file(), reason="needs ../shared/data/mbpp")
def test_agent_recipe_runs_bc_and_rl_and_scores_every_policy_on_every_heldout_set(tmp_path):
    require_bwrap()
    data = small_mbpp(tmp_path)
    # --prepare (what scripts/gpu_stage.sh runs before a device session) plays the BC stage's
    # reference trajectories into the cache and trains nothing; the BC stage then plays none
    # and validates the RL stage's training tasks; the BC stage then plays none, RL validates none
    # --rl-tasks 2: the RL stage trains on (and --prepare validates) the first 2 of 12 training tasks
    recipe = ("--rl-minutes", "1", "--bc-args", BC, "--rl-args", RL, "--train-per-problem", "2")
    recipe += ("--rl-tasks", "2")
    prepared = run_recipe(tmp_path, data, "--prepare", *recipe)
    assert prepared.returncode == 0, prepared.stdout[-3000:] + prepared.stderr[-3000:]
    assert "playing the debug reference trajectories" in prepared.stderr
    assert "playing the swe reference trajectories" in prepared.stderr
    assert "validated 2 debug tasks" in prepared.stderr
    # the held-out debugging tasks measured at their base (records gpu_stage.sh ships): a device's
    # first evaluation runs no test to open them
    assert "measured 2 held-out debugging tasks" in prepared.stdout
    records = [json.loads(p.read_text()) for p in (tmp_path / "debug-cache").glob("*.json")]
    assert sum(r["task_id"].startswith("mbpp-debug/1") for r in records) == 2, records
    assert not (tmp_path / "runs" / "bc").exists() and not (tmp_path / "recipe.json").exists()
    for stage in ("prepare", "prepare_rl"):
        assert not (tmp_path / "runs" / stage / "run" / "hf_model").exists(), "no optimizer step"
    proc = run_recipe(tmp_path, data, *recipe, "--overlap-eval")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "playing the" not in proc.stderr and "swe reference trajectories from" in proc.stderr
    assert "validated 2 debug tasks: 2 on this machine before, the other 0" in proc.stderr
    # BC is scored while RL trains (--overlap-eval, its output in a log of its own); then the
    # trained policies env by env, the base last (a device call that runs out of time has BC + RL
    # vs BC)
    scored = [
        line for line in proc.stdout.splitlines() if line.startswith("[agent_recipe] lit-coderl validate")
    ]
    policy = "--model.init_args.model.name_or_path "

    def held_out(line: str) -> str:
        return "swe_mbpp" if "synth_mbpp_test/" in line else "swe" if "swe:" in line else "debug"

    sets = ["debug", "swe", "swe_mbpp"]
    assert [(line.split(policy)[1].split()[0].split("/")[-2:], held_out(line)) for line in scored] == [
        *((["run", "hf_model"], s) for s in sets),  # BC (bc/run/hf_model)
        *((["run", "hf_model"], s) for s in sets),  # BC + RL
        *((["tiny-random"], s) for s in sets),
    ]
    assert all("/bc/run/" in line and "overlapped.log" in line for line in scored[:3])
    assert all("/rl/run/" in line and "overlapped.log" not in line for line in scored[3:6])
    overlapped = (tmp_path / "runs" / "eval" / "bc" / "overlapped.log").read_text()
    assert overlapped.count("| source / split ") == 3 and "| swe:" in overlapped
    report = json.loads((tmp_path / "recipe.json").read_text())
    rows = report["rows"]
    assert [r["after"] for r in rows] == ["base", "BC", "BC + RL"]
    for r in rows:
        assert r["debug"]["num_tasks"] == r["swe"]["num_tasks"] == r["swe_mbpp"]["num_tasks"] == 2
        assert r["debug"]["source"] == f"debug:mbpp:{data}" and r["debug"]["split"] == "test"
        assert all(t.startswith("mbpp-debug/1") for t in r["debug"]["solved"])  # held out: MBPP 11-16
        assert sum(r["swe"]["verdicts"].values()) == 2 and "tamper" not in r["debug"]["resolved_verdicts"]
        # what the episodes did: the debugging gym's first edits, the SWE env's final diffs
        assert r["debug"]["behaviour"]["episodes"] == 2 and "on_bug_line" in r["debug"]["behaviour"]
        assert r["swe"]["behaviour"]["episodes"] == r["swe_mbpp"]["behaviour"]["episodes"] == 2
        assert "fix_lines" in r["swe"]["behaviour"]
        # where each evaluation's time went: the model, the wait on the env after it, workspaces
        loop = r["swe_mbpp"]["loop_s"]
        assert set(loop) == {"seconds", "generate_s", "reward_wait_s", "env_reset_s", "env_finish_s"}
        assert loop["env_reset_s"] > 0 and loop["generate_s"] > 0
        assert sum(loop.values()) - loop["seconds"] <= loop["seconds"] + 1 <= r["swe_mbpp"]["eval_s"] + 1
        # stage 0c: the held-out debugging tasks' bugs as one-file SWE repositories, task for task
        assert r["swe_mbpp"]["task_ids"] == r["debug"]["task_ids"] and r["swe_mbpp"]["split"] == "eval"
        assert r["swe_mbpp"]["source"].endswith("synth_mbpp_test/swe/tasks.jsonl")
    assert report["synth"]["mbpp_swe_heldout"]["eval"] >= 2
    bc, rl = report["stages"]
    # BC's evaluations (one after the other) started with the RL stage; BC + RL's after both
    bc_debug, bc_swe, bc_last = rows[1]["debug"], rows[1]["swe"], rows[1]["swe_mbpp"]
    assert bc_debug["started_at"] - (rl["finished_at"] - rl["wall_s"]) < min(10, rl["wall_s"] / 2)
    assert bc_swe["started_at"] >= bc_debug["started_at"] + bc_debug["eval_s"]
    assert bc_last["started_at"] >= bc_swe["started_at"] + bc_swe["eval_s"]
    assert rows[2]["debug"]["started_at"] >= max(rl["finished_at"], bc_last["started_at"] + bc_last["eval_s"])
    assert "--model.init_args.demonstrations.also" in bc["command"] and "swe:" in bc["command"]
    # MBPP-train bugs as one-file SWE repositories (stage 0b) are SWE demonstrations too
    mbpp_swe = tmp_path / "runs" / "synth_mbpp" / "swe" / "tasks.jsonl"
    assert report["synth"]["mbpp_swe"]["tasks"] >= 1 and f"swe:{mbpp_swe}" in bc["command"]
    assert {json.loads(line)["split"] for line in mbpp_swe.read_text().splitlines()} == {"train"}
    # two bugs a training problem for BC and RL; the held-out tasks stay one a problem (above)
    assert f"demonstrations.source 'debug:mbpp:{data}?per_problem=2'" in bc["command"]
    assert f"problems.source 'debug:mbpp:{data}?per_problem=2'" in rl["command"]
    assert (
        f"--model.init_args.model.name_or_path {tmp_path / 'runs' / 'bc' / 'run' / 'hf_model'}"
        in rl["command"]
    )
    same_bugs = "SWE env vs debugging gym, the same bugs (swe_mbpp)"
    assert set(report["comparisons"]) == {
        *(f"{a} vs {b} ({s})" for a, b in (("BC", "base"), ("BC + RL", "BC")) for s in sets),
        *(f"{after}: {same_bugs}" for after in ("base", "BC", "BC + RL")),
    }
    assert report["comparisons"][f"BC: {same_bugs}"]["tasks"] == 2
    assert (tmp_path / "runs" / "agent_recipe.png").is_file()
    # BC trained on both envs' trajectories: its log says how many rows it kept
    metrics = (tmp_path / "runs" / "bc" / "run" / "metrics.csv").read_text()
    assert "train/loss" in metrics
    # a rerun (after a device call ran out of time) reuses every finished stage and evaluation
    again = run_recipe(tmp_path, data, "--resume", "--rl-minutes", "1")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    ran = [line for line in again.stdout.splitlines() if line.startswith("[agent_recipe] lit-coderl")]
    assert ran == []
    assert json.loads((tmp_path / "recipe.json").read_text())["rows"] == rows
    # an evaluation made on other tasks (another machine's task set) is not reused: made again;
    # nor one made by another env or config (the tools in its prompt, a turn's token limit)
    base = tmp_path / "runs" / "eval" / "base" / "debug" / "result.json"
    assert json.loads(base.read_text())["task_ids"] == rows[0]["debug"]["task_ids"] != []
    base.write_text(json.dumps({**json.loads(base.read_text()), "task_ids": ["mbpp-debug/999-x"]}))
    base_swe = base.parent.parent / "swe" / "result.json"
    stale = json.loads(base_swe.read_text())
    base_swe.write_text(json.dumps({**stale, "eval_digest": "made-before-a-change-of-the-env"}))
    other = run_recipe(tmp_path, data, "--resume", "--rl-minutes", "1")
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    ran = [line for line in other.stdout.splitlines() if line.startswith("[agent_recipe] lit-coderl")]
    assert len(ran) == 2 and all("validate" in line for line in ran), ran
    assert "scored other tasks (3 differ)" in other.stdout and "made by another env or config" in other.stdout
    assert base.with_name("result.other_tasks.json").is_file()
    assert base_swe.with_name("result.other_env.json").is_file()
    assert json.loads(base.read_text())["task_ids"] == rows[0]["debug"]["task_ids"]
    assert json.loads(base_swe.read_text())["eval_digest"] == stale["eval_digest"]
    # --score rl (a device budget for BC, RL and one evaluation): only BC + RL is scored and
    # reported, compared with the BC of an earlier report on the same tasks
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"rows": rows}))
    only_rl = run_recipe(
        tmp_path, data, "--resume", "--rl-minutes", "1", "--score", "rl", "--compare-with", str(earlier)
    )
    assert only_rl.returncode == 0, only_rl.stdout[-3000:] + only_rl.stderr[-3000:]
    report = json.loads((tmp_path / "recipe.json").read_text())
    assert [r["after"] for r in report["rows"]] == ["BC + RL"] and report["rows"][0]["debug"] == rows[2][
        "debug"
    ]
    assert "BC + RL vs BC of earlier (debug)" in report["comparisons"]
    assert "BC + RL vs BC (debug)" not in report["comparisons"]


@pytest.mark.slow
@pytest.mark.skipif(not (MBPP / "mbpp.jsonl").is_file(), reason="needs ../shared/data/mbpp")
def test_agent_recipe_for_the_swe_env_alone_trains_rl_in_the_swe_env(tmp_path):
    """``--envs swe``: BC on SWE trajectories only, GRPO in the SWE env on stage 0b's MBPP-train
    one-file repositories (configs/agent_recipe_rl_swe.yaml), both policies scored on the two
    held-out SWE sets and on no debugging task."""
    require_bwrap()
    data = small_mbpp(tmp_path)
    recipe = ("--envs", "swe", "--skip-base", "--rl-minutes", "1", "--bc-args", BC, "--rl-args", RL)
    proc = run_recipe(tmp_path, data, *recipe)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "recipe.json").read_text())
    bc, rl = report["stages"]
    mbpp_swe = tmp_path / "runs" / "synth_mbpp" / "swe" / "tasks.jsonl"
    assert "agent_recipe_rl_swe.yaml" in rl["command"] and f"problems.source swe:{mbpp_swe}" in rl["command"]
    assert "debug:" not in bc["command"] + rl["command"]
    # the RL stage's episodes were SWE episodes: shell commands in a repository, graded by its tests
    dumped = [json.loads(line) for line in (Path(rl["log_dir"]) / "rollouts.jsonl").read_text().splitlines()]
    assert dumped and all(row["instance_id"].startswith("mbpp-debug/6") for row in dumped)  # MBPP train
    assert all("/workspace/repo" in row["prompt"] and "fail_to_pass" in row["grade"] for row in dumped)
    rows = report["rows"]
    assert [r["after"] for r in rows] == ["BC", "BC + RL"]
    for r in rows:
        assert "debug" not in r and r["swe"]["num_tasks"] == r["swe_mbpp"]["num_tasks"] == 2
    assert set(report["comparisons"]) == {"BC + RL vs BC (swe)", "BC + RL vs BC (swe_mbpp)"}
