"""Random Network Distillation's networks and running statistics (Burda et al. 2018, Section 2.2
and Appendix A.4; OpenAI's ``CnnPolicy`` of random-network-distillation).

* images: the target is 3 convolutions (32 8x8/4, 64 4x4/2, 64 3x3/1) and a linear layer of
  ``feature_size`` (512); the predictor the same convolutions, then two linear layers of 512
  with ReLU and a linear layer of ``feature_size``; leaky ReLU after each convolution,
  orthogonal initialisation with gain sqrt(2), zero biases.  They see the newest frame of an
  observation (``channels``: Atari's last grayscale frame of the stack of 4);
* vectors, and images smaller than the convolutions' 36x36 reach (MiniGrid's views), flattened: the same shapes
  with linear layers of ``mlp_sizes`` in place of the convolutions.

Their input is normalized per element by a running mean and std and clipped to +-5
(Section 2.4); the statistics live here (``obs_rms``), with those of the intrinsic reward
(``return_rms``: the running variance of the forward-filtered intrinsic return), the forward
filter of every env (``filter_state``) and every env's intrinsic return of the episode so far
(``episode_return``, for the logs), all as buffers, so that ``model.tar`` keeps them and a
resumed run continues them exactly.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from models.init import orthogonal_weight
from rl_core.numerics.normalization import RunningMeanStd

OBS_CLIP = 5.0
CONV_MIN_SIDE = 36  # the smallest image side the three convolutions take (8x8/4, 4x4/2, 3x3/1 leave 1x1)


def _orthogonal_init(module: nn.Module, gain: float = math.sqrt(2)) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            orthogonal_weight(m.weight, gain)
            nn.init.zeros_(m.bias)


class _ConvTrunk(nn.Module):
    def __init__(self, in_shape: Sequence[int]):
        super().__init__()
        c = in_shape[0]
        self.convs = nn.ModuleList(
            [nn.Conv2d(c, 32, 8, stride=4), nn.Conv2d(32, 64, 4, stride=2), nn.Conv2d(64, 64, 3, stride=1)]
        )
        with torch.no_grad():
            self.out_size = self(torch.zeros(1, *in_shape)).shape[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.leaky_relu(conv(x))
        return x.flatten(1)


class _MLPTrunk(nn.Module):
    def __init__(self, in_size: int, sizes: Sequence[int]):
        super().__init__()
        layers, last = [], in_size
        for size in sizes:
            layers.append(nn.Linear(last, size))
            last = size
        self.layers = nn.ModuleList(layers)
        self.out_size = last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.layers:
            x = F.leaky_relu(layer(x))
        return x


class RNDNetwork(nn.Module):
    """trunk -> (``hidden`` linear layers with ReLU) -> linear ``feature_size``: the target (no hidden
    layers) or the predictor (two of 512)."""

    def __init__(self, in_shape: Sequence[int], feature_size: int, hidden: Sequence[int], mlp_sizes: Sequence[int]):
        super().__init__()
        convolved = len(in_shape) == 3 and min(in_shape[1:]) >= CONV_MIN_SIDE
        self.trunk = _ConvTrunk(in_shape) if convolved else _MLPTrunk(math.prod(in_shape), mlp_sizes)
        layers, last = [], self.trunk.out_size
        for size in hidden:
            layers.append(nn.Linear(last, size))
            last = size
        self.hidden = nn.ModuleList(layers)
        self.out = nn.Linear(last, feature_size)
        _orthogonal_init(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.trunk(x)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


def rnd_input_shape(obs_shape: Sequence[int], channels: int) -> tuple[int, ...]:
    """The part of an observation RND sees: the newest ``channels`` of an image (0: all of it)."""
    obs_shape = tuple(int(d) for d in obs_shape)
    if len(obs_shape) == 3 and channels:
        return (min(channels, obs_shape[0]), *obs_shape[1:])
    return obs_shape


class RND(nn.Module):
    """Target, predictor and RND's running statistics, for ``num_envs`` envs.

    ``normalized_input(obs [..., *obs_shape])`` -> the networks' input [N, *in_shape] (newest frame,
    per-element normalized, clipped to +-5); ``features(x)`` -> (predicted, target) [N, k].
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_envs: int,
        channels: int = 0,
        feature_size: int = 512,
        mlp_sizes: Sequence[int] = (64, 64, 64),
        predictor_hidden: Sequence[int] = (512, 512),
    ):
        super().__init__()
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.in_shape = rnd_input_shape(self.obs_shape, channels)
        self.target = RNDNetwork(self.in_shape, feature_size, (), mlp_sizes)
        self.target.requires_grad_(False)
        self.predictor = RNDNetwork(self.in_shape, feature_size, predictor_hidden, mlp_sizes)
        self.obs_rms = RunningMeanStd(self.in_shape)
        self.return_rms = RunningMeanStd(())
        self.register_buffer("filter_state", torch.zeros(num_envs, dtype=torch.float64))
        self.register_buffer("episode_return", torch.zeros(num_envs, dtype=torch.float64))

    def newest(self, obs: torch.Tensor) -> torch.Tensor:
        """[..., *obs_shape] -> [N, *in_shape]: the newest channels of image observations."""
        x = obs.reshape(-1, *self.obs_shape)
        if len(self.obs_shape) == 3 and self.in_shape[0] != self.obs_shape[0]:
            x = x[:, -self.in_shape[0] :]
        return x

    def normalized_input(self, obs: torch.Tensor) -> torch.Tensor:
        dtype = self.predictor.out.weight.dtype
        return self.obs_rms.normalize(self.newest(obs).to(dtype), clip=OBS_CLIP)

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            target = self.target(x)
        return self.predictor(x), target
