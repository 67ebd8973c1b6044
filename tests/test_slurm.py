"""lit-coderl under a real SLURM: a localhost cluster (munged, slurmctld, slurmd) started by a
session fixture, then ``srun`` for 2-rank DDP and ``sbatch`` of the shipped template for requeue.

``make test`` (as root) apt-installs ``slurm-wlm`` and ``munge``; without them, or not as root,
these tests skip with the reason. The cluster's config, state, logs and munge socket live in a
temporary directory (``SLURM_CONF`` points there), on free ports, so a system SLURM is untouched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, shared_dir

pytestmark = pytest.mark.slow
BINARIES = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "scontrol", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm_conf(root: Path, host: str) -> str:
    return f"""\
ClusterName=litcoderl
SlurmctldHost={host}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
# A private munged socket; cred_expire is also how long a requeued job waits to restart (120 s default).
AuthInfo=socket={root}/munge/sock,cred_expire=5
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
# Look for runnable jobs every 2 s (default 60 s): a requeued job otherwise waits ~30 s to restart.
SchedulerParameters=sched_interval=2
# Lightning ignores SIGTERM under auto-requeue: do not wait 30 s before the SIGKILL of a requeued job.
KillWait=2
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _tail(path: Path, n: int = 800) -> str:
    return path.read_text(errors="replace")[-n:] if path.is_file() else f"({path.name} missing)"


@pytest.fixture(scope="session")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A running one-node cluster; yields the environment for srun/sbatch (``SLURM_CONF`` set,
    this checkout first on ``PYTHONPATH``, offline hub). Daemons are stopped by PID at the end."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        pytest.skip("the localhost SLURM cluster needs root (slurmd runs jobs as their user)")
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(
            f"SLURM not installed (missing {', '.join(missing)}): apt-get install slurm-wlm munge (make system-deps)"
        )
    root = tmp_path_factory.mktemp("slurm")
    for sub in ("munge", "state", "spool", "log"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o700)
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, host))
    env = {
        **os.environ,
        "SLURM_CONF": str(conf),
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "HF_HUB_OFFLINE": "1",
        "LIT_CODERL_SHARED": str(shared_dir()),
    }
    for name in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_")) and k != "SLURM_CONF"]:
        del env[name]  # a pytest started inside a job must not leak its allocation into ours
    log = open(root / "log" / "daemons.out", "w")  # noqa: SIM115 - closed at teardown
    daemons: list[subprocess.Popen] = []
    try:
        munge_args = [f"--socket={root}/munge/sock", f"--key-file={key}", f"--pid-file={root}/munge/pid"]
        munge_args += [f"--log-file={root}/log/munged.log", f"--seed-file={root}/munge/seed"]
        # --force: /tmp's parents are group/world-writable, which munged otherwise refuses.
        daemons.append(
            subprocess.Popen(["munged", "--foreground", "--force", *munge_args], stdout=log, stderr=log)
        )
        time.sleep(0.5)
        daemons.append(
            subprocess.Popen(["slurmctld", "-D", "-f", str(conf)], env=env, stdout=log, stderr=log)
        )
        daemons.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env, stdout=log, stderr=log))
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline and state != "idle":
            if any(d.poll() is not None for d in daemons):
                break
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            state = out.stdout.strip()
            time.sleep(0.5)
        if state != "idle":
            logs = "\n".join(_tail(root / "log" / f) for f in ("daemons.out", "slurmctld.log", "slurmd.log"))
            pytest.skip(f"localhost SLURM did not come up (node state {state!r}):\n{logs}")
        yield env
    finally:
        for daemon in reversed(daemons):
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
        for daemon in daemons:
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
        log.close()


