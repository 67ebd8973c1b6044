"""Workspace session costs: open (reset), command round trips and how many sessions run at once.

    python scripts/bench_workspace.py [--backend bwrap] [--opens 30] [--commands 200]
                                      [--max-concurrent 64] [--out bench_results/workspace.json]

Measured on a small git repository (a few files, one commit) like the shipped SWE tasks:

* **open**: ``open_workspace`` until the first command can run (sandbox start, repository copy,
  base commit read), then ``close``; p50/p99 over ``--opens`` sessions (the toolchain is built
  once before timing);
* **round trip** of ``true``, ``echo hello`` and ``python -c pass`` on one open session: trainer
  call to result, p50/p99 over ``--commands`` calls each;
* **diff** of a one-line edit;
* **concurrency**: N sessions opened in parallel, one ``python -c`` + ``git status`` in each, all
  must succeed; N doubles (then steps) until one fails or ``--max-concurrent``. The largest
  clean N is reported, with the wall time of the whole round.

* **grading** (``--grade``, on by default): per shipped SWE task (``data/swe``), the time of one
  grading run of its reference patch (fresh workspace, apply, restore tests, test patch, pytest,
  both records checked) and of the unchanged base, and the time of a ``ContainerEnv`` reset
  (workspace + tool install), with the verdicts (the reference must resolve, the base must not).

Prints a table and writes JSON with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace, toolchain_dir  # noqa: E402


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def summary(xs: list[float]) -> dict:
    return {"p50_ms": 1e3 * percentile(xs, 50), "p99_ms": 1e3 * percentile(xs, 99), "n": len(xs)}


def make_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "stats.py").write_text("def mean(xs):\n    return sum(xs) / len(xs)\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_stats.py").write_text(
        "from pkg.stats import mean\n\ndef test_mean():\n    assert mean([1, 3]) == 2\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    ident = ["-c", "user.name=b", "-c", "user.email=b@b"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *ident, *args], cwd=repo, env=env, check=True)
    return repo


def bench_open(cfg: WorkspaceConfig, repo: Path, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        ws = open_workspace(cfg, repo)
        times.append(time.perf_counter() - t)
        ws.close()
    return times


def bench_commands(cfg: WorkspaceConfig, repo: Path, n: int) -> dict:
    out = {}
    with open_workspace(cfg, repo) as ws:
        for name, cmd in (("true", "true"), ("echo", "echo hello"), ("python -c pass", "python -c pass")):
            ws.run(cmd)  # warm
            times = []
            for _ in range(n):
                t = time.perf_counter()
                r = ws.run(cmd)
                times.append(time.perf_counter() - t)
                assert r.exit_code == 0, r
            out[name] = summary(times)
        ws.run("echo '# edit' >> pkg/stats.py")
        times = []
        for _ in range(max(5, n // 10)):
            t = time.perf_counter()
            assert ws.diff()
            times.append(time.perf_counter() - t)
        out["diff"] = summary(times)
    return out


def concurrent_round(cfg: WorkspaceConfig, repo: Path, n: int) -> tuple[bool, float, str]:
    """Open ``n`` sessions at once, run one command in each; all must succeed."""

    def one(_: int):
        ws = open_workspace(cfg, repo)
        r = ws.run("python -c 'import sys; print(sys.version_info[0])' && git status --short | wc -l")
        return ws, r

    t = time.perf_counter()
    sessions, errors = [], []
    with ThreadPoolExecutor(max_workers=n) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        for f in futs:
            try:
                ws, r = f.result()
                sessions.append(ws)
                if r.exit_code != 0 or r.output != "3\n0\n":
                    errors.append(f"exit {r.exit_code}: {r.output[-200:]}")
            except Exception as e:  # noqa: BLE001 - a failed open is the answer we look for
                errors.append(f"{type(e).__name__}: {e}")
    wall = time.perf_counter() - t
    for ws in sessions:
        ws.close()
    return not errors, wall, (errors[0] if errors else "")


def bench_concurrency(cfg: WorkspaceConfig, repo: Path, cap: int) -> dict:
    rounds, best, n = [], 0, 1
    while n <= cap:
        ok, wall, err = concurrent_round(cfg, repo, n)
        rounds.append({"sessions": n, "ok": ok, "wall_s": wall, "error": err})
        print(f"  {n:3d} sessions: {'ok' if ok else 'FAILED'} in {wall:.2f}s {err}", flush=True)
        if not ok:
            break
        best = n
        n = n * 2 if n < 16 else n + 16
    return {"max_clean_sessions": best, "cap": cap, "rounds": rounds}


def bench_grading(cfg: WorkspaceConfig) -> dict:
    """Reset and grading time per shipped SWE task (a fresh repository cache: preparation is
    timed apart, once per task, as a machine does it once)."""
    from lit_codeRL.envs.swe.env import ContainerEnv, SWESettings
    from lit_codeRL.problems.swe import load_swe_tasks

    tasks = load_swe_tasks("embedded", split="all")
    rows = []
    with tempfile.TemporaryDirectory(prefix="lcrl-bench-swe-") as cache:
        settings = SWESettings(workspace=cfg, repo_cache=cache)
        with ContainerEnv(data_name_or_path=None, settings=settings) as env:
            for task in tasks:
                t = time.perf_counter()
                env.repos.get(task)
                prepare = time.perf_counter() - t
                t = time.perf_counter()
                env.reset(task)
                reset = time.perf_counter() - t
                env.close()
                gold = env.grader.grade(task, task.patch)
                base = env.grader.grade(task, "", run_empty=True)
                rows.append(
                    {
                        "task": task.instance_id,
                        "prepare_repo_s": round(prepare, 3),
                        "reset_s": round(reset, 3),
                        "grade_reference_s": round(gold.wall_s, 3),
                        "reference_verdict": gold.verdict,
                        "grade_base_s": round(base.wall_s, 3),
                        "base_verdict": base.verdict,
                    }
                )
                print(f"  {task.instance_id}: grade {gold.wall_s:.2f} s ({gold.verdict})", flush=True)
    return {
        "tasks": rows,
        "reset": summary([r["reset_s"] for r in rows]),
        "grade": summary([r["grade_reference_s"] for r in rows] + [r["grade_base_s"] for r in rows]),
    }


def cpu_info() -> dict:
    try:
        from lit_codeRL.policy.cpu_path import cpu_path

        return cpu_path()
    except Exception:  # noqa: BLE001 - torch-free fallback
        name = ""
        try:
            name = next(
                (ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
                "",
            )
        except OSError:
            pass
        return {"cpu": name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="bwrap", choices=["auto", "bwrap", "apptainer"])
    ap.add_argument("--opens", type=int, default=30)
    ap.add_argument("--commands", type=int, default=200)
    ap.add_argument("--max-concurrent", type=int, default=64)
    ap.add_argument("--out", default=str(REPO / "bench_results" / "workspace.json"))
    ap.add_argument("--grade", action=argparse.BooleanOptionalAction, default=True, help="time SWE grading")
    args = ap.parse_args()

    cfg = WorkspaceConfig(backend=args.backend, max_sessions=args.max_concurrent)
    toolchain_dir(cfg.python, cfg.toolchain)  # built once per machine, not part of a reset
    with tempfile.TemporaryDirectory(prefix="lcrl-bench-ws-") as tmp:
        repo = make_repo(Path(tmp))
        print("open/close ...", flush=True)
        opens = bench_open(cfg, repo, args.opens)
        print("commands ...", flush=True)
        commands = bench_commands(cfg, repo, args.commands)
        print("concurrency ...", flush=True)
        concurrency = bench_concurrency(replace(cfg, command_timeout_s=60.0), repo, args.max_concurrent)
    grading = None
    if args.grade:
        print("grading ...", flush=True)
        grading = bench_grading(cfg)

    result = {
        "backend": args.backend,
        "cpu": cpu_info(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "open": summary(opens),
        "round_trip": commands,
        "concurrency": concurrency,
        "grading": grading,
    }
    rows = [("open (reset) + first-command ready", result["open"])]
    rows += [(f"round trip `{k}`", v) for k, v in commands.items()]
    print(f"\nworkspace bench ({args.backend}, {os.cpu_count()} CPUs: {result['cpu'].get('cpu', '?')})")
    print(f"{'what':40s} {'p50 ms':>9s} {'p99 ms':>9s} {'n':>5s}")
    for name, s in rows:
        print(f"{name:40s} {s['p50_ms']:9.1f} {s['p99_ms']:9.1f} {s['n']:5d}")
    if grading:
        for name, key in (("SWE env reset (workspace + tools)", "reset"), ("grading run per task", "grade")):
            g = grading[key]
            print(f"{name:40s} {g['p50_ms']:9.1f} {g['p99_ms']:9.1f} {g['n']:5d}")
    print(
        f"largest clean concurrent sessions: {concurrency['max_clean_sessions']} (cap {args.max_concurrent})"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
