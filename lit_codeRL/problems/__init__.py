"""Problem records and their loaders (seed JSON, MBPP, HumanEval)."""

from lit_codeRL.problems.record import Problem

__all__ = ["Problem"]
