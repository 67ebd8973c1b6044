"""The GPU check's plan (``scripts/gpu_check.py run --dry-run``): the agent recipe (#49) is a call of
its own, run only when named, on the tasks staged from the dev machine."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _plan(tmp_path: Path, *extra: str) -> str:
    env = {**os.environ, "GPU_CHECK_TMP": str(tmp_path)}
    cmd = [sys.executable, "scripts/gpu_check.py", "run", ".gpu2", "--dry-run", *extra]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_agent_recipe_runs_only_when_named_and_reads_the_staged_tasks(tmp_path):
    default = _plan(tmp_path)
    assert "# quickstart" in default and "scripts/agent_recipe.py" not in default
    alone = _plan(tmp_path, "--only", "agent_recipe", "--budget-s", "570")
    assert [line for line in alone.splitlines() if line.startswith("# ") and "env:" not in line] == [
        line for line in alone.splitlines() if line.startswith("# agent_recipe")
    ]
    assert "scripts/agent_recipe.py" in alone and "--debug-heldout 200" in alone
    assert "--overlap-eval" in alone  # BC is scored while RL trains: the GPU has room for both
    assert "--swe-tasks" not in alone  # nothing staged: the recipe synthesizes its own
    # compared stage by stage with the last full H200 run on the same held-out tasks
    assert "--compare-with " + str(REPO / "bench_results" / "agent_recipe_gpu_h200_run3.json") in alone
    tasks = tmp_path / "lcr_stage" / "agent_recipe" / "synth" / "swe" / "tasks.jsonl"
    tasks.parent.mkdir(parents=True)
    tasks.write_text("")
    plan = _plan(tmp_path, "--only", "agent_recipe")
    assert f"--swe-tasks {tasks}" in plan and "--swe-mbpp-tasks" not in plan
    mbpp_swe = tmp_path / "lcr_stage" / "agent_recipe" / "synth_mbpp" / "swe" / "tasks.jsonl"
    mbpp_swe.parent.mkdir(parents=True)
    mbpp_swe.write_text("")
    plan = _plan(tmp_path, "--only", "agent_recipe")
    assert f"--swe-mbpp-tasks {mbpp_swe}" in plan and "--swe-mbpp-test-tasks" not in plan
    # the held-out debugging tasks' bugs as SWE tasks (stage 0c), where the dev box staged them
    held_out = tmp_path / "lcr_stage" / "agent_recipe" / "synth_mbpp_test" / "swe" / "tasks.jsonl"
    held_out.parent.mkdir(parents=True)
    held_out.write_text("")
    assert f"--swe-mbpp-test-tasks {held_out}" in _plan(tmp_path, "--only", "agent_recipe")


def test_staged_evaluations_are_reused_and_the_recipe_files_come_back_flat(tmp_path, monkeypatch):
    """A device call brings back a few shallow files, and no weights: the recipe's reports come
    back in one archive; the base evaluations made on the dev box land where the recipe reuses
    them; extra recipe arguments reach the command."""
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    monkeypatch.setattr(gpu_check, "STAGE", tmp_path / "stage")
    monkeypatch.setattr(gpu_check, "RUNS", tmp_path / "runs")
    staged = tmp_path / "stage" / "agent_recipe" / "eval" / "base" / "debug" / "result.json"
    staged.parent.mkdir(parents=True)
    staged.write_text('{"resolved": 0}')
    packed = tmp_path / "stage" / "agent_recipe" / "synth_cache" / "mbpp-debug-1.json.xz"
    packed.parent.mkdir(parents=True)
    packed.write_bytes(lzma.compress(b'{"rows": []}'))
    # the debugging tasks' records and validation markers, as gpu_stage.sh tars them
    records = tmp_path / "dev-cache"
    (records / "prepared").mkdir(parents=True)
    (records / "mbpp-debug_11-x.json").write_text('{"base_commit": "abc"}')
    (records / "prepared" / "mbpp-debug_11-x-1.valid-2").write_text('{"gold_s": 0.4}')
    with tarfile.open(tmp_path / "stage" / "agent_recipe" / "debug_tasks.tar.xz", "w:xz") as tar:
        tar.add(records / "mbpp-debug_11-x.json", "./mbpp-debug_11-x.json")
        tar.add(records / "prepared" / "mbpp-debug_11-x-1.valid-2", "./prepared/mbpp-debug_11-x-1.valid-2")
    gpu_check.unpack_task_caches()
    assert [p.name for p in packed.parent.iterdir()] == ["mbpp-debug-1.json"]
    cache = tmp_path / "stage" / "agent_recipe" / "debug_tasks"
    assert (cache / "prepared" / "mbpp-debug_11-x-1.valid-2").read_text() == '{"gold_s": 0.4}'
    assert (cache / "mbpp-debug_11-x.json").is_file()
    assert not (tmp_path / "stage" / "agent_recipe" / "debug_tasks.tar.xz").exists()
    assert gpu_check.check_env()["LIT_CODERL_DEBUG_CACHE"] == str(cache)
    assert gpu_check.reuse_staged_evaluations() == ["base/debug"]
    assert (tmp_path / "runs" / "agent_recipe" / "eval" / "base" / "debug" / "result.json").is_file()
    run = tmp_path / "runs" / "agent_recipe"
    (run / "bc" / "run" / "hf_model").mkdir(parents=True)
    (run / "bc" / "run" / "hf_model" / "config.json").write_text("{}")
    (run / "bc" / "run" / "model.safetensors").write_bytes(b"weights")
    (run / "bc" / "run" / "metrics.csv").write_text("step,loss\n")
    out = tmp_path / "out"
    gpu_check.collect_small(run, out / "runs.tar.gz")
    with tarfile.open(out / "runs.tar.gz") as tar:
        assert sorted(tar.getnames()) == ["bc/run/metrics.csv", "eval/base/debug/result.json"]
    monkeypatch.setenv("AGENT_RECIPE_ARGS", "--envs debug --rl-args '--trainer.max_steps 2'")
    cmd = gpu_check.agent_recipe_cmd(out)
    assert cmd[-4:] == ["--envs", "debug", "--rl-args", "--trainer.max_steps 2"]
    cores = max(8, min(32, os.cpu_count() or 8))  # as many workspace operations at once as cores
    assert f"--model.init_args.debug.parallel {cores}" in cmd[cmd.index("--eval-args") + 1]
    assert cmd[cmd.index("--rl-args") + 1] == f"--model.init_args.env.debug.parallel {cores}"


def test_a_run_is_compared_with_an_earlier_report_on_the_tasks_both_scored():
    """``scripts/agent_recipe.py --compare-with``: stage with stage, env with env, only over the
    held-out tasks in both (here t1-t4; t5 and t0 are in one run each), hand-counted."""
    sys.path.insert(0, str(REPO / "scripts"))
    from recipe_stages import against_earlier

    earlier = {
        "rows": [
            {"after": "BC", "debug": {"task_ids": ["t0", "t1", "t2", "t3", "t4"], "solved": ["t0", "t1"]}},
            {"after": "BC + RL", "debug": {"resolved": 3}},  # no task ids: left out
        ]
    }
    rows = [
        {
            "after": "BC",
            "debug": {"task_ids": ["t1", "t2", "t3", "t4", "t5"], "solved": ["t2", "t3", "t4", "t5"]},
        },
        {"after": "BC + RL", "debug": {"task_ids": ["t1"], "solved": []}},
        {"after": "base", "debug": {"task_ids": ["t1"], "solved": []}},  # not in the earlier report
    ]
    assert against_earlier(rows, earlier, "run2") == {
        "BC vs BC of run2 (debug)": {
            "gained": 3,  # t2, t3, t4
            "lost": 1,  # t1
            "mcnemar_p": 0.625,  # exact two-sided: 2 * P(X <= 1), X ~ Bin(4, 1/2) = 2 * 5/16
            "tasks": 4,
            "resolved": 3,
            "resolved_before": 1,
        }
    }


def test_rl_scored_alone_is_compared_with_the_earlier_runs_bc():
    """``--score rl`` (a device budget that holds BC, RL and one evaluation): BC + RL has no BC row
    of its own run, so it is compared with the BC the earlier report scored on the same tasks."""
    sys.path.insert(0, str(REPO / "scripts"))
    from recipe_stages import against_earlier

    earlier = {"rows": [{"after": "BC", "debug": {"task_ids": ["t0", "t1", "t2"], "solved": ["t0"]}}]}
    rows = [{"after": "BC + RL", "debug": {"task_ids": ["t0", "t1", "t2"], "solved": ["t1", "t2"]}}]
    assert against_earlier(rows, earlier, "run3") == {
        "BC + RL vs BC of run3 (debug)": {
            "gained": 2,
            "lost": 1,
            "mcnemar_p": 1.0,  # 2 * P(X <= 1), X ~ Bin(3, 1/2) = 2 * 4/8
            "tasks": 3,
            "resolved": 2,
            "resolved_before": 1,
        }
    }
    # with its own BC scored, BC + RL is compared with the earlier BC + RL only (none here)
    both = [{"after": "BC", "debug": {"task_ids": ["t0"], "solved": []}}, *rows]
    assert list(against_earlier(both, earlier, "run3")) == ["BC vs BC of run3 (debug)"]
