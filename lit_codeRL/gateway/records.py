"""What one gateway call leaves behind, and how an episode's calls become training rows.

A call is recorded with the prompt's ids exactly as the engine saw them, each choice's sampled ids
and the sampler's log-probs: nothing is re-tokenised later. Rows are rebuilt from the ids alone:

* a call whose prompt *extends* an open row (the row's prompt, completions and observations so
  far, token for token) continues that row: the new prompt tokens after the row's end are an
  observation (masked), the completion is the next trainable turn. A harness that appends to its
  history (mini-swe-agent, most scaffolds) gives one multi-turn row per episode, because the
  gateway renders a continued chat onto the sampled tokens (``render.py``);
* a call that extends no open row (a harness that summarised, truncated or rewrote its history)
  starts a row of its own; every row of an episode shares the episode's reward. Both are
  counted (``merged_calls``, ``rewritten_calls``), so a harness whose rows fall apart shows.
* of an ``n`` > 1 call, only the choice the agent acted on is trained: the one a later call's
  prompt extends (the same prefix rule), else the first (what clients take by default: the
  episode's last call, or a history rewritten after it). The others are dropped
  (``dropped_choices``): the episode's outcome does not depend on them, so its reward on them is
  noise, and n = 16 on 200 calls would otherwise make 3,000 rows of one episode's reward. Should
  later calls extend several choices (an agent that explores branches), each is trained, the
  first in the open row, the others in rows of their own. ``train_choices="all"`` keeps every
  choice, each beyond the first in a row of its own (an agent that votes over its choices: all
  of them shape the outcome).
"""

from __future__ import annotations

from array import array
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

TrainChoices = Literal["chosen", "all"]
"""Which choices of an ``n`` > 1 call are trained (see the module docstring)."""


@dataclass
class Choice:
    """One sampled completion of a call."""

    token_ids: list[int]
    """Exactly the sampled ids (a stop string's tokens and EOS included)."""
    logprobs: list[float]
    """The sampler's log-prob of each id (temperature-scaled, unfiltered: what the trainer computes)."""
    text: str
    """The text the client got (a stop string cut off, as the OpenAI API returns it)."""
    finish_reason: str
    """``stop`` (EOS, a stop token or a stop string) or ``length``."""


@dataclass
class CallRecord:
    """One answered request of an episode (recorded only after its reply was sent)."""

    episode: str
    index: int
    """Position among the episode's recorded calls."""
    kind: str
    """``chat`` or ``completion``."""
    prompt_ids: list[int]
    choices: list[Choice]
    continued: bool = False
    """The prompt was rendered onto the previous call's sampled ids (``render.py``)."""
    policy_version: int = 0
    """The trainer's optimizer step when the call was sampled."""
    wall_s: float = 0.0
    """Queue wait + generation time of the call."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> CallRecord:
        choices = [Choice(**c) for c in data.get("choices", [])]
        return CallRecord(**{**data, "choices": choices})


@dataclass
class RowTurn:
    """One trainable turn of a row and the observation tokens after it (until the next turn)."""

    call: int
    """Index of the call that sampled it."""
    choice: Choice
    observation_ids: list[int] = field(default_factory=list)


@dataclass
class Row:
    """A training row rebuilt from calls: the first call's prompt, then turns."""

    prompt_ids: list[int]
    turns: list[RowTurn] = field(default_factory=list)

    def context_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for turn in self.turns:
            ids += turn.choice.token_ids + turn.observation_ids
        return ids


@dataclass
class EpisodeRows:
    """An episode's rows and how its calls were laid out."""

    rows: list[Row]
    merged_calls: int = 0
    """Calls that continued a row (their prompt extended it token for token). Counted per call,
    whatever its ``n``: with ``rewritten_calls``, every call with choices after the first such."""
    rewritten_calls: int = 0
    """Calls that started a row of their own after an earlier call had made one (the history was
    not an extension); a call with no choices makes no row and counts in neither."""
    dropped_choices: int = 0
    """Choices of ``n`` > 1 calls left out of every row: ones the agent did not act on (no later
    call extended them); always 0 with ``train_choices="all"``."""


