"""The pure parts of the code-output game: one player writes a short deterministic Python program,
the other predicts its exact output, the writer scores when the prediction is wrong.

``gate`` decides whether a written program counts (a static check, then guarded runs in the
sandbox, each with another hash seed), ``grading`` parses and grades predictions, ``rewards`` is the
reward table (``learnability`` by default). The rollout runner, module and config build on these.
"""

from lit_codeRL.envs.code_game.gate import (
    BANNED_ATTRIBUTES,
    BANNED_NAMES,
    REASONS,
    VETTED_IMPORTS,
    GateResult,
    GateSettings,
    extract_program,
    gate_programs,
)
from lit_codeRL.envs.code_game.grading import (
    format_prediction,
    normalise_output,
    parse_prediction,
    prediction_correct,
)
from lit_codeRL.envs.code_game.rewards import (
    DEFAULT_MODE,
    FORMAT_REASONS,
    INVALID_PROGRAM_REWARD,
    NO_PROGRAM_REWARD,
    UNPARSED_PREDICTION_REWARD,
    GameMode,
    predictor_reward,
    program_rewards,
    refusal_reward,
    writer_reward,
    writer_rewards,
)

__all__ = [
    "BANNED_ATTRIBUTES",
    "BANNED_NAMES",
    "DEFAULT_MODE",
    "FORMAT_REASONS",
    "INVALID_PROGRAM_REWARD",
    "NO_PROGRAM_REWARD",
    "REASONS",
    "UNPARSED_PREDICTION_REWARD",
    "VETTED_IMPORTS",
    "GameMode",
    "GateResult",
    "GateSettings",
    "extract_program",
    "format_prediction",
    "gate_programs",
    "normalise_output",
    "parse_prediction",
    "prediction_correct",
    "predictor_reward",
    "program_rewards",
    "refusal_reward",
    "writer_reward",
    "writer_rewards",
]
