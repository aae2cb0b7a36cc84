"""Advantage estimators for the configurable on-policy agent.

Andrychowicz et al. 2020, "What Matters in On-Policy Reinforcement Learning?
A Large-Scale Empirical Study" (arXiv:2006.05990), Section 3:
the advantage estimator is one of GAE, N-step returns or V-trace, as in SEED
RL's ``agents/policy_gradient/modules/advantages.py``.

All tensors are time-major ``[T, B]`` and ``bootstrap_value`` is ``V(x_T)`` of
shape ``[B]``.  Index ``t`` describes the transition ``(x_t, a_t, r_t,
x_{t+1})``; ``discounts[t]`` already holds ``gamma * (1 - terminated_t)`` so an
episode that ends inside the unroll is cut by a zero discount.  In the
formulas ``gamma_t`` reads ``discounts[t]`` and ``V_T`` reads
``bootstrap_value``.

Every estimator returns :class:`AdvantagesAndReturns` ``(advantages,
returns)``, both ``[T, B]`` and gradient-free (computed under
``torch.no_grad()``): the advantages feed the policy loss, the returns are the
value-function targets.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import torch

from rl_core.losses import vtrace as vtrace_lib
from rl_core.losses.scan import discounted_scan, discounted_window_sums


class AdvantagesAndReturns(NamedTuple):
    advantages: torch.Tensor  # [T, B] A_t, no gradient.
    returns: torch.Tensor  # [T, B] value targets, no gradient.


def _check_shapes(
    values: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    bootstrap_value: torch.Tensor,
    **extra: torch.Tensor,
) -> None:
    tb = values.shape
    tensors = dict(values=values, rewards=rewards, discounts=discounts, **extra)
    ok = values.dim() == 2 and all(x.shape == tb for x in tensors.values())
    ok = ok and bootstrap_value.shape == tb[1:]
    if not ok:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in tensors.items())
        raise ValueError(
            "advantage estimators expect [T, B] tensors and bootstrap_value of shape "
            f"[B]; got {shapes}, bootstrap_value={tuple(bootstrap_value.shape)}"
        )


@torch.no_grad()
def gae(
    values: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    bootstrap_value: torch.Tensor,
    lambda_: float,
) -> AdvantagesAndReturns:
    """Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438, eq. 16).

    ::

        delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t),        V(x_T) = bootstrap_value
        A_t     = sum_{l>=0} (prod_{i<l} gamma_{t+i} lambda) delta_{t+l}
                = delta_t + gamma_t lambda A_{t+1},          A_T = 0
        returns_t = A_t + V(x_t)   (the TD(lambda) return)

    ``lambda_ = 1`` gives Monte-Carlo returns bootstrapped at ``x_T``,
    ``lambda_ = 0`` the one-step TD error.

    Args:
        values: ``[T, B]`` V(x_t).
        rewards: ``[T, B]`` r_t.
        discounts: ``[T, B]`` gamma * (1 - terminated_t).
        bootstrap_value: ``[B]`` V(x_T).
        lambda_: the GAE lambda in [0, 1].

    Returns:
        ``AdvantagesAndReturns(advantages=A, returns=A + V)``, gradient-free.
    """
    _check_shapes(values, rewards, discounts, bootstrap_value)
    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rewards + discounts * values_tp1 - values
    advantages = discounted_scan(deltas, discounts * lambda_)  # A_t = delta_t + gamma_t lambda A_{t+1}
    return AdvantagesAndReturns(advantages=advantages, returns=advantages + values)


@torch.no_grad()
def nstep(
    values: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    bootstrap_value: torch.Tensor,
    n: int,
) -> AdvantagesAndReturns:
    """N-step TD returns (Sutton & Barto 2018, eq. 7.1; SEED RL's ``NStep``).

    ::

        G_t = sum_{k=0}^{m-1} (prod_{i<k} gamma_{t+i}) r_{t+k}
              + (prod_{i<m} gamma_{t+i}) V(x_{t+m}),     m = min(n, T - t)
        A_t = G_t - V(x_t)

    A step less than ``n`` steps from the unroll's end bootstraps from
    ``V(x_T) = bootstrap_value``.  ``n <= 0`` (or ``n >= T``) means ``m = T - t``:
    the discounted return to the end of the unroll, bootstrapped at ``x_T``.
    ``n = 1`` is the one-step TD target (equal to ``gae`` with ``lambda_ = 0``).

    Returns:
        ``AdvantagesAndReturns(advantages=G - V, returns=G)``, gradient-free.
    """
    _check_shapes(values, rewards, discounts, bootstrap_value)
    T = values.shape[0]
    if n <= 0 or n >= T:  # m = T - t: the discounted return G_t = r_t + gamma_t G_{t+1}, G_T = V(x_T)
        returns = discounted_scan(rewards, discounts, bootstrap_value)
        return AdvantagesAndReturns(advantages=returns - values, returns=returns)
    # Windows of n steps cut at T (r = 0 and gamma = 1 past the end): the sum and the
    # discount product of the first m terms; the bootstrap index t + m = min(t + n, T).
    sums, products = discounted_window_sums(rewards, discounts, int(n))
    values_ext = torch.cat([values, bootstrap_value.unsqueeze(0)], dim=0)  # [T+1, B]
    bootstrap_index = torch.clamp(torch.arange(T, device=values.device) + int(n), max=T)
    returns = sums + products * values_ext[bootstrap_index]
    return AdvantagesAndReturns(advantages=returns - values, returns=returns)


@torch.no_grad()
def vtrace(
    log_rhos: torch.Tensor,
    values: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    bootstrap_value: torch.Tensor,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> AdvantagesAndReturns:
    """V-trace (Espeholt et al. 2018, "IMPALA", eq. 1 and Section 4.2) as an estimator.

    ::

        v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) rho_t delta_t
        delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t)
        rho_t = min(rho_bar, pi/mu),  c_i = lambda min(c_bar, pi/mu)
        A_s = rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)),   v_T = V(x_T)

    A thin wrapper around :func:`rl_core.losses.vtrace.from_importance_weights`:
    ``advantages`` are its ``pg_advantages`` and ``returns`` its ``vs``.
    ``log_rhos`` is ``log pi(a_t|x_t) - log mu(a_t|x_t)`` ``[T, B]``; a
    threshold of None means no clipping.
    """
    _check_shapes(values, rewards, discounts, bootstrap_value, log_rhos=log_rhos)
    out = vtrace_lib.from_importance_weights(
        log_rhos=log_rhos.detach(),
        discounts=discounts.detach(),
        rewards=rewards.detach(),
        values=values.detach(),
        bootstrap_value=bootstrap_value.detach(),
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        lambda_=lambda_,
    )
    return AdvantagesAndReturns(advantages=out.pg_advantages, returns=out.vs)


def bootstrap_truncations(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    values: torch.Tensor,
    truncated: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Time-limit truncation without the lost final observation.

    Pardo et al. 2018, "Time Limits in Reinforcement Learning" (ICML,
    arXiv:1712.00378), Section 3 ("partial-episode bootstrapping"): an episode
    cut by a time limit must not be treated as reaching a terminal state of
    value 0; the return should bootstrap from the value of the state where it
    was cut.  SEED RL implements this as ``handle_abandoned_episodes_properly``
    (an "abandoned" step gets a zero TD error and the target V(x_t); earlier
    steps do not see through it).

    ``truncated[t]`` is True when transition t ended the episode by a time
    limit, not by a terminal state.  Then ``x_{t+1}`` in the unroll is the first
    observation of the next episode and the true next state is lost, so
    ``r_t + gamma V(x_{t+1})`` cannot be formed.  We rewrite that step as::

        r_t     := sg(V(x_t))      (values[t], detached)
        gamma_t := 0
        mask_t  := 0               (1 at every other step)

    so that ``r_t + gamma_t V(x_{t+1}) = V(x_t)``: the step is a pseudo-terminal
    transition whose "reward" is the value of the last state whose value is
    known.  Consequently, with any estimator in this module (``gae``, ``nstep``,
    ``vtrace``):

    * at step t: delta_t = 0, so ``A_t = 0`` and ``return_t = V(x_t)`` (the
      step carries no learning signal; ``mask`` drops it from the means);
    * at steps s < t of the same episode: the estimate is exactly that of a
      shorter unroll ending at ``x_t`` with ``bootstrap_value = V(x_t)``
      (partial-episode bootstrapping), instead of treating the time limit as
      a terminal state of value 0.

    The reward r_t actually received on the truncated step is dropped, as in
    SEED RL.  ``truncated`` must be False on steps that terminated (with
    gymnasium pass ``truncated & ~terminated``): a real terminal step keeps its
    reward and zero discount.

    Args:
        rewards, discounts, values: ``[T, B]``.
        truncated: ``[T, B]`` bool (or 0/1).

    Returns:
        ``(rewards, discounts, mask)``: new ``[T, B]`` tensors (inputs are not
        modified); ``mask`` is float in the dtype of ``rewards``.
    """
    if not (rewards.shape == discounts.shape == values.shape == truncated.shape):
        raise ValueError(
            "bootstrap_truncations expects rewards, discounts, values, truncated of the "
            f"same shape; got rewards={tuple(rewards.shape)}, "
            f"discounts={tuple(discounts.shape)}, values={tuple(values.shape)}, "
            f"truncated={tuple(truncated.shape)}"
        )
    truncated = truncated.bool()
    new_rewards = torch.where(truncated, values.detach().to(rewards.dtype), rewards)
    new_discounts = torch.where(truncated, torch.zeros_like(discounts), discounts)
    mask = (~truncated).to(rewards.dtype)
    return new_rewards, new_discounts, mask


