"""Memory of a quantized policy with LoRA against full-precision ones: at load, and at the peak of
one training step. A table and ``bench_results/quantized.json``.

    python scripts/bench_quantized.py                       # SmolLM2-135M-Instruct, CPU
    python scripts/bench_quantized.py --variants fp32,4bit-lora --seq 512

Each variant runs in its own process (so one's allocations cannot hide in another's): it loads the
policy (``lit_codeRL.policy.loading.load_model``, as a run does), records the process's resident
memory above what it held after importing torch and transformers, resets the peak
(``/proc/self/clear_refs``), runs ``--steps`` training steps (forward, backward, AdamW on the
trainable parameters) on a fixed ``--batch`` x ``--seq`` batch under the autocast a run would use,
and records the peak resident memory of those steps above the same baseline. Variants:

* ``fp32`` / ``bf16``: full fine-tuning, parameters in that dtype;
* ``fp32-lora``: LoRA (r 16) on an fp32 base;
* ``8bit-lora`` / ``4bit-lora``: LoRA on a bitsandbytes LLM.int8 / NF4 (double-quantized) base
  (``model.quantization``), computing in ``quant_compute_dtype: auto``.

On a GPU (``--device cuda``) the same is measured with ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "fp32": {"dtype": "float32"},
    "bf16": {"dtype": "bfloat16"},
    "fp32-lora": {"dtype": "float32", "lora": True},
    "8bit-lora": {"quantization": "8bit", "lora": True},
    "4bit-lora": {"quantization": "4bit", "lora": True},
}


def _rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(variant: str, model: str, batch: int, seq: int, steps: int, device: str) -> dict:
    """One variant, in this process."""
    import torch
    import transformers  # noqa: F401  (its import is part of the baseline)

    sys.path.insert(0, str(REPO))
    from lit_codeRL.policy.loading import LoraSettings, is_quantized, load_model
    from lit_codeRL.policy.precision import cpu_has_native_bf16

    spec = dict(VARIANTS[variant])
    lora = LoraSettings(r=16, alpha=32) if spec.pop("lora", False) else None
    cuda = device == "cuda"
    base = torch.cuda.memory_allocated() / 2**20 if cuda else _rss_mb()
    t0 = time.perf_counter()
    policy, _ = load_model(name_or_path=model, lora=lora, **spec)
    if cuda and not is_quantized(policy):
        policy.cuda()
    load_s = time.perf_counter() - t0
    at_load = (torch.cuda.memory_allocated() / 2**20 if cuda else _rss_mb()) - base
    params = sum(p.numel() for p in policy.parameters())
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    weight_mb = policy.get_memory_footprint() / 2**20
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, 20000, (batch, seq), generator=gen).to(device)
    opt = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-5)
    # what a run's precision "auto" picks: bf16 autocast where the device computes it natively
    native = torch.cuda.is_bf16_supported() if cuda else cpu_has_native_bf16()
    autocast = native and spec.get("dtype") != "bfloat16"
    policy.train()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak of the steps only
    step_s = []
    for _ in range(steps):
        t = time.perf_counter()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = policy(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step_s.append(time.perf_counter() - t)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if cuda else _rss_mb("VmHWM")) - base
    return {
        "variant": variant,
        "params_m": params / 1e6,
        "trainable_m": trainable / 1e6,
        "weights_mb": weight_mb,
        "at_load_mb": at_load,
        "peak_step_mb": peak,
        "step_s": sorted(step_s)[len(step_s) // 2],
        "load_s": load_s,
        "autocast_bf16": autocast,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--out", default=str(REPO / "bench_results" / "quantized.json"))
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one variant
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.model, args.batch, args.seq, args.steps, args.device)))
        return {}
    sys.path.insert(0, str(REPO))
    from lit_codeRL.policy.cpu_path import cpu_path

    results = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        cmd = [sys.executable, __file__, "--one", variant, "--model", args.model, "--batch", str(args.batch),
               "--seq", str(args.seq), "--steps", str(args.steps), "--device", args.device]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if run.returncode != 0:
            results.append({"variant": variant, "not_run": run.stderr.strip().splitlines()[-1][:300]})
            continue
        results.append(json.loads(run.stdout.strip().splitlines()[-1]))
    rows = [
        "| variant | params (M) | trainable (M) | weights (MiB) | RSS at load (MiB) | peak in a step (MiB) | step s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "not_run" in r:
            rows.append(f"| {r['variant']} | not run: {r['not_run']} | | | | | |")
            continue
        rows.append(
            f"| {r['variant']} | {r['params_m']:.1f} | {r['trainable_m']:.2f} | {r['weights_mb']:.0f} | "
            f"{r['at_load_mb']:.0f} | {r['peak_step_mb']:.0f} | {r['step_s']:.2f} |"
        )
    table = "\n".join(rows)
    report = {
        "command": "python scripts/bench_quantized.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": args.model,
        "batch": args.batch,
        "seq": args.seq,
        "device": args.device,
        "cpu_path": cpu_path() if args.device == "cpu" else None,
        "results": results,
        "table": table,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(table)
    print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
