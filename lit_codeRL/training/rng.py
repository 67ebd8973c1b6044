"""Exact resume: the process-global RNG streams and per-rank checkpoint state.

A resumed run must draw the same random numbers an uninterrupted run would have drawn. The
streams a module owns (the rollout dataset's sampling generator, the problem stream's shuffle,
the replay buffer's and the DQN collector's generators) are checkpointed by their owners. What no
object owns lives here: Python's ``random``, NumPy's global generator, torch's global CPU
generator (dropout, ``torch.rand`` without a generator) and, where CUDA is available, every CUDA
device's global generator (dropout on the GPU, sampling kernels that ignore a CPU generator).

Two details decide whether "the same numbers" holds:

* *When* the global streams are restored. Lightning consumes the global torch RNG between
  ``on_load_checkpoint`` and the first new step (a fresh ``DataLoader`` iterator draws its base
  seed; model code may initialise something). The uninterrupted run drew those numbers before
  its first step, long before the checkpoint. So :class:`GlobalRNG` only stashes the saved state
  on load and a module applies it in ``on_train_batch_start`` of the first step after the resume:
  the step then starts from exactly the state the checkpoint was taken in.
* *Whose* state is saved. Under DDP every rank has its own streams (each rank offsets its seeds
  by its rank), but Lightning writes the checkpoint from rank 0 only. :func:`gather_rank_states`
  collects every rank's state into the checkpoint (a collective: ``on_save_checkpoint`` runs on
  every rank) and :func:`own_rank_state` picks this rank's entry on load.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import torch

log = logging.getLogger("lit_codeRL")


def capture_global_rng() -> dict[str, Any]:
    """The process-global RNG states as checkpoint-safe values (``torch.load(weights_only=True)``
    reads them: tensors, ints, tuples and lists only, no NumPy arrays)."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_global_rng(state: dict[str, Any]) -> None:
    """Set the process-global RNG streams to ``state`` (from :func:`capture_global_rng`)."""
    random.setstate(_as_python_state(state["python"]))
    np_state = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": np_state["key"].numpy().astype(np.uint32), "pos": int(np_state["pos"])},
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        }
    )
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if len(cuda) == count:
            torch.cuda.set_rng_state_all(cuda)
        else:  # resumed on a machine with another device count: restore the devices both have
            log.warning(
                "checkpoint holds CUDA RNG states of %d devices, this process sees %d: "
                "restoring the first min(both) only",
                len(cuda),
                count,
            )
            for device, device_state in enumerate(cuda[:count]):
                torch.cuda.set_rng_state(device_state, device)


def _as_python_state(state: Any) -> tuple:
    # random.setstate wants tuples; a checkpoint round trip may hand back lists.
    version, internal, gauss_next = state
    return (version, tuple(internal), gauss_next)


class GlobalRNG:
    """The global RNG streams as a checkpointable object whose restore waits for the first step.

    ``load_state_dict`` only stashes the state; :meth:`restore_pending` (called from the owning
    module's ``on_train_batch_start``) applies it. See the module docstring for why."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return capture_global_rng()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending = state

    def restore_pending(self) -> bool:
        """Apply a stashed checkpoint state once; returns whether there was one."""
        if self.pending is None:
            return False
        state, self.pending = self.pending, None
        restore_global_rng(state)
        return True


RANKS_SUFFIX = "_ranks"
"""``checkpoint[key + RANKS_SUFFIX]`` holds every rank's entry of ``checkpoint[key]`` (DDP only)."""


def gather_rank_states(trainer: Any, state: Any) -> list[Any] | None:
    """On rank 0, every rank's ``state`` in rank order when more than one process trains; else
    None (other ranks get None too: only rank 0 writes the checkpoint, so only it holds the list).

    A collective: every rank must call it (Lightning runs ``on_save_checkpoint`` on all ranks)."""
    if trainer is None or trainer.world_size <= 1:
        return None
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    rank = torch.distributed.get_rank()
    gathered: list[Any] | None = [None] * trainer.world_size if rank == 0 else None
    torch.distributed.gather_object(state, gathered, dst=0)
    return gathered


def save_rank_states(checkpoint: dict[str, Any], key: str, trainer: Any, state: Any) -> None:
    """``checkpoint[key] = state`` (this rank's: rank 0's in the written file, as before) and, under
    DDP, on rank 0, ``checkpoint[key + "_ranks"]`` = every rank's."""
    checkpoint[key] = state
    per_rank = gather_rank_states(trainer, state)
    if per_rank is not None:
        checkpoint[key + RANKS_SUFFIX] = per_rank


def own_rank_state(checkpoint: dict[str, Any], key: str, rank: int) -> Any:
    """This rank's entry of ``key``: its own from ``key + "_ranks"`` when saved there, else the
    single-process one (a checkpoint from a 1-process run, or from before per-rank state).

    A rank the checkpoint has no entry for (more processes than the run that saved it) continues
    from rank 0's state, with a warning: its prompt order and sampling then repeat rank 0's."""
    per_rank = checkpoint.get(key + RANKS_SUFFIX)
    if per_rank is not None:
        if rank < len(per_rank):
            return per_rank[rank]
        log.warning(
            "checkpoint has per-rank state of %d processes, not of rank %d: continuing from "
            "rank 0's (its data order and sampling repeat rank 0's)",
            len(per_rank),
            rank,
        )
    elif rank > 0 and key in checkpoint:
        log.warning(
            "checkpoint was saved by a single process: every rank continues from its state "
            "(data order and sampling repeat across ranks)"
        )
    return checkpoint.get(key)
