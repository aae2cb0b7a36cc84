"""Soft actor-critic's loss parts, over batches of transitions [B] (or any batch shape).

Continuous actions: Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"
(arXiv:1812.05905), Sec. 4-5.  Discrete actions: Christodoulou 2019, "Soft Actor-Critic for
Discrete Action Settings" (arXiv:1910.07207), Sec. 3, where every expectation over the
policy's actions is computed exactly from the categorical pi(.|s).  Notation: alpha the
temperature, Q_1, Q_2 the twin critics, Q-bar their target copies, H-bar the target entropy.

* ``soft_q_targets``: y = r + gamma (1 - d) (min_i Q-bar_i(s', a') - alpha log pi(a'|s')),
  a' ~ pi(.|s') (Eq. 3 with the soft value of Eq. 3's V, twin-min as in Fujimoto et al. 2018);
* ``discrete_soft_values``: V(s') = sum_a' pi(a'|s') (min_i Q-bar_i(s', a') - alpha log pi(a'|s'))
  (Christodoulou Eq. 10), the bootstrap of the discrete target;
* ``critic_loss``: J_Q = E[1/2 (Q_i(s, a) - y)^2] summed over the two critics (Eq. 5);
* ``actor_loss``: J_pi = E[alpha log pi(a~|s) - min_i Q_i(s, a~)], a~ = f(eps; s) reparameterised
  (Eq. 7 / 9, the minimum of the twins as in the paper's Algorithm 1);
* ``discrete_actor_loss``: J_pi = E_s[sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))]
  (Christodoulou Eq. 12);
* ``temperature_loss``: J(alpha) = E[-alpha (log pi(a|s) + H-bar)] (Eq. 18), and its discrete
  form sum_a pi(a|s) (-alpha (log pi(a|s) + H-bar)) (Christodoulou Eq. 11);
* ``polyak_update``: Q-bar <- tau Q + (1 - tau) Q-bar (Algorithm 1).

``mask`` (optional, [B]) drops transitions from the means: a time-limit truncation's next
observation is the next episode's first, so that transition has no target.
"""

from __future__ import annotations

from typing import Iterable

import torch


def _mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return x.mean()
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def soft_q_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    next_log_probs: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """y = r + gamma_t (min(Q-bar_1(s', a'), Q-bar_2(s', a')) - alpha log pi(a'|s')).

    ``discounts`` is gamma, or 0 where the transition ends the episode; every argument [B]."""
    soft_value = torch.minimum(next_q1, next_q2) - alpha * next_log_probs
    return rewards + discounts * soft_value


def discrete_soft_values(
    next_probs: torch.Tensor,
    next_log_probs: torch.Tensor,
    next_q1: torch.Tensor,
    next_q2: torch.Tensor,
    alpha: torch.Tensor | float,
) -> torch.Tensor:
    """V(s') = sum_a pi(a|s') (min_i Q-bar_i(s', a) - alpha log pi(a|s')): [B, A] inputs -> [B]."""
    return (next_probs * (torch.minimum(next_q1, next_q2) - alpha * next_log_probs)).sum(-1)


def critic_loss(
    q1: torch.Tensor, q2: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """J_Q(theta_1) + J_Q(theta_2), J_Q = E[1/2 (Q(s, a) - y)^2]; ``targets`` carry no gradient."""
    targets = targets.detach()
    return _mean(0.5 * (q1 - targets).pow(2), mask) + _mean(0.5 * (q2 - targets).pow(2), mask)


def actor_loss(
    log_probs: torch.Tensor,
    q1: torch.Tensor,
    q2: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """J_pi = E[alpha log pi(a~|s) - min_i Q_i(s, a~)] for reparameterised a~ (gradients through a~)."""
    return _mean(alpha * log_probs - torch.minimum(q1, q2), mask)


def discrete_actor_loss(
    probs: torch.Tensor,
    log_probs: torch.Tensor,
    q1: torch.Tensor,
    q2: torch.Tensor,
    alpha: torch.Tensor | float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """J_pi = E_s[sum_a pi(a|s) (alpha log pi(a|s) - min_i Q_i(s, a))]: [B, A] inputs; Q carries no gradient."""
    q = torch.minimum(q1, q2).detach()
    return _mean((probs * (alpha * log_probs - q)).sum(-1), mask)


def temperature_loss(
    log_alpha: torch.Tensor,
    log_probs: torch.Tensor,
    target_entropy: float,
    probs: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """J(alpha) = E[-alpha (log pi(a|s) + H-bar)], alpha = exp(log_alpha); gradient to alpha only.

    Continuous: ``log_probs`` [B] of sampled actions.  Discrete: ``log_probs`` and ``probs`` [B, A],
    the expectation over a taken exactly (so the bracket is -(H(pi(.|s)) - H-bar))."""
    alpha = log_alpha.exp()
    log_probs = log_probs.detach()
    if probs is not None:
        log_probs = (probs.detach() * log_probs).sum(-1)  # E_a log pi(a|s) = -H(pi(.|s))
    return _mean(-alpha * (log_probs + target_entropy), mask)


@torch.no_grad()
def polyak_update(target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], tau: float) -> None:
    """target <- tau online + (1 - tau) target, tensor by tensor, in place."""
    target, online = list(target), list(online)
    if len(target) != len(online):
        raise ValueError(f"polyak_update: {len(target)} target tensors vs {len(online)} online ones")
    torch._foreach_lerp_(target, online, tau)
