"""The reward table of the code-output game: what the writer and the predictor earn.

A batch holds programs; each valid program gets ``k`` predictions, of which ``c`` are right, and
``p = c / k`` is the predictor's success rate on it. Modes (one per game, for both roles):

* ``zero_sum``, the game as first stated ("the writer scores if the prediction is wrong"): each
  prediction is +1 for the predictor when right and -1 when wrong, the writer the opposite; over
  ``k`` predictions the writer gets their mean, ``1 - 2p``.
* ``learnability`` (**default**): the writer gets ``4 p (1 - p)``: 1 at ``p = 1/2``, 0 when the
  predictor always or never succeeds (the ``proposer_solver`` environment of Prime Intellect's
  verifiers, ``taskset.py``). The predictor gets 1 / 0.
* ``azr``: Absolute Zero's proposer reward ``1 - p``, and 0 when ``p`` is 0 or 1 (AZR, Zhao et al.
  2025). The predictor gets 1 / 0.

Why ``learnability`` is the default: early on the predictor is weak and gets nearly every
program wrong, so under ``zero_sum`` every program earns the writer about +1, and so does noise.
The writer is paid for being unpredictable, not for being hard-but-learnable, and every group
gets the same reward: zero advantage, no signal. ``learnability`` pays most for programs the
predictor solves half the time, and nothing for ones it never solves, so the writer is pushed
towards the predictor's frontier; ``azr`` does too but still pays most for the hardest program the
predictor solves at all.

A program the gate refused earns a penalty on a two-rung ladder (AZR's format/wrong split):
:data:`NO_PROGRAM_REWARD` (-1) when there is no program to speak of (no closed code block, blank,
does not parse, too long: the ``FORMAT_REASONS``), and :data:`INVALID_PROGRAM_REWARD` (-0.5) when it
parses but breaks a rule or fails when run. Why two rungs: a small policy starts with almost no
valid programs, and with one penalty every writer group is flat at -1 (no advantage anywhere,
nothing to learn from: SmolLM2-135M's first run, ``docs/code_game.md``); with two, a group that
holds a closed, parsing program beside prose has signal towards the format first. Any valid
program (>= 0) still beats every refused one, so no rung pays for breaking the rules. In
``zero_sum`` both rungs are -1 by default: there a program the predictor always gets right earns
-1, and a -0.5 for a rule-breaking program would pay the writer to break rules rather than lose.
A prediction without a parsable ``[OUTPUT]`` block earns :data:`UNPARSED_PREDICTION_REWARD` (-0.5)
below a wrong one (0) for the same reason (``zero_sum``: -1, as a wrong one). One whose gate
verdict is ``sandbox_error`` earns nothing and is masked out of the loss (:func:`program_rewards`
returns ``None``): the infrastructure failed, not the writer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

GameMode = Literal["zero_sum", "learnability", "azr"]
GAME_MODES: tuple[str, ...] = ("zero_sum", "learnability", "azr")
DEFAULT_MODE: GameMode = "learnability"

NO_PROGRAM_REWARD = -1.0
"""The writer's reward for an answer with no program in it (a reason in :data:`FORMAT_REASONS`):
AZR's format-error penalty, the lowest reward of the game."""

INVALID_PROGRAM_REWARD = -0.5
"""The writer's reward for a program that parses but that the gate refused (a banned name, a
runtime error, no output, non-determinism, ...) in ``learnability`` and ``azr``: half a unit below
the lowest reward of a valid program (0), so any valid program, even a trivial one, beats it, and
half a unit above :data:`NO_PROGRAM_REWARD` (AZR's wrong-answer rung)."""

UNPARSED_PREDICTION_REWARD = -0.5
"""The predictor's reward for an answer without a parsable ``[OUTPUT]`` block in ``learnability``
and ``azr`` (a wrong answer earns 0)."""

FORMAT_REASONS: frozenset[str] = frozenset({"no_program", "empty", "syntax_error", "too_long"})
"""Gate reasons that mean the writer gave no program to run: :data:`NO_PROGRAM_REWARD`."""


