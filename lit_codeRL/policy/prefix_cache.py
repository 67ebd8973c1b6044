"""Keys and values of sequences the engine decoded, reused when a later prompt extends one.

Why: a multi-turn episode's next prompt is its last prompt, the action just sampled and the env's
observation. Prefilled from scratch every turn, an agent episode of ``k`` turns pays for its
first prompt ``k`` times; on a CPU that prefill, not the decode, is most of a turn (10 contexts of
1,500 tokens: 36 s of prefill against 18 s for 128 decode steps, SmolLM2-135M, 2 cores). vLLM and
SGLang keep such prefixes in their KV cache; this is the same idea for the lean CPU sampler
(``policy/fast_decode.py``): when a row finishes, its keys/values (prompt plus every token fed) are
kept under its token ids; a later prompt that starts with a kept sequence prefills only what
follows it, and the sequence leaves the store (the row that extends it is kept in its place when it
finishes, so an episode holds one entry, not one per turn).

The reused keys/values are those the same weights computed for the same tokens at the same
positions (rotary positions come from the tokens' indices, not from padding), so a turn decodes
as it would after a full prefill, up to the rounding of a different batch shape. Kept entries
belong to one build of the weights: :meth:`PrefixStore.clear` runs when they change. Memory is
bounded (``EngineSettings.prefix_cache_mib``), the oldest entries dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Prefix:
    """A kept sequence: its token ids and per-layer keys/values ``[H_kv, len, d]``."""

    tokens: tuple[int, ...]
    keys: list[Tensor]
    values: list[Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixStore:
    """Decoded sequences' keys/values, newest last, within ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], Prefix] = OrderedDict()
        self._bytes = 0
        self.reused_tokens = 0
        """Prompt tokens served from the store since it was made (for logs and tests)."""

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def put(self, prefix: Prefix) -> None:
        if self.max_bytes <= 0 or prefix.nbytes > self.max_bytes:
            return
        old = self._entries.pop(prefix.tokens, None)
        self._bytes -= old.nbytes if old is not None else 0
        self._entries[prefix.tokens] = prefix
        self._bytes += prefix.nbytes
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.nbytes

    def discard(self, tokens: tuple[int, ...]) -> None:
        old = self._entries.pop(tokens, None)
        self._bytes -= old.nbytes if old is not None else 0

    def longest(self, prompt: list[int]) -> Prefix | None:
        """The longest kept sequence ``prompt`` starts with and goes beyond (at least one of its
        tokens is left to prefill: the step that yields the next token's logits)."""
        best: Prefix | None = None
        for tokens, entry in self._entries.items():
            n = len(tokens)
            if n < len(prompt) and (best is None or n > len(best.tokens)) and tuple(prompt[:n]) == tokens:
                best = entry
        if best is not None:
            self._entries.move_to_end(best.tokens)
        return best


def keep_rows(
    store: PrefixStore,
    rows: list[int],
    sequences: list[list[int]],
    keys: list[Tensor],
    values: list[Tensor],
    valid: Tensor,
) -> None:
    """Keep cache rows ``rows`` of a ``[B, H_kv, L, d]`` per-layer cache as ``sequences`` (the
    tokens fed to each row, padding excluded); ``valid`` ``[B, L]`` marks each row's fed columns."""
    for row, tokens in zip(rows, sequences, strict=True):
        columns = valid[row].nonzero().squeeze(-1)
        if columns.numel() != len(tokens):  # never expected: the row's columns are its tokens
            continue
        store.put(
            Prefix(
                tuple(tokens),
                [k[row].index_select(1, columns) for k in keys],
                [v[row].index_select(1, columns) for v in values],
            )
        )


@dataclass
class PrefixedPrefill:
    """A batch laid out to prefill only what follows each row's kept prefix.

    Cache columns ``[0, width)`` hold the prefixes right-aligned (filled from the store), columns
    ``[width, width + suffix_ids.size(1))`` the suffixes left-padded: padding in the middle of a
    row is masked like left padding, and each token keeps its true position."""

    width: int
    prefixes: list[Prefix | None]
    suffix_ids: Tensor
    attention_mask: Tensor
    """``[B, width + S]``: which columns hold a token."""
    position_ids: Tensor
    """``[B, S]``: the suffix tokens' positions in their sequences."""
    reused: int


def plan_prefill(
    store: PrefixStore, prompts: list[list[int]], pad_id: int, device: torch.device
) -> PrefixedPrefill | None:
    """The prefixed layout of ``prompts`` (unpadded), or ``None`` when no prompt extends a kept
    sequence."""
    prefixes = [store.longest(p) for p in prompts]
    if all(p is None for p in prefixes):
        return None
    kept = [len(p.tokens) if p is not None else 0 for p in prefixes]
    width = max(kept)
    suffixes = [prompt[k:] for prompt, k in zip(prompts, kept, strict=True)]
    steps = max(len(s) for s in suffixes)
    ids = torch.full((len(prompts), steps), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width + steps, dtype=torch.long)
    positions = torch.zeros(len(prompts), steps, dtype=torch.long)
    for r, (suffix, k) in enumerate(zip(suffixes, kept, strict=True)):
        ids[r, steps - len(suffix) :] = torch.tensor(suffix)
        mask[r, width - k : width] = 1
        mask[r, width + steps - len(suffix) :] = 1
        positions[r, steps - len(suffix) :] = torch.arange(k, k + len(suffix))
    store.reused_tokens += sum(kept)
    for prefix in prefixes:  # the rows that extend it are kept longer when they finish
        if prefix is not None:
            store.discard(prefix.tokens)
    return PrefixedPrefill(width, prefixes, ids.to(device), mask.to(device), positions.to(device), sum(kept))


def fill_cache(plan: PrefixedPrefill, keys: list[Tensor], values: list[Tensor]) -> None:
    """Write each row's kept prefix into columns ``[width - len, width)`` of the per-layer
    ``[B, H_kv, capacity, d]`` buffers; unused prefix columns are zeroed (masked, but never
    uninitialised memory: ``0 * NaN`` would reach the attention output)."""
    for layer, (k, v) in enumerate(zip(keys, values, strict=True)):
        k[:, :, : plan.width].zero_()
        v[:, :, : plan.width].zero_()
        for row, prefix in enumerate(plan.prefixes):
            if prefix is None:
                continue
            n = len(prefix.tokens)
            k[row, :, plan.width - n : plan.width] = prefix.keys[layer]
            v[row, :, plan.width - n : plan.width] = prefix.values[layer]
