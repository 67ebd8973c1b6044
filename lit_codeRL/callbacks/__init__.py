"""Lightning callbacks: interval evaluation (MBPP, games), sample tables and the step-limited progress bar."""

from lit_codeRL.callbacks.game_eval import GameEvalCallback
from lit_codeRL.callbacks.mbpp_eval import MBPPEvalCallback
from lit_codeRL.callbacks.progress import StepLimitedRichProgressBar
from lit_codeRL.callbacks.samples import CompletionTableCallback

__all__ = ["CompletionTableCallback", "GameEvalCallback", "MBPPEvalCallback", "StepLimitedRichProgressBar"]
