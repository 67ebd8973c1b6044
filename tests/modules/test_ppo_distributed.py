"""PPO value pre-training on 2 processes (gloo, CPU) under DDP and FSDP2: the phase ends on the
explained variance of the *global* batch, so both ranks switch at the same step, keep identical
policies, and finish (a rank-local decision lets DDP replicas diverge and hangs FSDP2).

The file is also the job each rank runs: ``python test_ppo_distributed.py OUT STRATEGY MIN_EV``.
Each rank trains on one fixed batch of its own: rank 0's rewards are all equal (its own explained
variance is 0), rank 1's are 0 and 1, so rank 1's own statistic rises faster than the global
batch's and crosses ``MIN_EV`` one step earlier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import IterableDataset

from lit_codeRL.algorithms.gae import explained_variance
from lit_codeRL.modules.ppo import PPOModule
from lit_codeRL.rollout.trajectory import TrajectoryBatch

ROWS, PROMPT, MAX_NEW, STEPS = 4, 5, 6, 8
MIN_EV = 0.2
"""Measured under DDP (explained variance global / rank 1's own, steps 5-7): 0.09 / 0.09,
0.14 / 0.26, 0.35 / 0.41. Rank 1's own statistic crosses it at step 6, the global one at step 7;
rank 0's is 0 throughout (its returns have no variance)."""


def rank_batch(rank: int) -> TrajectoryBatch:
    """Rank ``rank``'s fixed batch: 2 groups of 2 rows; rank 0 rewards 0.5 everywhere, rank 1
    rewards 0 and 1."""
    g = torch.Generator().manual_seed(100 + rank)
    prompts = torch.randint(10, 1000, (ROWS // 2, PROMPT), generator=g).repeat_interleave(2, 0)
    completions = torch.randint(10, 1000, (ROWS, MAX_NEW), generator=g)
    ids = torch.cat([prompts, completions], 1)
    mask = torch.ones_like(ids)
    trainable = torch.cat(
        [torch.zeros(ROWS, PROMPT, dtype=torch.long), torch.ones(ROWS, MAX_NEW, dtype=torch.long)], 1
    )
    rewards = torch.full((ROWS,), 0.5) if rank == 0 else torch.tensor([0.0, 1.0, 1.0, 0.0])
    records = [{"verdict": "", "completion_tokens": MAX_NEW, "finished": True, "sandbox_s": 0.0}] * ROWS
    return TrajectoryBatch(
        input_ids=ids,
        attention_mask=mask,
        trainable_mask=trainable,
        old_logprobs=torch.zeros(ROWS, PROMPT + MAX_NEW),
        rewards=rewards,
        group_ids=torch.arange(ROWS) // 2,
        records=records,
    )


class Fixed(IterableDataset):
    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __iter__(self):
        while True:
            yield rank_batch(self.rank)


class JobPPO(PPOModule):
    """PPO on the fixed batch of its rank; records per step the phase, the logged (global) and
    the rank-local explained variance, and a checksum of the policy."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.trace: list[dict[str, float]] = []

    def setup(self, stage: str) -> None:
        self.dataset = Fixed(self.trainer.global_rank)

    def advantages_and_returns(self, batch, start, values, policy_old, stats) -> None:
        super().advantages_and_returns(batch, start, values, policy_old, stats)
        mask = batch.trainable_mask[:, start:]
        local = explained_variance(batch.values[:, start:], batch.returns[:, start:], mask)
        self.trace.append(
            {
                "pretraining": float(self.ppo_state.pretraining),
                "global_ev": stats["explained_variance_before"][0],
                "local_ev": float(local),
            }
        )

    def on_train_batch_end(self, *args) -> None:
        from lit_codeRL.training import distributed

        total = sum(
            float(distributed.full_tensor(p.detach()).double().sum()) for p in self.policy.parameters()
        )
        self.trace[-1]["policy_sum"] = total


def job(out: Path, strategy: str, min_ev: float | None) -> None:
    from lightning.pytorch import Trainer

    from lit_codeRL.training import distributed
    from lit_codeRL.training.strategies import FSDP2Strategy

    torch.manual_seed(0)
    module = JobPPO(
        model={"name_or_path": "tiny-random"},
        engine={"dtype": "model"},
        sampling={"max_new_tokens": MAX_NEW, "temperature": 1.0},
        num_generations=2,
        prompts_per_step=2,
        advantage="gae",
        critic={
            "kind": "model",
            "pretrain_steps": STEPS,
            "pretrain_min_ev": min_ev,
            "optimizer": {"learning_rate": 3e-3},
        },
        optimizer={"learning_rate": 1e-3},
        tis_cap=0.0,
        save_hf_model=False,
    )
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp" if strategy == "ddp" else FSDP2Strategy(),
        max_steps=STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        precision="32-true",
    )
    trainer.fit(module)
    params = distributed.full_state_dict(module.policy) if module.sharded else module.policy.state_dict()
    rank = trainer.global_rank
    torch.save({k: v.detach().cpu() for k, v in params.items()}, out / f"{strategy}_params{rank}.pt")
    (out / f"{strategy}_trace{rank}.json").write_text(json.dumps(module.trace))


def run_two_ranks(out: Path, strategy: str, min_ev: float | None, timeout: float = 150) -> list[list[dict]]:
    from tests.training.test_distributed import _env, _free_port

    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(out), strategy, str(min_ev)],
            cwd=Path(__file__).resolve().parents[2],
            env=_env(
                LOCAL_RANK=str(r), NODE_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"{strategy}: PPO on 2 ranks did not finish in {timeout} s (hang?)")
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-4000:]
    return [json.loads((out / f"{strategy}_trace{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_value_pretraining_ends_on_the_global_explained_variance(tmp_path, strategy):
    traces = run_two_ranks(tmp_path, strategy, MIN_EV)
    phases = [[t["pretraining"] for t in trace] for trace in traces]
    assert phases[0] == phases[1], phases  # both ranks leave pre-training at the same step
    switch = phases[0].index(0.0)  # ...and they do leave it, on the threshold, not the step limit
    assert 0 < switch < STEPS
    ev = [t["global_ev"] for t in traces[0]]
    assert ev == [t["global_ev"] for t in traces[1]]
    assert all(e < MIN_EV for e in ev[: switch - 1]) and ev[switch - 1] >= MIN_EV
    # the case a rank-local decision gets wrong: a rank's own statistic crossed first
    assert any(t["local_ev"] >= MIN_EV for t in traces[1][: switch - 1])
    # identical policies on both ranks after the switch (the policy trained at every later step)
    sums = [[t["policy_sum"] for t in trace] for trace in traces]
    assert sums[0] == sums[1] and sums[0][switch] != sums[0][switch - 1]
    if strategy == "ddp":  # every parameter of the two replicas (FSDP2: one sharded copy, the sums)
        p0, p1 = (torch.load(tmp_path / f"ddp_params{r}.pt") for r in range(2))
        for name, value in p0.items():
            assert torch.equal(value, p1[name]), name


if __name__ == "__main__":
    out_dir, strategy_arg, min_ev_arg = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    job(out_dir, strategy_arg, None if min_ev_arg == "None" else float(min_ev_arg))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # as tests/training/dist_job.py: leave cleanly
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
