"""Environments and their rewards: single-turn code execution and unit tests (GRPO), token-level
code generation (DQN, ``lit_codeRL.envs.codegen``); later games and multi-turn text envs."""

from lit_codeRL.envs.base import NO_CODE, PendingRewards, RewardResult, SingleTurnCodeEnv
from lit_codeRL.envs.code_execution import CodeExecutionEnv
from lit_codeRL.envs.extraction import extract_code
from lit_codeRL.envs.unit_test import UnitTestEnv

__all__ = [
    "NO_CODE",
    "CodeExecutionEnv",
    "PendingRewards",
    "RewardResult",
    "SingleTurnCodeEnv",
    "UnitTestEnv",
    "extract_code",
]
