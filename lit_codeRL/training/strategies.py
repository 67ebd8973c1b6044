"""Training strategies by name: ``--trainer.strategy ddp`` (Lightning's own) or ``fsdp2``.

``fsdp2`` is Lightning's ``ModelParallelStrategy`` as pure data parallelism: the device mesh is
``data_parallel = num_nodes x devices``, ``tensor_parallel = 1``, and
``PolicyModule.configure_model`` applies ``fully_shard`` per transformer block and then to the
root. (``ModelParallelStrategy``'s own ``"auto"`` would make it ``data_parallel = num_nodes``,
``tensor_parallel = devices``: on one node nothing would be sharded.) The full class path
``lightning.pytorch.strategies.ModelParallelStrategy`` with explicit sizes works as well.

Classic FSDP (``fsdp``, ``FSDPStrategy``) is refused by :func:`check_strategy`: Lightning's FSDP1
breaks manual optimization (Lightning-AI/pytorch-lightning#19626, #19685), which every
language-policy module uses, and needs a GPU.
"""

from __future__ import annotations

from datetime import timedelta

from lightning.pytorch.strategies import ModelParallelStrategy, Strategy, StrategyRegistry
from torch.distributed.constants import default_pg_timeout

from lit_codeRL.errors import ConfigError

FSDP2 = "fsdp2"


class FSDP2Strategy(ModelParallelStrategy):
    """FSDP2 data parallelism over every process (``data_parallel_size = world size``)."""

    def __init__(
        self,
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta | None = default_pg_timeout,
    ) -> None:
        super().__init__(
            data_parallel_size="auto",
            tensor_parallel_size=1,
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
            timeout=timeout,
        )

    def setup_environment(self) -> None:
        # Known only once the trainer has set num_nodes and the parallel devices.
        self._data_parallel_size = self.num_nodes * self.num_processes
        super().setup_environment()


def register() -> None:
    """Make ``strategy="fsdp2"`` resolvable by the Trainer and the CLI (idempotent)."""
    if FSDP2 not in StrategyRegistry:
        StrategyRegistry.register(
            FSDP2,
            FSDP2Strategy,
            description="FSDP2 (fully_shard) data parallelism over all devices, for manual optimization",
        )


def check_strategy(strategy: Strategy | str | None) -> None:
    """Refuse, in one line, a strategy the language-policy modules cannot train under: classic
    FSDP, given as an instance or by a registered name (``fsdp``, ``fsdp_cpu_offload``)."""
    from lightning.pytorch.strategies import FSDPStrategy

    if isinstance(strategy, str) and strategy in StrategyRegistry:
        refused = issubclass(StrategyRegistry[strategy]["strategy"], FSDPStrategy)
    else:
        refused = isinstance(strategy, FSDPStrategy)
    if refused:
        raise ConfigError(
            "strategy 'fsdp' (FSDPStrategy, FSDP1) cannot run manual optimization, which every "
            "language-policy module uses: use --trainer.strategy fsdp2 (FSDP2, fully_shard) or ddp"
        )


register()
