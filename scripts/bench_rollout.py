"""Rollout throughput of each generation engine on the same prompts and model: a table and JSON.

    python scripts/bench_rollout.py [--prompts 8] [--generations 4] [--new-tokens 128] [--rounds 2]
                                    [--engines hf-fp32,hf-bf16,openai] [--out bench_results/rollout.json]

What a rollout step asks of an engine: ``--prompts`` MBPP-style chat prompts, ``--generations``
samples each at T=1, up to ``--new-tokens`` tokens, through the engine protocol
(``GenerationEngine.generate``), on the embedded SmolLM2-135M-Instruct. Tokens/s counts the tokens
actually generated (a completion may end at EOS), divided by the wall time of the call; the median
over ``--rounds`` after one warm-up call.

Engines (those this machine can run; the others are listed as not run, with the reason):

* ``hf-fp32``: the transformers engine sampling from the live fp32 module (``engine.dtype: model``);
* ``hf-bf16``: the same engine from its bf16 replica (``engine.dtype: bfloat16``), run only where the
  CPU computes bf16 natively (elsewhere it is emulated and says nothing about the engine);
* ``openai``: the endpoint engine against llama.cpp's server on the same GGUF file (Q4_1 weights,
  its own kernels), started here with ``--server-slots`` parallel slots; found as
  ``$LIT_CODERL_LLAMA_SERVER`` or ``llama-server`` on PATH (``make test`` builds it);
* ``vllm``: the colocated vLLM engine (``pip install -e .[vllm]``), run only with CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_generation import REQUESTS  # noqa: E402  (scripts/ is on sys.path)

from lit_codeRL.policy.cpu_path import cpu_path  # noqa: E402
from lit_codeRL.policy.hf_engine import HFGenerationEngine  # noqa: E402
from lit_codeRL.policy.loading import load_model, resolve_source  # noqa: E402
from lit_codeRL.policy.openai_engine import OpenAIEngine  # noqa: E402
from lit_codeRL.policy.precision import cpu_has_native_bf16  # noqa: E402
from lit_codeRL.policy.sampling import SamplingParams  # noqa: E402
from lit_codeRL.policy.vllm_engine import VLLMEngine, vllm_available  # noqa: E402


def llama_server_binary() -> str | None:
    built = os.environ.get("LIT_CODERL_LLAMA_SERVER", str(Path.home() / ".cache/lit_coderl/bin/llama-server"))
    return built if os.access(built, os.X_OK) else shutil.which("llama-server")


class LlamaServer:
    """llama.cpp's server on ``gguf``, on a free local port, for the length of a ``with``."""

    def __init__(self, binary: str, gguf: str, slots: int, context: int, threads: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        argv = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(self.port)]
        argv += ["-c", str(context * slots), "-np", str(slots), "-t", str(threads)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.proc.kill()
        raise RuntimeError("llama-server did not come up within 120 s")

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def measure(engine, ids, mask, sampling: SamplingParams, generations: int, rounds: int) -> dict:
    engine.generate(ids, mask, sampling, generations, torch.Generator().manual_seed(0))  # warm-up
    runs = []
    for r in range(rounds):
        t = time.perf_counter()
        out = engine.generate(ids, mask, sampling, generations, torch.Generator().manual_seed(1 + r))
        seconds = time.perf_counter() - t
        runs.append({"seconds": seconds, "tokens": int(out.completion_mask.sum())})
    rates = [r["tokens"] / r["seconds"] for r in runs]
    return {
        "tokens_per_s": statistics.median(rates),
        "seconds": statistics.median(r["seconds"] for r in runs),
        "tokens": statistics.median(r["tokens"] for r in runs),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--engines", default="hf-fp32,hf-bf16,openai,vllm")
    ap.add_argument("--server-slots", type=int, default=8, help="openai: llama.cpp parallel slots")
    ap.add_argument("--out", type=Path, default=REPO / "bench_results" / "rollout.json")
    args = ap.parse_args(argv)

    model, tokenizer = load_model(name_or_path=args.model)
    model.float().eval()
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": REQUESTS[i % len(REQUESTS)]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for i in range(args.prompts)
    ]
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)
    threads = torch.get_num_threads()
    results: dict[str, dict] = {}
    for name in args.engines.split(","):
        if name == "hf-fp32":
            engine = HFGenerationEngine(tokenizer, model)  # dtype None: the live module
        elif name == "hf-bf16":
            if not cpu_has_native_bf16():
                results[name] = {"not_run": "this CPU has no native bf16 (emulated bf16 would be measured)"}
                continue
            engine = HFGenerationEngine(tokenizer, model, dtype=torch.bfloat16)  # its bf16 replica
        elif name == "openai":
            binary = llama_server_binary()
            kind, gguf = resolve_source(args.model)
            if binary is None or kind != "gguf":
                results[name] = {"not_run": "no llama-server (make test builds it) or no GGUF source"}
                continue
            context = 1024 + args.new_tokens
            with LlamaServer(binary, str(gguf), args.server_slots, context, threads) as server:
                engine = OpenAIEngine(tokenizer, server.url, max_concurrency=args.server_slots, timeout_s=600)
                ids, mask = engine.encode_prompts(prompts)
                results[name] = measure(engine, ids, mask, sampling, args.generations, args.rounds)
                results[name]["server"] = (
                    f"llama.cpp llama-server, {args.server_slots} slots, {threads} threads"
                )
            continue
        elif name == "vllm":
            if not vllm_available():
                results[name] = {"not_run": "needs CUDA and vllm (pip install -e '.[vllm]')"}
                continue
            engine = VLLMEngine(tokenizer, gpu_memory_utilization=0.5, sleep_level=0)
            engine.sync_weights(model.cuda())
        else:
            results[name] = {"not_run": "unknown engine"}
            continue
        ids, mask = engine.encode_prompts(prompts)
        results[name] = measure(engine, ids, mask, sampling, args.generations, args.rounds)
    if "vllm" not in results:
        results["vllm"] = {"not_run": "not asked for (--engines ...,vllm; needs CUDA and vllm)"}

    rows = ["| engine | tokens/s | s per call | tokens per call |", "|---|---|---|---|"]
    for name, r in results.items():
        if "not_run" in r:
            rows.append(f"| {name} | not run: {r['not_run']} | | |")
        else:
            rows.append(f"| {name} | {r['tokens_per_s']:.1f} | {r['seconds']:.2f} | {r['tokens']:.0f} |")
    table = "\n".join(rows)
    report = {
        "workload": {
            "model": args.model,
            "prompts": args.prompts,
            "generations": args.generations,
            "max_new_tokens": args.new_tokens,
            "temperature": 1.0,
            "rounds": args.rounds,
        },
        "cpu_path": cpu_path(),
        "machine": {"cpus": os.cpu_count(), "torch_threads": threads, "platform": platform.platform()},
        "versions": {"torch": torch.__version__},
        "engines": results,
        "table": table,
    }
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
