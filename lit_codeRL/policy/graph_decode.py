"""Decoding through captured CUDA graphs: the engine's sampler on a GPU.

Why: a decode step of a small dense model on a GPU is bound by kernel launches and Python, not by
the GPU. SmolLM2-135M's 30 layers issue ~500 kernels a token; launched one by one from Python that
is several milliseconds a step while the GPU works for a fraction of one. Here the lean forward
(``policy/fast_decode.py``) runs one decode step over *static* buffers (a KV cache
``[rows, H_kv, capacity, d]`` written at a device-side column, the fed tokens and positions, an
additive key mask) and that step is captured once per (batch bucket, capacity) as a CUDA graph;
each token then costs one graph replay plus the few sampling kernels.

What stays exact: a replay runs the very kernels eager execution of the same step runs, so with
``capture=False`` (the eager path, also what runs on a CPU) the same generator draws the same
token ids and log-probs bit for bit (``tests/policy/test_graph_decode.py`` on CPU, the ``gpu``
tests on CUDA). Sampling and the recorded log-probs are ``sampling.draw``, the function every
engine loop uses. Rows are padded to a bucket (a GEMM of another shape may round differently, so
a padded row's logits can differ in the last bit from an unpadded eager forward; the log-probs
recorded are always those of the distribution the token was drawn from).

What it does not do on the host: finished rows keep decoding (nearly free when launch-bound)
instead of being dropped from the cache, so nothing waits for the GPU to say which rows ended
before the next step is queued. Each step's tokens are copied to pinned host memory without
blocking and read one step later (EOS, stop tokens, stop strings, ``on_finished``), when the GPU
is already busy with the next step; the loop stops one step after the last row ends.

Weights: the graphs read the lean forward's weight tensors, which ``LeanLlama.refresh`` updates in
place after every optimizer step; if an address changes anyway (a module rebuilt), the graphs are
recaptured (``addresses``).
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lit_codeRL.policy.fast_decode import LeanLlama
from lit_codeRL.policy.output import GenerationOutput, sampled_output
from lit_codeRL.policy.sampling import SamplingParams, draw, stop_string_hits

log = logging.getLogger("lit_codeRL")

ROW_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256)
"""Batch sizes a graph is captured for; a batch pads to the next one (vLLM pads the same way).
Larger batches run the same step eagerly."""
CAPACITY_STEP = 256
"""KV-cache capacity (prompt width + new tokens) is rounded up to a multiple of this, so prompts
of nearby lengths share a graph."""
MAX_GRAPHS = 16
"""Captured graphs kept (least recently used dropped), each with its own few MiB of intermediates."""


def row_bucket(rows: int) -> int | None:
    """The captured batch size ``rows`` pads to; ``None`` past the largest bucket."""
    return next((b for b in ROW_BUCKETS if b >= rows), None)


class StaticStep:
    """One decode step of ``lean`` over static buffers for ``rows`` rows and ``capacity`` key
    columns: feed :attr:`token` at :attr:`position`, write its keys/values at column
    :attr:`slot` (the same for every row: prompts are left-padded to one width), return the next
    logits ``[rows, V]``. Every input lives in a buffer the step reads in place, and the step
    advances :attr:`position` and :attr:`slot` itself, so it can be captured and replayed."""

    def __init__(self, lean: LeanLlama, rows: int, capacity: int, k: list[Tensor], v: list[Tensor]):
        self.lean, self.rows, self.capacity = lean, rows, capacity
        like = lean.embed
        self.k = [t[:rows, :, :capacity] for t in k]
        self.v = [t[:rows, :, :capacity] for t in v]
        self.token = torch.zeros(rows, 1, dtype=torch.long, device=like.device)
        self.position = torch.zeros(rows, 1, dtype=torch.long, device=like.device)
        self.slot = torch.zeros(1, dtype=torch.long, device=like.device)
        self.mask = torch.zeros(rows, 1, 1, capacity, dtype=like.dtype, device=like.device)
        positions = torch.arange(capacity, device=like.device)[None]
        cos, sin = lean.rotary_tables(like[:1, None], positions)  # [1, 1, capacity, d]
        self.cos, self.sin = cos[0, 0], sin[0, 0]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.logits: Tensor | None = None

    def load(
        self, keys: list[Tensor], values: list[Tensor], key_valid: Tensor, next_position: Tensor
    ) -> None:
        """Start a batch: the prompt's keys/values ``[n, H_kv, width, d]`` (``n <= rows``) in the
        first columns, ``key_valid`` ``[n, width]`` its real tokens, ``next_position`` ``[n]``."""
        n, width = key_valid.shape
        for dst, src in zip(self.k + self.v, keys + values, strict=True):
            dst[:n, :, :width].copy_(src)
        self.mask.fill_(torch.finfo(self.mask.dtype).min)
        self.mask[:n, 0, 0, :width].masked_fill_(key_valid, 0.0)
        # padding rows too: a position the step keeps advancing must stay inside the rotary table
        self.position.zero_()
        self.position[:n, 0].copy_(next_position)
        self.slot.fill_(width)

    def _write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k[layer].index_copy_(2, self.slot, k)
        self.v[layer].index_copy_(2, self.slot, v)
        return self.k[layer], self.v[layer]

    def forward(self) -> Tensor:
        """The step itself (eager; what the graph captures)."""
        lean = self.lean
        self.mask.index_fill_(-1, self.slot, 0.0)  # the key written this step becomes visible
        x = F.embedding(self.token, lean.embed)
        cos, sin = self.cos[self.position][:, None], self.sin[self.position][:, None]
        x = lean.layers_forward(x, cos, sin, self.mask, self._write)
        logits = lean.head(x)[:, -1]
        self.position.add_(1)
        self.slot.add_(1)
        return logits

    def capture(self) -> None:
        """Record :meth:`forward` as a CUDA graph (after warm-up runs on a side stream, which
        also leave the buffers garbage: :meth:`load` resets every one a step reads). Each graph
        has its own memory pool: a shared one is only safe for graphs replayed in capture order.
        ``thread_local``: the sandbox's threads may allocate (host memory) meanwhile."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.forward()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
            self.logits = self.forward()

    def __call__(self) -> Tensor:
        """Run one step: replay the graph if captured, else eagerly. The returned logits of a
        replay are overwritten by the next one: consume them first."""
        if self.graph is None:
            return self.forward()
        self.graph.replay()
        return self.logits


