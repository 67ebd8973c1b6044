"""Problems: the ``Problem`` record and loaders (embedded set, MBPP, HumanEval, seed JSON)."""

from lit_codeRL.problems.humaneval import load_humaneval
from lit_codeRL.problems.mbpp import load_mbpp
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.registry import embedded_data_dir, load_embedded, load_problems
from lit_codeRL.problems.seed_json import load_seed_json

__all__ = [
    "Problem",
    "embedded_data_dir",
    "load_embedded",
    "load_humaneval",
    "load_mbpp",
    "load_problems",
    "load_seed_json",
]
