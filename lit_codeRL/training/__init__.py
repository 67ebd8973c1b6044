"""The shared training layer under ``modules/``: what every language-policy algorithm needs
(model, reference and engine setup; micro-batched backward; optimizer and schedule; checkpointed
extra state; HF export) and what every rollout-driven one adds (environments, rollout datasets,
rollout logging)."""

from lit_codeRL.training.optim import OptimizerSettings
from lit_codeRL.training.policy_module import PolicyModule
from lit_codeRL.training.rollout_module import RolloutModule

__all__ = ["OptimizerSettings", "PolicyModule", "RolloutModule"]
