"""Exact resume: a run killed with SIGKILL and resumed from its checkpoint continues as if it had
never stopped, step for step, for GRPO and DQN.

Each test runs the real CLI three times in subprocesses: an uninterrupted run of ``N`` steps; the
same configuration killed (SIGKILL, by :class:`KillMidStep`) in the middle of step ``K + 1``,
after its rollouts were sampled and its gradients computed, so the in-memory state has moved past
the last checkpoint; and a resume from that run's step-``K`` checkpoint with a *different*
``seed_everything`` (the checkpoint, not the global seed, must decide what follows). Steps
``K + 1 .. N`` of the resumed run must equal the uninterrupted run's: every logged metric but
timings, the sampled completions and their rewards (GRPO's ``rollouts.jsonl``), and the final
parameters.

The GRPO run is built so that every stream matters: ``attention_dropout`` makes the training
forward draw from torch's global CPU RNG; ``beta > 0`` makes the loss a KL to the reference on the
sampled tokens, so dropout masks and sampled completions both move the weights (a random model
earns one reward on every completion, so its advantages alone would move nothing); a warm-up plus
cosine learning rate makes the scheduler state matter. The resumed run sees 64 MiB of free memory
(:class:`LittleMemoryFree`): what the run decided from the machine's state at its start (the
automatic micro-batch size) must come from the checkpoint too.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import Callback

REPO = Path(__file__).resolve().parents[2]
N, K = 6, 3
"""Steps of the uninterrupted run; the step whose checkpoint the resumed run starts from."""
TIMING = ("time/", "tokens_per_s", "sandbox_s", "exec/")
"""Metric names that measure time or a cold cache, not the training trajectory."""


class KillMidStep(Callback):
    """SIGKILLs the run inside the optimizer step that follows global step ``step``: the rollout
    (or env steps and replay draw) of that step happened, its checkpoint never will.

    The run was started in a session of its own (:func:`start`), so rank 0, its group leader,
    kills the whole group: every rank and its sandbox workers die together. Ranks first meet at a
    barrier, so none is left inside a collective with a dead peer (seen in CI: a rank that died
    first left the other blocked in gloo, holding the test's pipe open until the timeout)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if trainer.global_step != self.step:
            return
        if trainer.world_size > 1:
            trainer.strategy.barrier("kill-mid-step")
        if trainer.global_rank == 0:
            assert os.getpgrp() == os.getpid(), "start the run with start_new_session=True"
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


class LittleMemoryFree(Callback):
    """Makes the resumed run see 64 MiB of free memory, where the run it continues saw gigabytes:
    the automatic micro-batch size must come from the checkpoint, not from the machine's memory at
    the resume (a busy CI machine once halved it and the first step's gradient changed)."""

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from lit_codeRL.policy import precision

        precision.available_cpu_memory = lambda *args, **kwargs: 64 * 2**20


def trainer_config(
    root: Path, accelerator: str, kill_at: int | None = None, resumed: bool = False
) -> dict[str, Any]:
    callbacks: list[dict[str, Any]] = [
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {
                "dirpath": str(root / "ckpt"),
                "filename": "{step}",
                "every_n_train_steps": 1,
                "save_top_k": -1,
            },
        }
    ]
    if kill_at is not None:
        callbacks.append(
            {"class_path": "tests.training.test_resume.KillMidStep", "init_args": {"step": kill_at}}
        )
    if resumed:
        callbacks.append({"class_path": "tests.training.test_resume.LittleMemoryFree"})
    return {
        "accelerator": accelerator,
        "devices": 1,
        "max_steps": N,
        "log_every_n_steps": 1,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": str(root),
        "logger": {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(root), "name": "", "version": "run"},
        },
        "callbacks": callbacks,
    }


LAUNCHER_ENV = (
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
)
"""Variables a launcher sets; inherited, ``LOCAL_RANK`` makes Lightning expect external ranks."""


