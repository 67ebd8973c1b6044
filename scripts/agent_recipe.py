"""The agent recipe end to end: SmolLM2-135M-Instruct as a debugging and SWE agent, base -> BC
on generated reference trajectories -> BC + RL, scored on held-out synthesized tasks.

    python scripts/agent_recipe.py                                  # everything, then the table
    python scripts/agent_recipe.py --rl-minutes 0                   # base and BC only
    python scripts/agent_recipe.py --bc-run runs/agent_recipe/bc/run --rl-minutes 30

Stage 0, the tasks: ``lit-coderl synth swe debug`` (SWE-bench rows from the shipped SWE
repositories and debugging programs, split by function: held-out tasks exercise functions no
training task touched); the debugging tasks are made at run time from MBPP
(``debug:mbpp:<data>``, MBPP's own splits: train 601-974, held-out from test 11-510).
Stage 0b (``--swe-mbpp-per-problem``): MBPP-train bugs as SWE tasks too, each a one-file
repository (``lit-coderl synth mbpp:<data> --mbpp-split train``), so BC sees the SWE env's
format on hundreds of tasks rather than the 59 the shipped repositories' train functions give.
Stage 0c (``--swe-mbpp-heldout``): MBPP-test bugs as one-file SWE repositories too, held out: the
same bugs, with the same ids, as the held-out debugging tasks, so each policy is also compared with
itself across the two envs on them.
Stage 1, ``configs/agent_recipe_bc.yaml``: behavioural cloning on the train tasks' reference
trajectories (generated from each gold fix, played for real in the env, kept only where they
resolve), debugging and SWE together. Stage 2, ``configs/agent_recipe_rl.yaml``: GRPO (the online
difficulty filter on) on the MBPP debugging train tasks from stage 1's ``hf_model``, for
``--rl-minutes`` of wall clock; with ``--envs swe``, ``configs/agent_recipe_rl_swe.yaml``: GRPO in
the SWE env on stage 0b's MBPP-train SWE tasks (the shipped repositories' train tasks without them).

Every policy is scored by ``lit-coderl validate`` (``configs/agent_recipe_eval.yaml``) on the first
``--debug-heldout`` MBPP-test debugging tasks, every held-out SWE task and the first
``--swe-mbpp-heldout`` of stage 0c's: greedy (the resolve rate) and, with
``--sampled-temperature``, one sample each. The noise band is the exact two-sided McNemar test on
the same tasks (tasks only one policy resolves), as the MBPP recipe does. The verdicts of every
held-out episode are counted (``tamper`` among them: a resolved episode can never be one, the
grader says so first), and what the episodes did (``behaviour``: the debugging gym's first edits,
the SWE env's final diffs, each against the task's reference fix). Evaluations under
``<out-dir>/eval`` are reused, so an interrupted recipe resumes. Writes
``bench_results/agent_recipe.json`` (``--out``) and ``<out-dir>/agent_recipe.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import recipe_stages as stages  # scripts/ is on sys.path when a script runs
from recipe_stages import REPO, STAGES, against_earlier, logger_args, paired, paired_on_common, reused_stage


def cli(args: list[str], log: Path | None = None) -> tuple[str, float]:
    return stages.cli(args, "agent_recipe", log)


def train_stage(name: str, config: str, run_dir: Path, extra: list[str]) -> dict[str, Any]:
    return stages.train_stage(name, config, run_dir, extra, "agent_recipe")


def rl_stage_args(source: str, minutes: float, tasks: int, rl_args: str) -> list[str]:
    """Stage 2's overrides: its training tasks (the first ``tasks`` of ``source``'s train split
    where ``tasks`` > 0), its wall-clock budget to the second, then the user's ``--rl-args``."""
    seconds = max(0, round(minutes * 60))
    hours, rest = divmod(seconds, 3600)
    args = ["--model.init_args.problems.source", source]
    args += ["--trainer.max_time", f"00:{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"]
    if tasks > 0:
        args += ["--model.init_args.problems.limit", str(tasks)]
    return args + shlex.split(rl_args)


def synth(out_dir: Path, extra: list[str]) -> dict[str, Any]:
    """Stage 0: the SWE tasks (reused when ``report.json`` exists)."""
    report = out_dir / "report.json"
    if not report.exists():
        cli(["synth", "swe", "debug", "--out", str(out_dir), *extra])
    return json.loads(report.read_text())


