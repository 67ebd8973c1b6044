"""How tokens are drawn: the sampling knobs, top-k/top-p filtering, categorical draws, stop strings.

Pure functions of logits and token rows, shared by every engine. The log-prob an engine records is
that of the temperature-scaled *unfiltered* distribution (what the trainer recomputes); top-k and
top-p only change which token is drawn, so a filtered sampler is a different policy from the one
the trainer scores: see ``docs/architecture.md`` for what the trainer's importance weight does and
does not correct there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class SamplingParams:
    """How completions are sampled."""

    max_new_tokens: int = 256
    """Maximum completion length in tokens (TRL: ``max_completion_length``)."""
    temperature: float = 1.0
    """Softmax temperature; ``0`` means greedy."""
    top_p: float = 1.0
    """Nucleus sampling mass; 1.0 disables it."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables it."""
    stop: list[str] = field(default_factory=list)
    """Strings that end a completion (e.g. ``</execute>`` or a closing code fence). The completion
    ends with the token that completes the string and keeps it: its token ids stay exactly what
    was sampled, so a multi-turn row rebuilt from them equals what the policy produced."""


def filter_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """``logits`` ``[B, V]`` with tokens outside the top ``top_k`` and outside the smallest set
    holding ``top_p`` of the mass set to ``-inf`` (0 / 1.0 disable either)."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass *before* it already exceeds top_p (the top token always stays).
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) > top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def device_generator(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded by one draw from ``generator`` (the caller's, on the CPU).

    A CPU generator cannot drive CUDA sampling kernels. Falling back to the device's global RNG
    would make GPU rollouts ignore the caller's seed (every DDP rank would share one stream) and
    leave them exact only if nothing else touched that RNG. Deriving the device generator from the
    caller's keeps the caller's generator, which its owner checkpoints, the only sampling state."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def sample_categorical(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One draw per row of ``probs`` ``[B, V]`` (non-negative, need not sum to 1) -> ``[B]``.

    Inverse-CDF sampling: one uniform number per row and a binary search in the running sum.
    ``torch.multinomial`` draws an exponential variate for every vocabulary entry instead, which
    took 14 ms per decode step for 16 x 49k on CPU (15% of the step). Zero-probability entries
    are never chosen: their cumulative sum equals their predecessor's.
    """
    u = torch.rand(probs.size(0), generator=generator, device=probs.device, dtype=probs.dtype)
    return inverse_cdf(probs, u)


def inverse_cdf(probs: Tensor, u: Tensor) -> Tensor:
    """The entry of each row of ``probs`` ``[B, V]`` where mass fraction ``u`` ``[B]`` in [0, 1] falls."""
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:].contiguous()  # a strided slice makes searchsorted copy and warn
    token = torch.searchsorted(cdf, u[:, None].to(cdf.dtype) * total, right=True)
    # u * total can round up to total; the first index reaching total is the last positive entry.
    last = torch.searchsorted(cdf, total, right=False)
    # A NaN row (a policy whose weights went NaN) finds no entry: an index past the vocabulary
    # would then fail a gather or an embedding (a device-side assert on a GPU); the last id is
    # drawn instead, with the NaN log-prob that tells the trainer.
    return torch.minimum(token, last).clamp_(max=probs.size(-1) - 1).squeeze(-1)


def draw(
    logits: Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """One token per row of ``logits`` ``[B, V]`` and its log-prob under the temperature-scaled,
    unfiltered distribution (what the trainer recomputes) -> ``([B], [B])``. Every engine loop
    draws through this one function, so a captured and an eager loop draw identically."""
    logits = logits.float()
    # (T = 1 divides nothing: skipping it saves a pass over [B, V] per token)
    scaled = logits / sampling.temperature if sampling.temperature not in (0, 1) else logits
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)
    if sampling.temperature > 0:
        if sampling.top_k > 0 or sampling.top_p < 1.0:
            probs = filter_logits(scaled, sampling.top_k, sampling.top_p).softmax(-1)
        else:
            probs = (scaled - lse).exp_()
        token = sample_categorical(probs, generator)
    else:
        token = logits.argmax(-1)
    return token, (scaled.gather(-1, token[:, None]) - lse).squeeze(-1)


def stop_string_hits(tokenizer, tokens: Tensor, active: Tensor, step: int, stops: list[str]) -> Tensor:
    """``[len(active)]`` bool: row ``active[i]`` of ``tokens`` ``[B, T]`` now ends in (contains,
    within its last few tokens up to ``step``) one of ``stops``. Checked every step, so a hit
    always involves the newest token."""
    # A stop string of n characters spans at most n + 1 tokens (one may carry extra text).
    window = max(len(s) for s in stops) + 1
    lo = max(0, step + 1 - window)
    tails = tokenizer.batch_decode(tokens[active, lo : step + 1].tolist())
    return torch.tensor([any(s in t for s in stops) for t in tails], device=tokens.device)
