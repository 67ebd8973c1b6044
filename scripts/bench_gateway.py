"""The gateway's cost and an agent program's throughput (issue #51).

    python scripts/bench_gateway.py [--model smollm2-135m-instruct] [--calls 16] [--concurrency 8]
                                    [--episodes 8] [--out bench_results/gateway.json]

* **overhead per call**: the same seeded chat request (``--overhead-tokens`` completion tokens,
  default 1, so that decode noise does not hide the fixed cost) answered ``--calls`` times through
  the gateway (the real OpenAI client over HTTP: template rendering, queue, engine, reply,
  record) and by direct engine calls on the same ids and seed (identical tokens, so identical
  decode work); the difference per call is the gateway's cost (p50 and mean of the pairs);
* **concurrent calls**: ``--concurrency`` clients at once, each a different prompt: calls/s and
  tokens/s against the same calls one at a time (the batching the gateway does);
* **episodes per minute**: ``--episodes`` scripted-agent episodes (``simple_agent.py``, 3 steps)
  on the shipped SWE tasks, run together through ``HarnessRunner`` (workspace start, agent,
  gateway calls, grading in a fresh workspace), with the share of the wall clock spent in
  generation.

Prints a table and writes JSON with the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import openai  # noqa: E402
import torch  # noqa: E402

from lit_codeRL.envs.harness.env import HarnessEnv, HarnessSettings  # noqa: E402
from lit_codeRL.envs.swe.env import SWESettings  # noqa: E402
from lit_codeRL.gateway.requests import ServeLimits  # noqa: E402
from lit_codeRL.gateway.server import Gateway, GatewayConfig  # noqa: E402
from lit_codeRL.policy.engine import EngineSettings, SamplingParams, make_engine  # noqa: E402
from lit_codeRL.policy.loading import ModelSettings, load_model  # noqa: E402
from lit_codeRL.rollout.harness import HarnessRunner  # noqa: E402
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set  # noqa: E402


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                flags = Path("/proc/cpuinfo").read_text()
                bf16 = "avx512_bf16" in flags or "amx_bf16" in flags
                return line.split(":", 1)[1].strip() + (" (AVX-512-BF16)" if bf16 else " (no native bf16)")
    except OSError:
        pass
    return platform.processor() or "unknown"


def serve(engine, tokenizer, max_tokens: int):
    gateway = Gateway(tokenizer, GatewayConfig("bench", ServeLimits(max_tokens=max_tokens))).start(port=0)
    stop = threading.Event()

    def drive() -> None:
        with torch.inference_mode():
            gateway.pump(engine, stop.is_set, torch.Generator().manual_seed(0))

    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    return gateway, lambda: (stop.set(), thread.join(), gateway.stop())


def overhead(engine, tokenizer, gateway, calls: int, max_tokens: int) -> dict:
    client = openai.OpenAI(base_url=gateway.url, api_key="bench", max_retries=0, timeout=600)
    messages = [
        {"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}
    ]
    via, direct, tokens = [], [], []
    ids = None
    for i in range(calls + 1):  # the first of each is a warm-up
        t0 = time.perf_counter()
        r = client.chat.completions.create(
            model="bench", messages=messages, max_tokens=max_tokens, temperature=1.0, seed=i
        )
        t1 = time.perf_counter()
        ids = r.model_extra["prompt_token_ids"]
        p, m = engine.pad_prompts([ids])
        t2 = time.perf_counter()
        with torch.inference_mode():
            out = engine.generate(
                p,
                m,
                SamplingParams(max_new_tokens=max_tokens, temperature=1.0),
                1,
                torch.Generator().manual_seed(i),
            )
        t3 = time.perf_counter()
        same = (
            out.completion_ids[0, : int(out.completion_mask[0].sum())].tolist()
            == r.choices[0].model_extra["token_ids"]
        )
        if i:
            via.append(t1 - t0)
            direct.append(t3 - t2)
            tokens.append((len(r.choices[0].model_extra["token_ids"]), same))
    gap = [a - b for a, b in zip(via, direct, strict=True)]
    return {
        "calls": calls,
        "prompt_tokens": len(ids or []),
        "completion_tokens_mean": statistics.mean(t for t, _ in tokens),
        "identical_tokens": all(same for _, same in tokens),
        "gateway_ms_p50": 1e3 * statistics.median(via),
        "direct_ms_p50": 1e3 * statistics.median(direct),
        "overhead_ms_p50": 1e3 * statistics.median(gap),
        "overhead_ms_mean": 1e3 * statistics.mean(gap),
    }


def concurrent(gateway, concurrency: int, max_tokens: int) -> dict:
    def one(i: int, out: list) -> None:
        c = openai.OpenAI(base_url=gateway.url, api_key=f"c{i}", max_retries=0, timeout=600)
        r = c.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": f"Task {i}: sort a list of numbers in Python."}],
            max_tokens=max_tokens, temperature=1.0,
        )  # fmt: skip
        out.append(r.usage.completion_tokens)

    result = {}
    for mode in ("sequential", "concurrent"):
        done: list[int] = []
        batches = gateway.queue.batches
        t0 = time.perf_counter()
        if mode == "sequential":
            for i in range(concurrency):
                one(i, done)
        else:
            threads = [threading.Thread(target=one, args=(i, done)) for i in range(concurrency)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        wall = time.perf_counter() - t0
        result[mode] = {
            "calls": len(done),
            "wall_s": wall,
            "calls_per_s": len(done) / wall,
            "tokens_per_s": sum(done) / wall,
            "generate_calls": gateway.queue.batches - batches,
        }
    result["speedup"] = result["concurrent"]["tokens_per_s"] / result["sequential"]["tokens_per_s"]
    return result


def episodes_per_minute(engine, episodes: int, max_tokens: int) -> dict:
    problems = load_problem_set(ProblemSettings(source="swe", split="train"))
    env = HarnessEnv(
        HarnessSettings(
            command="python3 /opt/lcrl-agent/simple_agent.py --task {task_file} --base-url {base_url} --max-steps 3",
            timeout_s=600,
            swe=SWESettings(grade_timeout_s=300, parallel=max(8, episodes)),
        )
    )
    runner = HarnessRunner(engine, env, SamplingParams(max_new_tokens=max_tokens, temperature=1.0))
    try:
        runner.run(problems[:1], 1, torch.Generator().manual_seed(0))  # warm-up: toolchain, repo cache
        chosen = [problems[i % len(problems)] for i in range(episodes)]
        stats: dict[str, float] = {}
        t0 = time.perf_counter()
        ran = runner.run(chosen, 1, torch.Generator().manual_seed(1), stats)
        wall = time.perf_counter() - t0
    finally:
        runner.close()
    calls = sum(e.record()["gateway"]["calls"] for e in ran)
    return {
        "episodes": len(ran),
        "wall_s": wall,
        "episodes_per_min": 60 * len(ran) / wall,
        "gateway_calls": calls,
        "agent_phase_s": stats.get("generate_s", 0.0),
        "grading_s": stats.get("reward_wait_s", 0.0),
        "verdicts": sorted({e.record()["verdict"] for e in ran}),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--calls", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument(
        "--max-tokens", type=int, default=64, help="completion tokens of the concurrency and harness parts"
    )
    p.add_argument("--overhead-tokens", type=int, default=1, help="completion tokens of the overhead part")
    p.add_argument("--out", default=str(REPO / "bench_results" / "gateway.json"))
    args = p.parse_args()
    model, tokenizer = load_model(ModelSettings(name_or_path=args.model))
    model.eval()
    engine = make_engine(EngineSettings(dtype="auto"), tokenizer, model)
    gateway, close = serve(engine, tokenizer, args.max_tokens)
    try:
        # the engine is driven by the gateway's thread; direct calls take turns with it (one at a time)
        lock_free = overhead(engine, tokenizer, gateway, args.calls, args.overhead_tokens)
        conc = concurrent(gateway, args.concurrency, args.max_tokens)
    finally:
        close()
    eps = episodes_per_minute(engine, args.episodes, args.max_tokens)
    result = {
        "cpu": cpu_name(),
        "model": args.model,
        "max_tokens": args.max_tokens,
        "overhead_tokens": args.overhead_tokens,
        "torch_threads": torch.get_num_threads(),
        "overhead": lock_free,
        "concurrency": conc,
        "harness": eps,
    }
    print(
        f"CPU: {result['cpu']}, model {args.model}, max_tokens {args.max_tokens} (overhead: {args.overhead_tokens})"
    )
    o = lock_free
    print("| measure | value |\n|---|---|")
    print(f"| one call through the gateway, p50 | {o['gateway_ms_p50']:.0f} ms |")
    print(f"| the same call, direct engine, p50 | {o['direct_ms_p50']:.0f} ms |")
    print(
        f"| gateway overhead per call, p50 (mean) | {o['overhead_ms_p50']:.1f} ms ({o['overhead_ms_mean']:.1f} ms) |"
    )
    print(f"| identical tokens both ways | {o['identical_tokens']} |")
    for mode in ("sequential", "concurrent"):
        c = conc[mode]
        print(
            f"| {args.concurrency} calls {mode} | {c['tokens_per_s']:.0f} tok/s, {c['calls_per_s']:.2f} calls/s, {c['generate_calls']} generate calls |"
        )
    print(
        f"| harness episodes per minute ({eps['episodes']} together) | {eps['episodes_per_min']:.1f} ({eps['gateway_calls']} calls, agents {eps['agent_phase_s']:.0f} s, grading {eps['grading_s']:.0f} s) |"
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