def synth_mbpp(out_dir: Path, data: str, per_problem: int, split: str = "train") -> dict[str, Any]:
    """Stage 0b: MBPP-train bugs as SWE rows (a one-file repository each: ``solution.py`` and
    ``test_solution.py``), more SWE demonstrations for BC than the shipped repositories' train
    functions give (59); stage 0c, ``split="test"``: MBPP-test bugs as held-out SWE tasks, the
    same bugs as the held-out debugging tasks. ``--no-check``: BC keeps only trajectories that
    resolve their task, an env validates every task it scores both ways before its first episode,
    and the synthesis measured that the bug fails a test (reused when ``report.json`` exists)."""
    report = out_dir / "report.json"
    if not report.exists():
        cli(["synth", f"mbpp:{data}", "--mbpp-split", split, "--per-function", str(per_problem),
             "--no-check", "--out", str(out_dir)])  # fmt: skip
    return json.loads(report.read_text())


EVAL_INPUTS = (
    "lit_codeRL/envs",
    "lit_codeRL/sandbox",
    "lit_codeRL/rollout",
    "lit_codeRL/problems",
    "env/tools",
)
"""What an episode's prompt, observations and grade are made by, besides the policy and the tasks."""


def eval_digest() -> str:
    """sha256 over the evaluation config and every file under ``EVAL_INPUTS``: a finished
    evaluation is reused only under the same digest. One made before a change of the env (the
    tools its prompt lists, how an edit is read, the token limit of a turn) scored other prompts:
    the base policy's evaluation committed under ``bench_results/agent_recipe_eval/`` is staged for
    every later device run, and would otherwise stand for prompts it never saw."""
    digest = hashlib.sha256((REPO / "configs" / "agent_recipe_eval.yaml").read_bytes())
    for folder in EVAL_INPUTS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def evaluate(
    policy: str,
    source: str,
    split: str,
    limit: int | None,
    temperature: float,
    run_dir: Path,
    extra: list[str],
    log: Path | None = None,
) -> dict[str, Any]:
    """Resolve rate of ``policy`` on ``source``/``split`` (one episode per task), with every
    episode's verdict counted; reuses a finished evaluation under ``run_dir`` when it scored the
    same tasks (a task set made on another machine may differ: a mutation whose tests time out
    there is not a task) with the same env and config (:func:`eval_digest`). ``log``: where the
    evaluation's output goes (see ``cli``)."""
    done, digest = run_dir / "result.json", eval_digest()
    if done.exists():
        result = json.loads(done.read_text())
        scored, wanted = result.get("task_ids"), heldout_ids(source, split, limit)
        if result.get("eval_digest") != digest:
            print(f"[agent_recipe] {done} was made by another env or config: evaluating again", flush=True)
            done.rename(done.with_name("result.other_env.json"))
        elif scored is None or scored == wanted:
            return result
        else:
            print(
                f"[agent_recipe] {done} scored other tasks ({len(set(scored) ^ set(wanted))} differ): "
                "evaluating again",
                flush=True,
            )
            done.rename(done.with_name("result.other_tasks.json"))
    args = [
        "validate", "--config", "configs/agent_recipe_eval.yaml", *logger_args(run_dir),
        "--model.init_args.model.name_or_path", policy,
        "--model.init_args.source", source,
        "--model.init_args.split", split,
        "--model.init_args.temperature", str(temperature),
        *(["--model.init_args.limit", str(limit)] if limit else []),
        *extra,
    ]  # fmt: skip
    started = time.time()
    shown, wall = cli(args, log)
    (report,) = (run_dir / "run" / "mbpp_eval").glob("*.json")
    data = json.loads(report.read_text())
    problems = data["problems"]
    verdicts: dict[str, int] = {}
    resolved_verdicts: dict[str, int] = {}
    turns = []
    for p in problems:
        for s in p["samples"]:
            verdict = str(s.get("info", {}).get("grade_verdict") or s.get("verdict") or "none")
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            if s.get("success_turn") is not None:
                resolved_verdicts[verdict] = resolved_verdicts.get(verdict, 0) + 1
            turns.append(s.get("num_turns", 0))
    solved = sorted(p["task_id"] for p in problems if p["num_correct"] > 0)
    behaviour = (debug_behaviour if source.startswith("debug") else swe_behaviour)(source, split, problems)
    result = {
        "source": source,
        "split": split,
        "temperature": temperature,
        "num_tasks": len(problems),
        "resolved": len(solved),
        "resolve_rate": len(solved) / max(1, len(problems)),
        "solved": solved,
        "task_ids": [p["task_id"] for p in problems],
        "verdicts": dict(sorted(verdicts.items())),
        "resolved_verdicts": resolved_verdicts,
        "mean_turns": sum(turns) / max(1, len(turns)),
        "behaviour": behaviour,
        "eval_s": wall,
        # inside the evaluation loop (the rest of eval_s: start-up, loading, validating the tasks)
        "loop_s": {
            k.removeprefix("mbpp_eval/").replace("time/", ""): round(v, 1)
            for k, v in data.get("metrics", {}).items()
            if k == "mbpp_eval/seconds" or k.startswith("mbpp_eval/time/")
        },
        "started_at": started,
        "eval_digest": digest,
        "command": shown,
        "report": str(report),
    }
    done.write_text(json.dumps(result, indent=1))
    return result


