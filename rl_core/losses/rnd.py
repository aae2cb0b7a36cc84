"""Random Network Distillation (Burda, Edwards, Storkey, Klimov 2018, "Exploration by Random
Network Distillation", arXiv:1810.12894): the intrinsic reward, its normalization, the
predictor's loss.

A fixed, randomly initialised target network f maps an observation to features; a predictor
f-hat is trained to match them.  Where the predictor has seen similar observations its error
is small, so the error is a novelty bonus (Section 2.2)::

    i_t = || f-hat(x_{t+1}) - f(x_{t+1}) ||^2        (here: the mean over the k features)

Its scale is made comparable across environments and over time by dividing it by a running
standard deviation of the *discounted intrinsic return* (Section 2.4, "Reward and Observation
Normalization"), which OpenAI's code computes with a forward filter per environment::

    R_t = gamma_I R_{t-1} + i_t        (RewardForwardFilter, across episode ends)
    i'_t = i_t / std(R)                std over every R seen so far (a running estimate)

All tensors are time-major ``[T, B]``; features are ``[..., k]``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from rl_core.losses.scan import discounted_scan


def intrinsic_reward(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """i = mean_k (f-hat_k(x) - f_k(x))^2 over the last dim, without gradient (Section 2.2)."""
    return (predicted.detach() - target.detach()).pow(2).mean(-1)


def predictor_loss(predicted: torch.Tensor, target: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The distillation loss: mean over the (masked-in) samples of mean_k (f-hat_k - f_k)^2.

    Only the predictor gets a gradient: the target is fixed.  ``mask`` [N] (0/1) picks the
    share of the batch the predictor trains on (OpenAI's ``proportion_of_exp_used_for_predictor_update``).
    """
    per_sample = (predicted - target.detach()).pow(2).mean(-1)
    if mask is None:
        return per_sample.mean()
    mask = mask.to(per_sample.dtype)
    return (per_sample * mask).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def reward_forward_filter(
    rewards: torch.Tensor, initial: torch.Tensor, gamma: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The discounted intrinsic return run forward in time, per column (env)::

        R_t = gamma R_{t-1} + i_t,     R_{-1} = initial

    It does not stop at episode ends (the intrinsic stream is non-episodic).  One forward scan
    over time (``rl_core.losses.scan.discounted_scan``), no per-step Python loop.  Returns
    ``(R [T, B], R_{T-1} [B])``: the second carries the filter into the env's next unroll.
    """
    if rewards.dim() != 2 or initial.shape != rewards.shape[1:]:
        raise ValueError(
            f"reward_forward_filter expects rewards [T, B] and initial [B]; got "
            f"{tuple(rewards.shape)} and {tuple(initial.shape)}"
        )
    if rewards.shape[0] == 0:
        return rewards.clone(), initial.to(rewards.dtype)
    out = discounted_scan(rewards, torch.full_like(rewards, gamma), initial, reverse=False)
    return out, out[-1].clone()


@torch.no_grad()
def normalize_intrinsic_rewards(
    rewards: torch.Tensor, return_variance: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    """i' = i / sqrt(Var[R]) (Section 2.4): the reward over the running std of the forward-filtered
    intrinsic return (``return_variance``: that running variance, after this batch's update)."""
    return rewards / torch.sqrt(return_variance.to(rewards.dtype) + eps)