def stream_rewards_and_discounts(
    rewards: torch.Tensor,
    done: torch.Tensor,
    truncated: torch.Tensor,
    values: torch.Tensor,
    discounting: float,
    episodic: bool = True,
    clip_rewards: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``(rewards, discounts, mask)`` [T, B] one reward stream's estimator takes.

    An episodic stream (the env's reward) is cut where an episode ends: ``gamma_t = gamma
    (1 - done_t)``, and a time-limit truncation bootstraps (:func:`bootstrap_truncations`).
    A non-episodic stream (RND's intrinsic reward; Burda et al. 2018, Section 2.3: "the
    intrinsic reward stream ... non-episodic") discounts by ``gamma`` at every step, across
    episode ends, so its return counts the novelty the next episode may still bring; its
    mask is all ones.  ``clip_rewards`` clamps the rewards to [-1, 1] first.
    """
    if clip_rewards:
        rewards = rewards.clamp(-1, 1)
    if episodic:
        discounts = (~done.bool()).to(values.dtype) * discounting
        return bootstrap_truncations(rewards, discounts, values, truncated)
    return rewards, torch.full_like(values, discounting), torch.ones_like(rewards)


def combine_streams(estimates) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(sum_h c_h A_h, prod_h mask_h)`` for ``estimates`` = [(c_h, AdvantagesAndReturns_h, mask_h)]:
    the advantage of several reward streams with value heads of their own (RND, Burda et al. 2018,
    Section 2.3: ``A = c_E A_E + c_I A_I``), masked where any stream masks.  Each stream's own
    returns stay the targets of its own head."""
    (coef, first, mask), *rest = estimates
    advantages = coef * first.advantages
    for coef, out, stream_mask in rest:
        advantages = advantages + coef * out.advantages
        mask = mask * stream_mask
    return advantages, mask
