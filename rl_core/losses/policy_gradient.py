"""Policy and value losses for the configurable on-policy agent.

Andrychowicz et al. 2020, "What Matters in On-Policy Reinforcement Learning?
A Large-Scale Empirical Study" (arXiv:2006.05990), Section 3: the policy loss
is one of vanilla PG, PPO, AWR, V-MPO (or V-trace's, which is vanilla PG with
V-trace advantages), the value loss MSE or Huber with optional PPO-style
clipping, and advantages may be normalised per minibatch.  SEED RL implements
them in ``agents/policy_gradient/modules/{policy_losses,
generalized_onpolicy_loss, constraints}.py``.

All per-step functions take time-major ``[T, B]`` tensors and return the
per-step loss ``[T, B]`` to *minimise*, without reduction: the caller picks
:func:`masked_mean` or a sum through :func:`reduce`.  Advantages and value
targets are always detached inside, so they never receive gradient.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import torch


# --------------------------------------------------------------------------- #
# Reductions.
# --------------------------------------------------------------------------- #


def masked_mean(x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """sum(x * mask) / max(sum(mask), 1); the plain mean of ``x`` when ``mask`` is None.

    ``mask`` is bool or float (0/1 or weights) of ``x``'s shape.  Entries with
    ``mask == 0`` contribute exactly 0 (and no gradient) even where ``x`` is
    inf or NaN.
    """
    if mask is None:
        return x.mean()
    if mask.dtype == torch.bool:
        return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1)
    mask = mask.to(x.dtype)
    return torch.where(mask != 0, x * mask, 0.0).sum() / mask.sum().clamp(min=1.0)


@torch.no_grad()
def explained_variance(
    values: torch.Tensor, returns: torch.Tensor, mask: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """1 - Var[G - V] / Var[G] over the masked-in steps (1: V explains the targets, 0: no better than
    their mean, < 0: worse); NaN where the targets do not vary.  A 0-dim float64 tensor (no host sync)."""
    values, returns = values.detach().double(), returns.detach().double()
    if mask is None:  # (the same arithmetic in fewer ops: two-pass variances)
        var_returns = returns.var(correction=0)
        ratio = 1.0 - (returns - values).var(correction=0) / var_returns.clamp(min=torch.finfo(torch.float64).tiny)
        return torch.where(var_returns > 0, ratio, torch.full_like(ratio, float("nan")))
    mean = masked_mean(returns, mask)
    var_returns = masked_mean((returns - mean) ** 2, mask)
    error = returns - values
    var_error = masked_mean((error - masked_mean(error, mask)) ** 2, mask)
    ratio = 1.0 - var_error / var_returns.clamp(min=torch.finfo(torch.float64).tiny)
    return torch.where(var_returns > 0, ratio, torch.full_like(ratio, float("nan")))


def reduce(x: torch.Tensor, mask: Optional[torch.Tensor] = None, reduction: str = "mean") -> torch.Tensor:
    """Reduces a per-step loss: ``"mean"`` is :func:`masked_mean`, ``"sum"`` is sum(x * mask)."""
    if reduction == "mean":
        return masked_mean(x, mask)
    if reduction == "sum":
        if mask is None:
            return x.sum()
        mask = mask.to(x.dtype)
        return torch.where(mask != 0, x * mask, torch.zeros_like(x)).sum()
    raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")


# --------------------------------------------------------------------------- #
# Policy losses.
# --------------------------------------------------------------------------- #


def vpg(log_probs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Vanilla policy gradient (REINFORCE, Williams 1992; Sutton et al. 2000)::

        L_t = -A_t log pi(a_t|s_t)

    whose gradient is the score-function estimator ``-A_t grad log pi``.
    ``log_probs`` ``[T, B]`` = log pi(a_t|s_t); ``advantages`` ``[T, B]`` (detached).
    With V-trace advantages this is IMPALA's policy loss.
    """
    return -advantages.detach() * log_probs