def build_rows(calls: list[CallRecord], train_choices: TrainChoices = "chosen") -> EpisodeRows:
    """Lay an episode's calls out as rows (see the module docstring); calls in recorded order.

    ``train_choices``: ``"chosen"`` trains the choices the agent acted on, ``"all"`` every choice."""
    if train_choices not in ("chosen", "all"):
        raise ValueError(f"train_choices must be 'chosen' or 'all', not {train_choices!r}")
    prompts = [_packed(call.prompt_ids) for call in calls]  # packed once, for both passes
    if train_choices == "chosen":
        kept = _acted_on_choices(calls, prompts)
    else:
        kept = [list(range(len(call.choices))) for call in calls]
    out = EpisodeRows([])
    contexts: list[bytes] = []  # each row's whole context, packed (``_packed``): beside ``out.rows``
    for k, call in enumerate(calls):
        choices = [call.choices[j] for j in kept[k]]
        out.dropped_choices += len(call.choices) - len(choices)
        if not choices:
            continue
        prompt = prompts[k]
        at = _longest_prefix(contexts, prompt)
        first, *others = choices
        if at is not None:
            row = out.rows[at]
            row.turns[-1].observation_ids = list(call.prompt_ids[len(contexts[at]) // _ITEM :])
            row.turns.append(RowTurn(call.index, first))
            contexts[at] = prompt + _packed(first.token_ids)
            out.merged_calls += 1
        else:
            out.rewritten_calls += bool(contexts)  # a row before it: its history was not extended
            out.rows.append(Row(list(call.prompt_ids), [RowTurn(call.index, first)]))
            contexts.append(prompt + _packed(first.token_ids))
        for choice in others:
            out.rows.append(Row(list(call.prompt_ids), [RowTurn(call.index, choice)]))
            contexts.append(prompt + _packed(choice.token_ids))
    return out


def _acted_on_choices(calls: list[CallRecord], prompts: list[bytes]) -> list[list[int]]:
    """Per call, the indices of the choices the agent acted on, ascending: those whose context
    (the call's prompt, then the choice) a later call's prompt extends, each later call vouching
    for the longest such choice of the call (ties: the first); none extended: ``[0]``.
    ``prompts``: the calls' prompts packed (``_packed``)."""
    # Packed ids make each prefix test one memcmp: 200 calls of 30k-token prompts are 20k pairs.
    acted_on = []
    for k, call in enumerate(calls):
        choices = [_packed(c.token_ids) for c in call.choices]
        continued: set[int] = set()
        for later in prompts[k + 1 :]:
            if len(continued) == len(choices):
                break
            if not later.startswith(prompts[k]):
                continue
            extended = [j for j, ids in enumerate(choices) if later.startswith(ids, len(prompts[k]))]
            if extended:
                continued.add(max(extended, key=lambda j: (len(choices[j]), -j)))
        acted_on.append(sorted(continued) if continued else [0] if choices else [])
    return acted_on


_ITEM = array("q").itemsize


def _packed(ids: list[int]) -> bytes:
    """``ids`` as fixed-width bytes: one list is a prefix of another iff its bytes are."""
    return array("q", ids).tobytes()


def _longest_prefix(contexts: list[bytes], prompt: bytes) -> int | None:
    """Index of the longest of ``contexts`` that ``prompt`` extends (the first of equals; None:
    none does). Packed, each test is one memcmp: a harness that rewrites its history on each of
    200 calls of 30k tokens made 200 rows, and rebuilding each row's ids for each call was
    quadratic in Python."""
    best, best_len = None, -1
    for k, context in enumerate(contexts):
        if best_len < len(context) <= len(prompt) and prompt.startswith(context):
            best, best_len = k, len(context)
    return best
