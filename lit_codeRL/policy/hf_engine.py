"""The transformers generation engine: batched, KV-cached sampling from the policy itself.

The :class:`GenerationEngine` protocol (``policy/engine.py``) over any transformers causal LM.
Llama-family models decode through the lean forward (``policy/fast_decode.py``): on a CPU with
finished rows dropped from the batch, on a GPU through captured CUDA graphs
(``policy/graph_decode.py``); other models through their own forward with an in-place KV cache
(``policy/kv_cache.py``). Sampling math
lives in ``policy/sampling.py``, the replica kept for another dtype or a sharded policy in
``policy/replica.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from lit_codeRL.policy import fast_decode
from lit_codeRL.policy.dtensor import is_sharded
from lit_codeRL.policy.graph_decode import GraphDecoder
from lit_codeRL.policy.kv_cache import cache_keyword, decode_cache
from lit_codeRL.policy.loading import is_quantized
from lit_codeRL.policy.output import GenerationOutput, left_pad, sampled_output
from lit_codeRL.policy.precision import generation_dtype, log_generation_dtype
from lit_codeRL.policy.prefix_cache import PrefixedPrefill, PrefixStore, fill_cache, keep_rows, plan_prefill
from lit_codeRL.policy.replica import copy_weights, device_of, make_replica
from lit_codeRL.policy.sampling import SamplingParams, device_generator, draw, stop_string_hits


class HFGenerationEngine:
    """Batched, KV-cached sampling over a transformers causal LM (the :class:`GenerationEngine`
    protocol of ``policy/engine.py``).

    Two things make it faster than ``model.generate`` for RL rollouts: each prompt is prefilled
    once and its KV cache repeated for the ``n`` samples of its group, and rows that emitted EOS
    are dropped from the batch (and the cache) instead of being carried to the longest sequence.

    With ``dtype=None`` it samples from the very module being trained (``sync_weights`` only
    records which one), so its weights are always current; on a CPU a Llama-family module runs
    through the lean forward, whose weight copies follow the module's parameters (rebuilt before
    a ``generate`` whenever they changed). With a ``dtype`` other than the module's (bf16
    generation for an fp32 trainer) it samples from a replica in that dtype, whose weights
    ``sync_weights`` refreshes from the live module; the log-probs it returns are then the
    replica's, and the trainer corrects the small mismatch (``PolicyModule.sampler_correction``).
    """

    def __init__(
        self,
        tokenizer,
        model: torch.nn.Module | None = None,
        stop_token_ids: list[int] | None = None,
        cpu_decode_threads: int | None = None,
        dtype: torch.dtype | str | None = None,
        fast_decode: bool = True,
        cuda_graphs: bool = True,
        prefix_cache_mib: float = 1024.0,
    ):
        self.tokenizer = tokenizer
        self.prefixes = PrefixStore(int(prefix_cache_mib * 2**20)) if prefix_cache_mib > 0 else None
        """Keys/values of finished rows, reused by a later prompt that extends one (the lean CPU
        sampler; ``policy/prefix_cache.py``); ``None``: off."""
        self._prefix_build: int | None = None
        self.fast_decode = fast_decode
        self.cuda_graphs = cuda_graphs
        """On a GPU, replay each decode step as a captured CUDA graph (off: the same static steps
        run eagerly, the captured path's reference)."""
        self.cpu_decode_threads = cpu_decode_threads
        self.dtype_setting = dtype
        """A dtype, ``None`` (the module's own) or a setting resolved per device (``"auto"``)."""
        self.dtype: torch.dtype | None = None
        """What it samples in now (``None``: the module's own dtype)."""
        eos = tokenizer.eos_token_id
        self.stop_token_ids = sorted({*(stop_token_ids or []), *([eos] if eos is not None else [])})
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.model: torch.nn.Module | None = None
        """The live module the engine follows."""
        self._replica: torch.nn.Module | None = None
        self._replica_of: torch.nn.Module | None = None
        self._lean: fast_decode.LeanLlama | None = None
        self._graphs: GraphDecoder | None = None
        self._always_replica = False
        if model is not None:
            self.sync_weights(model)

    def replicate(self, model: torch.nn.Module) -> None:
        """Sample from a full replica of ``model`` from now on, even in the module's own dtype.

        Called before ``model`` is sharded (FSDP2): the replica keeps whole weights, which
        :meth:`sync_weights` refreshes from the shards (one all-gather per parameter after each
        optimizer step). A sharded forward is a collective, so sampling from the live module
        would tie every decode step of every rank together and all-gather each block per token.
        Costs one unsharded copy of the weights per rank, in the sampling dtype."""
        self._always_replica = True
        self.sync_weights(model)

    # Whatever the caller's mode (``trainer.validate`` calls in under ``torch.inference_mode``), the
    # replica, the lean forward's weight copies and the decode buffers the engine keeps must be
    # ordinary tensors: inference tensors keep no version counter and refuse in-place writes once
    # the caller is back in training. (``inference_mode(False)`` turns grad mode back on: each
    # entry point also runs under ``no_grad``, innermost.)
    @torch.inference_mode(False)
    @torch.no_grad()
    def sync_weights(self, model: torch.nn.Module) -> None:
        """Sample from ``model``'s current weights from now on: the module itself when no other
        dtype is asked for, else a replica in ``dtype`` whose parameters are copied from it."""
        self.model = model
        setting = self.dtype_setting
        self.dtype = setting if isinstance(setting, torch.dtype) or setting is None else None
        if isinstance(setting, str):
            self.dtype = generation_dtype(setting, device_of(model).type)
        if not self._needs_replica(model):
            self._replica = self._replica_of = None
            self._lean = self._lean_forward(model)
            if self._lean is not None:
                self._lean.invalidate()  # the optimizer step just changed the module
            return
        source = list(model.parameters())
        device = source[0].device
        sharded = is_sharded(model)
        if (
            sharded
            and self._replica is not None
            and self._replica_of is model
            and device_of(self._replica) != device
        ):
            # Lightning moved the shards to the accelerator after sharding on the host.
            self._replica.to(device)
            self._lean = None
        elif self._replica is None or self._replica_of is not model or device_of(self._replica) != device:
            if sharded:
                raise RuntimeError(
                    "the engine needs its replica before the model is sharded: call replicate(model) first"
                )
            dtype = self.dtype or next(p.dtype for p in source if p.is_floating_point())
            self._replica, self._replica_of = make_replica(model, dtype), model
            self._lean = self._lean_forward(self._replica)
            return
        copy_weights(self._replica, model)
        if self._lean is not None:
            self._lean.invalidate()

    def _lean_forward(self, module: torch.nn.Module) -> fast_decode.LeanLlama | None:
        """The lean forward over ``module`` (kept if it already reads it), where it applies:
        ``fast_decode`` on, a CPU or CUDA device, a supported unsharded Llama-family model."""
        if self._lean is not None and self._lean.model is module:
            return self._lean
        usable = (
            self.fast_decode
            and device_of(module).type in ("cpu", "cuda")
            and fast_decode.supports(module)
            and not is_sharded(module)
        )
        return fast_decode.LeanLlama(module) if usable else None

    def _graph_decoder(self, lean: fast_decode.LeanLlama) -> GraphDecoder:
        """The static-step decoder over ``lean`` (its graphs kept while it reads the same forward)."""
        if self._graphs is None or self._graphs.lean is not lean:
            self._graphs = GraphDecoder(lean, capture=self.cuda_graphs)
        return self._graphs

    def _needs_replica(self, model: torch.nn.Module) -> bool:
        if self._always_replica:
            return True
        if self.dtype is None or is_quantized(model):
            # a quantized policy samples from itself: its layers already compute in their
            # compute dtype, and a copy of packed weights would only double them
            return False
        return any(p.is_floating_point() and p.dtype != self.dtype for p in model.parameters())

    @property
    def sampler(self) -> torch.nn.Module | None:
        """The module that samples: the replica if there is one, else the live module."""
        return self._replica if self._replica is not None else self.model

    def encode_prompts(self, prompts: list[str]) -> tuple[Tensor, Tensor]:
        """Left-padded ids and mask for already-templated prompt strings."""
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return enc["input_ids"], enc["attention_mask"]

    def pad_prompts(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Left-padded ids and mask for prompts given as token ids (multi-turn contexts)."""
        return left_pad(prompts, self.pad_token_id)

    @torch.inference_mode(False)  # see sync_weights
    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        sampling: SamplingParams,
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        on_finished: Callable[[list[int], list[list[int]], list[str]], None] | None = None,
    ) -> GenerationOutput:
        """Sample ``num_generations`` completions per prompt row; output rows are group-contiguous.

        ``on_finished(rows, token_ids, finish_reasons)`` is called as soon as rows end (EOS, a stop
        string, or the length limit at the end), so their rewards can be computed while the rest of the batch is
        still generating.
        """
        model = self.sampler
        if model is None:
            raise RuntimeError("the engine has no model: call sync_weights(model) first")
        device = next(model.parameters()).device
        if isinstance(self.dtype_setting, str):
            log_generation_dtype(self.dtype_setting, device.type)  # the device samples really come from
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        was_training = model.training
        model.eval()
        try:
            # The engine's dtype decides the sampling precision, not the trainer's autocast (a
            # rollout runs inside training_step): an fp32 sampler under bf16-mixed stays fp32.
            with torch.autocast(device.type, enabled=False):
                out = self._sample(
                    model, prompt_ids, prompt_mask, sampling, num_generations, generator, on_finished
                )
        finally:
            model.train(was_training)
        return out

    @contextmanager
    def _decode_threads(self, device: torch.device) -> Iterator[None]:
        # Decode matmuls on CPU are too small to amortise intra-op threading, and the freed cores
        # score finished completions in the sandbox meanwhile. Prefill keeps every thread.
        if device.type != "cpu" or self.cpu_decode_threads is None:
            yield
            return
        threads = torch.get_num_threads()
        torch.set_num_threads(max(1, min(self.cpu_decode_threads, threads)))
        try:
            yield
        finally:
            torch.set_num_threads(threads)

    def _plan_prefixes(self, lean: fast_decode.LeanLlama, prompts: list[list[int]]) -> PrefixedPrefill | None:
        """The prefixed prefill of ``prompts`` over the current weights (kept prefixes of an
        older build of them are dropped first)."""
        lean.refresh_if_stale()
        if self._prefix_build != lean.build:
            self.prefixes.clear()
            self._prefix_build = lean.build
        return plan_prefill(self.prefixes, prompts, self.pad_token_id, lean.embed.device)

    @staticmethod
    def _keep(store, rows, active, prompts, tokens, step, cache, mask) -> None:
        """Keep cache rows ``rows`` (fed their prompt and ``tokens[:, :step]``) in ``store``."""
        originals = active[rows].tolist()
        sequences = [prompts[r] + tokens[r, :step].tolist() for r in originals]
        keep_rows(store, rows, sequences, cache.k, cache.v, mask.bool())

    def _sample(
        self, model, prompt_ids, prompt_mask, sampling, n, generator, on_finished
    ) -> GenerationOutput:
        device = prompt_ids.device
        if generator is not None and generator.device != device:
            generator = device_generator(generator, device)
        lean = self._lean if self._lean is not None and self._lean.model is model else None
        if lean is not None and device.type == "cuda":
            return self._graph_decoder(lean).generate(
                prompt_ids,
                prompt_mask,
                sampling,
                n,
                generator,
                on_finished,
                self.tokenizer,
                self.stop_token_ids,
                self.pad_token_id,
            )
        store = self.prefixes if lean is not None else None
        prompts: list[list[int]] = []
        plan = None
        if store is not None:
            prompts = [row[m].tolist() for row, m in zip(prompt_ids, prompt_mask.bool(), strict=True)]
            plan = self._plan_prefixes(lean, prompts)
        feed_ids, mask = prompt_ids, prompt_mask
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)
        if lean is not None:
            forward, cache_kw = lean, "cache"
            width = plan.attention_mask.size(1) if plan is not None else prompt_ids.size(1)
            cache = lean.new_cache(prompt_ids.size(0), width + sampling.max_new_tokens + 1)
            if plan is not None:  # prefill only what follows each row's kept prefix
                fill_cache(plan, cache.k, cache.v)
                cache.length = plan.width
                feed_ids, mask, positions = plan.suffix_ids, plan.attention_mask, plan.position_ids
        else:
            forward, cache_kw = model, cache_keyword(model)
            cache = decode_cache(reserve=sampling.max_new_tokens + 1)
        logits = forward(
            input_ids=feed_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_kw: cache},
        ).logits[:, -1, :]
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, 0)
            prompt_ids = prompt_ids.repeat_interleave(n, 0)
            prompt_mask = prompt_mask.repeat_interleave(n, 0)
            mask = mask.repeat_interleave(n, 0)
            positions = positions.repeat_interleave(n, 0)
            prompts = [p for p in prompts for _ in range(n)]
        batch, max_new = prompt_ids.size(0), sampling.max_new_tokens
        tokens = torch.full((batch, max_new), self.pad_token_id, dtype=torch.long, device=device)
        logprobs = torch.zeros(batch, max_new, device=device)
        lengths = torch.full((batch,), max_new, dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
        stop = torch.tensor(self.stop_token_ids, device=device)
        by_string = torch.zeros(batch, dtype=torch.bool, device=device)
        active = torch.arange(batch, device=device)  # original row of each live cache row
        next_pos = positions[:, -1:] + 1
        with self._decode_threads(device):
            for step in range(max_new):
                token, logprob = draw(logits, sampling, generator)
                tokens[active, step] = token
                logprobs[active, step] = logprob
                done = torch.isin(token, stop)
                if sampling.stop:
                    hit = stop_string_hits(self.tokenizer, tokens, active, step, sampling.stop) & ~done
                    by_string[active[hit]] = True
                    done = done | hit
                if done.any():
                    finished[active[done]] = True
                    lengths[active[done]] = step + 1
                    if on_finished is not None:
                        rows = active[done].tolist()
                        reasons = ["stop_string" if by_string[r] else "stop" for r in rows]
                        on_finished(rows, [tokens[r, : step + 1].tolist() for r in rows], reasons)
                    if store is not None and step > 0:
                        self._keep(
                            store,
                            done.nonzero().squeeze(-1).tolist(),
                            active,
                            prompts,
                            tokens,
                            step,
                            cache,
                            mask,
                        )
                    keep = (~done).nonzero().squeeze(-1)
                    if keep.numel() == 0:
                        break
                    cache.batch_select_indices(keep)
                    active, token, mask, next_pos = active[keep], token[keep], mask[keep], next_pos[keep]
                if step == max_new - 1:
                    break
                mask = torch.cat([mask, mask.new_ones(mask.size(0), 1)], dim=1)
                logits = forward(
                    input_ids=token[:, None],
                    attention_mask=mask,
                    position_ids=next_pos,
                    use_cache=True,
                    **{cache_kw: cache},
                ).logits[:, -1, :]
                next_pos = next_pos + 1
        if store is not None and step > 0 and not bool(finished.all()):  # rows cut at max_new_tokens
            self._keep(store, list(range(active.numel())), active, prompts, tokens, step, cache, mask)
        if on_finished is not None and not bool(finished.all()):
            rows = (~finished).nonzero().squeeze(-1).tolist()
            on_finished(rows, [tokens[r].tolist() for r in rows], ["length"] * len(rows))
        reasons = [
            "stop_string" if s else "stop" if f else "length"
            for f, s in zip(finished.tolist(), by_string.tolist(), strict=True)
        ]
        return sampled_output(
            self.tokenizer, self.pad_token_id, prompt_ids, prompt_mask, tokens, logprobs, lengths, reasons
        )