def heldout_ids(source: str, split: str, limit: int | None) -> list[str]:
    """The ids of the tasks an evaluation of ``source``/``split`` scores (the first ``limit``)."""
    from lit_codeRL.problems import load_problems

    return [p.task_id for p in load_problems(source, split=split)[:limit]]


def measure_heldout(source: str, split: str, limit: int | None) -> dict[str, Any]:
    """Open every held-out debugging task an evaluation of ``source``/``split`` scores (the first
    ``limit``) as the evaluation's env does: the first open of a task on a machine runs its tests at
    the base (FAIL_TO_PASS measured, ``DebugTask.to_swe_task``) and caches the record, which
    ``scripts/gpu_stage.sh`` ships, so that a device's first evaluation runs none of them."""
    import yaml

    from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
    from lit_codeRL.problems import load_problems
    from lit_codeRL.problems.debug import DebugTaskInvalid

    block = yaml.safe_load((REPO / "configs" / "agent_recipe_eval.yaml").read_text())["model"]["init_args"]
    problems = load_problems(source, split=split)[:limit]
    start, invalid = time.time(), 0
    with DebugEnv(DebugSettings(**block["debug"])) as env:

        def open_task(problem: Any) -> bool:
            try:
                env.task_of(problem)
            except DebugTaskInvalid:  # scored as the evaluation finds it: unresolved
                return False
            return True

        with ThreadPoolExecutor(max(1, env.settings.parallel)) as pool:
            invalid = sum(not ok for ok in pool.map(open_task, problems))
    wall = time.time() - start
    print(
        f"[agent_recipe] measured {len(problems)} held-out debugging tasks in {wall:.0f} s ({invalid} invalid)"
    )
    return {"tasks": len(problems), "invalid": invalid, "wall_s": round(wall, 1)}


def debug_behaviour(source: str, split: str, problems: list[dict[str, Any]]) -> dict[str, int]:
    """What the first edit of every episode did against its task's fix (``envs/debug/behaviour.py``:
    on the buggy line, the right line, the bug named): the skill a resolve rate hides."""
    from lit_codeRL.envs.debug.behaviour import behaviour_counts, first_edit, transcript_actions
    from lit_codeRL.envs.debug.tools import PRESETS
    from lit_codeRL.problems import load_problems
    from lit_codeRL.problems.debug import debug_task

    tasks = {p.task_id: debug_task(p) for p in load_problems(source, split=split)}
    return behaviour_counts(
        first_edit(tasks[p["task_id"]], transcript_actions(s["completion"]), PRESETS["full"])
        for p in problems
        if p["task_id"] in tasks
        for s in p["samples"]
    )


def swe_behaviour(source: str, split: str, problems: list[dict[str, Any]]) -> dict[str, int]:
    """What every SWE episode's final diff did against its task's reference patch
    (``envs/swe/behaviour.py``: changed the fix's file, its lines, other files, made the same
    change): where the agent went, which a resolve rate of 0 does not say."""
    from lit_codeRL.envs.swe.behaviour import behaviour_counts, diff_behaviour
    from lit_codeRL.problems import load_problems

    patches = {p.task_id: p.metadata["swe_task"].patch for p in load_problems(source, split=split)}
    return behaviour_counts(
        diff_behaviour(str((s.get("info", {}).get("episode") or {}).get("diff") or ""), patches[p["task_id"]])
        for p in problems
        if p["task_id"] in patches
        for s in p["samples"]
    )