class GraphDecoder:
    """Sampling from a :class:`LeanLlama` through :class:`StaticStep`s (see the module docstring).

    ``capture=False`` runs the identical steps eagerly: the reference the captured path is tested
    against, and the path on a CPU."""

    def __init__(self, lean: LeanLlama, capture: bool = True):
        self.lean = lean
        self.capture = capture and lean.embed.device.type == "cuda"
        self._steps: OrderedDict[tuple[int, int], StaticStep] = OrderedDict()
        self._store: tuple[list[Tensor], list[Tensor]] | None = None
        self._addresses: tuple[int, ...] = ()
        self.captures = 0
        """Graphs captured so far (a test sees recaptures)."""

    def _kv_store(self, rows: int, capacity: int) -> tuple[list[Tensor], list[Tensor]]:
        """One KV buffer per layer, big enough for every step's views; grown (and every graph
        dropped) when a batch needs more."""
        if self._store is not None:
            have = self._store[0][0]
            if have.size(0) >= rows and have.size(2) >= capacity:
                return self._store
            rows, capacity = max(rows, have.size(0)), max(capacity, have.size(2))
        self._steps.clear()
        self._store = None  # free the old buffers before allocating the new ones
        lean, like = self.lean, self.lean.embed
        shape = (rows, lean.kv_heads, capacity, lean.head_dim)
        # zeros, not empty: a stale NaN bit pattern under the mask would still poison a softmax
        fresh = [
            torch.zeros(shape, dtype=like.dtype, device=like.device) for _ in range(2 * len(lean.layers))
        ]
        self._store = fresh[: len(lean.layers)], fresh[len(lean.layers) :]
        return self._store

    def step_for(self, rows: int, capacity: int) -> StaticStep:
        """The (captured) step for a batch of ``rows`` and a KV capacity of ``capacity``."""
        addresses = self.lean.addresses()
        if addresses != self._addresses:
            self._steps.clear()  # the weights moved: graphs captured over them are stale
            self._addresses = addresses
        # On a GPU rows pad to a bucket captured or not, so the eager reference runs the same shapes
        bucket = row_bucket(rows) if self.lean.embed.device.type == "cuda" else rows
        rows = bucket or rows
        capacity = math.ceil(capacity / CAPACITY_STEP) * CAPACITY_STEP
        key = (rows, capacity)
        if key in self._steps:
            self._steps.move_to_end(key)
            return self._steps[key]
        k, v = self._kv_store(rows, capacity)
        step = StaticStep(self.lean, rows, capacity, k, v)
        if self.capture and bucket is not None:
            try:
                step.capture()
                self.captures += 1
            except RuntimeError as err:  # a driver or op that cannot be captured: decode eagerly
                log.warning(
                    "CUDA graph capture failed (%s); decoding without graphs", str(err).splitlines()[0]
                )
                self.capture, step.graph = False, None
        self._steps[key] = step
        while len(self._steps) > MAX_GRAPHS:
            self._steps.popitem(last=False)
        return step

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        sampling: SamplingParams,
        n: int,
        generator: torch.Generator | None,
        on_finished: Callable[[list[int], list[list[int]], list[str]], None] | None,
        tokenizer,
        stop_token_ids: list[int],
        pad_token_id: int,
    ) -> GenerationOutput:
        """The engine's ``generate`` (same arguments and output) through static steps."""
        lean = self.lean
        lean.refresh_if_stale()
        device = prompt_ids.device
        groups, width = prompt_ids.shape
        rows, max_new = groups * n, sampling.max_new_tokens
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        cache = lean.new_cache(groups, width)
        logits = lean(
            input_ids=prompt_ids,
            attention_mask=prompt_mask,
            position_ids=positions,
            cache=cache,
            logits_to_keep=1,
        ).logits[:, -1]
        step = self.step_for(rows, width + max_new)
        repeat = (lambda t: t.repeat_interleave(n, 0)) if n > 1 else (lambda t: t)
        step.load(
            [repeat(t) for t in cache.k],
            [repeat(t) for t in cache.v],
            repeat(prompt_mask.bool()),
            repeat(positions[:, -1] + 1),
        )
        del cache
        logits = repeat(logits)
        prompt_ids, prompt_mask = repeat(prompt_ids), repeat(prompt_mask)
        tokens = torch.full((rows, max_new), pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros(rows, max_new, device=device)
        rows_done = _HostRows(rows, max_new, device, tokenizer, stop_token_ids, sampling.stop, on_finished)
        for t in range(max_new):
            token, logprob = draw(logits, sampling, generator)
            tokens[:, t], logprobs[:, t] = token, logprob
            rows_done.send(t, token)
            if t < max_new - 1:
                step.token[:rows, 0].copy_(token)
                logits = step()[:rows]
            # the previous step's tokens reached the host while this one was queued
            if t > 0 and rows_done.receive(t - 1):
                break
        else:
            rows_done.receive(max_new - 1)
        rows_done.finish_rest()
        lengths = torch.tensor(rows_done.lengths, device=device)
        return sampled_output(
            tokenizer, pad_token_id, prompt_ids, prompt_mask, tokens, logprobs, lengths, rows_done.reasons
        )


class _HostRows:
    """The host's view of which rows ended: each step's tokens arrive in pinned memory without
    blocking the device (:meth:`send`) and are read a step later (:meth:`receive`)."""

    def __init__(self, rows, max_new, device, tokenizer, stop_token_ids, stops, on_finished):
        cuda = device.type == "cuda"
        self.host = torch.zeros(max_new, rows, dtype=torch.long, pin_memory=cuda)
        self.events = [torch.cuda.Event() for _ in range(max_new)] if cuda else None
        self.tokenizer, self.stop_ids, self.stops = tokenizer, set(stop_token_ids), list(stops)
        self.on_finished = on_finished
        self.lengths = [max_new] * rows
        self.reasons = ["length"] * rows
        self.live = list(range(rows))
        self.received = -1

    def send(self, t: int, token: Tensor) -> None:
        self.host[t].copy_(token, non_blocking=self.events is not None)
        if self.events is not None:
            self.events[t].record()

    def receive(self, t: int) -> bool:
        """Mark the rows that ended at step ``t``; True when none is left."""
        if self.events is not None:
            self.events[t].synchronize()
        self.received = t
        row_tokens = self.host[t].tolist()
        ended, reasons = [], []
        for r in self.live:
            if row_tokens[r] in self.stop_ids:
                ended.append(r), reasons.append("stop")
        if self.stops:
            rest = [r for r in self.live if r not in set(ended)]
            if rest:
                hits = stop_string_hits(self.tokenizer, self.host.T, torch.tensor(rest), t, self.stops)
                for r, hit in zip(rest, hits.tolist(), strict=True):
                    if hit:
                        ended.append(r), reasons.append("stop_string")
        if ended:
            for r, reason in zip(ended, reasons, strict=True):
                self.lengths[r], self.reasons[r] = t + 1, reason
            gone = set(ended)
            self.live = [r for r in self.live if r not in gone]
            if self.on_finished is not None:
                self.on_finished(ended, [self.host[: t + 1, r].tolist() for r in ended], reasons)
        return not self.live

    def finish_rest(self) -> None:
        """Rows still live after the last step ran out of tokens."""
        if self.live and self.on_finished is not None:
            last = self.received + 1
            self.on_finished(
                self.live, [self.host[:last, r].tolist() for r in self.live], ["length"] * len(self.live)
            )
