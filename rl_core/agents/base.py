"""What the runtime asks of an agent (DESIGN.md, "Agents").

The runtime (actor pool, inference batcher, learner loop, evaluation, checkpoints)
knows no agent by name.  It asks the agent for:

* ``build_model()``: the model from the env spec, with whatever is trained or kept
  beside the network registered on it (normalizer buffers, Lagrange multipliers), so
  that the model's state_dict (in ``model.tar``) is all of the agent's state, and
  publishing the weights to the inference copy carries the normalizer statistics too;
* ``unroll_fields()``: what the unroll store keeps per step beyond obs, reward, done,
  truncated and action (IMPALA: the behaviour logits and baseline);
* ``act(model, inputs, state, greedy)``: one inference step for a batch of envs: the
  actions, those per-step fields, the new state; greedy for validation and the test;
* ``make_optimizer(model)``: optimizer and learning-rate schedule;
* ``updates(model, batch, state)``: how the learner consumes one batch of unrolls
  [T+1, B]: a generator of ``(loss, stats)``; the learner takes one optimizer step
  (backward, gradient clipping) after each, so an agent makes several epochs and
  minibatches by yielding several losses (PPO), or one (IMPALA).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from torch import nn


def action_field(spec: dict) -> tuple[tuple, np.dtype]:
    """Per-step shape and dtype of an action: int64 [] for discrete, float32 [D] for a box."""
    action = spec["action"]
    if action["kind"] == "discrete":
        return (), np.dtype(np.int64)
    return tuple(action["shape"]), np.dtype(np.float32)


class Agent:
    name = "agent"

    def __init__(self, flags, spec: dict | None = None):
        self.flags = flags
        self.spec = spec

    def build_model(self) -> nn.Module:
        from models import build_model

        return build_model(self.flags, self.spec)

    def unroll_fields(self) -> dict[str, tuple[tuple, np.dtype]]:
        raise NotImplementedError

    def act(self, model, inputs: dict, state: tuple, greedy: bool = False):
        """Returns ``(action [1, B, ...], {field: [1, B, ...]}, new_state)``."""
        raise NotImplementedError

    def make_optimizer(self, model: nn.Module):
        from rl_core.optim import make_optimizer

        return make_optimizer(self.flags, [p for p in model.parameters() if p.requires_grad])

    def updates(self, model, batch: dict, state: tuple) -> Iterator[tuple[torch.Tensor, dict]]:
        raise NotImplementedError
