"""What the recipe scripts (``mbpp_recipe.py``, ``agent_recipe.py``) share: each stage is the real
CLI in its own process, its command kept so it reproduces alone; a finished stage can be reused;
two policies are compared task by task on the same tasks (the exact McNemar test)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAGES = {"base": "base", "bc": "BC", "rl": "BC + RL"}
"""A recipe's stages in order, by their command-line names (``--score``), and each one's label
(a report row's ``after``)."""


def cli(args: list[str], tag: str, log: Path | None = None) -> tuple[str, float]:
    """Run ``lit-coderl <args>`` in its own process; returns the shown command and wall time.
    ``log``: where its output goes (a stage running beside another), instead of this process's."""
    shown = shlex.join(["lit-coderl", *args])
    print(f"\n[{tag}] {shown}" + (f"  (output: {log})" if log else ""), flush=True)
    start = time.time()
    command = [sys.executable, "-m", "lit_codeRL.cli", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if log is None:
        subprocess.run(command, cwd=REPO, check=True, env=env)
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out:
            subprocess.run(command, cwd=REPO, check=True, env=env, stdout=out, stderr=subprocess.STDOUT)
    return shown, time.time() - start


def logger_args(run_dir: Path) -> list[str]:
    """A CSV logger writing to ``run_dir/run`` (the stage's log directory)."""
    return [
        "--trainer.default_root_dir", str(run_dir),
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(run_dir),
        "--trainer.logger.name", "",
        "--trainer.logger.version", "run",
    ]  # fmt: skip


def train_stage(name: str, config: str, run_dir: Path, extra: list[str], tag: str) -> dict[str, Any]:
    """Train one stage through the CLI; returns its command, wall time and log directory."""
    shown, wall = cli(["fit", "--config", f"configs/{config}", *logger_args(run_dir), *extra], tag)
    stage = {
        "stage": name, "command": shown, "wall_s": wall, "log_dir": str(run_dir / "run"),
        "finished_at": time.time(),
    }  # fmt: skip
    (run_dir / "run" / "stage.json").write_text(json.dumps(stage, indent=1))  # for --bc-run/--rl-run
    return stage


def reused_stage(name: str, log_dir: Path) -> dict[str, Any]:
    """A finished stage's record (command, wall time) as its run wrote it, for ``--bc-run``/``--rl-run``."""
    if not (log_dir / "hf_model").is_dir():
        sys.exit(f"--{name}-run {log_dir}: no hf_model there (not a finished stage)")
    saved = log_dir / "stage.json"
    stage = json.loads(saved.read_text()) if saved.exists() else {"command": "(unknown)", "wall_s": None}
    return {**stage, "stage": name, "log_dir": str(log_dir)}


def paired(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any] | None:
    """Tasks only ``new`` solves, only ``old`` solves, and the exact McNemar p of the difference
    (``None`` where a result does not list its solved tasks)."""
    from lit_codeRL.algorithms.passk import mcnemar_exact_p

    if "solved" not in new or "solved" not in old:
        return None
    a, b = set(new["solved"]), set(old["solved"])
    gained, lost = len(a - b), len(b - a)
    return {"gained": gained, "lost": lost, "mcnemar_p": mcnemar_exact_p(gained, lost)}


def paired_on_common(new: Any, old: Any) -> dict[str, Any] | None:
    """:func:`paired` on the tasks both evaluations scored (their ``task_ids``), with how many
    there are and how many each resolved; ``None`` unless both are evaluations listing their
    scored and solved tasks."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return None
    if not {"task_ids", "solved"} <= new.keys() or not {"task_ids", "solved"} <= old.keys():
        return None
    common = set(new["task_ids"]) & set(old["task_ids"])
    a, b = set(new["solved"]) & common, set(old["solved"]) & common
    result = paired({"solved": sorted(a)}, {"solved": sorted(b)})
    assert result is not None
    return {**result, "tasks": len(common), "resolved": len(a), "resolved_before": len(b)}


def against_earlier(rows: list[dict[str, Any]], earlier: dict[str, Any], name: str) -> dict[str, Any]:
    """Each row of this run against the row of the same stage in an ``earlier`` report, env by env,
    on the held-out tasks both scored (their ``task_ids``): what a change between the runs (the
    recipe's data, the env's tools) did, with the same exact McNemar test. A row this run scored
    whose previous stage it did not (``--score rl``) is also compared with that stage's row there
    ("BC + RL vs BC of run3": RL against the same BC recipe scored by the earlier run). A stage or
    env the earlier report lacks, or one without task ids, is left out."""
    out: dict[str, Any] = {}
    before = {row["after"]: row for row in earlier.get("rows", [])}
    stages = list(STAGES.values())
    here = {row["after"] for row in rows}
    pairs = [(row, row["after"]) for row in rows]
    for row in rows:
        at = stages.index(row["after"]) if row["after"] in stages else 0
        if at > 0 and stages[at - 1] not in here:
            pairs.append((row, stages[at - 1]))
    for row, stage in pairs:
        old_row = before.get(stage, {})
        for key, new in row.items():
            compared = paired_on_common(new, old_row.get(key))
            if compared is not None:
                out[f"{row['after']} vs {stage} of {name} ({key})"] = compared
    return out