def _config(
    path: Path, mbpp: Path, *, devices: int, max_steps: int, max_new_tokens: int, eval_limit: int
) -> Path:
    """A tiny GRPO run: random 3M-parameter policy, embedded problems, MBPP evaluation at the end.
    JSON is YAML, so the CLI reads it as a config file."""
    callbacks = [
        {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": {"save_last": True}}
    ]
    if eval_limit:
        callbacks.append(
            {
                "class_path": "lit_codeRL.callbacks.MBPPEvalCallback",
                "init_args": {
                    "source": str(mbpp),
                    "split": "test",
                    "limit": eval_limit,
                    "batch_size": 2,
                    "max_new_tokens": 8,
                    "eval_at_start": False,
                    "eval_interval_steps": 0,
                    "sandbox": {"workers": 1},
                },
            }
        )
    config = {
        "seed_everything": 0,
        "trainer": {
            "accelerator": "cpu",
            "devices": devices,
            "strategy": "ddp" if devices > 1 else "auto",
            "precision": "auto",
            "max_steps": max_steps,
            "logger": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "callbacks": callbacks,
        },
        "model": {
            "class_path": "lit_codeRL.modules.grpo.GRPOModule",
            "init_args": {
                "model": {"name_or_path": "tiny-random"},
                "problems": {"source": "embedded", "split": "train"},
                "env": {"name": "unit_test"},
                "sampling": {"max_new_tokens": max_new_tokens, "temperature": 1.0},
                "sandbox": {"workers": 1},
                "num_generations": 2,
                "prompts_per_step": 1,
                "save_hf_model": False,
            },
        },
    }
    path.write_text(json.dumps(config, indent=1))
    return path


def _steps(rollouts: Path) -> list[int]:
    if not rollouts.is_file():
        return []
    return [json.loads(line)["step"] for line in rollouts.read_text().splitlines() if line.strip()]


def test_srun_two_rank_ddp_trains_and_evaluates_on_both_ranks(slurm, tmp_path, mbpp_dir):
    """``srun`` starts 2 tasks; Lightning's SLURMEnvironment makes them one DDP group: both ranks
    roll out and train, and MBPPEvalCallback's step JSON holds all questions, half from each."""
    n_questions = 4
    config = _config(
        tmp_path / "ddp.yaml", mbpp_dir, devices=2, max_steps=2, max_new_tokens=8, eval_limit=n_questions
    )
    run = tmp_path / "run"
    cmd = ["srun", "--job-name=coderl-ddp", "--nodes=1", "--ntasks-per-node=2", sys.executable, "-m"]
    cmd += ["lit_codeRL.cli", "fit", "--config", str(config), "--trainer.default_root_dir", str(run)]
    out = subprocess.run(cmd, cwd=REPO, env=slurm, capture_output=True, text=True, timeout=240)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    # One process group of two, built from srun's variables (not a Lightning-spawned child).
    assert "MEMBER: 1/2" in log and "MEMBER: 2/2" in log, log[-3000:]
    assert log.count("[lit-coderl] platform") == 1, "the platform block is logged once, by rank 0"
    assert re.search(r"2 processes \(1 node\(s\) x 2\), SLURMEnvironment job \d+", log), log[-3000:]
    for rank in (0, 1):
        steps = _steps(run / f"rollouts.rank{rank}.jsonl")
        assert steps and max(steps) == 2, f"rank {rank} did not train both steps: {steps}"
    report = json.loads((run / "mbpp_eval" / "step_000002.json").read_text())
    problems = report["problems"]
    assert len({p["task_id"] for p in problems}) == len(problems) == n_questions
    assert report["metrics"]["mbpp_eval/num_problems"] == n_questions
    by_rank = [sum(p["rank"] == r for p in problems) for r in (0, 1)]
    assert by_rank == [n_questions // 2, n_questions // 2], by_rank


def _job_state(env: dict[str, str], job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    return dict(re.findall(r"(\w+)=(\S+)", out))


def test_sbatch_template_requeues_on_sigusr1_and_resumes_from_the_hpc_checkpoint(slurm, tmp_path, mbpp_dir):
    """The shipped single-node template, submitted for real: SIGUSR1 mid-run (what
    ``--signal=SIGUSR1@90`` sends before the time limit) makes Lightning save ``hpc_ckpt_1.ckpt``
    and requeue; the requeued job resumes from it and finishes ``max_steps``."""
    import torch

    max_steps = 8
    config = _config(
        tmp_path / "one.yaml", mbpp_dir, devices=1, max_steps=max_steps, max_new_tokens=24, eval_limit=0
    )
    run, job_log = tmp_path / "run", tmp_path / "job.out"
    env = {**slurm, "CONFIG": str(config), "RUN_DIR": str(run), "PYTHON": sys.executable}
    # This test cluster has no GPUs (no GRES) and few CPUs: override the template's requests.
    cmd = ["sbatch", "--parsable", "--gpus-per-node=0", "--ntasks-per-node=1", "--cpus-per-task=1"]
    cmd += [f"--output={job_log}", str(REPO / "scripts" / "slurm" / "single_node.sbatch")]
    job = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout.strip()
    rollouts = run / "rollouts.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(s >= 2 for s in _steps(rollouts)):
            assert _job_state(slurm, job).get("JobState") in ("PENDING", "RUNNING"), _tail(job_log, 3000)
            time.sleep(0.2)
        assert any(s >= 2 for s in _steps(rollouts)), "the job did not reach step 2:\n" + _tail(job_log, 3000)
        # Steps only (not the batch shell), exactly like sbatch --signal=SIGUSR1@90.
        subprocess.run(["scancel", "--signal=USR1", job], env=slurm, check=True)
        deadline = time.monotonic() + 180
        state: dict[str, str] = {}
        while time.monotonic() < deadline:
            state = _job_state(slurm, job)
            if state.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
                break
            time.sleep(1)
        text = _tail(job_log, 100_000)
        assert state.get("JobState") == "COMPLETED", f"{state.get('JobState')}:\n{text[-4000:]}"
    finally:
        subprocess.run(["scancel", job], env=slurm, capture_output=True)
    assert state.get("Restarts") == "1", state
    hpc = run / "hpc_ckpt_1.ckpt"
    assert hpc.is_file(), sorted(p.name for p in run.iterdir())
    saved_step = torch.load(hpc, map_location="cpu", weights_only=False)["global_step"]
    assert 0 < saved_step < max_steps
    first, _, second = text.partition("restart 1:")
    assert "Handling auto-requeue signal" in first and "Requeued SLURM job" in first, first[-3000:]
    assert f"SLURMEnvironment job {job}" in first, "the platform block names the allocation"
    assert second, "no restarted run in the job log:\n" + text[-3000:]
    assert f"resume from {hpc}" in second and f"Restoring states from the checkpoint path at {hpc}" in second
    assert f"`Trainer.fit` stopped: `max_steps={max_steps}` reached." in second, second[-3000:]
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert last["global_step"] == max_steps
    # The resumed run continued the step count (its rollouts start after the saved step) and
    # the rollout dump of the whole job covers every step.
    steps = _steps(rollouts)
    assert set(steps) == set(range(1, max_steps + 1)), steps


@pytest.mark.parametrize("template", ["single_node.sbatch", "multi_node.sbatch"])
def test_templates_are_accepted_by_sbatch(slurm, template):
    """Every #SBATCH directive of both templates parses (``--test-only`` validates and schedules
    without running); the GPU, node and task counts are shrunk to what this cluster has."""
    shrink = ["--nodes=1", "--gpus-per-node=0", "--ntasks-per-node=1", "--cpus-per-task=1"]
    cmd = ["sbatch", "--test-only", *shrink, str(REPO / "scripts" / "slurm" / template)]
    out = subprocess.run(cmd, cwd=REPO, env=slurm, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "to start at" in out.stderr, out.stderr
