"""A multilayer perceptron stem for vector observations."""

from __future__ import annotations

import math

import torch
from torch import nn


class MLPStem(nn.Module):
    """obs [N, *obs_shape] -> features [N, sizes[-1]], tanh activations."""

    def __init__(self, obs_shape, sizes=(64, 64)):
        super().__init__()
        in_size = int(math.prod(obs_shape))
        layers = []
        for size in sizes:
            layers += [nn.Linear(in_size, size), nn.Tanh()]
            in_size = size
        self.net = nn.Sequential(*layers)
        self.out_size = in_size

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        weight = next(self.net.parameters(), None)  # computes in its parameters' dtype
        return self.net(obs.flatten(1).to(weight.dtype if weight is not None else torch.float32))
