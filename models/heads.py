"""Policy heads: what the policy part of a model outputs for each action kind.

* discrete actions: ``nn.Linear`` -> ``policy_logits`` [..., A] (kept a plain Linear
  named ``policy`` in ActorCritic, so IMPALA checkpoints keep their keys);
* box actions: :class:`GaussianHead` -> ``policy_mean`` and ``policy_std`` [..., D],
  the parameters of a diagonal Gaussian (``rl_core.numerics.distributions.Gaussian``, optionally
  tanh-squashed to the env's bounds by the agent).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rl_core.numerics.distributions import std_from_param


def std_param_for(std: float, kind: str, min_std: float) -> float:
    """The pre-activation x with ``std_from_param(x, kind, min_std) == std`` (the initial std)."""
    if std <= min_std:
        raise ValueError(f"initial std {std} must exceed the minimum std {min_std}")
    target = std - min_std
    if kind == "softplus":
        return target + math.log(-math.expm1(-target))  # softplus^-1
    return math.log(target)


class GaussianHead(nn.Module):
    """features [..., F] -> {"policy_mean", "policy_std"} [..., D].

    The std is state-independent (a learned vector, as in PPO's MuJoCo policies) or
    state-dependent (a second linear layer); either way it goes through
    ``std_from_param`` (softplus or safe-exp) and never falls below ``min_std``.
    """

    def __init__(
        self,
        in_size: int,
        action_dim: int,
        std_kind: str = "softplus",
        min_std: float = 1e-3,
        initial_std: float = 1.0,
        state_dependent: bool = False,
    ):
        super().__init__()
        self.std_kind, self.min_std = std_kind, min_std
        self.mean = nn.Linear(in_size, action_dim)
        x0 = std_param_for(initial_std, std_kind, min_std)
        self.state_dependent = state_dependent
        if state_dependent:
            self.std = nn.Linear(in_size, action_dim)
            nn.init.zeros_(self.std.weight)
            nn.init.constant_(self.std.bias, x0)
        else:
            self.std_param = nn.Parameter(torch.full((action_dim,), x0))

    @property
    def weight(self) -> torch.Tensor:  # the dtype of the head, as nn.Linear's
        return self.mean.weight

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        mean = self.mean(x)
        raw = self.std(x) if self.state_dependent else self.std_param.expand_as(mean)
        return {"policy_mean": mean, "policy_std": std_from_param(raw, self.std_kind, self.min_std)}
