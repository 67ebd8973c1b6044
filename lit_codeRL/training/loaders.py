"""The train ``DataLoader`` of modules whose dataset generates with the live policy.

Rollout and replay datasets sample from the very module being trained, so they run in the main
process; a module's batches come whole from its dataset, and its generation engines sleep as each
batch is ready (``PolicyModule.release_engines``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

FEW_WORKERS_WARNING = r"The 'train_dataloader' does not have many workers"
"""Lightning's advice (a ``PossibleUserWarning``) to give the train loader more workers."""


def in_process_loader(dataset: IterableDataset, **kwargs: Any) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` in the main process (``num_workers=0``), without
    Lightning's advice to add workers.

    Rollout and replay datasets generate with the live policy (or Q-network): a worker process
    would sample from a stale copy of it, so 0 workers is the design, and Lightning's "does not
    have many workers" warning at every fit is advice that must not be followed. It is ignored
    for the train loader only, only from Lightning's data connector, and only once a module has
    built such a loader (the filter is process-wide, as every ``warnings`` filter is); a loader
    passed to ``Trainer.fit`` in a process that never built one still gets the warning.
    """
    from lightning.fabric.utilities.warnings import PossibleUserWarning

    # re-adding an identical filter replaces it, so building loaders again adds nothing
    warnings.filterwarnings(
        "ignore",
        message=FEW_WORKERS_WARNING,
        category=PossibleUserWarning,
        module=r"lightning\.pytorch\.trainer\.connectors\.data_connector\Z",
    )
    return DataLoader(dataset, num_workers=0, **kwargs)


def whole_batch(batch: Any) -> Any:
    """The collate function of datasets that yield whole batches."""
    return batch


class SleepAfterEachBatch(IterableDataset):
    """The module's batches, its engines put to sleep as each one is ready: that step's rollouts
    are done and its forward and backward come next (the batch is pulled inside
    ``training_step``, in this process). A vLLM engine then sleeps once per step, and ``generate``
    alone wakes it."""

    def __init__(self, dataset: IterableDataset, release: Callable[[], None]) -> None:
        self.dataset, self.release = dataset, release

    def __iter__(self) -> Iterator[Any]:
        for batch in self.dataset:
            self.release()
            yield batch
