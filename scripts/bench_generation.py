"""Decode speed of the generation engine beside this machine's matmul bound and HF ``generate``.

    python scripts/bench_generation.py [--device auto|cpu|cuda] [--batches 1,16,64] [--new-tokens 64]
                                       [--rounds 2] [--out bench_results/generation.json]

On the embedded SmolLM2-135M-Instruct, for fp32 and bf16 and each batch size, with the same chat
prompts (MBPP-style requests), on ``--device`` (default: CUDA when there is one):

* **ours**: ``HFGenerationEngine`` (``engine.dtype`` ``model`` for fp32: the live module; ``bfloat16``:
  the bf16 replica the trainer keeps in sync), sampling at T=1; on a GPU through captured CUDA
  graphs (``policy/graph_decode.py``);
* **ours-eager** (GPU only): the same static decode steps run eagerly (``engine.cuda_graphs: false``);
* **hf**: transformers' ``model.generate(do_sample=True)`` on the same prompts, with the model in
  that dtype.

On a GPU the **captured-graph floor** is measured in the same run: the captured decode step of
that batch replayed back to back with nothing else (no sampling, no host work), the time a step
cannot go below without a faster forward; ``ours`` minus the floor is the engine's own per-token
cost (sampling kernels, host bookkeeping).

Every row generates exactly ``--new-tokens`` tokens (EOS ignored), so both produce the same work.
Decode tokens/s = ``batch * (new_tokens - 1) / (total time - prefill time)``, the prefill measured
by a one-token call on the same batch; the median over ``--rounds``.

The bound is measured in the same run: dense matmul GFLOP/s (2048 x 2048, fp32 and bf16) divided
by the model's FLOPs per token (2 x parameters: every weight multiplies once per token, the tied
LM head included) is the compute-bound decode rate; the decode-shaped LM-head product
(batch x hidden -> vocabulary) is timed too. Prints a markdown table and writes JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lit_codeRL.policy.cpu_path import cpu_path  # noqa: E402
from lit_codeRL.policy.hf_engine import HFGenerationEngine  # noqa: E402
from lit_codeRL.policy.loading import load_model  # noqa: E402
from lit_codeRL.policy.precision import cpu_has_native_bf16  # noqa: E402
from lit_codeRL.policy.replica import make_replica  # noqa: E402
from lit_codeRL.policy.sampling import SamplingParams  # noqa: E402

REQUESTS = [
    "Write a python function to find the first repeated character in a given string.",
    "Write a function to reverse words in a given string.",
    "Write a python function to check whether the given number is a perfect square or not.",
    "Write a function to find the maximum product subarray of the given array.",
    "Write a function to remove all whitespaces from the given string.",
    "Write a python function to count the number of digits in a given integer.",
    "Write a function to merge two sorted lists into one sorted list.",
    "Write a function that returns the n-th Fibonacci number.",
]


DEVICE = torch.device("cpu")
"""Where the benchmark runs (``--device``)."""


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def matmul_gflops(dtype: torch.dtype, n: int = 2048, reps: int = 10) -> float:
    a, b = (torch.randn(n, n, dtype=dtype, device=DEVICE) for _ in range(2))
    for _ in range(3):
        a @ b
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n**3 / ((time.perf_counter() - t) / reps) / 1e9


def lm_head_ms(dtype: torch.dtype, rows: int, hidden: int, vocab: int, reps: int = 20) -> float:
    x = torch.randn(rows, hidden, dtype=dtype, device=DEVICE)
    w = torch.randn(vocab, hidden, dtype=dtype, device=DEVICE)
    for _ in range(3):
        torch.nn.functional.linear(x, w)
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        torch.nn.functional.linear(x, w)
    sync()
    return (time.perf_counter() - t) / reps * 1e3


def graph_floor_ms(engine: HFGenerationEngine, batch: int, width: int, new_tokens: int) -> float | None:
    """Milliseconds per replay of the captured decode step for ``batch`` rows after a ``width``
    prompt, back to back (the rows' positions stay inside the cache: one replay per new token)."""
    lean = engine._lean
    if DEVICE.type != "cuda" or lean is None or not engine.cuda_graphs:
        return None
    step = engine._graph_decoder(lean).step_for(batch, width + new_tokens)
    if step.graph is None:
        return None
    reps = new_tokens - 1

    def replays() -> float:
        step.position.zero_()
        step.slot.fill_(width)
        sync()
        t = time.perf_counter()
        for _ in range(reps):
            step()
        sync()
        return (time.perf_counter() - t) / reps * 1e3

    replays()
    return statistics.median(replays() for _ in range(3))


def prompts_for(tokenizer, batch: int) -> list[str]:
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": REQUESTS[i % len(REQUESTS)]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(batch)
    ]


