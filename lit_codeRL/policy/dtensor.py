"""Reading FSDP2-sharded modules (``DTensor`` parameters) from the policy layer.

The engine refreshes its replica from a sharded policy with these; ``training/distributed.py``
re-exports them next to the rest of the data-parallel helpers.
"""

from __future__ import annotations

import torch
from torch import Tensor


def is_sharded(module: torch.nn.Module) -> bool:
    """True when ``module``'s parameters are ``DTensor`` shards (FSDP2 / ``fully_shard``)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in module.parameters())


def full_tensor(t: Tensor) -> Tensor:
    """The whole tensor of a ``DTensor`` shard (a collective: every rank calls it), or ``t``."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t
