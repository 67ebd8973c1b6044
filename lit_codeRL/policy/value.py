"""Critics for PPO: a value head on the policy's own backbone, or a separate value network.

Both predict, for each trainable token ``t`` of a row, the value of the state *before* it (the
context up to ``t - 1``): the same positions whose logits give the token's log-prob, so values,
log-probs and advantages line up column for column (``[B, L - start]``).

* :class:`ValueHead` reads the final (normed) hidden states the policy forward already computed
  (``PolicyModule.token_logprobs(..., with_hidden=True)``): no second forward, and the value loss
  also trains the shared backbone (scaled by ``vf_coef``), as classic actor-critic PPO does.
* :class:`ValueModel` is a second transformer (verl, OpenRLHF, Open-Reasoner-Zero): the policy's
  backbone weights (or another checkpoint's) without the LM head, plus a fresh value head, with
  its own optimizer group. Twice the forward/backward of the head, but the policy's features are
  not pulled toward value prediction.

The head starts at zero (every value 0 at the first step: no initialisation bias toward the
reward model a critic would otherwise inherit, VC-PPO's first failure mode), in fp32.
"""

from __future__ import annotations

from torch import Tensor, nn


class ValueHead(nn.Module):
    """``hidden [..., H] -> value [...]``: one linear unit, zero-initialised, computed in fp32."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.proj(hidden.float()).squeeze(-1)


def backbone_of(causal_lm: nn.Module) -> nn.Module:
    """The transformer body of a transformers causal LM (``model.model`` for Llama/Qwen2), the
    part that returns hidden states without the LM head."""
    prefix = getattr(causal_lm, "base_model_prefix", "model")
    body = getattr(causal_lm, prefix, None)
    if body is None:
        raise ValueError(f"cannot find the backbone ({prefix!r}) of {type(causal_lm).__name__}")
    return body


class ValueModel(nn.Module):
    """A separate critic: ``backbone`` (a transformers base model) + :class:`ValueHead`."""

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = ValueHead(hidden_size)

    @classmethod
    def from_causal_lm(cls, causal_lm: nn.Module) -> ValueModel:
        """The critic made of ``causal_lm``'s backbone (its LM head is dropped)."""
        return cls(backbone_of(causal_lm), causal_lm.config.hidden_size)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, start: int) -> Tensor:
        """``[B, L - start]`` values of the states before tokens ``start..L-1``."""
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.backbone(
            input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1], position_ids=positions[:, :-1]
        ).last_hidden_state
        return self.head(hidden[:, start - 1 :])