def refusal_reward(
    reason: str,
    mode: GameMode = DEFAULT_MODE,
    *,
    invalid: float | None = None,
    no_program: float | None = None,
) -> float:
    """The writer's reward for a program the gate refused with ``reason`` (not ``ok``, not
    ``sandbox_error``): ``no_program`` (default :data:`NO_PROGRAM_REWARD`) for a reason in
    :data:`FORMAT_REASONS`, else ``invalid`` (default :data:`INVALID_PROGRAM_REWARD`, -1 in
    ``zero_sum``). ``None`` takes the default."""
    _check_mode(mode)
    if reason in ("ok", "sandbox_error"):
        raise ValueError(f"{reason!r} is not a refusal")
    if reason in FORMAT_REASONS:
        return NO_PROGRAM_REWARD if no_program is None else float(no_program)
    if invalid is not None:
        return float(invalid)
    return -1.0 if mode == "zero_sum" else INVALID_PROGRAM_REWARD


def predictor_reward(
    correct: bool, mode: GameMode = DEFAULT_MODE, *, parsed: bool = True, unparsed: float | None = None
) -> float:
    """The predictor's reward for one prediction: ``1.0`` right / ``0.0`` wrong (``learnability``,
    ``azr``), or ``+1.0`` / ``-1.0`` in the original ``zero_sum`` game. An answer with no parsable
    block (``parsed=False``) earns ``unparsed`` (default :data:`UNPARSED_PREDICTION_REWARD`, -1 in
    ``zero_sum``)."""
    _check_mode(mode)
    if not parsed:
        if unparsed is not None:
            return float(unparsed)
        return -1.0 if mode == "zero_sum" else UNPARSED_PREDICTION_REWARD
    if mode == "zero_sum":
        return 1.0 if correct else -1.0
    return 1.0 if correct else 0.0


def writer_reward(p: float, mode: GameMode = DEFAULT_MODE) -> float:
    """The writer's reward for one valid program that the predictor gets right at rate ``p``:
    ``zero_sum``: ``1 - 2p``; ``learnability``: ``4 p (1 - p)``; ``azr``: ``1 - p``, or 0 when
    ``p`` is 0 or 1."""
    _check_mode(mode)
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    if mode == "zero_sum":
        return 1.0 - 2.0 * p
    if mode == "learnability":
        return 4.0 * p * (1.0 - p)
    return 0.0 if p in (0.0, 1.0) else 1.0 - p


def writer_rewards(correct_counts: Sequence[int], k: int, mode: GameMode = DEFAULT_MODE) -> list[float]:
    """The writer's reward per program of a batch: program ``i`` got ``k`` predictions of which
    ``correct_counts[i]`` were right (a list or a 1-D tensor of counts), rewarded by
    :func:`writer_reward` at ``p = correct_counts[i] / k``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    counts = correct_counts.tolist() if hasattr(correct_counts, "tolist") else list(correct_counts)
    out = []
    for c in counts:
        if not (float(c) == int(c) and 0 <= int(c) <= k):
            raise ValueError(f"each correct count must be an integer in [0, {k}], got {c}")
        out.append(writer_reward(int(c) / k, mode))
    return out


def program_rewards(
    reasons: Sequence[str],
    correct_counts: Sequence[int],
    k: int,
    mode: GameMode = DEFAULT_MODE,
    *,
    invalid: float | None = None,
    no_program: float | None = None,
) -> list[float | None]:
    """The writer's reward per program from its gate reason (``GateResult.reason``) and, for valid
    programs, its correct-prediction count: ``ok`` -> :func:`writer_reward`, ``sandbox_error`` ->
    ``None`` (masked: no reward, out of the loss), any other reason -> :func:`refusal_reward`.
    ``correct_counts[i]`` is read only for valid programs."""
    if len(reasons) != len(correct_counts):
        raise ValueError(f"{len(reasons)} reasons but {len(correct_counts)} correct counts")
    counts = correct_counts.tolist() if hasattr(correct_counts, "tolist") else list(correct_counts)
    out: list[float | None] = []
    for reason, c in zip(reasons, counts, strict=True):
        if reason == "ok":
            out.append(writer_rewards([c], k, mode)[0])
        elif reason == "sandbox_error":
            out.append(None)
        else:
            out.append(refusal_reward(reason, mode, invalid=invalid, no_program=no_program))
    return out


def _check_mode(mode: str) -> None:
    if mode not in GAME_MODES:
        raise ValueError(f"mode must be one of {GAME_MODES}, got {mode!r}")


__all__ = [
    "DEFAULT_MODE",
    "FORMAT_REASONS",
    "GAME_MODES",
    "INVALID_PROGRAM_REWARD",
    "NO_PROGRAM_REWARD",
    "UNPARSED_PREDICTION_REWARD",
    "GameMode",
    "predictor_reward",
    "program_rewards",
    "refusal_reward",
    "writer_reward",
    "writer_rewards",
]
