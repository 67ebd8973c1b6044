"""The env side of one GRPO step in the debugging gym, and what an edit that loops forever costs it.

    python scripts/bench_debug_step.py [--data ../shared/data/mbpp] [--tasks 8] [--generations 8]
                                       [--hangs 2] [--split validation] [--parallel N]
                                       [--eval-timeout-s S] [--grade-min-timeout-s S]
                                       [--rollouts RUN/rollouts.jsonl [--steps 3 4] [--source S]]
                                       [--out bench_results/debug_step.json]

A step of ``configs/agent_recipe_rl.yaml`` plays ``--tasks`` x ``--generations`` episodes; each turn
waits for every live episode's tool call, so one episode whose edit makes the tests loop forever
stalls the whole batch: its ``eval`` calls and its grade each run until they are stopped. On the
H200 (bench_results/agent_recipe_gpu_h200_run2.json) such episodes made a step's reward wait
64 s against 4 s for the others.

Episodes of MBPP debugging tasks (``debug:mbpp:<data>``, generated at run time) are played through
the env's real batched interface with that config's env settings, the way the rollout runner
plays them (every live episode's turn at once; an episode cut after its last action is graded as
it stands):

* scripted (the default): every episode views the file, edits it, runs ``eval`` twice; the edit
  is the task's reference fix, except in ``--hangs`` episodes, where the file's first line becomes
  a loop that never ends;
* ``--rollouts``: a run's ``rollouts.jsonl`` replayed, each episode's sampled actions as they were
  (``--source``: the run's ``problems.source``, default the recipe's RL source).

Each step is timed (resets, turns, grading, the whole step) twice: with the grader's CPU-time
limit (``grade_min_cpu_s``, the default) and without it (``0``: only the wall clock,
``grade_min_timeout_s`` at least). Prints a table and writes JSON with the CPU and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings  # noqa: E402
from lit_codeRL.envs.debug.reference import reference_actions  # noqa: E402
from lit_codeRL.envs.protocol import Action  # noqa: E402
from lit_codeRL.problems.debug import debug_task  # noqa: E402
from lit_codeRL.problems.record import Problem  # noqa: E402
from lit_codeRL.problems.registry import load_problems  # noqa: E402

RL_CONFIG = REPO / "configs" / "agent_recipe_rl.yaml"
RL_ENV: dict = yaml.safe_load(RL_CONFIG.read_text())["model"]["init_args"]["env"]["debug"]
"""``env.debug`` of the recipe's RL config, read from it (knobs it does not set at their defaults)."""


def script(problem: Problem, hang: bool, tools: tuple[str, ...]) -> list[str]:
    """view, edit (the reference fix, or a loop at the top of the file), eval, eval."""
    task = debug_task(problem)
    view, edit = reference_actions(task, tools, output_shown=True)[:2]
    if hang:
        path = next(iter(task.fix))
        first = task.files[path].splitlines(keepends=True)[0]
        edit = f'I will change line 1.\n<edit path="{path}" lines="1-1">\nwhile True: pass\n{first}</edit>'
    return [view, edit, "<eval/>", "<eval/>"]


def one_step(env: DebugEnv, episodes: list[tuple[Problem, list[Action]]], hanging: set[int]) -> dict:
    """Play ``episodes`` (a problem and its actions) as one batch, the way the rollout runner does:
    every live episode's turn at once, an episode cut after its last action graded as it stands."""
    times: dict[str, float] = {}
    t_step = time.perf_counter()
    t0 = time.perf_counter()
    states = [s.state for s in env.reset_batch([problem for problem, _ in episodes])]
    times["reset_s"] = time.perf_counter() - t0
    ended, verdict = [False] * len(episodes), ["none"] * len(episodes)
    for turn in range(max(len(actions) for _, actions in episodes)):
        live = [i for i, (_, actions) in enumerate(episodes) if not ended[i] and turn < len(actions)]
        t0 = time.perf_counter()
        results = env.step_batch([states[i] for i in live], [episodes[i][1][turn] for i in live]).result()
        times[f"turn{turn + 1}_s"] = time.perf_counter() - t0
        for i, r in zip(live, results, strict=True):
            ended[i] = ended[i] or r.terminated or r.truncated or bool(r.info.get("masked"))
            if r.info.get("verdict"):
                verdict[i] = str(r.info["verdict"])
    t0 = time.perf_counter()
    graded = env.finish_batch(states, [not e for e in ended])
    times["grade_s"] = time.perf_counter() - t0
    times["step_s"] = time.perf_counter() - t_step
    verdicts: dict[str, dict[str, int]] = {"hang": {}, "other": {}}
    for i, result in enumerate(graded):
        if result is not None and result.info.get("verdict"):
            verdict[i] = str(result.info["verdict"])
        kind = verdicts["hang" if i in hanging else "other"]
        kind[verdict[i]] = kind.get(verdict[i], 0) + 1
    return {**{k: round(v, 2) for k, v in times.items()}, "verdicts": verdicts}


