"""V-trace off-policy correction (Espeholt et al. 2018, "IMPALA", Section 4.1).

All tensors are time-major: ``[T, B]`` (or ``[T, B, A]`` for logits), and
``bootstrap_value`` is ``V(x_T)`` of shape ``[B]``.  Per-step ``discounts``
already hold ``gamma * (1 - done)``, so in the formulas below ``gamma^{t-s}``
reads ``prod_{i=s}^{t-1} discounts_i`` and episode ends inside the unroll are
handled by zeros in ``discounts``.

V-trace target, eq. (1)::

    v_s = V(x_s) + sum_{t>=s} gamma^{t-s} (prod_{i=s}^{t-1} c_i) delta_t V
    delta_t V = rho_t (r_t + gamma V(x_{t+1}) - V(x_t))
    rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))
    c_i = lambda * min(c_bar, pi(a_i|x_i) / mu(a_i|x_i))

computed with the equivalent backward recursion (Remark 1)::

    v_s - V(x_s) = delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1})),

run as one scan over time (``rl_core.losses.scan.discounted_scan``: no per-step Python loop),

and the policy-gradient advantage (Section 4.2)::

    A_s = rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)),  v_T = V(x_T).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from rl_core.losses.scan import discounted_scan


class VTraceReturns(NamedTuple):
    vs: torch.Tensor  # [T, B] V-trace targets v_s.
    pg_advantages: torch.Tensor  # [T, B] rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)).


class VTraceFromLogitsReturns(NamedTuple):
    vs: torch.Tensor
    pg_advantages: torch.Tensor
    log_rhos: torch.Tensor
    behavior_action_log_probs: torch.Tensor
    target_action_log_probs: torch.Tensor


def _clip(x: torch.Tensor, threshold: Optional[float]) -> torch.Tensor:
    return x if threshold is None else torch.clamp(x, max=threshold)


def action_log_probs(policy_logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log pi(a_t | x_t) for logits ``[T, B, A]`` and int64 actions ``[T, B]`` -> ``[T, B]``."""
    log_probs = F.log_softmax(policy_logits, dim=-1)
    return log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1)


def _check_shapes(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
) -> None:
    tb = log_rhos.shape
    ok = (
        log_rhos.dim() == 2
        and discounts.shape == tb
        and rewards.shape == tb
        and values.shape == tb
        and bootstrap_value.shape == tb[1:]
    )
    if not ok:
        raise ValueError(
            "V-trace expects log_rhos, discounts, rewards, values of shape [T, B] "
            "and bootstrap_value of shape [B]; got "
            f"log_rhos={tuple(log_rhos.shape)}, discounts={tuple(discounts.shape)}, "
            f"rewards={tuple(rewards.shape)}, values={tuple(values.shape)}, "
            f"bootstrap_value={tuple(bootstrap_value.shape)}"
        )


@torch.no_grad()
def from_importance_weights(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets (IMPALA eq. 1) and policy-gradient advantages.

    Args:
        log_rhos: ``[T, B]`` log(pi(a_t|x_t) / mu(a_t|x_t)).
        discounts: ``[T, B]`` gamma * (1 - done_t).
        rewards: ``[T, B]`` r_t.
        values: ``[T, B]`` V(x_t).
        bootstrap_value: ``[B]`` V(x_T).
        clip_rho_threshold: rho_bar in delta_t V (None: no clipping).
        clip_pg_rho_threshold: clipping of rho^pg_s in the advantage (None: none).
        clip_c_threshold: c_bar in the trace coefficients c_i (None: none).
        lambda_: lambda multiplying c_i (Remark 2 of the paper).

    Returns:
        ``VTraceReturns(vs, pg_advantages)``, both ``[T, B]`` and gradient-free.
    """
    _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value)
    rhos = torch.exp(log_rhos)
    clipped_rhos = _clip(rhos, clip_rho_threshold)
    cs = lambda_ * _clip(rhos, clip_c_threshold)

    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    # Backward recursion: (v_s - V(x_s)) = delta_s + gamma_s c_s (v_{s+1} - V(x_{s+1})),
    # v_T - V(x_T) = 0, as one scan over time (rl_core/losses/scan.py).
    vs = discounted_scan(deltas, discounts * cs) + values

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    clipped_pg_rhos = _clip(rhos, clip_pg_rho_threshold)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def from_logits(
    behavior_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> VTraceFromLogitsReturns:
    """V-trace (IMPALA eq. 1) with rho_t = pi(a_t|x_t) / mu(a_t|x_t) taken from logits.

    ``behavior_policy_logits`` (mu) and ``target_policy_logits`` (pi) are
    ``[T, B, A]``, ``actions`` is int64 ``[T, B]``; other arguments are as in
    :func:`from_importance_weights`. ``vs`` and ``pg_advantages`` carry no
    gradient; the returned log-probabilities keep the autograd graph of the logits.
    """
    if (
        behavior_policy_logits.dim() != 3
        or target_policy_logits.shape != behavior_policy_logits.shape
        or actions.shape != behavior_policy_logits.shape[:2]
    ):
        raise ValueError(
            "V-trace expects behavior/target logits of shape [T, B, A] and actions "
            f"of shape [T, B]; got behavior_policy_logits={tuple(behavior_policy_logits.shape)}, "
            f"target_policy_logits={tuple(target_policy_logits.shape)}, "
            f"actions={tuple(actions.shape)}"
        )
    target_action_log_probs = action_log_probs(target_policy_logits, actions)
    behavior_action_log_probs = action_log_probs(behavior_policy_logits, actions)
    log_rhos = target_action_log_probs - behavior_action_log_probs
    vtrace_returns = from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        lambda_=lambda_,
    )
    return VTraceFromLogitsReturns(
        vs=vtrace_returns.vs,
        pg_advantages=vtrace_returns.pg_advantages,
        log_rhos=log_rhos,
        behavior_action_log_probs=behavior_action_log_probs,
        target_action_log_probs=target_action_log_probs,
    )
