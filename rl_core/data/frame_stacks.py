"""Frame stacks stored once per frame: sequences of stacked observations [N, L+1, C, H, W] as
their distinct frames [N, L+C, H, W] and, per step and stack slot, which frame it is.

A stack of C frames shifts by one frame a step, so a sequence of L+1 stacks holds only L+C
distinct frames: the first stack's C-1 older frames, then each step's newest one.  Where an
episode starts inside the sequence, the env fills the stack with its reset frame (Atari's
``FrameStack``), which is that step's newest frame.  ``encode`` maps every stack slot to one of
the frames of its window (the frame a pure shift puts there, else the step's newest frame, else
any frame of the window) and checks the mapping reproduces the observation exactly; ``decode``
gathers the stacks back.  Memory: (L+C)/(C(L+1)) of the stacks, 0.26 for Atari's 121 x 4 frames.
"""

from __future__ import annotations

import numpy as np
import torch


class NotFrameStacks(ValueError):
    pass


def encode(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """obs [N, L+1, C, H, W] -> (frames [N, L+C, H, W], index [N, L+1, C] int16 into frames)."""
    N, L1, C = obs.shape[:3]
    frames = np.concatenate([obs[:, 0, : C - 1], obs[:, :, C - 1]], axis=1)  # [N, L+C, H, W]
    shift = np.arange(L1)[:, None] + np.arange(C)[None, :]  # slot (t, c) -> frame t + c when the stack shifts
    index = np.broadcast_to(shift, (N, L1, C)).astype(np.int16)
    same = (frames[:, shift] == obs).reshape(N, L1, C, -1).all(-1)
    if not same.all():
        newest = np.arange(L1)[:, None] + C - 1
        for n, t, c in zip(*np.nonzero(~same)):
            candidates = [newest[t, 0], *range(t, t + C)]
            match = next((k for k in candidates if np.array_equal(frames[n, k], obs[n, t, c])), None)
            if match is None:
                raise NotFrameStacks(f"step {t}'s stack slot {c} is none of the frames of its window")
            index[n, t, c] = match
    return frames, np.ascontiguousarray(index)


def decode(frames: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """frames [B, L+C, H, W], index [B, L+1, C] -> stacks [B, L+1, C, H, W]."""
    B = frames.shape[0]
    rows = torch.arange(B).view(B, 1, 1)
    return frames[rows, index.long()]
