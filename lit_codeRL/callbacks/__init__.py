"""Lightning callbacks: interval evaluation and sample tables."""

from lit_codeRL.callbacks.mbpp_eval import MBPPEvalCallback
from lit_codeRL.callbacks.samples import CompletionTableCallback

__all__ = ["CompletionTableCallback", "MBPPEvalCallback"]
