"""Vision stems: image observations [N, C, H, W] -> features [N, out_size].

uint8 observations are scaled by 1/255 inside (folded into the first conv's
weights, which saves a pass over the float copy of the batch); float
observations are used as given (GridStem: symbolic grids, uint8 too).  A stem computes in its parameters' dtype
(float32, or bfloat16 for reduced-precision inference). Any leading dims are accepted
([T, B, C, H, W] -> [T, B, out_size]).
The fc layer's input size is found by a dry run of the conv trunk on the
observation shape given at construction, so any image size works.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["AtariNetStem", "GridStem", "MinAtarStem", "ResNetStem"]


def _check_obs_shape(obs_shape: Sequence[int]) -> tuple[int, int, int]:
    obs_shape = tuple(int(d) for d in obs_shape)
    if len(obs_shape) != 3 or min(obs_shape) < 1:
        raise ValueError(f"obs_shape must be (C, H, W), got {obs_shape}")
    return obs_shape  # type: ignore[return-value]


def _scaled_conv(conv: nn.Conv2d, x: torch.Tensor, scale: float) -> torch.Tensor:
    """conv(x * scale) computed as a conv with weights * scale (zero padding keeps it exact)."""
    if scale == 1.0:
        return conv(x)
    return F.conv2d(x, conv.weight * scale, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


def _conv_out_size(trunk: nn.Module, obs_shape: tuple[int, int, int]) -> int:
    with torch.no_grad():
        return trunk(torch.zeros(1, *obs_shape)).numel()


class _Stem(nn.Module):
    obs_shape: tuple[int, int, int]
    out_size: int

    def _prepare(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Size, float]:
        """[N, C, H, W] in channels-last and the stem's dtype, the leading dims, and the scale for
        the first conv."""
        if tuple(obs.shape[-3:]) != self.obs_shape:
            raise ValueError(f"expected observations [..., {self.obs_shape}], got {tuple(obs.shape)}")
        lead = obs.shape[:-3]
        # Channels-last convolutions are ~25% faster on CPU (oneDNN) and suit cuDNN too;
        # flatten() below is logical, so the fc layer sees the same order either way.
        # The layout change happens on the 4x smaller uint8 data.
        x = obs.reshape(-1, *self.obs_shape).contiguous(memory_format=torch.channels_last)
        return x.to(self.fc.weight.dtype), lead, (1.0 / 255.0 if obs.dtype == torch.uint8 else 1.0)

    def trunk(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """Conv features of x * scale."""
        raise NotImplementedError

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x, lead, scale = self._prepare(obs)
        x = self.trunk(x, scale).flatten(1)
        x = torch.relu(self.fc(x))
        return x.reshape(*lead, self.out_size)


class AtariNetStem(_Stem):
    """torchbeast's AtariNet convs (Mnih et al. 2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, ReLU; fc 512 + ReLU."""

    def __init__(self, obs_shape: Sequence[int], out_size: int = 512):
        super().__init__()
        self.obs_shape = _check_obs_shape(obs_shape)
        self.out_size = out_size
        channels = self.obs_shape[0]
        self.conv1 = nn.Conv2d(channels, 32, kernel_size=8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, kernel_size=3, stride=1)
        self.conv_out_size = _conv_out_size(self.trunk, self.obs_shape)
        self.fc = nn.Linear(self.conv_out_size, out_size)

    def trunk(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        x = torch.relu(_scaled_conv(self.conv1, x, scale))
        x = torch.relu(self.conv2(x))
        return torch.relu(self.conv3(x))

    @torch.no_grad()
    def recycle_pairs(self, obs: torch.Tensor) -> list:
        """The convolutions whose filters ``models.recycling`` may recycle, each with the layer that reads
        it and its ReLU activations on ``obs`` [N, C, H, W]: conv1 -> conv2, conv2 -> conv3, conv3 -> fc
        (a channel owns H x W of fc's input columns: the flatten is logical, NCHW)."""
        from models.recycling import RecyclePair

        x, _, scale = self._prepare(obs)
        h1 = torch.relu(_scaled_conv(self.conv1, x, scale))
        h2 = torch.relu(self.conv2(h1))
        h3 = torch.relu(self.conv3(h2))
        return [
            RecyclePair(self.conv1, self.conv2, h1),
            RecyclePair(self.conv2, self.conv3, h2),
            RecyclePair(self.conv3, self.fc, h3, columns_per_unit=h3.shape[-2] * h3.shape[-1]),
        ]


class _ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x))))."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(torch.relu(self.conv1(torch.relu(x))))


