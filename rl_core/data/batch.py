"""The learner's batch: what every agent's ``updates`` reads, its fields written once, here.

A batch is time-major, [T+1, B, ...]: index t holds obs[t], the reward, done and truncated that came with it,
and the action that led to it, with the agent's own per-step fields of that inference step (its
``unroll_fields``: IMPALA's behaviour logits and baseline, PPO's log-probability); so an agent pairs its
outputs [:-1] with batch[1:] and bootstraps from the last observation.  The actors' unroll stores hold
``step_fields`` (``rl_core/runtime/actors.py``); a replay's sample adds ``REPLAY_INDEX`` and
``REPLAY_WEIGHT`` (``rl_core/data/replay_source.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np

if TYPE_CHECKING:  # env servers import the data path's spec without torch
    import torch

    from rl_core.data.env_spec import EnvSpec

# The runtime's own field: per step, the version of the weights whose inference chose its action.  The learner
# takes it off every batch (rl_core/runtime/learner.py's ``Learner.to_device``): no agent sees it.
POLICY_VERSION = "policy_version"
# A replay sample's fields: the sampled items' indices (priorities are written back to them) and their
# importance-sampling weights, [B] each.
REPLAY_INDEX = "replay/index"
REPLAY_WEIGHT = "replay/weight"


class Batch(TypedDict, total=False):
    """The fields every batch has (beyond them: the agent's ``unroll_fields``, and a replay's ``REPLAY_INDEX``
    and ``REPLAY_WEIGHT``)."""

    obs: torch.Tensor  # [T+1, B, *obs_shape], the env's dtype
    reward: torch.Tensor  # [T+1, B] float32: the reward that came with obs[t]
    done: torch.Tensor  # [T+1, B] bool: obs[t] is the first of a new episode (the previous one ended)
    truncated: torch.Tensor  # [T+1, B] bool: that end was a time limit, not a terminal state
    action: torch.Tensor  # [T+1, B] int64 (discrete) or [T+1, B, D] float32 (box): the action that led to obs[t]


def action_field(spec: EnvSpec) -> tuple[tuple, np.dtype]:
    """Per-step shape and dtype of an action: int64 [] for discrete, float32 [D] for a box."""
    if spec.discrete:
        return (), np.dtype(np.int64)
    return spec.action.shape, np.dtype(np.float32)


def step_fields(spec: EnvSpec) -> dict[str, tuple[tuple, np.dtype]]:
    """The fields of ``Batch`` and ``POLICY_VERSION``, each's per-step shape and dtype, for envs of ``spec``."""
    return {
        "obs": (tuple(spec.obs.shape), np.dtype(spec.obs.dtype)),
        "reward": ((), np.dtype(np.float32)),
        "done": ((), np.dtype(np.bool_)),
        "truncated": ((), np.dtype(np.bool_)),
        "action": action_field(spec),
        POLICY_VERSION: ((), np.dtype(np.int32)),
    }
