"""Multi-turn rollout cost of the CPU engine, with and without reusing kept prefixes.

    python scripts/bench_multiturn.py [--batch 10] [--prompt 600] [--turns 4] [--new-tokens 64]
                                      [--observation 150] [--out bench_results/multiturn.json]

An agent episode's next prompt is its history: the last prompt, the action sampled and the env's
observation. This times ``--turns`` turns of ``--batch`` such episodes on the embedded
SmolLM2-135M-Instruct (bf16 where the CPU computes in it, else fp32; greedy, every row decoding
``--new-tokens``, observations of random tokens, each row's lengths different) through
``HFGenerationEngine`` twice, with ``engine.prefix_cache_mib`` 0 (every turn prefills the whole
history) and on (a turn prefills only what follows the row's kept sequence). Both should decode the
same tokens (counted: in bf16 another batch shape's rounding can flip a near-tie). Prints a table per turn and writes JSON with the CPU named.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.policy.cpu_path import cpu_path  # noqa: E402
from lit_codeRL.policy.hf_engine import HFGenerationEngine  # noqa: E402
from lit_codeRL.policy.loading import load_model  # noqa: E402
from lit_codeRL.policy.sampling import SamplingParams  # noqa: E402


def episodes(engine: HFGenerationEngine, args: argparse.Namespace) -> tuple[list[float], list[list[int]]]:
    """Seconds per turn and every action's ids."""
    gen = torch.Generator().manual_seed(0)
    contexts = [
        torch.randint(100, 40000, (args.prompt + 17 * r,), generator=gen).tolist() for r in range(args.batch)
    ]
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
    seconds, actions = [], []
    for _ in range(args.turns):
        ids, mask = engine.pad_prompts(contexts)
        start = time.perf_counter()
        out = engine.generate(ids, mask, sampling, 1, None)
        seconds.append(time.perf_counter() - start)
        done = [
            out.completion_ids[r, : int(out.completion_mask[r].sum())].tolist() for r in range(args.batch)
        ]
        actions += done
        contexts = [
            c + a + torch.randint(100, 40000, (args.observation + 9 * r,), generator=gen).tolist()
            for r, (c, a) in enumerate(zip(contexts, done, strict=True))
        ]
    return seconds, actions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--prompt", type=int, default=600, help="first prompt's tokens (row r: + 17 r)")
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--observation", type=int, default=150, help="observation tokens per turn (row r: + 9 r)")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results" / "multiturn.json")
    args = ap.parse_args()
    model, tokenizer = load_model(name_or_path=args.model)
    path = cpu_path()
    dtype = getattr(torch, path["engine_auto_dtype"])
    results = {}
    for name, mib in (("full prefill", 0.0), ("kept prefixes", 1024.0)):
        engine = HFGenerationEngine(tokenizer, model, dtype=dtype, prefix_cache_mib=mib)
        engine.stop_token_ids = []  # every row decodes --new-tokens
        seconds, actions = episodes(engine, args)
        results[name] = {"turn_s": [round(s, 2) for s in seconds], "total_s": round(sum(seconds), 2)}
        results[name]["actions"] = actions
    full, kept = results["full prefill"].pop("actions"), results["kept prefixes"].pop("actions")
    differing = sum(a != b for a, b in zip(full, kept, strict=True))
    same = differing == 0
    speedup = results["full prefill"]["total_s"] / results["kept prefixes"]["total_s"]
    print("\n| turn | full prefill (s) | kept prefixes (s) |\n|---|---|---|")
    for t in range(args.turns):
        print(
            f"| {t + 1} | {results['full prefill']['turn_s'][t]} | {results['kept prefixes']['turn_s'][t]} |"
        )
    print(
        f"| all | {results['full prefill']['total_s']} | {results['kept prefixes']['total_s']} |\n"
        f"\nspeed-up {speedup:.2f}x; actions differing: {differing} of {len(full)} (bf16 rounding of another "
        f"batch shape can flip a near-tie); {path['cpu']} ({', '.join(path['flags_found'])}), {path['threads']} threads, {dtype}"
    )
    report = {
        "workload": vars(args) | {"out": str(args.out)},
        "cpu_path": path,
        "torch": torch.__version__,
        "results": results,
        "speedup": round(speedup, 2),
        "same_actions": same,
        "actions_differing": differing,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