class _ResNetStage(nn.Module):
    """conv3x3 -> maxpool 3x3 stride 2 (padding 1) -> 2 residual blocks."""

    def __init__(self, in_channels: int, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, kernel_size=3, stride=1, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.res1 = _ResidualBlock(channels)
        self.res2 = _ResidualBlock(channels)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.res2(self.res1(self.pool(_scaled_conv(self.conv, x, scale))))


class ResNetStem(_Stem):
    """The IMPALA deep ResNet (Espeholt et al. 2018), as in torchbeast's polybeast Net.

    Stages of 16, 32, 32 channels; then ReLU, fc 256 + ReLU.
    """

    def __init__(self, obs_shape: Sequence[int], channels: Sequence[int] = (16, 32, 32), out_size: int = 256):
        super().__init__()
        self.obs_shape = _check_obs_shape(obs_shape)
        self.out_size = out_size
        stages, in_channels = [], self.obs_shape[0]
        for c in channels:
            stages.append(_ResNetStage(in_channels, c))
            in_channels = c
        self.stages = nn.Sequential(*stages)
        self.conv_out_size = _conv_out_size(self.trunk, self.obs_shape)
        self.fc = nn.Linear(self.conv_out_size, out_size)

    def trunk(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        for i, stage in enumerate(self.stages):
            x = stage(x, scale if i == 0 else 1.0)
        return torch.relu(x)

    @torch.no_grad()
    def recycle_pairs(self, obs: torch.Tensor) -> list:
        """The residual blocks' first convolutions, whose filters ``models.recycling`` may recycle, each with
        the block's second (the only reader of its ReLU) and its activations on ``obs`` [N, C, H, W].  The
        stages' own convolutions and the blocks' second ones add into the residual stream: not recycled."""
        from models.recycling import RecyclePair

        x, _, scale = self._prepare(obs)
        pairs = []
        for i, stage in enumerate(self.stages):
            x = stage.pool(_scaled_conv(stage.conv, x, scale if i == 0 else 1.0))
            for block in (stage.res1, stage.res2):
                h = torch.relu(block.conv1(torch.relu(x)))
                pairs.append(RecyclePair(block.conv1, block.conv2, h))
                x = x + block.conv2(h)
        return pairs


class GridStem(nn.Module):
    """Symbolic grids, each cell one-hot in the channels ([C, V, V], MiniGrid's encoded view): two 3x3 convs of 16
    and 32 channels that keep the side (padding 1, so any view from 1x1 works), ReLU; fc ``out_size`` + ReLU.  A
    stem of the size MiniGrid's baselines use on its 7x7 views (rl-starter-files: three 2x2 convs to 64
    features); values are used as given, uint8 ones not scaled by 1/255."""

    def __init__(self, obs_shape: Sequence[int], out_size: int = 256):
        super().__init__()
        self.obs_shape = _check_obs_shape(obs_shape)
        self.out_size = out_size
        self.conv1 = nn.Conv2d(self.obs_shape[0], 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc = nn.Linear(32 * self.obs_shape[1] * self.obs_shape[2], out_size)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if tuple(obs.shape[-3:]) != self.obs_shape:
            raise ValueError(f"expected observations [..., {self.obs_shape}], got {tuple(obs.shape)}")
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *self.obs_shape).to(self.fc.weight.dtype)
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        return torch.relu(self.fc(x.flatten(1))).reshape(*lead, self.out_size)


class MinAtarStem(nn.Module):
    """MinAtar's network (Young & Tian 2019, Section 4): one 3x3 conv of 16 channels, stride 1 and no padding, ReLU;
    fc ``out_size`` (128) + ReLU.  For [C, 10, 10] binary grids, one channel per object kind; values used as given."""

    def __init__(self, obs_shape: Sequence[int], out_size: int = 128):
        super().__init__()
        self.obs_shape = _check_obs_shape(obs_shape)
        if min(self.obs_shape[1:]) < 3:
            raise ValueError(f"MinAtarStem: its 3x3 conv needs a grid of side >= 3, got {self.obs_shape}")
        self.out_size = out_size
        self.conv = nn.Conv2d(self.obs_shape[0], 16, kernel_size=3)
        self.fc = nn.Linear(16 * (self.obs_shape[1] - 2) * (self.obs_shape[2] - 2), out_size)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if tuple(obs.shape[-3:]) != self.obs_shape:
            raise ValueError(f"expected observations [..., {self.obs_shape}], got {tuple(obs.shape)}")
        lead = obs.shape[:-3]
        x = torch.relu(self.conv(obs.reshape(-1, *self.obs_shape).to(self.fc.weight.dtype)))
        return torch.relu(self.fc(x.flatten(1))).reshape(*lead, self.out_size)
