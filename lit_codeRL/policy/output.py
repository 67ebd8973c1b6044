"""What a generation engine returns, and the padding of token rows around it.

Every engine returns a :class:`GenerationOutput`, so rollouts do not care whether tokens came from
transformers (``policy/hf_engine.py``) or a later vLLM engine. Log-probs are those of the
temperature-scaled, *unfiltered* distribution, i.e. exactly what the training forward computes
with ``log_softmax(logits / temperature)``; top-p/top-k only change which token is drawn
(``policy/sampling.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class GenerationOutput:
    """A batch of completions, one row per sequence, ready to become a training batch."""

    prompt_ids: Tensor
    """``[B, P]`` prompt tokens, left-padded."""
    prompt_mask: Tensor
    """``[B, P]`` 1 on real prompt tokens."""
    completion_ids: Tensor
    """``[B, T]`` sampled tokens, right-padded with the pad id after EOS."""
    completion_mask: Tensor
    """``[B, T]`` 1 on tokens the policy produced (EOS included), 0 on padding."""
    logprobs: Tensor
    """``[B, T]`` log-prob of each sampled token under the sampling policy (0 on padding)."""
    texts: list[str]
    """Decoded completions without special tokens."""
    finished: Tensor
    """``[B]`` True where the sequence ended by itself (EOS, a stop token or a stop string) rather
    than hitting ``max_new_tokens``."""
    finish_reasons: list[str] = field(default_factory=list)
    """Per row: ``"stop"`` (EOS or stop token), ``"stop_string"`` or ``"length"`` (cut off)."""

    @property
    def num_completion_tokens(self) -> int:
        return int(self.completion_mask.sum())


def sampled_output(
    tokenizer,
    pad_token_id: int,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    tokens: Tensor,
    logprobs: Tensor,
    lengths: Tensor,
    reasons: list[str],
) -> GenerationOutput:
    """A decode loop's buffers as a :class:`GenerationOutput`: ``tokens``/``logprobs`` ``[B, max_new]``
    cut to the longest of ``lengths`` ``[B]``, the pad id and log-prob 0 past each row's end, the
    texts decoded, ``finished`` where a row ended by itself (its reason is not ``length``)."""
    width = int(lengths.max()) if lengths.numel() else 0
    completion_mask = (torch.arange(width, device=tokens.device)[None, :] < lengths[:, None]).long()
    tokens = tokens[:, :width].masked_fill(completion_mask == 0, pad_token_id)
    logprobs = logprobs[:, :width] * completion_mask
    texts = tokenizer.batch_decode(tokens.cpu(), skip_special_tokens=True)
    finished = torch.tensor([r != "length" for r in reasons], dtype=torch.bool, device=tokens.device)
    return GenerationOutput(
        prompt_ids, prompt_mask, tokens, completion_mask, logprobs, texts, finished, reasons
    )


def left_pad(rows: list[list[int]], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """``[B, max_len]`` left-padded ids and their mask."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


def concat_generation_outputs(outputs: list[GenerationOutput], pad_token_id: int) -> GenerationOutput:
    """Stack several generation batches (different prompt/completion widths) into one."""
    if len(outputs) == 1:
        return outputs[0]
    prompt_width = max(o.prompt_ids.size(1) for o in outputs)
    completion_width = max(o.completion_ids.size(1) for o in outputs)

    def pad(t: Tensor, width: int, value: float, left: bool) -> Tensor:
        extra = width - t.size(1)
        if extra == 0:
            return t
        filler = t.new_full((t.size(0), extra), value)
        return torch.cat([filler, t] if left else [t, filler], dim=1)

    return GenerationOutput(
        prompt_ids=torch.cat([pad(o.prompt_ids, prompt_width, pad_token_id, True) for o in outputs]),
        prompt_mask=torch.cat([pad(o.prompt_mask, prompt_width, 0, True) for o in outputs]),
        completion_ids=torch.cat(
            [pad(o.completion_ids, completion_width, pad_token_id, False) for o in outputs]
        ),
        completion_mask=torch.cat([pad(o.completion_mask, completion_width, 0, False) for o in outputs]),
        logprobs=torch.cat([pad(o.logprobs, completion_width, 0.0, False) for o in outputs]),
        texts=[t for o in outputs for t in o.texts],
        finished=torch.cat([o.finished for o in outputs]),
        finish_reasons=[r for o in outputs for r in o.finish_reasons],
    )


def unpadded_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> list[list[int]]:
    """The real tokens of each left-padded prompt row (what a server engine sends)."""
    return [row[mask.bool()].tolist() for row, mask in zip(prompt_ids, prompt_mask, strict=True)]


def request_seeds(generator: torch.Generator | None, count: int) -> list[int]:
    """``count`` sampling seeds for a server's requests, drawn from the caller's generator: the
    only sampling state a run checkpoints, so a resumed run sends the same seeds."""
    return [int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) for _ in range(count)]


def completions_output(
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    num_generations: int,
    token_ids: list[list[int]],
    logprobs: list[list[float]],
    texts: list[str],
    finish_reasons: list[str],
    pad_token_id: int,
) -> GenerationOutput:
    """A :class:`GenerationOutput` from per-sample lists (``num_generations`` samples per prompt
    row, group-contiguous), as engines that get whole completions back (a server, vLLM) have them."""
    rows = len(token_ids)
    width = max((len(t) for t in token_ids), default=0)
    completion = torch.full((rows, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.long)
    logps = torch.zeros(rows, width)
    for r, (ids, lps) in enumerate(zip(token_ids, logprobs, strict=True)):
        if ids:
            completion[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[r, : len(ids)] = 1
            logps[r, : len(ids)] = torch.tensor(lps, dtype=torch.float32)
    return GenerationOutput(
        prompt_ids.repeat_interleave(num_generations, 0),
        prompt_mask.repeat_interleave(num_generations, 0),
        completion,
        mask,
        logps,
        list(texts),
        torch.tensor([r != "length" for r in finish_reasons], dtype=torch.bool),
        list(finish_reasons),
    )
