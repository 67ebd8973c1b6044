"""Candidate generation of ``lit-coderl synth``: every mutant of a repository from one parse per
file (``mutations.mutants``) against a parse per site (``apply_mutation``, what synthesis did
before).

    python scripts/bench_synth_candidates.py REPO [REPO ...] [--per-site-limit 30]
                                             [--out bench_results/synth_candidates.json]

Each ``REPO`` is read as synthesis reads it (a directory or a git bundle; ``swe`` and ``debug``
for the shipped sources). Per repository: the source files bugs go into, their mutation sites,
the seconds ``mutants`` takes for all of them, and the seconds per site of ``apply_mutation``,
timed on the first ``--per-site-limit`` sites of each file (0: all) and scaled to every site:
the old way is minutes on a big file. The timed sites' mutants must be the same both ways.
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

from lit_codeRL.problems.synth.candidates import source_files  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repos", nargs="+", help="directories, git bundles, swe, debug")
    parser.add_argument("--per-site-limit", type=int, default=30)
    parser.add_argument("--out", type=Path, default=REPO / "bench_results" / "synth_candidates.json")
    args = parser.parse_args()
    from lit_codeRL.problems.synth.repository import read_repository

    rows = []
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
    table = "\n".join(lines)
    print(table)
    from lit_codeRL.policy.cpu_path import cpu_path

    result = {
        "workload": {"repos": args.repos, "per_site_limit": args.per_site_limit},
        "cpu": cpu_path(),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "results": rows,
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
