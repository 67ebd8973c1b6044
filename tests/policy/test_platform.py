"""Platform detection: offline clusters, small GPUs, the MBPP environment overrides, and the
block the CLI logs once at the start of ``fit``. No test touches the network: the hub probe is
injected, and the real probe is exercised against sockets on localhost."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
import torch

from lit_codeRL.errors import ConfigError
from lit_codeRL.policy import platform

REPO_ENV_KEYS = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "WANDB_MODE",
    "MBPP_DATASET_PATH",
    "MBPP_EVAL_NUM_QUESTIONS",
)


def no_network() -> bool:
    raise AssertionError("the hub probe must not run when the environment already decides")


def test_offline_from_failed_probe_sets_offline_modes_but_keeps_the_users_choices(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # no data/mbpp or ../shared/data/mbpp to find from here
    environ = {"WANDB_MODE": "disabled"}
    found = platform.apply_environment(platform.detect(probe=lambda: False, environ=environ), environ)
    assert found.offline and found.offline_reason == "huggingface.co unreachable"
    assert environ == {"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    assert dict(found.env_set) == {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_env_decides_without_probing():
    environ = {"HF_HUB_OFFLINE": "1"}
    found = platform.apply_environment(platform.detect(probe=no_network, environ=environ), environ)
    assert found.offline and environ["WANDB_MODE"] == "offline"
    online = {"HF_HUB_OFFLINE": "0"}
    assert not platform.detect(probe=no_network, environ=online).offline
    proxied = {"HTTPS_PROXY": "http://proxy:3128"}
    assert not platform.detect(probe=no_network, environ=proxied).offline


def test_online_sets_nothing():
    environ: dict[str, str] = {}
    found = platform.apply_environment(platform.detect(probe=lambda: True, environ=environ), environ)
    assert not found.offline and environ == {} and found.env_set == ()


def test_offline_in_this_process_reaches_huggingface_hub(monkeypatch):
    """huggingface_hub froze HF_HUB_OFFLINE at import; applying offline must update it too."""
    import huggingface_hub.constants as hub_constants

    for key in REPO_ENV_KEYS:  # set, then delete: monkeypatch then removes what the code sets
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    platform.apply_environment(platform.detect(probe=lambda: False))
    assert os.environ["WANDB_MODE"] == "offline" and hub_constants.HF_HUB_OFFLINE is True


def test_probe_is_a_bounded_tcp_connect():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert platform.hub_reachable("127.0.0.1", server.getsockname()[1], timeout_s=1.0)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert not platform.hub_reachable("127.0.0.1", port, timeout_s=1.0)


def test_probe_gives_up_at_its_timeout_even_if_the_lookup_hangs(monkeypatch):
    """getaddrinfo has no timeout (a node without a resolver can block for tens of seconds)."""
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def hanging_lookup(*args, **kwargs):
        started.set()
        release.wait(30)  # only a probe that waited for the lookup gets past this before the test ends
        finished.set()
        return contextlib.nullcontext()  # a connection that opens, too late to count

    monkeypatch.setattr(socket, "create_connection", hanging_lookup)
    try:
        reachable = platform.hub_reachable("huggingface.co", 443, timeout_s=0.3)
        # the probe answered while the lookup still hung: it did not wait for it
        assert started.is_set() and not finished.is_set()
        assert not reachable
    finally:
        release.set()


def test_offline_finds_the_shared_mbpp_copy(mbpp_dir):
    environ = {"LIT_CODERL_SHARED": str(mbpp_dir.parents[1])}
    found = platform.apply_environment(platform.detect(probe=lambda: False, environ=environ), environ)
    assert found.mbpp_path == str(mbpp_dir.resolve()) == environ["MBPP_DATASET_PATH"]
    # Online, the hub stays the source unless the user names a local copy.
    assert (
        platform.detect(probe=lambda: True, environ={"LIT_CODERL_SHARED": str(mbpp_dir.parents[1])}).mbpp_path
        is None
    )


def test_dataset_path_replaces_the_hub_id_in_the_loader(monkeypatch, mbpp_dir):
    from lit_codeRL.problems import load_problems
    from lit_codeRL.problems.mbpp import local_override

    monkeypatch.setenv("MBPP_DATASET_PATH", str(mbpp_dir))
    for name in ("mbpp", "google-research-datasets/mbpp"):
        problems = load_problems(name, split="test")  # no network: the local copy answers
        assert len(problems) == 500 and str(mbpp_dir) in problems[0].source
    assert local_override("someone/other-mbpp") == "someone/other-mbpp"  # a deliberate other hub id
    monkeypatch.delenv("MBPP_DATASET_PATH")
    assert local_override("mbpp") == "mbpp"


def test_eval_env_reaches_the_callback(monkeypatch, mbpp_dir):
    from lit_codeRL.callbacks import MBPPEvalCallback

    monkeypatch.setenv("MBPP_DATASET_PATH", str(mbpp_dir))
    monkeypatch.setenv("MBPP_EVAL_NUM_QUESTIONS", "3")
    callback = MBPPEvalCallback(source="mbpp", split="test")
    assert [p.task_id for p in callback.problems()] == ["mbpp/11", "mbpp/12", "mbpp/13"]
    assert len(MBPPEvalCallback(source="mbpp", split="test", limit=2).problems()) == 2  # config wins
    monkeypatch.setenv("MBPP_EVAL_NUM_QUESTIONS", "three")
    with pytest.raises(ConfigError, match="MBPP_EVAL_NUM_QUESTIONS"):
        MBPPEvalCallback(source="mbpp", split="test")


def fake_cuda(monkeypatch, name: str, gib: float) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=gib * 2**30)
    )
    monkeypatch.setattr(
        torch.cuda, "mem_get_info", lambda device=None: (int(0.95 * gib * 2**30), int(gib * 2**30))
    )


@pytest.mark.parametrize(("gib", "small"), [(15.0, True), (80.0, False)])
def test_small_gpu_gets_conservative_batches(monkeypatch, gib, small):
    from lit_codeRL.callbacks import MBPPEvalCallback
    from lit_codeRL.policy.precision import default_micro_batch_size

    fake_cuda(monkeypatch, "Tesla T4" if small else "NVIDIA A100-SXM4-80GB", gib)
    found = platform.detect(probe=no_network, environ={"HF_HUB_OFFLINE": "1"})
    assert found.small_gpu is small
    hint = default_micro_batch_size(num_params=3_000_000, seq_len=256)  # memory alone would allow 64
    assert (hint <= platform.SMALL_GPU_MICRO_BATCH) is small
    assert MBPPEvalCallback().batch_size == (
        platform.SMALL_GPU_EVAL_BATCH if small else platform.DEFAULT_EVAL_BATCH
    )
    assert MBPPEvalCallback(batch_size=32).batch_size == 32
    assert ("small: micro-batch hint" in platform.describe(found)) is small


def test_cli_fit_logs_the_platform_once_and_the_env_reaches_the_callback(tmp_path, mbpp_dir):
    """The real entry point: one platform block, and MBPP_* steer the callback of a config that
    names the hub dataset (so the run needs no network)."""
    run = tmp_path / "run"
    callback = {
        "class_path": "lit_codeRL.callbacks.MBPPEvalCallback",
        "init_args": {"source": "mbpp", "split": "test", "max_new_tokens": 4, "eval_at_start": False},
    }
    args = [
        "--model.init_args.model.name_or_path",
        "tiny-random",
        "--model.init_args.sampling.max_new_tokens",
        "4",
    ]
    args += ["--model.init_args.num_generations", "2", "--model.init_args.prompts_per_step", "1"]
    args += ["--model.init_args.sandbox.workers", "1", "--model.init_args.save_hf_model", "false"]
    args += [
        "--trainer.max_steps",
        "1",
        "--trainer.logger",
        "false",
        "--trainer.enable_progress_bar",
        "false",
    ]
    args += ["--trainer.callbacks", json.dumps([callback]), "--trainer.default_root_dir", str(run)]
    env = {k: v for k, v in os.environ.items() if k not in REPO_ENV_KEYS}
    env |= {"HF_HUB_OFFLINE": "1", "MBPP_DATASET_PATH": str(mbpp_dir), "MBPP_EVAL_NUM_QUESTIONS": "2"}
    env["LIT_CODERL_CPU_BF16"] = "0"  # the CPU path the assertions below name, on any CPU
    env["PYTHONPATH"] = os.pathsep.join([str(platform_repo()), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-m", "lit_codeRL.cli", "fit", "--config", "configs/quickstart.yaml", *args],
        cwd=platform_repo(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    log = out.stderr
    assert log.count("[lit-coderl] platform") == 1, log[-3000:]
    block = log[log.index("[lit-coderl] platform") :].split("\n[", 1)[0]
    assert "hub: offline (HF_HUB_OFFLINE=1)" in block
    assert "trainer: precision 32-true" in block
    assert f"data: MBPP from {mbpp_dir}, MBPP_EVAL_NUM_QUESTIONS=2" in block
    assert "set: HF_DATASETS_OFFLINE=1 WANDB_MODE=offline" in block
    report = json.loads((run / "mbpp_eval" / "step_000001.json").read_text())
    assert [p["task_id"] for p in report["problems"]] == ["mbpp/11", "mbpp/12"]


def platform_repo():
    from tests.conftest import REPO

    return REPO


def test_in_process_cli_leaves_os_environ_alone(monkeypatch):
    """Only ``main`` (the process's entry point) writes the platform into ``os.environ``; a
    script or test building ``CodeRLCLI`` itself keeps its environment."""
    from lit_codeRL.cli import CodeRLCLI

    for key in REPO_ENV_KEYS:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    monkeypatch.setattr(platform, "_CURRENT", None)
    monkeypatch.chdir(platform_repo())
    before = dict(os.environ)
    args = ["--config", "configs/dqn_codegen.yaml", "--trainer.logger", "false", "--trainer.callbacks", "[]"]
    CodeRLCLI(args=args, run=False)
    assert {k: os.environ.get(k) for k in REPO_ENV_KEYS} == {k: before.get(k) for k in REPO_ENV_KEYS}
