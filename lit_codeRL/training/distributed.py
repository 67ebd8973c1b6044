"""What data-parallel training (DDP, FSDP2) needs from ``torch.distributed``, in one place.

Two concerns live here:

* **Batch statistics that mean the same on 1 or N ranks.** DDP and FSDP2 *average* gradients
  over ranks, so a rank's loss must be its share of the global loss times the world size:
  each loss divides its local sum by ``global_count / world_size`` (:func:`per_rank_normaliser`),
  and batch-level statistics (the reward std of ``scale_rewards: batch``) are computed over the
  global batch (:func:`global_std`). Then ``N ranks x B rows`` gives the gradient of
  ``1 rank x N*B rows`` on the same rows.
* **Sharding** (FSDP2 = ``fully_shard``): which submodules form a shard unit
  (:func:`shard_units`), sharding a policy (:func:`shard_model`), and reading full tensors back
  out of a sharded model (:func:`full_tensor`, :func:`full_state_dict`).

Every function is a no-op (or the local answer) when ``torch.distributed`` is not initialised,
so single-process code calls them unconditionally. Every function that communicates is a
collective: all ranks must call it, in the same order.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from lit_codeRL.policy.dtensor import full_tensor, is_sharded

__all__ = [
    "all_ranks",
    "all_reduce",
    "any_rank",
    "full_state_dict",
    "full_tensor",
    "global_max",
    "global_std",
    "is_sharded",
    "per_rank_normalisers",
    "set_gradient_sync",
    "shard_model",
    "shard_units",
    "world_size",
]


def world_size() -> int:
    """Ranks in the default process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce(values: Tensor, op: str = "sum") -> Tensor:
    """``values`` reduced over all ranks (``sum``, ``max`` or ``min``); returns a new tensor."""
    out = values.clone()
    if world_size() > 1:
        ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        dist.all_reduce(out, op=ops[op])
    return out


def per_rank_normalisers(local: list[float], device: torch.device | str = "cpu") -> list[float]:
    """The counts a rank divides its loss sums by: ``sum over ranks of local / world_size``.

    The gradient all-reduce of DDP and FSDP2 divides by the world size; dividing each rank's
    sum by the *mean* count per rank undoes that, so the averaged gradient is
    ``sum over all rows / global count`` exactly, as one process on the whole batch computes.
    Equal to ``local`` on one process. One all-reduce for all counts."""
    n = world_size()
    if n == 1:
        return [float(v) for v in local]
    total = all_reduce(torch.tensor([float(v) for v in local], dtype=torch.float64, device=device))
    return [float(v) / n for v in total.tolist()]


def global_max(local: int, device: torch.device | str = "cpu") -> int:
    """The largest ``local`` over ranks (micro-batch counts every rank must run)."""
    return int(all_reduce(torch.tensor([int(local)], dtype=torch.long, device=device), "max"))


def all_ranks(flag: bool, device: torch.device | str = "cpu") -> bool:
    """True when ``flag`` holds on every rank."""
    return bool(all_reduce(torch.tensor([int(flag)], dtype=torch.long, device=device), "min"))


def any_rank(flag: bool, device: torch.device | str = "cpu") -> bool:
    """True when ``flag`` holds on some rank."""
    return bool(all_reduce(torch.tensor([int(flag)], dtype=torch.long, device=device), "max"))


def global_std(values: Tensor) -> Tensor:
    """Unbiased std of ``values`` (1-D, this rank's part) over all ranks' parts; 0 for < 2 values.

    Two passes (global mean, then the global sum of squared deviations) in float64, so it agrees
    with ``torch.std`` of the concatenated values to float rounding, not just algebraically."""
    flat = values.detach().reshape(-1).double()
    head = all_reduce(torch.stack([flat.new_tensor(float(flat.numel())), flat.sum()]))
    count, total = float(head[0]), head[1]
    if count < 2:
        return values.new_zeros(())
    squares = all_reduce(((flat - total / count) ** 2).sum().reshape(1))
    return (squares[0] / (count - 1)).sqrt().to(values.dtype)


# ---------------------------------------------------------------------------------------- sharding
def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules to ``fully_shard`` before the root: the transformer blocks.

    transformers names them in ``_no_split_modules`` (``LlamaDecoderLayer``, ...); a model
    without that list falls back to the children of its ``ModuleList`` s. One block per unit
    keeps a single block's full weights in memory at a time during forward and backward."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    units = [m for m in model.modules() if type(m).__name__ in names]
    if not units:
        units = [
            child
            for m in model.modules()
            if isinstance(m, torch.nn.ModuleList)
            for child in m
            if any(True for _ in child.parameters())
        ]
    return units


def shard_model(model: torch.nn.Module, mesh) -> torch.nn.Module:
    """``fully_shard`` each block of ``model`` then the root over ``mesh`` (idempotent)."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        return model
    for unit in shard_units(model):
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def set_gradient_sync(model: torch.nn.Module, enabled: bool) -> None:
    """FSDP2's ``no_sync``: skip the gradient reduce-scatter on all but the last micro-batch.

    Lightning's ``toggle_model(sync_grad=...)`` only acts for DDP; without this FSDP2 still
    computes the right sum, with one reduce-scatter per micro-batch instead of one per step."""
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(enabled)


def full_state_dict(model: torch.nn.Module) -> dict[str, Tensor]:
    """The unsharded state dict of an FSDP2 model on CPU (a collective: call on every rank)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
