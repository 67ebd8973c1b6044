"""Q-networks of ``DQNModule``: one Q-value per action of ``CodeGenerationEnv`` from its flat
observation ``[spec | token history | meta]`` (``lit_codeRL.envs.codegen.observation``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class QNetwork(nn.Module):
    """MLP over ``[spec | embedded token history | meta]`` with one output per action.

    The history segment holds action ids (``-1`` = padding); each position's id is embedded and the
    embeddings are concatenated, so position matters and the input width does not grow with the
    vocabulary.
    """

    def __init__(
        self,
        spec_dim: int,
        history: int,
        meta_dim: int,
        n_actions: int,
        embed_dim: int = 16,
        hidden_sizes: tuple[int, ...] = (256, 256),
    ):
        super().__init__()
        self.spec_dim, self.history, self.meta_dim, self.n_actions = spec_dim, history, meta_dim, n_actions
        self.embed = nn.Embedding(n_actions + 1, embed_dim, padding_idx=0)
        layers: list[nn.Module] = []
        width = spec_dim + history * embed_dim + meta_dim
        for size in hidden_sizes:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.trunk = nn.Sequential(*layers)
        self.out_features = width
        self.head = nn.Linear(width, n_actions)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        spec = obs[:, : self.spec_dim]
        ids = obs[:, self.spec_dim : self.spec_dim + self.history].long() + 1  # -1 padding -> 0
        meta = obs[:, self.spec_dim + self.history :]
        return self.trunk(torch.cat([spec, self.embed(ids).flatten(1), meta], dim=1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``[B, obs_dim]`` -> ``[B, n_actions]``."""
        return self.head(self.features(obs))


class DuelingQNetwork(QNetwork):
    """``Q = V + A - mean(A)`` (Wang et al. 2016): the value of a state is learned once, not per action."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.value = nn.Linear(self.out_features, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        h = self.features(obs)
        advantage = self.head(h)
        return self.value(h) + advantage - advantage.mean(dim=1, keepdim=True)
