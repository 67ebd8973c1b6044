"""Every command the README, docs/ and the configs' header comments show runs, so none can rot.

The commands are read from the documents themselves: the ```bash blocks of the README and of
``docs/*.md`` (``\\`` continuations joined, ``VAR=value`` prefixes and ``a && b`` chains split), the
comment block at the top of every ``configs/*.yaml``, and the ``lit-coderl`` lines of the Makefile
targets the README runs (``make run``). Each distinct command is then

* **run**: ``lit-coderl fit/validate/test`` for real, through the CLI entry point
  (``lit_codeRL.cli.main``, in-process: the same code path as the console script without ~10 s of
  interpreter start and imports per command), for one step on the tiny random model, in a
  scratch working directory holding the repository's ``configs/`` and ``data/`` and a
  ``../shared`` beside it, so relative paths (``runs/...``, ``../shared/data/mbpp``) mean what
  they mean in a checkout. Only what makes it small is appended (``TINY_*`` below), never a key the
  command sets itself. A path of an earlier run (``runs/x/version_0/hf_model``, ``.../last.ckpt``,
  ``rollouts.jsonl``, ``<run>``) is a run this module made first (``produced_runs``), linked
  where the command looks. Multi-process commands run as a subprocess (``slow``).
* **parsed** (``--print_config``) where it needs a package the test environment does not have
  (W&B), and for every config, with the flags its header mentions in passing;
* **listed in ``NOT_RUN``** with the reason (SLURM, installs, benchmarks, the suite itself), and
  still checked for what can be checked without running it (the script exists, takes the flags
  shown, the config and fit arguments an ``sbatch`` line passes parse).

A documented command that is none of these (a new ``python scripts/...`` line, a placeholder the
test does not know) fails ``test_every_documented_command_is_run_or_classified`` until it is
classified here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from lit_codeRL.console import CurrentStderrHandler
from lit_codeRL.policy import platform
from tests.conftest import shared_dir

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
PROGRAMS = ("lit-coderl", "make", "sbatch", "srun", "python", "python3", "pip")


# ------------------------------------------------------------------------------ reading the docs
@dataclass
class Command:
    """One documented command line."""

    words: list[str]
    """The command's words after any ``VAR=value`` prefix (shell quoting removed)."""
    env: dict[str, str]
    where: str
    """``README.md:LINE``, ``docs/x.md:LINE``, ``configs/x.yaml:LINE`` or ``Makefile:LINE``."""

    @property
    def text(self) -> str:
        """The key of ``NOT_RUN``: env prefix and words joined by single spaces."""
        return " ".join([*(f"{k}={v}" for k, v in self.env.items()), *self.words])

    @property
    def program(self) -> str:
        return self.words[0]


def _split(line: str, where: str) -> list[Command]:
    """``a && b`` into two commands, each with its ``VAR=value`` prefix taken apart."""
    # `<hf_model dir>` is one placeholder, not two words (`'["</execute>"]'` is no placeholder)
    line = re.sub(r"<[A-Za-z_][\w ]*>", lambda m: shlex.quote(m.group(0)), line)
    commands, words = [], shlex.split(line, comments=True)
    chunks: list[list[str]] = [[]]
    for w in words:
        if w == "&&":
            chunks.append([])
        else:
            chunks[-1].append(w)
    for chunk in chunks:
        env = {}
        while chunk and re.fullmatch(r"[A-Za-z_]\w*=.*", chunk[0]):
            key, _, value = chunk.pop(0).partition("=")
            env[key] = value
        if chunk:
            commands.append(Command(chunk, env, where))
    return commands


def readme_commands(text: str, name: str = "README.md") -> list[Command]:
    """Every command line of the ```bash blocks of a Markdown text."""
    commands = []
    lines = text.splitlines()
    in_bash, pending, start = False, "", 0
    for number, line in enumerate(lines, 1):
        if line.strip().startswith("```"):
            in_bash = line.strip() == "```bash"
            continue
        if not in_bash:
            continue
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        commands += _split(pending + stripped, f"{name}:{start}")
        pending = ""
    return commands


_COMMAND_IN_COMMENT = re.compile(
    r"\s*(?:[^:`]*:\s+)?((?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:"
    + "|".join(map(re.escape, PROGRAMS))
    + r")(?:\s.*)?)$"
)
_FLAG = re.compile(r"(--[a-z_]+\.[\w.]+)(?:\s+('[^']*'|[^\s()'-][^\s()]*))?")
"""A ``--group.key value`` mentioned in prose (dotted: a config key, not a script's ``--data``)."""


