"""The queue between the server's event loop and the thread that owns the generation engine.

Requests arrive on the server's thread; the engine is driven only by its owner (the training
thread during a harness rollout, the main thread of ``lit-coderl serve``), which calls
:meth:`GenerationQueue.run_pending`: it takes every waiting job, groups those that sample alike
(same sampling knobs and ``n``) into batches of at most ``max_batch_rows`` sequences, runs one
``generate`` per batch and resolves each job's future. Concurrent agents therefore share decode
steps instead of queueing behind each other. A job with a ``seed`` runs alone from a generator of
that seed, so the same seeded request gives the same reply whatever else is in flight.

A job whose future was cancelled (its client hung up, its episode closed) is dropped right before
its batch runs, never generated. Jobs are taken round-robin by owner (the episode), so one
episode's backlog of calls that cannot batch together does not run ahead of another's call.
"""

from __future__ import annotations

import queue
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_codeRL.gateway.records import Choice
from lit_codeRL.gateway.requests import cut_at_stop
from lit_codeRL.policy.sampling import SamplingParams


@dataclass(eq=False)  # hashed by identity: an episode keeps a set of its waiting jobs
class GenerationJob:
    """Prompts to sample ``n`` completions each for, and the future their choices go to."""

    prompts: list[list[int]]
    sampling: SamplingParams
    n: int = 1
    seed: int | None = None
    owner: str | None = None
    """The episode the job is for (jobs are taken round-robin by owner)."""
    future: Future = field(default_factory=Future)
    queued_at: float = field(default_factory=time.perf_counter)

    def key(self) -> tuple[Any, ...]:
        s = self.sampling
        alone = id(self) if self.seed is not None else None
        return (s.temperature, s.top_p, s.top_k, s.max_new_tokens, tuple(s.stop), self.n, alone)


class GenerationQueue:
    """Jobs waiting for the engine (see the module docstring).

    Args:
        max_batch_rows: Sequences (prompts x ``n``) per ``generate`` call at most.
        batch_wait_s: After the first job arrives, how long to wait for more to batch with it.
    """

    def __init__(self, max_batch_rows: int = 64, batch_wait_s: float = 0.005) -> None:
        self.max_batch_rows, self.batch_wait_s = max(1, max_batch_rows), batch_wait_s
        self._jobs: queue.Queue[GenerationJob] = queue.Queue()
        self.batches = 0
        self.rows = 0

    def submit(self, job: GenerationJob) -> Future:
        self._jobs.put(job)
        return job.future

    def _take(self, timeout_s: float) -> list[GenerationJob]:
        try:
            jobs = [self._jobs.get(timeout=timeout_s)]
        except queue.Empty:
            return []
        deadline = time.perf_counter() + self.batch_wait_s
        while True:
            try:
                jobs.append(self._jobs.get(timeout=max(0.0, deadline - time.perf_counter())))
            except queue.Empty:
                return jobs

    def run_pending(
        self, engine: Any, timeout_s: float = 0.05, generator: torch.Generator | None = None
    ) -> int:
        """Run every job waiting (after up to ``timeout_s`` for the first); returns how many ran."""
        jobs = _round_robin(self._take(timeout_s))
        groups: dict[tuple[Any, ...], list[GenerationJob]] = {}
        for job in jobs:
            groups.setdefault(job.key(), []).append(job)
        for group in groups.values():
            batch: list[GenerationJob] = []
            for job in group:
                if batch and sum(len(j.prompts) for j in batch + [job]) * job.n > self.max_batch_rows:
                    self._run(engine, batch, generator)
                    batch = []
                batch.append(job)
            if batch:
                self._run(engine, batch, generator)
        return len(jobs)

    def _run(self, engine: Any, jobs: list[GenerationJob], generator: torch.Generator | None) -> None:
        # a client that left while earlier batches ran: its job is dropped here, not generated
        jobs = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        if not jobs:
            return
        first = jobs[0]
        if first.seed is not None:
            generator = torch.Generator().manual_seed(first.seed % (2**63))
        prompts = [p for j in jobs for p in j.prompts]
        try:
            ids, mask = engine.pad_prompts(prompts)
            out = engine.generate(ids, mask, first.sampling, first.n, generator)
        except Exception as err:  # noqa: BLE001 - every waiting client gets the error, the server lives
            for job in jobs:
                job.future.set_exception(err)
            return
        self.batches += 1
        self.rows += len(prompts) * first.n
        choices = []
        for r in range(len(prompts) * first.n):
            length = int(out.completion_mask[r].sum())
            reason = out.finish_reasons[r] if out.finish_reasons else "stop"
            choices.append(
                Choice(
                    token_ids=out.completion_ids[r, :length].tolist(),
                    logprobs=[float(x) for x in out.logprobs[r, :length].tolist()],
                    text=cut_at_stop(out.texts[r], first.sampling.stop),
                    finish_reason="length" if reason == "length" else "stop",
                )
            )
        pos = 0
        for job in jobs:
            size = len(job.prompts) * job.n
            job.future.set_result(choices[pos : pos + size])
            pos += size


def _round_robin(jobs: list[GenerationJob]) -> list[GenerationJob]:
    """Each owner's first job, then each owner's second, ...: batches are formed (and run) in this
    order, so a call of a quiet episode waits behind at most one batch of a flooding one."""
    by_owner: dict[Any, list[GenerationJob]] = {}
    for i, job in enumerate(jobs):
        by_owner.setdefault(job.owner if job.owner is not None else ("anonymous", i), []).append(job)
    out: list[GenerationJob] = []
    for rank in range(max((len(v) for v in by_owner.values()), default=0)):
        out += [v[rank] for v in by_owner.values() if rank < len(v)]
    return out
