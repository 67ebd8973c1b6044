"""Checkpoint state beyond weights and optimizer: objects a module registers by name (rollout
position and RNG, baselines, schedules), saved per rank and restored whichever of ``setup`` and
checkpoint loading happens first. A mixin of :class:`~lit_codeRL.training.policy_module.PolicyModule`.
"""

from __future__ import annotations

from typing import Any, Protocol

from lit_codeRL.training.rng import own_rank_state, save_rank_states


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RegisteredState:
    """``register_state`` and the checkpoint hooks that save and restore what was registered."""

    def register_state(self, name: str, obj: Stateful) -> None:
        """Checkpoint ``obj.state_dict()`` under ``name``; restore it now if a checkpoint already
        loaded (``setup`` may run after ``on_load_checkpoint``)."""
        self._registered()[name] = obj
        if name in self._pending():
            obj.load_state_dict(self._pending().pop(name))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # Per rank: under DDP each rank's stream position and RNG states differ (training/rng.py).
        state = {name: obj.state_dict() for name, obj in self._registered().items()}
        save_rank_states(checkpoint, "lit_coderl_state", self._trainer, state)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rank = self.trainer.global_rank if self._trainer is not None else 0
        saved = dict(own_rank_state(checkpoint, "lit_coderl_state", rank) or {})
        if "rollout_state" in checkpoint:  # checkpoints written before the state registry
            saved.setdefault("rollout", checkpoint["rollout_state"])
        for name, state in saved.items():
            if name in self._registered():
                self._registered()[name].load_state_dict(state)
            else:
                self._pending()[name] = state

    def _registered(self) -> dict[str, Stateful]:
        return self.__dict__.setdefault("_state", {})

    def _pending(self) -> dict[str, dict[str, Any]]:
        # a checkpoint's states whose objects are not registered yet
        return self.__dict__.setdefault("_pending_state", {})