def draw(rows: list[dict[str, Any]], sets: dict[str, str], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # e.g. a GPU image without it: the JSON holds every figure
        print(f"[agent_recipe] no matplotlib: {path} not drawn")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    names = [r["after"] for r in rows]
    for ax, (key, title) in zip(axes[0], sets.items(), strict=True):
        values = [100 * r[key]["resolve_rate"] for r in rows]
        ax.bar(names, values, color=["#999999", "#4c72b0", "#55a868"][: len(rows)])
        for i, v in enumerate(values):
            ax.text(i, v, f"{v:.1f}", ha="center", va="bottom")
        ax.set_title(f"{title}: greedy resolve rate (%), {rows[0][key]['num_tasks']} tasks")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def finished_runs(out_dir: Path) -> dict[str, Path]:
    """The training stages (``bc``, ``rl``) a recipe run under ``out_dir`` finished: a stage is
    finished once it saved its policy and its record."""
    runs = {name: out_dir / name / "run" for name in ("bc", "rl")}
    return {
        name: run
        for name, run in runs.items()
        if (run / "stage.json").exists() and (run / "hf_model").is_dir()
    }


def stages_to_score(score: str, skip_base: bool, rl_available: bool, prepare: bool) -> set[str]:
    """The stages ``--score`` names (``base`` left out by ``--skip-base``); exits with a one-line
    error before any stage runs when it names another or leaves nothing to score (``rl`` alone
    while no RL stage runs or was found: ``--rl-minutes 0`` without ``--rl-run`` or ``--resume``)."""
    stages = {s.strip() for s in score.split(",") if s.strip()} - ({"base"} if skip_base else set())
    if stages - STAGES.keys():
        sys.exit(f"--score {score!r}: name {', '.join(STAGES)} or some of them")
    if not stages - (set() if rl_available else {"rl"}) and not prepare:
        sys.exit(f"--score {score!r}: no stage to score (rl needs --rl-minutes > 0, --rl-run or --resume)")
    return stages


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", default=str((REPO / "../shared/data/mbpp").resolve()), help="MBPP directory"
    )
    parser.add_argument("--out-dir", default="runs/agent_recipe")
    parser.add_argument("--debug-heldout", type=int, default=200, help="MBPP-test debugging tasks scored")
    parser.add_argument("--swe-heldout", type=int, default=0, help="held-out SWE tasks scored (0: all)")
    parser.add_argument(
        "--envs", default="debug,swe", help="the envs trained on and scored (debug, swe, or both)"
    )
    parser.add_argument(
        "--synth-args", default="--per-function 3 --eval-fraction 0.5", help="for lit-coderl synth"
    )
    parser.add_argument(
        "--train-per-problem",
        type=int,
        default=3,
        help="bugs made a MBPP-train problem for BC and RL (3: about 1,050 training tasks, 1: 373; the "
        "held-out tasks stay one a problem)",
    )
    parser.add_argument("--swe-tasks", default=None, help="an SWE tasks.jsonl to use instead of synthesizing")
    parser.add_argument(
        "--swe-mbpp-per-problem",
        type=int,
        default=1,
        help="MBPP-train bugs a problem given to BC as SWE tasks too (1: 373 one-file repositories; "
        "0: none, the SWE demonstrations are the 59 synthesized train tasks only)",
    )
    parser.add_argument(
        "--swe-mbpp-tasks", default=None, help="those SWE rows' tasks.jsonl, to use instead of synthesizing"
    )
    parser.add_argument(
        "--swe-mbpp-heldout",
        type=int,
        default=100,
        help="MBPP-test bugs scored as one-file SWE tasks (the first N: the same bugs as the first N "
        "held-out debugging tasks; 0: none): the SWE env on repositories shaped like BC's MBPP-train "
        "ones, functions never trained on, beside the shipped repositories' held-out functions",
    )
    parser.add_argument(
        "--swe-mbpp-test-tasks",
        default=None,
        help="those SWE rows' tasks.jsonl, to use instead of synthesizing",
    )
    parser.add_argument("--bc-run", default=None, help="a finished BC stage's log dir to reuse")
    parser.add_argument("--rl-run", default=None, help="a finished RL stage's log dir to reuse")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the stages already finished under --out-dir (a rerun after a timeout)",
    )
    parser.add_argument(
        "--rl-minutes", type=float, default=40.0, help="RL wall-clock budget; 0 skips stage 2"
    )
    parser.add_argument(
        "--rl-tasks",
        type=int,
        default=0,
        help="train the RL stage on the first N training tasks only (0: all). A few minutes of GRPO "
        "draw 8 tasks a step, and --prepare validates only these: 200 took 402 s on a 2-core CPU, "
        "all 1,050 about an hour beside other work",
    )
    parser.add_argument("--bc-args", default="", help="extra overrides for stage 1")
    parser.add_argument("--rl-args", default="", help="extra overrides for stage 2")
    parser.add_argument("--eval-args", default="", help="extra overrides for every validate")
    parser.add_argument(
        "--sampled-temperature", type=float, default=0.0, help="also score one sample at T (0: off)"
    )
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="only make what the stages read from caches (tasks, played reference trajectories, "
        "the held-out debugging tasks measured at their base), "
        "train nothing: scripts/gpu_stage.sh runs this so a GPU session plays no trajectory",
    )
    parser.add_argument(
        "--overlap-eval",
        action="store_true",
        help="score the BC policy while the RL stage trains (one GPU has room for both, and a "
        "device session saves the minutes of BC's evaluations; on a CPU the two share its cores); "
        "its output goes to <out-dir>/eval/bc/overlapped.log",
    )
    parser.add_argument(
        "--compare-with",
        default=None,
        help="an earlier report of this script: each stage is also compared with the same stage "
        "there, on the held-out tasks both scored (exact McNemar), e.g. after a change of the "
        "recipe's data or the env's tools",
    )
    parser.add_argument("--skip-base", action="store_true", help="the same as leaving base out of --score")
    parser.add_argument(
        "--score",
        default="base,bc,rl",
        help="the stages whose policies are scored on the held-out tasks (base, bc, rl): e.g. 'rl' "
        "on a short device budget where an earlier run (--compare-with) scored the same BC recipe",
    )
    parser.add_argument("--base-model", default="smollm2-135m-instruct")
    parser.add_argument("--out", default=str(REPO / "bench_results" / "agent_recipe.json"))
    args = parser.parse_args()
    out_dir = (REPO / args.out_dir).resolve()
    if args.resume:  # (before the check below: a finished RL stage is a stage to score)
        for name, done in finished_runs(out_dir).items():
            if getattr(args, f"{name}_run") is None:
                setattr(args, f"{name}_run", str(done))
    scored_stages = stages_to_score(
        args.score, args.skip_base, args.rl_minutes > 0 or bool(args.rl_run), args.prepare
    )
    data = str(Path(args.data).resolve())
    start = time.time()
    debug_source = f"debug:mbpp:{data}"  # held out: one bug a problem, the same tasks whatever trains
    train_source = debug_source + (
        f"?per_problem={args.train_per_problem}" if args.train_per_problem > 1 else ""
    )
    envs = {e.strip() for e in args.envs.split(",") if e.strip()}
    if not envs or envs - {"debug", "swe"}:
        sys.exit(f"--envs {args.envs!r}: name debug, swe or both")
    if args.swe_tasks:
        synth_report: dict[str, Any] = {"reused": str(Path(args.swe_tasks).resolve())}
        swe_source = f"swe:{Path(args.swe_tasks).resolve()}"
    elif "swe" not in envs:  # no SWE task is trained on or scored: stage 0 is a quarter hour for nothing
        synth_report, swe_source = {"skipped": f"--envs {args.envs}"}, ""
    else:
        synth_report = synth(out_dir / "synth", shlex.split(args.synth_args))
        swe_source = f"swe:{out_dir / 'synth' / 'swe' / 'tasks.jsonl'}"
    sets = {
        "debug": (debug_source, "test", args.debug_heldout or None, "MBPP debugging (held out)"),
        "swe": (swe_source, "eval", args.swe_heldout or None, "synthesized SWE (held out)"),
    }
    sets = {key: value for key, value in sets.items() if key in envs}
    if args.swe_mbpp_test_tasks and "swe" in envs:
        synth_report["mbpp_swe_heldout"] = {"reused": str(Path(args.swe_mbpp_test_tasks).resolve())}
        held_out = f"swe:{Path(args.swe_mbpp_test_tasks).resolve()}"
    elif args.swe_mbpp_heldout > 0 and "swe" in envs:
        # stage 0c: the held-out debugging tasks' bugs (MBPP test) as one-file SWE repositories
        made = synth_mbpp(out_dir / "synth_mbpp_test", data, 1, "test")
        synth_report["mbpp_swe_heldout"] = {k: made.get(k) for k in ("tasks", "eval", "wall_s")}
        held_out = f"swe:{out_dir / 'synth_mbpp_test' / 'swe' / 'tasks.jsonl'}"
    if "mbpp_swe_heldout" in synth_report and args.swe_mbpp_heldout > 0:
        sets["swe_mbpp"] = (held_out, "eval", args.swe_mbpp_heldout, "MBPP bugs as SWE (held out)")
    swe_train = [swe_source]  # the SWE demonstrations' sources (their train split)
    if args.swe_mbpp_tasks:
        synth_report["mbpp_swe"] = {"reused": str(Path(args.swe_mbpp_tasks).resolve())}
        swe_train.append(f"swe:{Path(args.swe_mbpp_tasks).resolve()}")
    elif args.swe_mbpp_per_problem > 0 and "swe" in envs:
        made = synth_mbpp(out_dir / "synth_mbpp", data, args.swe_mbpp_per_problem)
        synth_report["mbpp_swe"] = {k: made.get(k) for k in ("tasks", "train", "wall_s")}
        swe_train.append(f"swe:{out_dir / 'synth_mbpp' / 'swe' / 'tasks.jsonl'}")
    stages: list[dict[str, Any]] = []
    bc_extra = [
        "--model.init_args.model.name_or_path", args.base_model,
        "--model.init_args.demonstrations.source", train_source if "debug" in envs else swe_train[0],
        "--model.init_args.demonstrations.also",
        json.dumps(swe_train if envs == {"debug", "swe"} else swe_train[1:] if envs == {"swe"} else []),
        *shlex.split(args.bc_args),
    ]  # fmt: skip
    # RL in the debugging gym when it is trained on; with --envs swe alone, in the SWE env on the
    # SWE train tasks (stage 0b's one-file repositories where there are, as the gym's are MBPP's)
    rl_config = "agent_recipe_rl.yaml" if "debug" in envs else "agent_recipe_rl_swe.yaml"
    rl_extra = rl_stage_args(
        train_source if "debug" in envs else swe_train[-1], args.rl_minutes, args.rl_tasks, args.rl_args
    )
    if args.prepare:
        # The BC stage's setup loads (plays, caches) every demonstration, the RL stage's validates
        # every training task (markers beside the task repositories); no step runs in either.
        prepared = train_stage(
            "prepare", "agent_recipe_bc.yaml", out_dir / "prepare", [*bc_extra, "--trainer.max_steps", "0"]
        )
        wall = prepared["wall_s"]
        if args.rl_minutes > 0:
            rl_setup = [*rl_extra, "--model.init_args.model.name_or_path", args.base_model]
            rl_setup += ["--trainer.max_steps", "0"]
            wall += train_stage("prepare_rl", rl_config, out_dir / "prepare_rl", rl_setup)["wall_s"]
        if "debug" in sets:
            synth_report["debug_heldout"] = measure_heldout(*sets["debug"][:3])
            wall += synth_report["debug_heldout"]["wall_s"]
        print(f"[agent_recipe] prepared in {wall:.0f} s: {json.dumps(synth_report)[:300]}")
        return
    if args.bc_run:
        bc_dir = Path(args.bc_run).resolve()
        stages.append(reused_stage("bc", bc_dir))
    else:
        bc = train_stage("bc", "agent_recipe_bc.yaml", out_dir / "bc", bc_extra)
        stages.append(bc)
        bc_dir = Path(bc["log_dir"])
    policies = {"base": args.base_model, "bc": str(bc_dir / "hf_model")}
    rows = [{"after": STAGES[s], "policy": policy} for s, policy in policies.items() if s in scored_stages]
    extra = shlex.split(args.eval_args)

    def score(row: dict[str, Any], key: str, log: Path | None = None) -> None:
        """``row``'s policy on the held-out tasks of env ``key`` (greedy, and sampled if asked)."""
        source, split, limit, _ = sets[key]
        name = row["after"].replace(" + ", "_").lower()
        row[key] = evaluate(
            row["policy"], source, split, limit, 0.0, out_dir / "eval" / name / key, extra, log
        )
        if args.sampled_temperature > 0:
            row[f"{key}_sampled"] = evaluate(
                row["policy"], source, split, limit, args.sampled_temperature,
                out_dir / "eval" / name / f"{key}_t{args.sampled_temperature:g}", extra, log,
            )  # fmt: skip

    rl_dir: Path | None = None
    if args.rl_run:
        rl_dir = Path(args.rl_run).resolve()
        stages.append(reused_stage("rl", rl_dir))
    elif args.rl_minutes > 0:
        with ThreadPoolExecutor(1) as pool:  # leaving it waits for the overlapped evaluations
            bc_row = next((r for r in rows if r["after"] == STAGES["bc"]), None)
            log = out_dir / "eval" / "bc" / "overlapped.log"
            overlapped = (
                [pool.submit(score, bc_row, key, log) for key in sets] if args.overlap_eval and bc_row else []
            )
            rl = train_stage(
                "rl",
                rl_config,
                out_dir / "rl",
                ["--model.init_args.model.name_or_path", str(bc_dir / "hf_model"), *rl_extra],
            )
        for done in overlapped:
            done.result()  # an evaluation that failed fails the recipe, as it would alone
        stages.append(rl)
        rl_dir = Path(rl["log_dir"])
    if rl_dir is not None and "rl" in scored_stages:
        rows.append({"after": STAGES["rl"], "policy": str(rl_dir / "hf_model")})

    # the trained policies env by env (debugging first), the base policy last: a run that runs out
    # of time (a device session) has the comparison the recipe is for (BC + RL vs BC) on the first
    # env, and the base's zero is the figure a previous run most likely measured already
    order = [(row, key) for key in sets for row in rows if row["after"] != STAGES["base"]]
    order += [(row, key) for key in sets for row in rows if row["after"] == STAGES["base"]]
    for row, key in order:
        if key not in row:  # (scored beside the RL stage)
            score(row, key)
    comparisons: dict[str, Any] = {}
    for i in range(1, len(rows)):
        for key in sets:
            comparisons[f"{rows[i]['after']} vs {rows[i - 1]['after']} ({key})"] = paired(
                rows[i][key], rows[i - 1][key]
            )
    for r in rows:  # one policy on the same bugs in both envs: what the SWE env's shell costs it
        compared = paired_on_common(r.get("swe_mbpp"), r.get("debug"))
        if compared is not None:
            comparisons[f"{r['after']}: SWE env vs debugging gym, the same bugs (swe_mbpp)"] = compared
    if args.compare_with:
        earlier = Path(args.compare_with)
        comparisons.update(against_earlier(rows, json.loads(earlier.read_text()), earlier.stem))
    total = time.time() - start

    print(f"\n[agent_recipe] total wall {total / 60:.1f} min")
    print("\n| after | " + " | ".join(t for *_, t in sets.values()) + " |\n|---|" + "---|" * len(sets))
    for r in rows:
        cells = [f"{100 * r[k]['resolve_rate']:.1f}% ({r[k]['resolved']}/{r[k]['num_tasks']})" for k in sets]
        print(f"| {r['after']} | " + " | ".join(cells) + " |")
    for name, c in comparisons.items():
        print(
            f"[agent_recipe] {name}: +{c['gained']} / -{c['lost']} tasks, exact McNemar p = {c['mcnemar_p']:.3f}"
        )
    for r in rows:
        for k in sets:
            print(
                f"[agent_recipe] {r['after']} {k} verdicts: {r[k]['verdicts']} (resolved: {r[k]['resolved_verdicts']})"
            )
            if r[k].get("behaviour"):
                what = "first edits" if k == "debug" else "final diffs"
                print(f"[agent_recipe] {r['after']} {k} {what}: {r[k]['behaviour']}")
    print("\n| stage | wall | command |\n|---|---|---|")
    for s in stages:
        wall = f"{s['wall_s'] / 60:.1f} min" if s.get("wall_s") is not None else "reused"
        print(f"| {s['stage']} | {wall} | `{s['command']}` |")
    picture = out_dir / "agent_recipe.png"
    draw(rows, {k: v[3] for k, v in sets.items()}, picture)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "command": shlex.join([Path(sys.executable).name, *sys.argv]),
                "total_wall_s": total,
                "synth": synth_report,
                "rows": rows,
                "comparisons": comparisons,
                "stages": stages,
                "picture": str(picture),
            },
            indent=1,
        )
    )
    print(f"\n[agent_recipe] picture: {picture}\n[agent_recipe] wrote {out}")


if __name__ == "__main__":
    main()