def _quiet_port() -> int:
    """A free port below the ephemeral range. Lightning's own pick (bind to port 0) is an
    ephemeral port, which an outgoing connection may take before rank 0 listens on it (seen in
    CI: EADDRINUSE in the 2-process run)."""
    rng = random.Random()
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


def start(
    model: dict[str, Any],
    root: Path,
    accelerator: str,
    *extra: str,
    kill_at: int | None = None,
    resumed: bool = False,
):
    """Launch ``lit_codeRL.cli fit`` on this checkout in a subprocess."""
    root.mkdir(parents=True)
    trainer = trainer_config(root, accelerator, kill_at, resumed)
    config = {"seed_everything": 0, "trainer": trainer, "model": model}
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        **{k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV},
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "MASTER_PORT": str(_quiet_port()),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "lit_codeRL.cli", "fit", "--config", str(path), *extra],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: KillMidStep and finish() kill all of it
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Exit code and output of a run; on a timeout the run's whole group is killed and the test
    fails with the output so far (a stuck rank must not hang the suite)."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the run did not finish in {timeout:.0f} s; its output:\n{out[-6000:]}")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a straggler of a killed run holds nothing open
    return proc.returncode, out


def kill_and_resume(
    model: dict[str, Any], tmp_path: Path, accelerator: str, *extra: str
) -> tuple[Path, Path]:
    """Run uninterrupted and killed side by side, then resume the killed one; returns the roots
    of the uninterrupted and the resumed run. ``extra``: more CLI arguments for all three."""
    whole, killed, resumed = tmp_path / "whole", tmp_path / "killed", tmp_path / "resumed"
    runs = [start(model, whole, accelerator, *extra), start(model, killed, accelerator, *extra, kill_at=K)]
    (rc_whole, out_whole), (rc_killed, out_killed) = (finish(p) for p in runs)
    assert rc_whole == 0, out_whole[-4000:]
    assert rc_killed == -signal.SIGKILL, f"the run was not killed (rc {rc_killed}): {out_killed[-4000:]}"
    saved = sorted(p.name for p in (killed / "ckpt").glob("*.ckpt"))
    assert saved == [f"step={s}.ckpt" for s in range(1, K + 1)], saved  # died inside step K + 1
    ckpt = killed / "ckpt" / f"step={K}.ckpt"
    args = ("--ckpt_path", str(ckpt), "--seed_everything", "123")
    proc = start(model, resumed, accelerator, *extra, *args, resumed=True)
    rc, out = finish(proc)
    assert rc == 0, out[-4000:]
    return whole, resumed


def step_metrics(root: Path) -> dict[int, dict[str, float]]:
    """``{step: {metric: value}}`` from the CSV log, timings left out."""
    rows: dict[int, dict[str, float]] = {}
    with (root / "run" / "metrics.csv").open() as f:
        for row in csv.DictReader(f):
            values = {
                k: float(v) for k, v in row.items() if v not in ("", None) and k not in ("step", "epoch")
            }
            values = {k: v for k, v in values.items() if not any(t in k for t in TIMING)}
            rows.setdefault(int(row["step"]), {}).update(values)
    return rows


def assert_same_steps(whole: Path, resumed: Path, must_have: tuple[str, ...]) -> None:
    expected, got = step_metrics(whole), step_metrics(resumed)
    after = {step: m for step, m in expected.items() if step >= K}
    # Lightning logs a step's metrics under the global step before its optimizer step: K .. N-1.
    assert sorted(got) == sorted(after) == list(range(K, N)), (sorted(got), sorted(expected))
    for step in after:
        for name in must_have:
            assert name in after[step], f"{name} not logged at step {step}"
        assert got[step].keys() == after[step].keys(), step
        for name, value in after[step].items():
            assert got[step][name] == pytest.approx(value, rel=1e-6, abs=1e-7), (step, name)


