"""Candidate generation of ``lit-coderl synth``: every mutant of a repository from one parse per
file (``mutations.mutants``) against a parse per site (``apply_mutation``, what synthesis did
before).

    python scripts/bench_synth_candidates.py REPO [REPO ...] [--per-site-limit 30]
                                             [--out bench_results/synth_candidates.json]
    python scripts/bench_synth_candidates.py --scaling 250 500 1000 [--out bench_results/synth_scaling.json]

Each ``REPO`` is read as synthesis reads it (a directory or a git bundle; ``swe`` and ``debug``
for the shipped sources). Per repository: the source files bugs go into, their mutation sites,
the seconds ``mutants`` takes for all of them, and the seconds per site of ``apply_mutation``,
timed on the first ``--per-site-limit`` sites of each file (0: all) and scaled to every site:
the old way is minutes on a big file. The timed sites' mutants must be the same both ways.

``--scaling N ...``: how candidate generation scales with one file's length instead, the seconds
``candidates_by_function`` (every mutant as a de-duplicated diff) takes on a generated module of N
functions, with and without a final newline. Linear is the target: the same seconds per candidate
at every N. (Before: 4.6, 11.3 and 43.9 s for 250, 500 and 1,000 functions, each candidate's diff
made from the whole new file; without a final newline every site also rendered the whole module
again: 250 functions, 543 s.)

Prints a table and writes JSON with the CPU named.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.problems.synth.candidates import candidates_by_function, source_files  # noqa: E402
from lit_codeRL.problems.synth.mutations import apply_mutation, mutants  # noqa: E402


def shipped(name: str) -> list[tuple[str, dict[str, str | bytes]]]:
    """The shipped SWE repositories (``swe``) or debugging programs (``debug``), as synthesis reads them."""
    from lit_codeRL.problems.synth.cli import shipped_debug_programs, shipped_swe_repositories

    return shipped_swe_repositories() if name == "swe" else shipped_debug_programs()


def measure(name: str, files: dict[str, str | bytes], per_site_limit: int) -> dict:
    paths = source_files(files)
    sites = timed = 0
    one_parse_s = per_site_s = 0.0
    for path in paths:
        source = files[path]
        assert isinstance(source, str)
        t0 = time.perf_counter()
        pairs = mutants(source)
        one_parse_s += time.perf_counter() - t0
        sites += len(pairs)
        sample = pairs if per_site_limit <= 0 else pairs[:per_site_limit]
        t0 = time.perf_counter()
        for site, mutant in sample:
            if apply_mutation(source, site) != mutant:
                raise SystemExit(f"{name}: {path}: {site} differs between the two ways")
        spent = time.perf_counter() - t0
        per_site_s += spent / len(sample) * len(pairs) if sample else 0.0
        timed += len(sample)
    return {
        "repository": name,
        "files": len(paths),
        "sites": sites,
        "one_parse_s": round(one_parse_s, 2),
        "per_site_s_scaled": round(per_site_s, 1),
        "per_site_timed_sites": timed,
        "speedup": round(per_site_s / one_parse_s, 1) if one_parse_s else None,
    }


def generated_module(functions: int) -> str:
    """``functions`` small functions, each with sites of several kinds, ending in a newline."""
    return "\n\n".join(
        f"def f{i}(x, y):\n    total = 0\n    for k in range(x):\n        if k % 3 == {i % 3}:\n"
        f"            total += k * y\n    return total - {i}\n"
        for i in range(functions)
    )


def measure_scaling(functions: int, final_newline: bool) -> dict:
    source = generated_module(functions)
    source = source if final_newline else source.rstrip("\n")
    t0 = time.perf_counter()
    groups = candidates_by_function({"pkg/mod.py": source})
    seconds = time.perf_counter() - t0
    count = sum(len(group) for group in groups.values())
    return {
        "functions": functions,
        "lines": source.count("\n") + 1,
        "final_newline": final_newline,
        "candidates": count,
        "seconds": round(seconds, 2),
        "ms_per_candidate": round(1000 * seconds / count, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repos", nargs="*", help="directories, git bundles, swe, debug")
    parser.add_argument("--per-site-limit", type=int, default=30)
    parser.add_argument("--scaling", type=int, nargs="+", help="functions of each generated module")
    parser.add_argument("--out", type=Path, default=None, help="default: bench_results/synth_<mode>.json")
    args = parser.parse_args()
    if bool(args.repos) == bool(args.scaling):
        parser.error("name repositories or --scaling N ..., not both")
    from lit_codeRL.problems.synth.repository import read_repository

    rows = []
    if args.scaling:
        lines = [
            "| functions | lines | final newline | candidates | s | ms per candidate |",
            "|---|---|---|---|---|---|",
        ]
        for n in args.scaling:
            for final_newline in (True, False):
                rows.append(measure_scaling(n, final_newline))
                print(json.dumps(rows[-1]), flush=True)
        lines += [
            f"| {r['functions']} | {r['lines']} | {'yes' if r['final_newline'] else 'no'} | {r['candidates']} "
            f"| {r['seconds']} | {r['ms_per_candidate']} |"
            for r in rows
        ]
    else:
        for repo in args.repos:
            sources = shipped(repo) if repo in ("swe", "debug") else [read_repository(repo)]
            for name, files in sources:
                rows.append(measure(name, files, args.per_site_limit))
                print(json.dumps(rows[-1]), flush=True)
        lines = [
            "| repository | files | sites | one parse per file, s | a parse per site, s (scaled) | speed-up |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['repository']} | {r['files']} | {r['sites']} | {r['one_parse_s']} | {r['per_site_s_scaled']} "
            f"| {r['speedup']}x |"
            for r in rows
        ]
    out = args.out or REPO / "bench_results" / (
        "synth_scaling.json" if args.scaling else "synth_candidates.json"
    )
    table = "\n".join(lines)
    print(table)
    from lit_codeRL.policy.cpu_path import cpu_path

    result = {
        "workload": {"repos": args.repos, "per_site_limit": args.per_site_limit, "scaling": args.scaling},
        "cpu": cpu_path(),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "results": rows,
        "table": table,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
