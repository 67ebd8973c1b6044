"""One training round's logging, shared by the game modules (SPIRAL, the code game).

Each module computes the metrics only it knows (game outcomes, baselines, roles) and hands them
here; what every round has (learning rate, generation throughput and time, the loss statistics of
``PolicyModule.update``, its timings), the progress-bar value, ``last_records`` for the samples
table and the run's jsonl dump are done once, so each module file holds only its algorithm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the module is passed in, never imported: no import cycle with policy_module
    from lit_codeRL.rollout.trajectory import TrajectoryBatch
    from lit_codeRL.training.policy_module import PolicyModule


def round_metrics(
    module: PolicyModule,
    batch: TrajectoryBatch,
    stats: dict[str, list[float]],
    times: dict[str, float],
) -> dict[str, float]:
    """What every round logs: ``train/lr``, ``train/tokens_per_s`` and ``time/generate_s`` (from
    ``batch.stats``), ``times`` as they are, and each loss statistic as ``train/<name>``, its mean
    over the micro-batches (and epochs) that produced it."""
    gen_s = batch.stats.get("generate_s", 0.0)
    metrics = {
        "train/tokens_per_s": batch.stats.get("completion_tokens", 0.0) / max(gen_s, 1e-9),
        "train/lr": module.optimizers().param_groups[0]["lr"],
        "time/generate_s": gen_s,
        **times,
    }
    for key, values in stats.items():
        metrics[f"train/{key}"] = sum(values) / len(values)
    return metrics


def log_round(
    module: PolicyModule,
    batch: TrajectoryBatch,
    stats: dict[str, list[float]],
    times: dict[str, float],
    metrics: dict[str, float],
    progress: tuple[str, float],
    records: list[dict[str, Any]] | None = None,
) -> None:
    """Log one round: the module's own ``metrics`` plus :func:`round_metrics`, ``progress``
    (name, value) on the progress bar only; keep ``batch.records`` as ``module.last_records`` and
    append ``records`` (``None``: none) to the run's jsonl with the step and rank."""
    module.log_dict(
        {**metrics, **round_metrics(module, batch, stats, times)}, on_step=True, batch_size=batch.batch_size
    )
    name, value = progress
    module.log(name, value, prog_bar=True, logger=False, on_step=True, batch_size=batch.batch_size)
    module.last_records = batch.records
    if module.writer is not None and records is not None:
        module.writer.write(records, step=module.global_step, rank=module.global_rank)


__all__ = ["log_round", "round_metrics"]
