"""Token-level code generation, the DQN environment: ``CodeGenerationEnv`` and its parts.

``vocabulary`` (actions and signatures), ``grammar`` (the line grammar behind the action mask),
``execution`` (sandbox grading behind a cache), ``observation`` (the fixed-size features),
``rewards`` (pure reward functions) and ``env`` (the gymnasium env that ties them together).
"""

from lit_codeRL.envs.codegen.env import CodeGenerationEnv
from lit_codeRL.envs.codegen.execution import CachedExecutor, CodeExecutor, SandboxExecutor, compiles
from lit_codeRL.envs.codegen.observation import ObservationLayout, spec_features
from lit_codeRL.envs.codegen.rewards import REWARD_TYPES, RewardWeights
from lit_codeRL.envs.codegen.vocabulary import DEFAULT_CODE_TOKENS, EDIT_OPS, build_vocabulary, signature_of

__all__ = [
    "DEFAULT_CODE_TOKENS",
    "EDIT_OPS",
    "REWARD_TYPES",
    "CachedExecutor",
    "CodeExecutor",
    "CodeGenerationEnv",
    "ObservationLayout",
    "RewardWeights",
    "SandboxExecutor",
    "build_vocabulary",
    "compiles",
    "signature_of",
    "spec_features",
]