def _ratio(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    return torch.exp(log_probs - behaviour_log_probs.detach())


def ppo_clip(
    log_probs: torch.Tensor,
    behaviour_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_epsilon: float,
) -> torch.Tensor:
    """PPO's clipped surrogate (Schulman et al. 2017, arXiv:1707.06347, eq. 7)::

        r_t = pi(a_t|s_t) / pi_old(a_t|s_t) = exp(log_probs - behaviour_log_probs)
        L_t = -min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)

    ``behaviour_log_probs`` (pi_old) and ``advantages`` are detached; the
    gradient reaches ``log_probs`` only where the unclipped term is the minimum.
    """
    ratio = _ratio(log_probs, behaviour_log_probs)
    adv = advantages.detach()
    clipped = torch.clamp(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
    return -torch.minimum(ratio * adv, clipped * adv)


@torch.no_grad()
def ppo_clip_fraction(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor, clip_epsilon: float) -> torch.Tensor:
    """``[T, B]`` float, 1 where ``|r_t - 1| > eps`` (the ratio lies outside the clip range).

    For logging (baselines' ``clipfrac``); gradient-free.
    """
    ratio = _ratio(log_probs, behaviour_log_probs)
    return ((ratio - 1.0).abs() > clip_epsilon).to(log_probs.dtype)


@torch.no_grad()
def approx_kl(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    """``[T, B]``: ``(r_t - 1) - log r_t``, an unbiased, non-negative estimate of KL(mu || pi) from actions
    drawn from the behaviour policy mu (Schulman's k3 estimator; cleanrl's ``approx_kl``).  For logging."""
    log_ratio = log_probs - behaviour_log_probs
    return torch.expm1(log_ratio) - log_ratio


@torch.no_grad()
def awr_weights(advantages: torch.Tensor, beta: float, max_weight: Optional[float] = 20.0) -> torch.Tensor:
    """AWR's exponentiated-advantage weights (Peng et al. 2019, arXiv:1910.00177,
    Algorithm 1 / eq. 10, with the weight clip w_max of their implementation)::

        w_t = min(exp(A_t / beta), w_max)

    Computed as ``exp(min(A_t / beta, log w_max))`` so large advantages cannot
    overflow; ``max_weight=None`` disables the clip.  Gradient-free.
    """
    if beta <= 0:
        raise ValueError(f"AWR temperature beta must be positive, got {beta}")
    scaled = advantages / beta
    if max_weight is not None:
        if max_weight <= 0:
            raise ValueError(f"AWR max_weight must be positive, got {max_weight}")
        scaled = torch.clamp(scaled, max=math.log(max_weight))
    return torch.exp(scaled)


def awr(
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    beta: float,
    max_weight: Optional[float] = 20.0,
) -> torch.Tensor:
    """Advantage-Weighted Regression policy loss (Peng et al. 2019, Algorithm 1)::

        L_t = -w_t log pi(a_t|s_t),   w_t = min(exp(A_t / beta), w_max)

    (see :func:`awr_weights`; the weights are detached).
    """
    return -awr_weights(advantages.detach(), beta, max_weight) * log_probs


class VMPOTerms(NamedTuple):
    policy: torch.Tensor  # [T, B] -psi log pi on the selected steps, 0 elsewhere.
    temperature: torch.Tensor  # scalar L_eta (gradient to eta only).
    weights: torch.Tensor  # [T, B] psi (sums to 1 over the selected steps), no gradient.
    top_mask: torch.Tensor  # [T, B] float, 1 on the selected steps.


def vmpo(
    log_probs: torch.Tensor,
    advantages: torch.Tensor,
    temperature: torch.Tensor,
    epsilon_eta: float,
    top_fraction: float = 0.5,
    mask: Optional[torch.Tensor] = None,
) -> VMPOTerms:
    """V-MPO's policy and temperature losses (Song et al. 2019, "V-MPO:
    On-Policy Maximum a Posteriori Policy Optimization for Discrete and
    Continuous Control", arXiv:1909.12238, Sections 4.1-4.2, eqs. 3-4).

    Let D~ be the steps of the batch whose advantage is among the top
    ``top_fraction`` (the top half in the paper) of the masked-in steps::

        psi(s, a) = exp(A(s,a) / eta) / sum_{(s',a') in D~} exp(A(s',a') / eta)   (eq. 3)
        L_pi      = -sum_{(s,a) in D~} psi(s, a) log pi(a|s)                       (eq. 3)
        L_eta     = eta epsilon_eta + eta log[ 1/|D~| sum_{(s,a) in D~} exp(A(s,a)/eta) ]  (eq. 4)

    ``|D~| = max(1, ceil(top_fraction * N))`` with N the number of masked-in
    steps (ceil, so a batch of one step keeps it and an odd count keeps the
    median; SEED RL uses floor(N / 2) and keeps ties with the k-th value,
    here ties at the boundary are broken arbitrarily by ``torch.topk``).

    Inside psi both A and eta are detached, so ``policy`` (whose SUM over
    [T, B] is L_pi) sends gradient to ``log_probs`` only.  L_eta's gradient
    goes to ``temperature`` only (A is detached); the log-mean-exp is computed
    with ``logsumexp``.  The KL term L_alpha (eq. 5) is
    :func:`lagrange_penalty` with ``kind="upper"``.

    Args:
        log_probs: ``[T, B]`` log pi(a_t|s_t).
        advantages: ``[T, B]`` A_t (detached).
        temperature: positive scalar tensor eta that requires grad
            (e.g. softplus of a parameter).
        epsilon_eta: the KL bound epsilon_eta of eq. 4.
        top_fraction: fraction of the masked-in steps kept, in (0, 1].
        mask: optional ``[T, B]`` bool/0-1; steps with 0 are never selected.

    Returns:
        :class:`VMPOTerms`.  If ``mask`` selects no step at all, the policy
        term and weights are zeros and the temperature loss is ``0 * eta``.
    """
    if not 0.0 < top_fraction <= 1.0:
        raise ValueError(f"top_fraction must be in (0, 1], got {top_fraction}")
    if temperature.numel() != 1:
        raise ValueError(f"temperature must be a scalar tensor, got shape {tuple(temperature.shape)}")
    if advantages.shape != log_probs.shape:
        raise ValueError(
            f"log_probs and advantages must have the same shape; got "
            f"{tuple(log_probs.shape)} and {tuple(advantages.shape)}"
        )
    adv = advantages.detach()
    eta = temperature.reshape(())
    valid = torch.ones_like(adv, dtype=torch.bool) if mask is None else mask.bool()
    num_valid = int(valid.sum())
    if num_valid == 0:
        zeros = torch.zeros_like(adv)
        return VMPOTerms(policy=zeros * log_probs, temperature=0.0 * eta, weights=zeros, top_mask=zeros)
    # ceil(top_fraction * N), robust to float error such as 0.3 * 10 = 3.0000000000000004.
    k = max(1, math.ceil(top_fraction * num_valid - 1e-9))
    k = min(k, num_valid)

    flat = torch.where(valid, adv, torch.full_like(adv, -math.inf)).reshape(-1)
    top_idx = torch.topk(flat, k).indices
    top_flat = torch.zeros_like(flat, dtype=torch.bool)
    top_flat[top_idx] = True
    top = top_flat.reshape(adv.shape)

    # psi: softmax over D~ of A / sg(eta).
    logits = torch.where(top, adv / eta.detach(), torch.full_like(adv, -math.inf))
    psi = torch.softmax(logits.reshape(-1), dim=0).reshape(adv.shape)
    policy = torch.where(top, -psi * log_probs, torch.zeros_like(log_probs))

    # L_eta = eta eps + eta (logsumexp_{D~}(A / eta) - log |D~|).
    top_adv = adv.reshape(-1)[top_idx]
    log_mean_exp = torch.logsumexp(top_adv / eta, dim=0) - math.log(k)
    temperature_loss = eta * epsilon_eta + eta * log_mean_exp
    return VMPOTerms(policy=policy, temperature=temperature_loss, weights=psi, top_mask=top.to(adv.dtype))


def lagrange_penalty(
    value: torch.Tensor,
    multiplier: torch.Tensor,
    target: float,
    mask: Optional[torch.Tensor] = None,
    kind: str = "upper",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Lagrangian relaxation of a constraint on a per-step quantity.

    V-MPO (Song et al. 2019, arXiv:1909.12238, eq. 5) bounds the KL with a
    Lagrange multiplier alpha and the "coordinate-descent" split::

        L_alpha = alpha (epsilon_alpha - sg[KL]) + sg[alpha] KL

    the first part trains the multiplier, the second the policy.  With
    ``m = masked_mean(value, mask)``:

    * ``kind="upper"`` (constraint ``value <= target``, e.g. a KL bound)::

          policy_term     = sg(multiplier) * value                    [T, B]
          multiplier_loss = multiplier * (target - sg(m))             scalar

    * ``kind="lower"`` (constraint ``value >= target``, e.g. an entropy floor)::

          policy_term     = -sg(multiplier) * value
          multiplier_loss = multiplier * (sg(m) - target)

    Minimising ``multiplier_loss`` raises the multiplier while the constraint
    is violated and lowers it otherwise; ``multiplier`` should be kept
    positive by its parametrisation (softplus or exp of a parameter).  The
    policy term gets no gradient into the multiplier and the multiplier loss
    none into ``value``.  ``policy_term`` is per step (reduce it with the
    same ``mask``).
    """
    if multiplier.numel() != 1:
        raise ValueError(f"multiplier must be a scalar tensor, got shape {tuple(multiplier.shape)}")
    multiplier = multiplier.reshape(())
    mean_value = masked_mean(value.detach(), mask)
    if kind == "upper":
        return multiplier.detach() * value, multiplier * (target - mean_value)
    if kind == "lower":
        return -multiplier.detach() * value, multiplier * (mean_value - target)
    raise ValueError(f"kind must be 'upper' or 'lower', got {kind!r}")


# --------------------------------------------------------------------------- #
# Value loss and advantage normalisation.
# --------------------------------------------------------------------------- #


def _value_error_loss(error: torch.Tensor, kind: str, huber_delta: float) -> torch.Tensor:
    if kind == "mse":
        return 0.5 * error**2
    if kind == "huber":
        abs_error = error.abs()
        return torch.where(
            abs_error <= huber_delta,
            0.5 * error**2,
            huber_delta * (abs_error - 0.5 * huber_delta),
        )
    raise ValueError(f"value loss kind must be 'mse' or 'huber', got {kind!r}")


def value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    kind: str = "mse",
    huber_delta: float = 1.0,
    clip_epsilon: Optional[float] = None,
    old_values: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Per-step value loss (Andrychowicz et al. 2020, Section 3).

    With ``x = V(s_t) - G_t`` (``G_t`` = ``returns``, detached)::

        mse:   l(x) = 0.5 x^2
        huber: l(x) = 0.5 x^2                   if |x| <= delta
                      delta (|x| - delta / 2)   otherwise

    With ``clip_epsilon`` and ``old_values`` (the values the behaviour policy
    predicted, detached), PPO-style value clipping as in OpenAI baselines'
    ppo2 and SEED RL's ``value_ppo_style_clip_eps``::

        V_clip = V_old + clip(V - V_old, -eps, eps)
        L_t    = max(l(V - G), l(V_clip - G))

    Returns ``[T, B]``.
    """
    if (clip_epsilon is None) != (old_values is None):
        raise ValueError("value clipping needs both clip_epsilon and old_values (or neither)")
    returns = returns.detach()
    loss = _value_error_loss(values - returns, kind, huber_delta)
    if clip_epsilon is not None:
        old_values = old_values.detach()
        clipped_values = old_values + torch.clamp(values - old_values, -clip_epsilon, clip_epsilon)
        loss = torch.maximum(loss, _value_error_loss(clipped_values - returns, kind, huber_delta))
    return loss


@torch.no_grad()
def advantage_moments(advantages: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """[sum(A), sum(A^2), count] over the masked-in entries, in float64: what ``normalize_advantages``
    needs of a minibatch, in a form that adds up over its parts (under torchrun, one all-reduce over the
    ranks' parts).  Masked-out entries count for nothing, inf or NaN included."""
    a = advantages.detach().double()
    w = torch.ones_like(a) if mask is None else mask.to(a.dtype).expand_as(a)
    a = torch.where(w != 0, a, 0.0)
    return torch.stack([(a * w).sum(), (a * a * w).sum(), w.sum()])


@torch.no_grad()
def normalize_advantages(
    advantages: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    eps: float = 1e-8,
    moments: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Per-minibatch advantage normalisation (Andrychowicz et al. 2020, Section 3)::

        A'_t = (A_t - mean(A)) / (std(A) + eps)

    mean and std (population std, ddof = 0, as numpy in baselines) over the
    masked-in entries; masked-out entries are set to 0.  Gradient-free.

    ``moments``: the minibatch's ``advantage_moments`` when ``advantages`` is only a part of it (under
    torchrun every rank holds a part, as of the gradient the ranks average): the parts' moments summed,
    so that mean and std are those one process holding the whole minibatch computes.
    """
    adv = advantages.detach()
    if moments is None:
        mean = masked_mean(adv, mask)
        std = torch.sqrt(masked_mean((adv - mean) ** 2, mask))
    else:
        total, squares, count = moments.to(torch.float64)
        count = count.clamp(min=1.0)
        mean64 = total / count
        mean = mean64.to(adv.dtype)
        std = torch.sqrt((squares / count - mean64**2).clamp(min=0.0)).to(adv.dtype)
    out = (adv - mean) / (std + eps)
    if mask is not None:
        out = torch.where(mask.bool(), out, torch.zeros_like(out))
    return out