def scripted(problems: list[Problem], generations: int, hangs: int, tools: tuple[str, ...]):
    """``generations`` scripted episodes per problem, ``hangs`` of them spread over the batch."""
    episodes = [p for p in problems for _ in range(generations)]
    hanging = set(range(0, len(episodes), max(1, len(episodes) // hangs))[:hangs]) if hangs else set()
    return [(p, [Action(a) for a in script(p, i in hanging, tools)]) for i, p in enumerate(episodes)], hanging


def recorded(path: Path, problems: dict[str, Problem]) -> dict[int, list[tuple[Problem, list[Action]]]]:
    """A run's ``rollouts.jsonl`` by step: each episode's problem and its sampled actions."""
    steps: dict[int, list[tuple[Problem, list[Action]]]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        actions = [Action(t["text"], t.get("finish_reason") or "stop") for t in record["turns"]]
        steps.setdefault(int(record["step"]), []).append((problems[record["problem_id"]], actions))
    return steps


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "mbpp"))
    ap.add_argument("--split", default="validation", help="MBPP split of the scripted tasks (its smallest)")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--hangs", type=int, default=2, help="episodes of the step whose edit loops forever")
    ap.add_argument(
        "--rollouts", type=Path, help="replay this run's rollouts.jsonl instead of scripted episodes"
    )
    ap.add_argument("--source", help="the replayed run's problems.source (default: the recipe's RL source)")
    ap.add_argument("--steps", type=int, nargs="*", help="the replayed steps (default: all)")
    ap.add_argument("--parallel", type=int, default=os.cpu_count() or 2)
    # what a hanging episode costs is these limits: the recipe's by default; smaller ones make a
    # quick check of the benchmark itself (its smoke test)
    ap.add_argument("--eval-timeout-s", type=float, help="env.debug.eval_timeout_s (default: the recipe's)")
    ap.add_argument(
        "--grade-min-timeout-s", type=float, help="env.debug.grade_min_timeout_s (default: the recipe's)"
    )
    ap.add_argument("--out", default="bench_results/debug_step.json")
    args = ap.parse_args(argv)

    if args.rollouts:
        source = args.source or f"debug:mbpp:{args.data}?per_problem=3"
        wanted = {json.loads(line)["problem_id"] for line in args.rollouts.read_text().splitlines()}
        problems = [p for p in load_problems(source, "train") if p.task_id in wanted]
        workload = {
            "rollouts": str(args.rollouts),
            "source": f"{source} (train)",
            "steps": args.steps or "all",
        }
    else:
        problems = load_problems(f"debug:mbpp:{args.data}", args.split)[: 4 * args.tasks]
        workload = {
            "source": f"debug:mbpp:{args.data} ({args.split})",
            "tasks": args.tasks,
            "generations": args.generations,
            "hangs": args.hangs,
            "episode": "view, edit (the reference fix, or `while True: pass` as line 1), eval, eval, graded at the cut",
        }
    limits = {
        key: value
        for key, value in (
            ("eval_timeout_s", args.eval_timeout_s),
            ("grade_min_timeout_s", args.grade_min_timeout_s),
        )
        if value is not None
    }
    env_settings = {**RL_ENV, **limits}
    modes = {"cpu limit (default)": {}, "wall clock only": {"grade_min_cpu_s": 0.0}}
    rows: dict[str, dict] = {}
    for name, extra in modes.items():
        env = DebugEnv(DebugSettings(**env_settings, parallel=args.parallel, **extra))
        try:
            kept = env.validate_problems(problems)
            cases: dict[str, tuple[list, set[int]]] = {}
            if args.rollouts:
                by_id = {p.task_id: p for p in kept}
                for step, episodes in sorted(recorded(args.rollouts, by_id).items()):
                    if not args.steps or step in args.steps:
                        cases[f"step {step}"] = episodes, set()
            else:
                kept = kept[: args.tasks]
                cases["no hang"] = scripted(kept, args.generations, 0, env.tools)
                cases[f"{args.hangs} hanging"] = scripted(kept, args.generations, args.hangs, env.tools)
            one_step(env, *scripted(kept[:1], 1, 0, env.tools))  # warm: toolchain, page cache
            rows[name] = {case: one_step(env, *episodes) for case, episodes in cases.items()}
            rows[name]["cpu_limit_s"] = sorted({env.grader.cpu_limit(env.task_of(p)) or 0.0 for p in kept})
            rows[name]["wall_limit_s"] = sorted({env.grader.time_limit(env.task_of(p)) for p in kept})
        finally:
            env.close()

    from lit_codeRL.policy.cpu_path import cpu_path

    lines = ["| grading limit | step | reset s | turns s | grade s | step s |", "|---|---|---|---|---|---|"]
    for name, row in rows.items():
        for case, r in row.items():
            if isinstance(r, dict):
                turns = round(sum(v for k, v in r.items() if k.startswith("turn")), 2)
                lines.append(
                    f"| {name} | {case} | {r['reset_s']} | {turns} | {r['grade_s']} | {r['step_s']} |"
                )
    table = "\n".join(lines)
    print(table)
    result = {
        "workload": {**workload, "parallel": args.parallel, "env": env_settings},
        "cpu": cpu_path(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "results": rows,
        "table": table,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
