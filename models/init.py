"""Orthogonal initialisation (Saxe et al. 2014), as PPO's reference implementations use it.

Andrychowicz et al. 2020 (decisions C57-C59) find the last policy layer's scale matters
most: scaled down by 100 (``policy_scale`` 0.01) the initial policy is nearly uniform
(discrete) or has its mean near 0 (continuous).  Hidden layers get gain sqrt(2), the
value heads gain 1, every bias 0.  Recurrent cores keep their own initialisation.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def orthogonal_weight(weight: torch.Tensor, gain: float) -> None:
    """nn.init.orthogonal_ on a contiguous copy: the image stems' conv weights are channels-last."""
    fresh = torch.empty(weight.shape, dtype=weight.dtype)
    nn.init.orthogonal_(fresh, gain=gain)
    with torch.no_grad():
        weight.copy_(fresh)


def orthogonal_init(model: nn.Module, policy_scale: float = 0.01) -> None:
    skip = set()
    core = getattr(model, "core", None)
    if core is not None:
        skip = {id(m) for m in core.modules()}
    std = getattr(model.policy, "std", None)  # a state-dependent std keeps its initial value
    if isinstance(std, nn.Module):
        skip.add(id(std))
    for module in model.modules():
        if id(module) in skip:
            continue
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            orthogonal_weight(module.weight, math.sqrt(2))
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    policy = model.policy
    last = policy.mean if hasattr(policy, "mean") else policy
    orthogonal_weight(last.weight, policy_scale)
    orthogonal_weight(model.baseline.weight, 1.0)
    if getattr(model, "stem_baseline", None) is not None:
        orthogonal_weight(model.stem_baseline.weight, 1.0)