def assert_same_rollouts(whole: Path, resumed: Path, name: str) -> None:
    """The rollouts of steps K+1..N: same prompts, same sampled tokens, same rewards."""

    def records(root: Path) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in (root / "run" / name).read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows if r["step"] > K]

    expected, got = records(whole), records(resumed)
    assert len(expected) == (N - K) * 2 * 2  # prompts_per_step x num_generations per step
    assert [r["completion"] for r in got] == [r["completion"] for r in expected], name
    assert got == expected, name


def assert_same_weights(whole: Path, resumed: Path, prefix: str) -> None:
    a = torch.load(whole / "ckpt" / f"step={N}.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    b = torch.load(resumed / "ckpt" / f"step={N}.ckpt", map_location="cpu", weights_only=False)["state_dict"]
    assert a.keys() == b.keys()
    start_ = torch.load(whole / "ckpt" / f"step={K}.ckpt", map_location="cpu", weights_only=False)[
        "state_dict"
    ]
    moved = [k for k in a if k.startswith(prefix) and not torch.equal(a[k], start_[k])]
    assert moved, "the weights did not change after the resume point: the comparison proves nothing"
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6, msg=f"{key} differs")


ACCELERATORS = [
    "cpu",
    pytest.param("gpu", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")),
]


GRPO_MODEL = {
    "class_path": "lit_codeRL.modules.grpo.GRPOModule",
    "init_args": {
        "model": {"name_or_path": "tiny-random", "tiny_config": {"attention_dropout": 0.1}},
        "problems": {"source": "embedded", "split": "train", "limit": 5},
        "env": {"name": "unit_test"},
        "sandbox": {"workers": 1},
        "sampling": {"max_new_tokens": 6, "temperature": 1.0},
        "num_generations": 2,
        "prompts_per_step": 2,
        "optimizer": {"learning_rate": 0.01, "weight_decay": 0.1, "warmup_steps": 2, "lr_schedule": "cosine"},
        "beta": 0.5,
        "entropy_interval": 1,
        "save_hf_model": False,
    },
}
"""A tiny random policy; dropout, the KL to the reference and warm-up + cosine make every stream
and the scheduler matter (see the module docstring)."""


@pytest.mark.parametrize("accelerator", ACCELERATORS)
def test_grpo_killed_and_resumed_matches_uninterrupted(tmp_path, accelerator):
    whole, resumed = kill_and_resume(GRPO_MODEL, tmp_path, accelerator)
    assert_same_steps(whole, resumed, ("train/reward", "train/loss", "train/kl", "train/entropy", "train/lr"))
    assert_same_rollouts(whole, resumed, "rollouts.jsonl")
    assert_same_weights(whole, resumed, "policy.")


@pytest.mark.slow
def test_grpo_ddp_killed_and_resumed_matches_uninterrupted_on_every_rank(tmp_path):
    """Two DDP processes (gloo on CPU), both SIGKILLed mid-step: each rank resumes its own prompt
    stream and sampling generator (their seeds differ by rank; a checkpoint holding rank 0's state
    alone would hand it to both), so both ranks' rollouts and the shared weights match."""
    ddp = ("--trainer.devices", "2", "--trainer.strategy", "ddp")
    whole, resumed = kill_and_resume(GRPO_MODEL, tmp_path, "cpu", *ddp)
    for rank in range(2):
        assert_same_rollouts(whole, resumed, f"rollouts.rank{rank}.jsonl")
    assert_same_weights(whole, resumed, "policy.")


DQN_MODEL = {
    "class_path": "lit_codeRL.modules.dqn.DQNModule",
    "init_args": {
        "train_problems": str(REPO / "data/examples/training_problems.json"),
        "eval_problems": str(REPO / "data/examples/eval_problems.json"),
        "vocab_size": None,
        "code_tokens": [
            "return",
            "not",
            "+",
            "-",
            "*",
            "%",
            "==",
            ">",
            "(",
            ")",
            ",",
            "abs",
            "max",
            "0",
            "1",
        ],
        "max_episode_steps": 8,
        "num_envs": 4,
        "learning_starts": 32,
        "batch_size": 16,
        "hidden_sizes": [32],
        "embed_dim": 4,
        "epsilon_decay_steps": 100,
        "target_sync_every": 2,
        "buffer_capacity": 5000,
        "greedy_eval_every": 0,
    },
}


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
def test_dqn_killed_and_resumed_matches_uninterrupted(tmp_path, prioritized):
    import shutil

    if not shutil.which("bwrap") and not shutil.which("apptainer"):
        pytest.skip("no isolating sandbox backend (bubblewrap or apptainer) is installed")
    model = json.loads(json.dumps(DQN_MODEL))
    # prioritized replay also runs 3-step returns: priorities, β and half-built transitions resume too
    model["init_args"].update(prioritized_replay=prioritized, n_step=3 if prioritized else 1)
    whole, resumed = kill_and_resume(model, tmp_path, "cpu")
    assert_same_steps(
        whole,
        resumed,
        ("train/loss", "train/q_mean", "train/epsilon", "train/buffer_size", "train/env_steps"),
    )
    assert_same_weights(whole, resumed, "online.")


# ---------------------------------------------------------------------------------- the pieces


def _draws() -> tuple:
    import random

    import numpy as np

    cuda = torch.rand(3, device="cuda").tolist() if torch.cuda.is_available() else None
    return random.random(), float(np.random.rand()), torch.rand(3).tolist(), cuda


def test_global_rng_survives_a_checkpoint_file_and_waits_for_the_first_step(tmp_path):
    """Every global stream (Python, NumPy, torch CPU, CUDA where present) comes back from a
    ``weights_only`` checkpoint load; ``load_state_dict`` alone changes nothing until
    ``restore_pending`` (what a module calls at the first step after a resume)."""
    from lit_codeRL.training.rng import GlobalRNG

    saved = GlobalRNG().state_dict()
    torch.save(saved, tmp_path / "rng.pt")
    expected = _draws()
    assert _draws() != expected  # the streams moved on

    rng = GlobalRNG()
    rng.load_state_dict(torch.load(tmp_path / "rng.pt", weights_only=True))
    moved_on = _draws()
    assert moved_on != expected  # not restored yet: Lightning may still draw before the first step
    assert rng.restore_pending() is True
    assert _draws() == expected
    assert rng.restore_pending() is False  # once only: later steps keep their own streams


def _rank_state_worker(rank: int, world: int, init_file: str, out: str) -> None:
    import types

    from lit_codeRL.training.rng import own_rank_state, save_rank_states

    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    try:
        torch.manual_seed(100 + rank)  # every rank its own stream, as under DDP
        checkpoint: dict[str, Any] = {}
        save_rank_states(checkpoint, "state", types.SimpleNamespace(world_size=world), torch.get_rng_state())
        if rank == 0:  # what Lightning writes: rank 0's dict
            torch.save(checkpoint, out)
        torch.distributed.barrier()
        loaded = torch.load(out, weights_only=True)
        torch.save(own_rank_state(loaded, "state", rank), f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


def test_each_rank_gets_its_own_state_back_from_rank_zeros_checkpoint(tmp_path):
    """Under DDP only rank 0 writes the checkpoint: the state of every rank must be in it, and each
    rank must load its own (two real gloo processes)."""
    import torch.multiprocessing as mp

    out = str(tmp_path / "ckpt.pt")
    mp.spawn(_rank_state_worker, args=(2, str(tmp_path / "init"), out), nprocs=2, join=True)
    for rank in range(2):
        torch.manual_seed(100 + rank)
        assert torch.equal(torch.load(f"{out}.{rank}", weights_only=True), torch.get_rng_state()), rank
