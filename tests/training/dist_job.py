"""Data-parallel GRPO jobs for ``test_distributed.py``, run as ``python dist_job.py OUT JOB...``.

Started once per rank by the test with ``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_PORT`` set (so
Lightning neither launches processes itself nor tears down the process group between fits),
or once without them for the single-process reference. Each job is ``strategy:loss_type:
scale_rewards`` or ``fsdp2:uneven``; rank 0 writes ``OUT/<job>.pt`` with the full parameters
after training and the full gradient of the first optimizer step.

``ddp:sp`` / ``fsdp2:sp``: the ``dapo`` job with ``sequence_parallel_size`` 2: both ranks train
on all rows (rank 0's, broadcast), each on half of every row's positions.

Parity jobs train on a fixed sequence of global batches (fixed token ids, completion lengths,
rewards and one sample without a reward); rank ``r`` of ``N`` takes rows ``[r*B, (r+1)*B)``, so
N ranks and one process see the same rows. The ``uneven`` job samples its batch with the engine,
rank 0 three prompts of up to 12 tokens, rank 1 one prompt of up to 3: different lengths and
different numbers of micro-batches per rank.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from lightning.pytorch import Trainer
from torch.utils.data import IterableDataset

from lit_codeRL.modules.grpo import GRPOModule
from lit_codeRL.modules.ppo import PPOModule
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.training import distributed
from lit_codeRL.training.strategies import FSDP2Strategy

GROUP, ROWS, PROMPT, MAX_NEW = 2, 8, 5, 7  # global batch: 4 groups of 2, prompt 5 tokens


def global_batch(step: int) -> TrajectoryBatch:
    """Step ``step``'s global batch of ``ROWS`` rows (the same in every process)."""
    g = torch.Generator().manual_seed(1000 + step)
    prompts = torch.randint(10, 1000, (ROWS // GROUP, PROMPT), generator=g).repeat_interleave(GROUP, 0)
    completions = torch.randint(10, 1000, (ROWS, MAX_NEW), generator=g)
    lengths = torch.randint(1, MAX_NEW + 1, (ROWS,), generator=g)
    lengths[0], lengths[-1] = MAX_NEW, 1  # rank 0 holds more tokens than rank 1
    done = (torch.arange(MAX_NEW)[None, :] < lengths[:, None]).long()
    ids = torch.cat([prompts, completions * done], dim=1)
    mask = torch.cat([torch.ones(ROWS, PROMPT, dtype=torch.long), done], dim=1)
    trainable = torch.cat([torch.zeros(ROWS, PROMPT, dtype=torch.long), done], dim=1)
    rewards = torch.rand(ROWS, generator=g) * (1 + torch.arange(ROWS) // (ROWS // 2))  # halves differ
    valid = torch.ones(ROWS, dtype=torch.bool)
    valid[-2] = False  # a sandbox failure on the last rank: row counts differ per rank
    return batch_of(ids, mask, trainable, torch.zeros(ROWS, PROMPT + MAX_NEW), rewards, valid)


def batch_of(ids, mask, trainable, old, rewards, valid) -> TrajectoryBatch:
    rows = ids.size(0)
    records = [
        {
            "verdict": "passed",
            "completion_tokens": int(trainable[i].sum()),
            "finished": True,
            "sandbox_s": 0.0,
        }
        for i in range(rows)
    ]
    return TrajectoryBatch(
        input_ids=ids,
        attention_mask=mask,
        trainable_mask=trainable,
        old_logprobs=old,
        rewards=rewards,
        group_ids=torch.arange(rows) // GROUP,
        valid=valid,
        records=records,
    )


class FixedBatches(IterableDataset):
    """This rank's rows of the fixed global batches, forever."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def __iter__(self):
        step, per_rank = 0, ROWS // self.world
        while True:
            yield global_batch(step).select(slice(self.rank * per_rank, (self.rank + 1) * per_rank))
            step += 1


class SampledBatches(IterableDataset):
    """Rollouts sampled by the module's engine, of a size and length that depend on the rank."""

    def __init__(self, module: GRPOModule, rank: int) -> None:
        self.module, self.rank = module, rank

    def __iter__(self):
        prompts, max_new = (3, 12) if self.rank == 0 else (1, 3)
        g = torch.Generator().manual_seed(self.rank)
        while True:
            ids = torch.randint(10, 1000, (prompts, PROMPT), generator=g)
            engine = self.module.engine
            out = engine.generate(ids, torch.ones_like(ids), SamplingParams(max_new_tokens=max_new), GROUP, g)
            rows = out.completion_ids.size(0)
            comp = out.completion_mask
            yield batch_of(
                torch.cat([out.prompt_ids, out.completion_ids], 1),
                torch.cat([out.prompt_mask, comp], 1),
                torch.cat([torch.zeros_like(out.prompt_mask), comp], 1),
                torch.cat([torch.zeros(rows, PROMPT), out.logprobs], 1),
                torch.rand(rows, generator=g),
                torch.ones(rows, dtype=torch.bool),
            )


class JobModule(GRPOModule):
    """GRPO on the job's batches; records the first step's full gradient."""

    def __init__(self, uneven: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.uneven = uneven
        self.first_grad: dict[str, torch.Tensor] | None = None

    def setup(self, stage: str) -> None:
        rank, world = self.trainer.global_rank, self.trainer.world_size
        if self.sequence_parallel_size > 1:  # the group's first rank pulls every row
            rank, world = 0, 1
        self.dataset = SampledBatches(self, rank) if self.uneven else FixedBatches(rank, world)

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.first_grad is None:
            self.first_grad = {
                n: distributed.full_tensor(p.grad).detach().clone() for n, p in self.policy.named_parameters()
            }
        super().on_before_optimizer_step(optimizer)


class PPOJobModule(PPOModule):
    """PPO with a critic on the fixed batches: value pre-training for the first rollout (the
    frozen policy gets DDP's zero gradients), then two epochs of joint updates; records the
    first joint step's full gradient of policy and critic."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.first_grad: dict[str, torch.Tensor] | None = None

    def setup(self, stage: str) -> None:
        self.dataset = FixedBatches(self.trainer.global_rank, self.trainer.world_size)

    def named_trained(self):
        yield from self.policy.named_parameters()
        yield from (("critic." + n, p) for n, p in self.critic.named_parameters())

    def on_before_optimizer_step(self, optimizer) -> None:
        if self.first_grad is None and not self.ppo_state.pretraining:
            self.first_grad = {
                n: distributed.full_tensor(p.grad).detach().clone() for n, p in self.named_trained()
            }
        super().on_before_optimizer_step(optimizer)


def run(job: str, out: Path, world: int) -> None:
    strategy, loss_type, scale = (job.split(":") + ["group"])[:3]
    uneven = loss_type == "uneven"
    # "sp": the dapo job with each row's sequence split over the 2 ranks (context parallelism)
    sp = 2 if loss_type == "sp" else 1
    loss_type = "dapo" if sp > 1 else loss_type
    torch.manual_seed(0)
    if loss_type == "ppo":
        return run_ppo(job, strategy, out, world)
    module = JobModule(
        uneven=uneven,
        model={"name_or_path": "tiny-random", "sequence_parallel_size": sp},
        engine={"dtype": "model"},
        sampling={"max_new_tokens": MAX_NEW, "temperature": 1.0},
        num_generations=GROUP,
        loss_type="dapo" if uneven else loss_type,
        scale_rewards=scale,
        optimizer={"learning_rate": 1e-3},
        tis_cap=0.0,
        micro_batch_size=2,
        entropy_interval=0,
        save_hf_model=False,
    )
    kinds = {"ddp": "ddp", "fsdp2": FSDP2Strategy()}
    if world > 1:  # LightningEnvironment.teardown() deletes it after each fit
        os.environ["WORLD_SIZE"] = str(world)
    trainer = Trainer(
        accelerator="cpu",
        devices=world,
        strategy=kinds[strategy] if world > 1 else "auto",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        precision="32-true",
    )
    trainer.fit(module)
    sharded = module.sharded
    params = distributed.full_state_dict(module.policy) if sharded else module.policy.state_dict()
    if trainer.is_global_zero:
        torch.save(
            {
                "params": {k: v.detach().cpu() for k, v in params.items()},
                "grad": module.first_grad,
                "sharded": sharded,
                "context_parallel": module.sp_group is not None,
            },
            out / f"{job.replace(':', '_')}.pt",
        )


def run_ppo(job: str, strategy: str, out: Path, world: int) -> None:
    module = PPOJobModule(
        model={"name_or_path": "tiny-random"},
        engine={"dtype": "model"},
        sampling={"max_new_tokens": MAX_NEW, "temperature": 1.0},
        num_generations=GROUP,
        advantage="gae",
        critic={"kind": "model", "pretrain_steps": 1, "optimizer": {"learning_rate": 1e-3}},
        ppo_epochs=2,
        optimizer={"learning_rate": 1e-3},
        tis_cap=0.0,
        micro_batch_size=2,
        save_hf_model=False,
    )
    kinds = {"ddp": "ddp", "fsdp2": FSDP2Strategy()}
    if world > 1:
        os.environ["WORLD_SIZE"] = str(world)
    trainer = Trainer(
        accelerator="cpu",
        devices=world,
        strategy=kinds[strategy] if world > 1 else "auto",
        max_steps=4,  # rollout 1: 2 critic-only steps; rollout 2: 2 joint steps
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        precision="32-true",
    )
    trainer.fit(module)
    params = {}
    for name, net in (("", module.policy), ("critic.", module.critic)):
        state = distributed.full_state_dict(net) if module.sharded else net.state_dict()
        params.update({name + k: v.detach().cpu() for k, v in state.items()})
    if trainer.is_global_zero:
        torch.save(
            {"params": params, "grad": module.first_grad, "sharded": module.sharded},
            out / f"{job.replace(':', '_')}.pt",
        )


if __name__ == "__main__":
    out_dir, ranks = Path(sys.argv[1]), int(os.environ.get("WORLD_SIZE", "1"))
    for name in sys.argv[2:]:
        run(name, out_dir, ranks)
    # Leave the process group before the interpreter exits: exiting with gloo's threads alive
    # aborted a rank now and then ("terminate called without an active exception", CI)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    # ...which was not enough: 1 run in 6 still aborted in the interpreter's teardown, after its
    # results were written. The results are on disk; skip the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
