"""The fixed-size observation of ``CodeGenerationEnv``: ``[spec | token history | meta]``.

A hashed bag-of-words of the spec (name, statement, arity, test values), the ids of the last
``history`` code tokens (the Q-network embeds them, so a 5,000-token vocabulary costs an embedding
table, not a 5,000-wide one-hot per position) and a few numbers about where the program stands.
"""

from __future__ import annotations

import ast
import re
import zlib
from dataclasses import dataclass

import numpy as np

from lit_codeRL.envs.codegen.vocabulary import signature_of, statement_of
from lit_codeRL.problems.record import Problem

META_FEATURES = ("step", "indent", "depth", "lines", "compiles", "pass_fraction", "expect_operand")


@dataclass(frozen=True)
class ObservationLayout:
    """Segments of the flat observation: ``[spec | history | meta]``."""

    spec_dim: int
    """Hashed bag-of-words of the problem spec (name parts, docstring words, arity, test values)."""
    history: int
    """Ids of the last ``history`` code tokens (action ids; line breaks and indentation as their edit
    ops), most recent last, ``-1`` where the body is shorter."""
    meta_dim: int = len(META_FEATURES)
    """Step, indentation, bracket depth, line count, compiles, tests passed, expects an operand."""

    @property
    def dim(self) -> int:
        return self.spec_dim + self.history + self.meta_dim


def _hash(word: str, dim: int) -> int:
    return zlib.crc32(word.encode()) % dim  # crc32: stable across processes, unlike hash()


def spec_features(problem: Problem, dim: int) -> np.ndarray:
    """L2-normalized hashed bag of words of the problem spec."""
    header, args = signature_of(problem)
    words = [f"name:{problem.entry_point}", f"arity:{len(args)}"]
    words += [f"part:{w}" for w in (problem.entry_point or "").lower().split("_") if w]
    words += [f"doc:{w}" for w in re.findall(r"[a-z]+|\d+", statement_of(problem).lower())]
    words += [f"out:{type(ast.literal_eval(exp)).__name__}" for _, exp in problem.io_pairs if _literal(exp)]
    vec = np.zeros(dim, dtype=np.float32)
    for w in words:
        vec[_hash(w, dim)] += 1.0
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return False
    return True
