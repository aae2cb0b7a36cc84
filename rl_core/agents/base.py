"""What the runtime asks of an agent (docs/architecture.md, "The agent seam").

The runtime (actor pool, inference batcher, learner loop, evaluation, checkpoints)
knows no agent by name.  It asks the agent for:

* ``build_model()``: the model from the env spec, with whatever is trained or kept
  beside the network registered on it (normalizer buffers, Lagrange multipliers, target
  networks, critics; the model's ``learner_only`` names what acting does not need), so
  that the model's state_dict (in ``model.tar``) is all of the agent's state, and
  publishing the weights to the inference copy carries the normalizer statistics too;
* ``unroll_fields()``: what the unroll store keeps per step beyond obs, reward, done,
  truncated and action (IMPALA: the behaviour logits and baseline);
* ``act(model, inputs, state, greedy)``: one inference step for a batch of envs: the
  actions, those per-step fields, the new state; greedy for validation and the test;
* ``actor_inputs(env_ids, num_envs)``: constant per-env inputs that travel with every
  inference request of those envs (R2D2: each env's exploration epsilon);
* ``sequence()``: ``(length, stride)``: the actors hand over ``length + 1`` steps every
  ``stride`` steps (IMPALA: unrolls of T+1 sharing one step; R2D2: burn-in + T + 1 steps
  overlapping by half);
* ``make_data_source(learner_queue, pin)``: how those reach the learner: batches of B unrolls
  (``UnrollBatcher``) or samples of a replay (``rl_core.data.replay_source``; ``pin``: sampled ahead into
  pinned memory, for a learner on CUDA), and
  ``learner_queue_size(K)``: how many chunks of K envs' sequences may wait for it;
* ``make_optimizer(model)``: optimizer and learning-rate schedule (which also drives ``entropy_cost()``
  under --entropy_decay linear);
* ``updates(model, batch, state)``: how the learner consumes one batch [T+1, B]: a
  generator of ``(loss, stats)``; the learner takes one optimizer step (backward,
  gradient clipping) after each and resumes the generator, so an agent makes several
  epochs and minibatches by yielding several losses (PPO), or one (IMPALA), and can
  act on the step it caused (R2D2 writes priorities back, copies its target network).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
from torch import nn

from rl_core.data.batch import Batch
from rl_core.data.env_spec import EnvSpec


@dataclass(frozen=True)
class ValueStream:
    """One reward stream an actor-critic learns a value head for.

    The agents' losses sum over their streams: advantage = sum_h coef_h A_h, value loss = sum_h
    of each head's loss.  Alone, the extrinsic stream (``baseline`` on ``reward``, coef 1) is the
    usual actor-critic; RND adds an intrinsic one (Burda et al. 2018, Section 2.3: "two value
    heads", combined advantage ``ext_coef A_E + int_coef A_I``).

    ``name``: how its statistics are logged (``ext``, ``int``); ``value_key``: the model output (and unroll field) holding V_h; ``reward_key``: the batch
    field of its rewards; ``episodic``: False for a stream whose return goes on across episode
    ends (RND's intrinsic return), so done and truncation leave its discounts alone;
    ``clip_rewards``: clamp the rewards to [-1, 1] (--reward_clipping abs_one).
    """

    name: str
    value_key: str
    reward_key: str
    discounting: float
    coef: float = 1.0
    episodic: bool = True
    clip_rewards: bool = False


def extrinsic_stream(flags, coef: float = 1.0) -> ValueStream:
    """The env's reward stream under the run's --discounting and --reward_clipping."""
    return ValueStream("ext", "baseline", "reward", flags.discounting, coef, True, flags.reward_clipping == "abs_one")


def stem_value_stream(flags) -> ValueStream:
    """--stem_value: the env's reward again, for ``stem_baseline`` (``models.policy.ActorCritic``), with coefficient 0:
    the head learns values of its own and adds no policy gradient."""
    clip = flags.reward_clipping == "abs_one"
    return ValueStream("stem", "stem_baseline", "reward", flags.discounting, 0.0, True, clip)


def actor_critic_streams(flags, ext_coef: float = 1.0) -> tuple[ValueStream, ...]:
    """The env's stream, and with --stem_value the stem's value head's."""
    streams = (extrinsic_stream(flags, coef=ext_coef),)
    if getattr(flags, "stem_value", False):
        streams += (stem_value_stream(flags),)
    return streams


class Agent:
    name = "agent"

    def __init__(self, flags, spec: EnvSpec | None = None):
        self.flags = flags
        self.spec = spec
        self.entropy_share = lambda: 1.0  # the share of --entropy_cost in force (--entropy_decay)

    def entropy_cost(self) -> float:
        """--entropy_cost now: constant, or (--entropy_decay linear) times the share of --total_steps still
        to go by the learning rate's schedule, whose batch count a checkpoint keeps."""
        return self.flags.entropy_cost * self.entropy_share()

    def build_model(self) -> nn.Module:
        from models import build_model

        return build_model(self.flags, self.spec)

    def unroll_fields(self) -> dict[str, tuple[tuple, np.dtype]]:
        raise NotImplementedError

    def act(self, model, inputs: dict, state: tuple, greedy: bool = False):
        """Returns ``(action [1, B, ...], {field: [1, B, ...]}, new_state)``."""
        raise NotImplementedError

    def actor_inputs(self, env_ids: np.ndarray, num_envs: int) -> dict[str, torch.Tensor]:
        """Per-env constants [1, K] added to the inference inputs of envs ``env_ids`` (of ``num_envs``)."""
        return {}

    def sequence(self) -> tuple[int, int]:
        """(steps per handed-over sequence beyond its first, new steps between two of them)."""
        T = self.flags.unroll_length
        return T, T

    def make_data_source(self, learner_queue, pin: bool = False):
        from rl_core.data.unroll_batcher import UnrollBatcher

        return UnrollBatcher(learner_queue, self.flags.batch_size, self.flags.unroll_length)

    def learner_queue_size(self, chunk_envs: int) -> int:
        """Chunks of ``chunk_envs`` envs' sequences the learner queue holds: two batches' worth."""
        return max(2, 2 * math.ceil(self.flags.batch_size / chunk_envs))

    def make_optimizer(self, model: nn.Module):
        from rl_core.numerics.optim import make_optimizer, remaining_share

        optimizer, scheduler = make_optimizer(self.flags, [p for p in model.parameters() if p.requires_grad])
        if getattr(self.flags, "entropy_decay", "none") == "linear":
            remaining = remaining_share(self.flags)
            self.entropy_share = lambda: remaining(scheduler.last_epoch)
        return optimizer, scheduler

    def updates(self, model, batch: Batch, state: tuple) -> Iterator[tuple[torch.Tensor, dict]]:
        raise NotImplementedError
