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
* choices beyond the first of an ``n`` > 1 call start rows of their own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    """Calls that continued a row (their prompt extended it token for token)."""
    rewritten_calls: int = 0
    """Calls after the first that started a row of their own (the history was not an extension)."""


def build_rows(calls: list[CallRecord]) -> EpisodeRows:
    """Lay an episode's calls out as rows (see the module docstring); calls in recorded order."""
    out = EpisodeRows([])
    for k, call in enumerate(calls):
        if not call.choices:
            continue
        row = _longest_prefix_row(out.rows, call.prompt_ids)
        first, *others = call.choices
        if row is not None:
            context = len(row.context_ids())
            row.turns[-1].observation_ids = list(call.prompt_ids[context:])
            row.turns.append(RowTurn(call.index, first))
            out.merged_calls += 1
        else:
            out.rows.append(Row(list(call.prompt_ids), [RowTurn(call.index, first)]))
            out.rewritten_calls += k > 0
        for choice in others:
            out.rows.append(Row(list(call.prompt_ids), [RowTurn(call.index, choice)]))
    return out


def _longest_prefix_row(rows: list[Row], prompt_ids: list[int]) -> Row | None:
    """The row whose whole context is the longest prefix of ``prompt_ids`` (None: no row is)."""
    best, best_len = None, -1
    for row in rows:
        context = row.context_ids()
        if (
            len(context) <= len(prompt_ids)
            and len(context) > best_len
            and prompt_ids[: len(context)] == context
        ):
            best, best_len = row, len(context)
    return best