def header(path: Path) -> list[tuple[int, str]]:
    """The comment block at the top of a config: ``(line number, text after '#')``."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("#"):
            break
        out.append((number, line[1:]))
    return out


def config_header_commands(path: Path) -> tuple[list[Command], list[tuple[str, str | None]]]:
    """The commands of a config's header comment, and the ``--flag value`` pairs it mentions
    outside them (``MBPP instead: --model.init_args.problems.source ...``)."""
    name = f"configs/{path.name}"
    commands: list[Command] = []
    flags: list[tuple[str, str | None]] = []
    pending, start = "", 0
    for number, text in header(path):
        if pending:
            line = pending + text.strip()
        elif m := _COMMAND_IN_COMMENT.match(text):
            line, start = m.group(1).strip(), number
        else:
            flags += [(flag, value.strip("'") if value else None) for flag, value in _FLAG.findall(text)]
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        commands += _split(line, f"{name}:{start}")
    return commands, flags


def makefile_commands(target: str) -> list[Command]:
    """The recipe lines of a Makefile target that are commands of ours (``lit-coderl ...``)."""
    lines = (REPO / "Makefile").read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    out = []
    for number in range(head + 1, len(lines)):
        line = lines[number]
        if not line.startswith("\t"):
            break
        if line.strip().startswith("lit-coderl"):
            out += _split(line.strip(), f"Makefile:{number + 1}")
    return out


def documented_commands() -> list[Command]:
    commands = readme_commands((REPO / "README.md").read_text())
    for page in sorted((REPO / "docs").glob("*.md")):
        commands += readme_commands(page.read_text(), f"docs/{page.name}")
    for path in CONFIGS:
        commands += config_header_commands(path)[0]
    return commands


# ------------------------------------------------------------------------------ classification
NOT_RUN: dict[str, str] = {
    "make test": "the whole test suite, of which this test is a part",
    "pip install -e .[wandb]": "an install step (network); the W&B command after it is parsed or run",
    "pip install trl": "an install step (network) for the TRL benchmark",
    "sbatch scripts/slurm/single_node.sbatch": "needs SLURM with GPUs; tests/test_slurm.py submits "
    "the templates to a localhost SLURM (srun DDP, requeue and resume)",
    "sbatch scripts/slurm/multi_node.sbatch": "needs 2 GPU nodes under SLURM; tests/test_slurm.py",
    "CONFIG=configs/quickstart.yaml RUN_DIR=runs/qs sbatch scripts/slurm/single_node.sbatch "
    "--trainer.max_steps 200": "needs SLURM with GPUs; its config and fit arguments are parsed here",
    "python scripts/grpo_learning_curve.py": "a measurement: a GRPO curve on the real model (minutes)",
    "python scripts/grpo_parity.py": "a measurement: 5 seeds x 2 paths of 50 GRPO steps (~75 min); "
    "tests/scripts/test_grpo_parity.py",
    "python scripts/mbpp_recipe.py": "a measurement: BC, 60 min of GRPO, MBPP test and HumanEval "
    "evaluations of 3 policies in 2 dtypes (~2.5 h); "
    "tests/scripts/test_mbpp_recipe_smoke.py",
    "python scripts/run_report.py bc_mbpp": "reads a finished bc_mbpp run (hours of training)",
    "python scripts/run_report.py reinforce_repair": "reads a finished reinforce_repair run",
    "python scripts/spiral_report.py runs/spiral_self_play/version_0": "reads a finished SPIRAL run",
    "python scripts/train_dqn_codegen.py --require-train-solved 7": "a measurement: DQN to 7 solved "
    "(minutes); tests/dqn/test_dqn_module.py trains the module",
    "python scripts/train_dqn_codegen.py": "a measurement (minutes); tests/dqn/test_dqn_module.py",
    "lit-coderl regrade runs/grpo_swe/version_0/rollouts.jsonl": "grades a finished SWE run's dump; "
    "tests/rollout/test_swe_episodes.py runs `lit-coderl regrade` on a dump it made",
    "lit-coderl episode runs/ppo_debug/version_0/rollouts.jsonl": "prints an episode of a finished "
    "run's dump; tests/rollout/test_debug_episodes.py runs `lit-coderl episode` on a dump it made",
    "python scripts/bench_sandbox.py": "a benchmark; tests/scripts/test_bench_sandbox_smoke.py",
    "lit-coderl synth swe debug --out runs/synth": "synthesizes and validates ~120 tasks (minutes); "
    "tests/problems/test_synth.py runs `lit-coderl synth` on a repository and grades its rows both ways",
    "lit-coderl synth path/to/repo other.bundle --out runs/synth": "a placeholder repository; "
    "tests/problems/test_synth.py",
    "lit-coderl synth mbpp:../shared/data/mbpp --out runs/synth_mbpp --mbpp-split test": "screens 974 "
    "MBPP solutions and grades ~500 rows (minutes); tests/problems/test_synth.py screens a subset",
    "lit-coderl synth swe debug --out runs/agent_recipe/synth --per-function 3 --eval-fraction 0.5": "the "
    "recipe's stage 0 (minutes); tests/scripts/test_agent_recipe_smoke.py runs the recipe",
    "lit-coderl fit --config configs/grpo_swe.yaml --model.init_args.problems.source "
    "swe:runs/synth/swe/tasks.jsonl": "reads `lit-coderl synth`'s output; tests/problems/test_synth.py "
    "reads such rows through the same loader",
    "lit-coderl fit --config configs/ppo_debug.yaml --model.init_args.problems.source "
    "debug:runs/synth/debug/tasks.jsonl": "reads `lit-coderl synth`'s output; tests/problems/test_synth.py",
    "lit-coderl fit --config configs/ppo_debug.yaml --model.init_args.problems.source "
    "debug:mbpp:../shared/data/mbpp": "screens all 974 MBPP solutions on first use and validates 373 "
    "tasks (minutes); tests/problems/test_synth.py loads a subset, tests/scripts/test_agent_recipe_smoke.py "
    "trains on one",
    "python scripts/agent_recipe.py": "a measurement: synthesis, BC, RL and held-out agent evaluations "
    "(hours on 2 cores); tests/scripts/test_agent_recipe_smoke.py",
    "lit-coderl synth mbpp:../shared/data/mbpp --mbpp-split train --no-check --out "
    "runs/agent_recipe/synth_mbpp": "the recipe's stage 0b (minutes: screens the MBPP-train solutions); "
    "tests/scripts/test_agent_recipe_smoke.py runs the recipe",
    "lit-coderl fit --config configs/agent_recipe_bc.yaml --model.init_args.demonstrations.source "
    "debug:mbpp:../shared/data/mbpp?per_problem=3 --model.init_args.demonstrations.also "
    "[swe:runs/agent_recipe/synth/swe/tasks.jsonl, swe:runs/agent_recipe/synth_mbpp/swe/tasks.jsonl]": "the "
    "recipe's stage 1; tests/scripts/test_agent_recipe_smoke.py",
    "lit-coderl fit --config configs/agent_recipe_rl.yaml --model.init_args.model.name_or_path "
    "runs/agent_recipe/bc/run/hf_model": "the recipe's stage 2; tests/scripts/test_agent_recipe_smoke.py",
    "python scripts/agent_recipe.py --envs swe": "a measurement (hours on 2 cores); "
    "tests/scripts/test_agent_recipe_smoke.py runs it with --envs swe",
    "lit-coderl fit --config configs/agent_recipe_rl_swe.yaml --model.init_args.model.name_or_path "
    "runs/agent_recipe/bc/run/hf_model --model.init_args.problems.source "
    "swe:runs/agent_recipe/synth_mbpp/swe/tasks.jsonl": "the recipe's stage 2 for --envs swe; "
    "tests/scripts/test_agent_recipe_smoke.py",
    "lit-coderl validate --config configs/agent_recipe_eval.yaml --model.init_args.source "
    "debug:mbpp:../shared/data/mbpp --model.init_args.split test --model.init_args.limit 200": "200 agent "
    "episodes; tests/scripts/test_agent_recipe_smoke.py evaluates through this config",
    "lit-coderl validate --config configs/agent_recipe_eval.yaml --model.init_args.source "
    "swe:runs/agent_recipe/synth/swe/tasks.jsonl --model.init_args.split eval": "reads the recipe's "
    "synthesized tasks; tests/scripts/test_agent_recipe_smoke.py",
    "python scripts/bench_grpo_vs_trl.py": "a benchmark (needs trl); tests/scripts/test_bench_grpo_smoke.py",
    "python scripts/bench_generation.py": "a benchmark (decode throughput, minutes)",
    "python scripts/ppo_learning_curve.py": "a measurement: task selection and two PPO runs (~1 h); "
    "tests/scripts/test_ppo_learning_curve_smoke.py",
    "python scripts/bench_rollout.py": "a benchmark (tokens/s of each engine, minutes); "
    "tests/scripts/test_bench_rollout_smoke.py",
    "python scripts/code_game_curve.py": "a measurement: a 30-step code-game run on the real model; "
    "tests/scripts/test_code_game_curve_smoke.py",
    "python scripts/bench_ppo_step.py": "a benchmark (PPO vs GRPO step phases, minutes); "
    "tests/scripts/test_bench_ppo_step_smoke.py",
    "python scripts/bench_gateway.py": "a benchmark (gateway cost per call, batching, agent episodes per "
    "minute; minutes on the real model); tests/scripts/test_bench_gateway_smoke.py",
    "python scripts/bench_debug_step.py": "a benchmark (a debugging-gym RL step with and without the "
    "CPU-time limit, minutes); tests/scripts/test_bench_debug_step_smoke.py",
    "python3 -m venv ~/.cache/lit_coderl/agents/mini-swe-agent": "an install (mini-swe-agent's own venv); "
    "make test-deps runs it, tests/envs/test_harness_mini_swe_agent.py uses it",
    "python scripts/sampler_parity.py": "a measurement: REINFORCE and SPIRAL curves with a bf16 and an fp32 "
    "sampler (an hour on 2 cores); tests/scripts/test_sampler_parity.py",
}
"""Documented commands this test does not run, each with the reason (key: ``Command.text``)."""

PLACEHOLDERS = {
    "<run>": "runs/_documented/version_0",
    "<hf_model dir>": "runs/_documented/version_0/hf_model",
}
"""Placeholders the documents use, and the run path each stands for."""

NEEDS_PACKAGE = {"lightning.pytorch.loggers.WandbLogger": "wandb"}
"""An argument that needs an optional package: without it the command is only parsed."""

MAKE_TARGETS_RUN = ("run",)
"""``make`` targets whose ``lit-coderl`` recipe lines are run like documented commands."""

SUBCOMMANDS = ("fit", "validate", "test")


def how(cmd: Command) -> str:
    """``run``, ``subprocess``, ``parse``, ``make``, ``not run`` or ``unclassified: why``."""
    if cmd.text in NOT_RUN:
        return "not run"
    if cmd.program == "make" and len(cmd.words) == 2 and cmd.words[1] in MAKE_TARGETS_RUN:
        return "make"
    if cmd.program != "lit-coderl":
        return f"unclassified: not a lit-coderl command and not in NOT_RUN ({cmd.text!r})"
    if len(cmd.words) < 2 or cmd.words[1] not in SUBCOMMANDS:
        return f"unclassified: subcommand {cmd.words[1:2]} is none of {SUBCOMMANDS}"
    unknown = [p for p in re.findall(r"<[^<>/\"]+>", cmd.text) if p not in PLACEHOLDERS]
    if unknown:
        return f"unclassified: placeholder {unknown} (known: {sorted(PLACEHOLDERS)})"
    if "--print_config" in cmd.words or any(
        a in cmd.words and importlib.util.find_spec(pkg) is None for a, pkg in NEEDS_PACKAGE.items()
    ):
        return "parse"
    if _processes(cmd.words) > 1:
        return "subprocess"
    return "run"


def _processes(words: list[str]) -> int:
    devices = _value(words, "--trainer.devices")
    return int(devices) if devices and devices.isdigit() else 1


def _value(words: list[str], key: str) -> str | None:
    """The last value given to ``key`` (``--key value`` or ``--key=value``)."""
    found = None
    for i, w in enumerate(words):
        if w == key and i + 1 < len(words):
            found = words[i + 1]
        elif w.startswith(key + "="):
            found = w.split("=", 1)[1]
    return found


COMMANDS = documented_commands()
RUNNABLE = list(
    {  # each distinct command once (the README and a config header often show the same one)
        c.text: c
        for c in reversed(
            [
                *(c for c in COMMANDS if how(c) in ("run", "subprocess", "parse")),
                *(m for c in COMMANDS if how(c) == "make" for m in makefile_commands(c.words[1])),
            ]
        )
    }.values()
)[::-1]


def _id(cmd: Command) -> str:
    words = [w for w in cmd.words if not w.startswith("-")][:3] + [f"{len(cmd.words)}w"]
    return f"{cmd.where}:" + "-".join(Path(w).stem for w in words)


def test_every_documented_command_is_run_or_classified():
    assert len(COMMANDS) >= 20, [c.text for c in COMMANDS]  # the parser still finds them
    problems = [f"{c.where}: {how(c)}" for c in COMMANDS if how(c).startswith("unclassified")]
    assert not problems, "\n".join(problems)
    documented = {c.text for c in COMMANDS}
    stale = [text for text in NOT_RUN if text not in documented]
    assert not stale, f"NOT_RUN lists commands no document has any more: {stale}"


def test_the_parser_reads_what_a_reader_reads():
    """Continuations, env prefixes, ``&&`` chains, comments, labels in config comments."""
    text = (
        "```bash\n"
        "# a comment\n"
        "lit-coderl fit --config a.yaml \\\n"
        "    --x.y '[\"</e>\"]'     # trailing words\n"
        "V=1 W=two lit-coderl validate --config b.yaml\n"
        'pip install -e ".[wandb]" && lit-coderl fit --k v\n'
        "```\n"
        "```python\nlit-coderl fit --not bash\n```\n"
    )
    got = [(c.env, c.words) for c in readme_commands(text)]
    assert got == [
        ({}, ["lit-coderl", "fit", "--config", "a.yaml", "--x.y", '["</e>"]']),
        ({"V": "1", "W": "two"}, ["lit-coderl", "validate", "--config", "b.yaml"]),
        ({}, ["pip", "install", "-e", ".[wandb]"]),
        ({}, ["lit-coderl", "fit", "--k", "v"]),
    ]
    assert [
        m.group(1) for m in map(_COMMAND_IN_COMMENT.match, ["   lit-coderl fit", " Alone:  make run"])
    ] == [
        "lit-coderl fit",
        "make run",
    ]
    assert _COMMAND_IN_COMMENT.match(" Evaluate it: `lit-coderl validate`.") is None
    assert _COMMAND_IN_COMMENT.match(" MBPP instead: --model.init_args.x y") is None


# ------------------------------------------------------------------------------ making it tiny
POLICY = ["--model.init_args.model.name_or_path", "tiny-random"]
TINY_MODULE: dict[str, list[str]] = {
    "GRPOModule": [
        *POLICY,
        *("--model.init_args.sampling.max_new_tokens", "8"),
        *("--model.init_args.num_generations", "2"),
        *("--model.init_args.prompts_per_step", "2"),
        *("--model.init_args.sandbox.workers", "1"),
    ],
    "BCModule": [
        *POLICY,
        *("--model.init_args.batch_size", "2"),
        *("--model.init_args.demonstrations.limit", "4"),
    ],
    "SpiralModule": [
        *POLICY,
        *("--model.init_args.sampling.max_new_tokens", "6"),
        *("--model.init_args.samples_per_step", "4"),
        *("--model.init_args.games_per_round", "3"),
    ],
    "EvaluationModule": [
        *POLICY,
        *("--model.init_args.limit", "2"),
        *("--model.init_args.max_new_tokens", "8"),
        *("--model.init_args.batch_size", "2"),
        *("--model.init_args.sandbox.workers", "1"),
    ],
    "DQNModule": [
        *("--model.init_args.num_envs", "2"),
        *("--model.init_args.hidden_sizes", "[16]"),
        *("--model.init_args.learning_starts", "8"),
        *("--model.init_args.batch_size", "4"),
        *("--model.init_args.buffer_capacity", "64"),
        *("--model.init_args.max_episode_steps", "4"),
    ],
}
TINY_MODULE["REINFORCEModule"] = TINY_MODULE["GRPOModule"]
TINY_MODULE["PPOModule"] = [*TINY_MODULE["GRPOModule"], *("--model.init_args.env.max_turns", "3")]
TINY_MODULE["CodeGameModule"] = [
    *POLICY,
    *("--model.init_args.sampling.max_new_tokens", "8"),
    *("--model.init_args.game.prediction_max_new_tokens", "6"),
    *("--model.init_args.game.prompts_per_step", "2"),
    *("--model.init_args.game.programs_per_prompt", "2"),
    *("--model.init_args.sandbox.workers", "1"),
    *("--model.init_args.warm_start.rounds", "1"),  # only read when a command sets warm_start.steps
    *("--model.init_args.warm_start.seed_programs", "4"),
    *("--model.init_args.warm_start.eval_pairs", "2"),
]
TINY_CALLBACK: dict[str, list[str]] = {
    "MBPPEvalCallback": [
        *("--trainer.callbacks.init_args.limit", "2"),
        *("--trainer.callbacks.init_args.n_samples", "1"),
        *("--trainer.callbacks.init_args.max_new_tokens", "8"),
        *("--trainer.callbacks.init_args.batch_size", "2"),
        *("--trainer.callbacks.init_args.eval_at_start", "false"),
        *("--trainer.callbacks.init_args.eval_interval_steps", "0"),
    ],
    "GameEvalCallback": [
        *("--trainer.callbacks.init_args.games_per_seat", "1"),
        *("--trainer.callbacks.init_args.max_new_tokens", "6"),
        *("--trainer.callbacks.init_args.eval_at_start", "false"),
        *("--trainer.callbacks.init_args.eval_interval_steps", "0"),
    ],
}
TINY_TRAINER = ["--trainer.max_steps", "1"]
QUIET = ["--trainer.enable_progress_bar", "false"]


def _module_and_callback(words: list[str]) -> tuple[str, str | None]:
    """Short names of the command's module class and of its last callback (where
    ``--trainer.callbacks.init_args.*`` goes), from ``--model`` or the config."""
    module, callback = None, None
    config = _value(words, "--config")
    if config:
        spec = yaml.safe_load((REPO / config).read_text())
        model = spec.get("model") or {}
        module = model.get("class_path") if isinstance(model, dict) else model
        callbacks = (spec.get("trainer") or {}).get("callbacks") or []
        if callbacks:
            callback = callbacks[-1]["class_path"].rsplit(".", 1)[-1]
    module = _value(words, "--model") or module
    if "--trainer.callbacks" in words:  # the command's own callbacks replace the config's
        callback = None
    assert module, f"no module in {words}"
    return module.rsplit(".", 1)[-1], callback


def tiny_args(words: list[str]) -> list[str]:
    """What to append to a documented command to make it one step on the tiny model: the
    module's and its last callback's ``TINY_*`` flags, minus every key the command sets."""
    module, callback = _module_and_callback(words)
    assert module in TINY_MODULE, f"no TINY_MODULE entry for {module}: add one"
    extra = [*TINY_MODULE[module], *TINY_CALLBACK.get(callback or "", []), *QUIET]
    if words[1] == "fit":
        extra += TINY_TRAINER
    given = {w.split("=", 1)[0] for w in words if w.startswith("--")}
    out = []
    for key, value in zip(extra[::2], extra[1::2], strict=True):
        if key not in given:
            out += [key, value]
    return out


# ------------------------------------------------------------------------------ running
@contextlib.contextmanager
def _process_state(cwd: Path, env: dict[str, str]):
    """The working directory, environment and ``lit_codeRL`` log handler of one in-process
    command, put back afterwards (module-scoped runs happen outside the per-test restore)."""
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    log = logging.getLogger("lit_codeRL")
    saved_log = (list(log.handlers), log.level, log.propagate)
    handler = CurrentStderrHandler()  # the CLI's own, on pytest's per-test stderr
    handler.setFormatter(logging.Formatter("[lit-coderl] %(message)s"))
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO)
    os.environ.update({"HF_HUB_OFFLINE": "1", **env})
    os.chdir(cwd)
    platform.reset()  # a fresh process detects its platform (MBPP copy, offline) in its own cwd
    try:
        yield
    finally:
        platform.reset()
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        log.handlers, log.propagate = saved_log[0], saved_log[2]
        log.setLevel(saved_log[1])


def lit_coderl(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """``lit-coderl ARGS`` in ``cwd`` through the console script's function; a non-zero exit
    (a one-line error) fails with what the CLI printed."""
    from lit_codeRL.cli import main

    with _process_state(cwd, env or {}):
        sys.argv = ["lit-coderl", *args]  # main() reads them as the console script does
        try:
            main()
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                pytest.fail(f"lit-coderl {shlex.join(args)}\nexited {exit_.code} (its error is above)")


def workdir(root: Path) -> Path:
    """A scratch checkout: ``configs``, ``data`` and ``scripts`` of the repository, and the
    shared data as ``../shared``; runs land under its own ``runs/``."""
    root.mkdir(parents=True, exist_ok=True)
    if shared_dir().is_dir() and not (root / "shared").exists():
        (root / "shared").symlink_to(shared_dir())
    work = root / "repo"
    work.mkdir(exist_ok=True)
    for name in ("configs", "data", "scripts"):
        if not (work / name).exists():
            (work / name).symlink_to(REPO / name)
    return work


def _version_dir(run: Path) -> Path:
    (version,) = sorted(run.glob("version_*"))
    return version


@pytest.fixture(scope="module")
def produced_runs(tmp_path_factory) -> dict[str, Path]:
    """The runs documented commands refer to, made here first: a GRPO run (``hf_model``,
    ``checkpoints/last.ckpt``, ``rollouts.jsonl``) and a DQN run (its ``last.ckpt``)."""
    _require_isolating_sandbox()
    root = tmp_path_factory.mktemp("produced")
    work = workdir(root)
    checkpoint = '[{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"save_last": true, "every_n_train_steps": 1}}]'
    csv = ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.name", ""]
    for name, config in (("grpo", "configs/quickstart.yaml"), ("dqn", "configs/dqn_codegen.yaml")):
        words = ["lit-coderl", "fit", "--config", config, "--trainer.callbacks", checkpoint]
        lit_coderl([*words[1:], *tiny_args(words), *csv, "--trainer.logger.save_dir", f"runs/{name}"], work)
    policy = _version_dir(work / "runs/grpo")
    for path in ("hf_model/config.json", "checkpoints/last.ckpt", "rollouts.jsonl"):
        assert (policy / path).is_file(), path
    # A random policy solves nothing; mark half its samples solved, so that filtered BC
    # (`min_reward 1.0`) has demonstrations to keep.
    dump = policy / "rollouts.jsonl"
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    dump.write_text("".join(json.dumps({**r, "reward": float(i % 2)}) + "\n" for i, r in enumerate(records)))
    dqn_run = _version_dir(work / "runs/dqn")
    assert (dqn_run / "checkpoints/last.ckpt").is_file()
    return {"policy": policy, "dqn": dqn_run}


def _require_isolating_sandbox() -> None:
    # As the module tests: the commands grade in the real sandbox (`make test` installs bubblewrap).
    import shutil

    if not shutil.which("bwrap") and not shutil.which("apptainer"):
        pytest.skip("no isolating sandbox backend (bubblewrap or apptainer) is installed")


def link_runs(cmd_words: list[str], work: Path, produced: dict[str, Path]) -> list[str]:
    """Put the runs a command names (``runs/<name>/version_N/...``) where it looks, linked to
    the produced ones (its own module's for ``--ckpt_path``, else the GRPO run); placeholders
    become such paths. Returns the words with placeholders replaced."""
    words = []
    for w in cmd_words:
        for placeholder, path in PLACEHOLDERS.items():
            w = w.replace(placeholder, path)
        words.append(w)
    module = _module_and_callback(words)[0]
    for i, w in enumerate(words):
        m = re.match(r"(runs/.+?/version_\d+)(/|$)", w)
        if not m:
            continue
        own = i > 0 and words[i - 1] == "--ckpt_path" and module == "DQNModule"
        target = work / m.group(1)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(produced["dqn" if own else "policy"])
        assert (work / w).exists(), f"{w}: the produced run has no such file"
    return words


@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param(c, marks=[pytest.mark.slow] if how(c) == "subprocess" else [], id=_id(c))
        for c in RUNNABLE
    ],
)
def test_documented_command_runs(cmd: Command, produced_runs, tmp_path):
    """The command as documented, plus only what makes it tiny, exits 0 and leaves a run."""
    work = workdir(tmp_path)
    words = link_runs(cmd.words, work, produced_runs)
    if _needs_mbpp(words) and not (shared_dir() / "data/mbpp/mbpp.jsonl").is_file():
        pytest.skip(f"MBPP data not found under {shared_dir()} (set LIT_CODERL_SHARED)")
    args = [*words[1:], *tiny_args(words)]
    if how(cmd) == "parse":
        lit_coderl([*args, "--print_config"] if "--print_config" not in args else args, work, cmd.env)
        return
    if how(cmd) == "subprocess":
        out = subprocess.run(
            [sys.executable, "-m", "lit_codeRL.cli", *args],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **cmd.env},
        )
        assert out.returncode == 0, out.stderr[-4000:]
    else:
        lit_coderl(args, work, cmd.env)
    # It did its job (rglob does not enter the linked configs/, data/ and earlier runs).
    module = _module_and_callback(words)[0]
    wanted = OUTPUT.get((words[1], module), OUTPUT[words[1], "*"])
    assert list(work.rglob(wanted)), sorted(str(p.relative_to(work)) for p in work.rglob("*"))


OUTPUT = {
    ("fit", "*"): "hf_model/config.json",  # a language policy's training saved the policy
    ("fit", "DQNModule"): "config.yaml",  # one step logs no metric (every 50): the run's config
    ("validate", "*"): "mbpp_eval/*.json",  # the per-problem results
    ("test", "*"): "mbpp_eval/*.json",
    ("test", "DQNModule"): "metrics.csv",  # test/{split}_solved, ...
}
"""What a finished command leaves in its working directory, by subcommand and module."""


def _needs_mbpp(words: list[str]) -> bool:
    """Whether the command reads MBPP (hub id or local copy; the eval config's default source)."""
    config = _value(words, "--config")
    text = " ".join(words[1:]) + ((REPO / config).read_text() if config else "")
    module = _module_and_callback(words)[0]
    return "mbpp" in re.sub(r"(configs/\S+|#.*)", "", text) or (
        module == "EvaluationModule" and _value(words, "--model.init_args.source") is None
    )


# ------------------------------------------------------------------------------ configs
def _subcommand_of(path: Path) -> str:
    """The subcommand the config's own header runs it with (``fit`` when it shows none)."""
    for cmd in config_header_commands(path)[0]:
        if cmd.program == "lit-coderl" and len(cmd.words) > 1 and cmd.words[1] in SUBCOMMANDS:
            return cmd.words[1]  # not `lit-coderl synth ...`: a header may show how its data is made
    return "fit"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_prints_with_the_flags_its_header_mentions(config, tmp_path, capsys):
    """``--print_config`` of every config, with every ``--flag value`` its header mentions in
    passing (``MBPP instead: --model.init_args.problems.source ...``)."""
    flags = config_header_commands(config)[1]
    extra = [w for flag, value in flags for w in ([flag] if value is None else [flag, value])]
    lit_coderl(
        [_subcommand_of(config), "--config", f"configs/{config.name}", *extra, "--print_config"],
        workdir(tmp_path),
    )
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["class_path"].startswith("lit_codeRL.modules.")
    for flag, value in flags:
        node = printed
        for part in flag.removeprefix("--").split("."):
            node = node[part]  # the mentioned key exists in the printed config
        if value is not None:
            assert node == yaml.safe_load(value), (flag, node)  # and took the value
    if printed["model"]["class_path"].endswith(".GRPOModule"):
        init = printed["model"]["init_args"]
        assert {"num_generations", "epsilon_high", "scale_rewards"} <= set(init)
        assert "max_new_tokens" in init["sampling"] and "timeout_s" in init["sandbox"]


# ------------------------------------------------------------------------------ not run
@pytest.mark.parametrize("cmd", [c for c in COMMANDS if how(c) == "not run"], ids=_id)
def test_commands_not_run_still_name_what_exists(cmd: Command, tmp_path):
    """A command listed in ``NOT_RUN`` names files that exist and flags its script takes; an
    ``sbatch`` line's config and fit arguments parse."""
    assert NOT_RUN[cmd.text]
    paths = [w for w in cmd.words[1:] if re.search(r"\.(py|sbatch|sh)$", w)]
    for path in paths:
        assert (REPO / path).is_file(), f"{cmd.where}: {path} does not exist"
    if cmd.program in ("python", "python3") and paths:
        source = (REPO / paths[0]).read_text()
        for flag in (w for w in cmd.words if w.startswith("--")):
            assert f'"{flag}"' in source, f"{cmd.where}: {paths[0]} does not take {flag}"
    if cmd.program == "sbatch" and (cmd.env or cmd.words[2:]):
        # run.sh passes CONFIG (its default where unset) and the extra words to `lit-coderl fit`
        default = re.search(r"CONFIG=\$\{CONFIG:-(\S+)\}", (REPO / "scripts/slurm/run.sh").read_text())
        assert default, "scripts/slurm/run.sh no longer sets CONFIG's default as this test reads it"
        config = cmd.env.get("CONFIG", default.group(1))
        lit_coderl(["fit", "--config", config, *cmd.words[2:], "--print_config"], workdir(tmp_path))