def time_ours(engine: HFGenerationEngine, ids, mask, new_tokens: int) -> float:
    """Seconds for one ``generate`` of ``new_tokens`` tokens per row."""
    sync()
    t = time.perf_counter()
    engine.generate(
        ids,
        mask,
        SamplingParams(max_new_tokens=new_tokens, temperature=1.0),
        generator=torch.Generator().manual_seed(0),
    )
    sync()
    return time.perf_counter() - t


def time_hf(model, tokenizer, ids, mask, new_tokens: int) -> float:
    """Seconds for HF ``generate`` of exactly ``new_tokens`` tokens per row."""
    torch.manual_seed(0)
    sync()
    t = time.perf_counter()
    with torch.no_grad():
        model.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
    sync()
    return time.perf_counter() - t


def decode_rate(run, batch: int, new_tokens: int, rounds: int) -> dict:
    run(1)  # warm-up (allocations, kernels)
    prefill = statistics.median(run(1) for _ in range(rounds))
    totals = [run(new_tokens) for _ in range(rounds)]
    total = statistics.median(totals)
    decode_s = max(total - prefill, 1e-9)
    return {
        "tokens_per_s": batch * (new_tokens - 1) / decode_s,
        "ms_per_step": decode_s / (new_tokens - 1) * 1e3,
        "prefill_s": prefill,
        "total_s": totals,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA when available"
    )
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--dtypes",
        default="auto",
        help="comma list of float32,bfloat16; auto: on a CPU float32, plus bfloat16 where the CPU has it "
        "natively (emulated bf16 rows, asked for explicitly, are labelled so); on a GPU bfloat16 (what "
        "engine.dtype auto samples in there)",
    )
    ap.add_argument(
        "--frameworks", default="auto", help="comma list of ours,ours-eager,hf; auto: all that apply"
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench_results" / "generation.json")
    args = ap.parse_args(argv)
    global DEVICE
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    DEVICE = torch.device("cuda" if cuda else "cpu")
    if args.dtypes == "auto":
        args.dtypes = "bfloat16" if cuda else "float32,bfloat16" if cpu_has_native_bf16() else "float32"
    if args.frameworks == "auto":
        args.frameworks = "ours,ours-eager,hf" if cuda else "ours,hf"
    path = cpu_path()
    print(f"CPU path: {json.dumps(path)}", flush=True)
    batches = [int(b) for b in args.batches.split(",")]
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    model, tokenizer = load_model(name_or_path=args.model)
    model.eval().to(DEVICE)
    tokenizer.padding_side = "left"
    params = sum(p.numel() for p in model.parameters())
    cfg = model.config

    bound = {}
    for name in args.dtypes.split(","):
        gflops = matmul_gflops(dtypes[name])
        bound[name] = {
            "matmul_gflops": gflops,
            "bound_tokens_per_s": gflops * 1e9 / (2 * params),
            "lm_head_ms_batch16": lm_head_ms(dtypes[name], 16, cfg.hidden_size, cfg.vocab_size),
        }

    def native(name: str) -> bool:
        return name == "float32" or cuda or path["native_bf16"]

    rows = []
    for name in args.dtypes.split(","):
        dtype = dtypes[name]
        # fp32: the live module; another dtype: the engine's own replica (what training samples with)
        engines = {
            graphs: HFGenerationEngine(
                tokenizer, model, dtype=None if dtype is torch.float32 else dtype, cuda_graphs=graphs
            )
            for graphs in (True, False)
        }
        for engine in engines.values():
            engine.stop_token_ids = []  # every row runs to --new-tokens: equal work for all
        hf_model = model if dtype is torch.float32 else make_replica(model, dtype)
        if dtype is not torch.float32 and hasattr(hf_model, "set_attn_implementation"):
            hf_model.set_attn_implementation("sdpa")  # HF generate's own default attention
        for batch in batches:
            enc = tokenizer(
                prompts_for(tokenizer, batch), return_tensors="pt", padding=True, add_special_tokens=False
            )
            ids, mask = enc["input_ids"].to(DEVICE), enc["attention_mask"].to(DEVICE)
            for fw in args.frameworks.split(","):
                if fw in ("ours", "ours-eager"):
                    run = functools.partial(time_ours, engines[fw == "ours"], ids, mask)
                else:
                    run = functools.partial(time_hf, hf_model, tokenizer, ids, mask)
                res = decode_rate(run, batch, args.new_tokens, args.rounds)
                res |= {"framework": fw, "dtype": name, "batch": batch, "native": native(name)}
                if fw == "ours":
                    floor = graph_floor_ms(engines[True], batch, ids.size(1), args.new_tokens)
                    res["graph_floor_ms"] = floor
                rows.append(res)
                print(f"{fw:5s} {name:9s} batch {batch:3d}: {res['tokens_per_s']:7.1f} tok/s", flush=True)

    def rate(fw: str, name: str, batch: int, key: str = "tokens_per_s") -> float | None:
        for r in rows:
            if (r["framework"], r["dtype"], r["batch"]) == (fw, name, batch):
                return r[key]
        return None

    fp32_bound = bound.get("float32", {}).get("bound_tokens_per_s")
    print(
        f"\nSmolLM2-135M ({params / 1e6:.1f}M parameters), {torch.get_num_threads()} threads, "
        f"{args.new_tokens} new tokens per row, median of {args.rounds} rounds"
    )
    for name, b in bound.items():
        print(
            f"matmul {name}: {b['matmul_gflops']:.0f} GFLOP/s -> compute bound {b['bound_tokens_per_s']:.0f} tok/s; "
            f"LM head at batch 16: {b['lm_head_ms_batch16']:.1f} ms"
        )
    print(
        "\n| dtype | batch | ours tok/s | ms/step | graph floor ms | eager static ms/step | HF ms/step "
        "| HF generate tok/s | ours / HF | ours / fp32 bound | ours / our fp32 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")

    def ratio(a: float | None, b: float | None, fmt: str = "{:.2f}x") -> str:
        return fmt.format(a / b) if a and b else "-"

    for r in rows:
        if r["framework"] != "ours":
            continue
        ours, hf = r["tokens_per_s"], rate("hf", r["dtype"], r["batch"])
        cells = [
            r["dtype"] + ("" if r["native"] else " (emulated)"),
            str(r["batch"]),
            f"{ours:.1f}",
            f"{r['ms_per_step']:.2f}",
            f"{r['graph_floor_ms']:.2f}" if r.get("graph_floor_ms") else "-",
            ratio(rate("ours-eager", r["dtype"], r["batch"], "ms_per_step"), 1, "{:.2f}"),
            ratio(rate("hf", r["dtype"], r["batch"], "ms_per_step"), 1, "{:.2f}"),
            f"{hf:.1f}" if hf else "-",
            ratio(ours, hf),
            ratio(ours, fp32_bound, "{:.0%}"),
            ratio(ours, rate("ours", "float32", r["batch"])),
        ]
        print("| " + " | ".join(cells) + " |")
    result = {
        "model": args.model,
        "device": DEVICE.type,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "parameters": params,
        "threads": torch.get_num_threads(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cpu_path": path,
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "new_tokens": args.new_tokens,
        "rounds": args.rounds,
        "bound": bound,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {args.out}")
    return result


if __name__ == "__main__":
    main()
