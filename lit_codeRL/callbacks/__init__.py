"""Lightning callbacks: interval evaluation (MBPP, games), sample tables, learning-curve PNGs and the
step-limited progress bar."""

from lit_codeRL.callbacks.curves import LearningCurveCallback
from lit_codeRL.callbacks.game_eval import GameEvalCallback
from lit_codeRL.callbacks.mbpp_eval import MBPPEvalCallback
from lit_codeRL.callbacks.progress import StepLimitedRichProgressBar
from lit_codeRL.callbacks.samples import CompletionTableCallback

__all__ = [
    "CompletionTableCallback",
    "GameEvalCallback",
    "LearningCurveCallback",
    "MBPPEvalCallback",
    "StepLimitedRichProgressBar",
]
