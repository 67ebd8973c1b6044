"""Reward functions of the token-level code-generation env, as pure functions of a graded program.

Three families, chosen by ``reward_type``:

* ``code_quality``: dense. Every step that leaves the (bracket-closed) program compilable pays
  ``progress * (Φ(s') - Φ(s))`` where the potential Φ is the fraction of tests passed (potential-based
  shaping, Ng et al. 1999: it does not change which programs are optimal). The final step adds
  ``correctness * pass_fraction + all_pass_bonus * all_passed + syntax * (±1) + structure * score +
  efficiency * all_passed * (1 - steps / max_steps)``.
* ``sparse``: 1 at the final step if every test passes, else 0.
* ``curriculum``: ``(1 - α) code_quality + α sparse`` where α grows from 0 to 1 with training
  progress, so the task gets harder (the shaping that guides early learning fades away); the env
  also unlocks harder problems as progress grows (see ``CodeGenerationEnv.set_progress``).
"""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass

from lit_codeRL import pyparse

REWARD_TYPES = ("code_quality", "sparse", "curriculum")


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the ``code_quality`` reward terms (also used by ``curriculum``)."""

    correctness: float = 1.0
    """Times the fraction of tests passed, at the final step."""
    all_pass_bonus: float = 1.0
    """Added at the final step when every test passes."""
    syntax: float = 0.2
    """+weight if the final program compiles, -weight if it does not."""
    structure: float = 0.1
    """Times the structure score in [0, 1] (returns a value, no dead code, no bare expressions)."""
    efficiency: float = 0.2
    """Times ``1 - steps / max_steps``, only for programs that pass every test (shorter is better)."""
    progress: float = 0.5
    """Times the change in the fraction of tests passed, on every step whose program compiles."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def structure_score(code: str) -> float:
    """Fraction of three structure checks the first function in ``code`` passes, in [0, 1].

    Checks: the body ends in a ``return`` with a value; no statement follows a ``return`` in the same
    block (dead code); no bare expression statements (a computed value thrown away). 0 if the code
    does not parse or has no function.
    """
    try:
        tree = pyparse.parse(code)
    except SyntaxError:
        return 0.0
    func = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        return 0.0
    last = func.body[-1]
    ends_in_return = isinstance(last, ast.Return) and last.value is not None
    no_dead_code = True
    no_bare_expr = True
    for node in ast.walk(func):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if isinstance(stmt, ast.Return | ast.Break | ast.Continue) and i < len(block) - 1:
                    no_dead_code = False
                if isinstance(stmt, ast.Expr) and not isinstance(stmt.value, ast.Constant):
                    no_bare_expr = False
    return (ends_in_return + no_dead_code + no_bare_expr) / 3.0


def progress_reward(previous_potential: float, potential: float, weights: RewardWeights) -> float:
    """Shaping term of one step: ``progress * (Φ(s') - Φ(s))`` with Φ = fraction of tests passed."""
    return weights.progress * (potential - previous_potential)


def code_quality_final(
    compiles: bool,
    pass_fraction: float,
    all_passed: bool,
    structure: float,
    steps: int,
    max_steps: int,
    weights: RewardWeights,
) -> dict[str, float]:
    """The final-step terms of ``code_quality`` by name (their sum is the reward)."""
    return {
        "correctness": weights.correctness * pass_fraction,
        "all_pass_bonus": weights.all_pass_bonus * float(all_passed),
        "syntax": weights.syntax * (1.0 if compiles else -1.0),
        "structure": weights.structure * structure,
        "efficiency": weights.efficiency * float(all_passed) * (1.0 - steps / max(max_steps, 1)),
    }


def sparse_reward(all_passed: bool) -> float:
    """1 if every test passes, else 0."""
    return 1.0 if all_passed else 0.0


def curriculum_mix(dense: float, sparse: float, progress: float) -> float:
    """``(1 - α) dense + α sparse`` with ``α = clip(progress, 0, 1)``."""
    alpha = min(max(progress, 0.0), 1.0)
    return (1.0 - alpha) * dense + alpha * sparse
