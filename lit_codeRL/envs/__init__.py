"""Environments and their rewards: the text-env and turn-based-game protocols, single-turn code
execution and unit tests, multi-turn code repair, token-level code generation (DQN,
``lit_codeRL.envs.codegen``)."""

from lit_codeRL.envs.base import NO_CODE, PendingRewards, RewardResult, SingleTurnCodeEnv
from lit_codeRL.envs.code_execution import CodeExecutionEnv
from lit_codeRL.envs.code_repair import CodeRepairEnv
from lit_codeRL.envs.extraction import extract_code
from lit_codeRL.envs.protocol import Action, EpisodeStart, PendingSteps, StepResult, TextEnv, TurnBasedGame
from lit_codeRL.envs.settings import EnvSettings, make_env
from lit_codeRL.envs.unit_test import UnitTestEnv

__all__ = [
    "NO_CODE",
    "Action",
    "CodeExecutionEnv",
    "CodeRepairEnv",
    "EnvSettings",
    "EpisodeStart",
    "PendingRewards",
    "PendingSteps",
    "RewardResult",
    "SingleTurnCodeEnv",
    "StepResult",
    "TextEnv",
    "TurnBasedGame",
    "UnitTestEnv",
    "extract_code",
    "make_env",
]
