"""IMPALA loss terms (Espeholt et al. 2018, Section 4.2) over time-major tensors.

Following torchbeast, every term is a *sum* over time T and batch B (not a
mean), so torchbeast's learning rates and cost coefficients carry over.
"""

from __future__ import annotations

import math
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from rl_core.losses import vtrace


def policy_gradient_loss(logits: torch.Tensor, actions: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """sum_{t,b} -log pi(a_t|x_t) * A_t: the V-trace policy gradient (Section 4.2).

    ``logits`` ``[T, B, A]``, ``actions`` int64 ``[T, B]``, ``advantages``
    ``[T, B]`` (detached here: only the policy receives this gradient).
    """
    return policy_gradient_loss_from_log_probs(vtrace.action_log_probs(logits, actions), advantages)


def policy_gradient_loss_from_log_probs(log_probs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """:func:`policy_gradient_loss` from ``log_probs`` = log pi(a_t|x_t) ``[T, B]``."""
    return torch.sum(-log_probs * advantages.detach())


def baseline_loss(advantages: torch.Tensor) -> torch.Tensor:
    """0.5 * sum_{t,b} (v_s - V(x_s))^2, with ``advantages = vs - values``."""
    return 0.5 * torch.sum(advantages**2)


def entropy_loss(logits: torch.Tensor) -> torch.Tensor:
    """sum_{t,b} sum_a pi(a|x_t) log pi(a|x_t): the negative entropy (Section 4.2).

    Minimising it maximises the policy entropy.
    """
    return entropy_loss_from_log_policy(F.log_softmax(logits, dim=-1))


def entropy_loss_from_log_policy(log_policy: torch.Tensor) -> torch.Tensor:
    """:func:`entropy_loss` from ``log_policy`` = log pi(.|x_t) ``[T, B, A]``."""
    return torch.sum(torch.exp(log_policy) * log_policy)


class ValueHead(NamedTuple):
    """One reward stream of :func:`multi_head_impala_loss`, all ``[T, B]`` but ``bootstrap_value`` [B]."""

    rewards: torch.Tensor  # r^h_t, already clipped if the stream clips
    discounts: torch.Tensor  # gamma_h (1 - done_t) for an episodic stream, gamma_h for a non-episodic one
    values: torch.Tensor  # V_h(x_t) from the learner (with gradient)
    bootstrap_value: torch.Tensor  # V_h(x_T)
    coef: float = 1.0  # c_h, the weight of this stream's advantage
    name: str = "ext"  # its statistics are logged as <name>_explained_variance


def multi_head_impala_loss(
    behavior_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    heads: Sequence[ValueHead],
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.0006,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """IMPALA's loss with one value head per reward stream (RND's extrinsic and intrinsic heads,
    Burda et al. 2018, Section 2.3, with IMPALA's V-trace instead of GAE).

    Every head h gets its own V-trace targets (IMPALA eq. 1) from the *same* importance weights::

        rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t)),   c_i = lambda min(c_bar, pi/mu)
        v^h_s = V_h(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma^h_i c_i) rho_t (r^h_t + gamma^h_t V_h(x_{t+1}) - V_h(x_t))
        A^h_s = min(rho_bar_pg, pi/mu) (r^h_s + gamma^h_s v^h_{s+1} - V_h(x_s))

    (the truncation clips from above, as V-trace defines it; the published RND-IMPALA code took
    ``max(rho, 1)``, which no longer bounds the variance), and the loss is::

        sum_{t,b} -log pi(a_t|x_t) sum_h c_h A^h_t
        + baseline_cost sum_h 0.5 sum_{t,b} (v^h_t - V_h(x_t))^2
        + entropy_cost sum_{t,b} sum_a pi log pi

    Summed over T and B, as :func:`impala_loss`, which is this with one head of coefficient 1.
    Stats: as :func:`impala_loss` (``clipped_rho_share``: the share of rho_t that rho-bar clips;
    ``entropy``: the policy's mean entropy per step),
    ``mean_vs`` of the first head, and each head's explained variance of its targets,
    ``<name>_explained_variance``.
    """
    from rl_core.losses.policy_gradient import explained_variance

    # log pi once: the importance weights, the policy gradient and the entropy all read it
    target_log_policy = F.log_softmax(target_policy_logits, dim=-1)
    target_log_probs = target_log_policy.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    behavior_log_probs = vtrace.action_log_probs(behavior_policy_logits, actions)
    log_rhos = (target_log_probs - behavior_log_probs).detach()
    pg_advantages = None
    baseline = 0.0
    vs_first = None
    explained = {}
    for head in heads:
        out = vtrace.from_importance_weights(
            log_rhos=log_rhos,
            discounts=head.discounts,
            rewards=head.rewards,
            values=head.values,
            bootstrap_value=head.bootstrap_value,
            clip_rho_threshold=clip_rho_threshold,
            clip_pg_rho_threshold=clip_pg_rho_threshold,
            clip_c_threshold=clip_c_threshold,
            lambda_=lambda_,
        )
        weighted = head.coef * out.pg_advantages
        pg_advantages = weighted if pg_advantages is None else pg_advantages + weighted
        baseline = baseline + baseline_loss(out.vs - head.values)
        vs_first = out.vs if vs_first is None else vs_first
        explained[f"{head.name}_explained_variance"] = explained_variance(head.values, out.vs)
    pg = policy_gradient_loss_from_log_probs(target_log_probs, pg_advantages)
    baseline = baseline_cost * baseline
    neg_entropy = entropy_loss_from_log_policy(target_log_policy)  # sum_{t,b} sum_a pi log pi
    entropy = entropy_cost * neg_entropy
    total_loss = pg + baseline + entropy
    stats = {
        "pg_loss": pg.detach(),
        "baseline_loss": baseline.detach(),
        "entropy_loss": entropy.detach(),
        "total_loss": total_loss.detach(),
        "mean_rho": torch.exp(log_rhos).mean().detach(),  # ~1 for any lag: E_mu[pi / mu] = 1
        # the share of steps whose rho rho-bar clips: how off-policy the batch is (the lag, later passes)
        "clipped_rho_share": (log_rhos > math.log(clip_rho_threshold)).float().mean()
        if clip_rho_threshold
        else torch.zeros((), device=log_rhos.device),
        "mean_vs": vs_first.mean().detach(),
        "entropy": -neg_entropy.detach() / actions.numel(),  # the policy's mean entropy per step, whatever its cost
        **explained,
    }
    return total_loss, stats


def impala_loss(
    behavior_policy_logits: torch.Tensor,
    target_policy_logits: torch.Tensor,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    discounting: float = 0.99,
    baseline_cost: float = 0.5,
    entropy_cost: float = 0.0006,
    clip_rho_threshold: Optional[float] = 1.0,
    clip_pg_rho_threshold: Optional[float] = 1.0,
    clip_c_threshold: Optional[float] = 1.0,
    lambda_: float = 1.0,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """Total IMPALA loss: pg + baseline_cost * baseline + entropy_cost * entropy.

    Time alignment: index ``t`` of every ``[T, ...]`` input describes the
    transition ``(x_t, a_t, r_t, x_{t+1})``:

    * ``behavior_policy_logits[t]`` (mu, from the actor) and
      ``target_policy_logits[t]`` (pi, from the learner) are evaluated at x_t;
    * ``actions[t]`` = a_t was sampled from mu(.|x_t);
    * ``rewards[t]`` = r_t is the (already clipped) reward received for a_t;
    * ``dones[t]`` is True when the episode ended with this step, i.e. x_{t+1}
      starts a new episode, so the discount for step t is 0:
      ``discounts = (~dones) * discounting``;
    * ``values[t]`` = V(x_t) from the learner, ``bootstrap_value`` = V(x_T) ``[B]``.

    With torchbeast's rollout buffers (where slot t+1 holds the action taken
    at frame t and its reward/done) this is ``batch[key][1:]`` against
    ``learner_outputs[key][:-1]`` and ``bootstrap_value = baseline[-1]``.

    Returns ``(total_loss, stats)``; ``stats`` holds python floats
    ``pg_loss``, ``baseline_loss`` and ``entropy_loss`` (already scaled by their
    costs), ``total_loss``, ``mean_rho`` (mean of pi/mu), ``mean_vs`` and
    ``ext_explained_variance``.  It is :func:`multi_head_impala_loss` with one head.
    """
    discounts = (~dones.bool()).to(rewards.dtype) * discounting
    return multi_head_impala_loss(
        behavior_policy_logits,
        target_policy_logits,
        actions,
        [ValueHead(rewards, discounts, values, bootstrap_value)],
        baseline_cost=baseline_cost,
        entropy_cost=entropy_cost,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
        lambda_=lambda_,
    )
