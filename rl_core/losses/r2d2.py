"""R2D2's loss parts (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed
Reinforcement Learning", ICLR, Sec. 2.3 and Table 2), over time-major [T, B] tensors.

* ``value_rescale`` h and its exact inverse (Pohlen et al. 2018, "Observe and Look Further",
  Proposition A.2);
* ``n_step_targets``: n-step returns bootstrapped from given values, windows cut at episode ends
  and at the end of the sequence;
* ``double_q_values``: h^-1(Q_target(s, argmax_a Q_online(s, a))) (van Hasselt et al. 2016);
* ``r2d2_loss``: the IS-weighted squared TD error of a batch of sequences and the TD errors
  the sequence priorities are made of;
* ``ape_x_epsilons``: the per-env exploration rates of Ape-X (Horgan et al. 2018, Sec. 4.1).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rl_core.losses.scan import discounted_window_sums


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1), exact for eps > 0."""
    if eps == 0:
        return torch.sign(x) * ((x.abs() + 1.0) ** 2 - 1.0)
    root = torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps))
    return torch.sign(x) * (((root - 1.0) / (2.0 * eps)) ** 2 - 1.0)


def n_step_targets(rewards: torch.Tensor, discounts: torch.Tensor, bootstrap: torch.Tensor, n: int) -> torch.Tensor:
    """n-step targets [T, B] for transitions t = 0..T-1 of a sequence.

    ``rewards[t]`` = r_t, ``discounts[t]`` = gamma_t (gamma, or 0 where the transition ends the
    episode), ``bootstrap[t]`` = the value of s_{t+1}.  With m = min(n, T - t) (a window is cut at
    the end of the sequence, where it bootstraps from the last value it has):

        y_t = sum_{i<m} (prod_{k<i} gamma_{t+k}) r_{t+i} + (prod_{k<m} gamma_{t+k}) bootstrap_{t+m-1}

    A zero discount stops the sum and the bootstrap at the episode's end.  The windows' sums and
    discount products are formed at once (``rl_core.losses.scan.discounted_window_sums``): the
    number of torch ops depends on neither n nor T.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    T = rewards.shape[0]
    sums, products = discounted_window_sums(rewards, discounts, n)
    last = torch.clamp(torch.arange(T, device=rewards.device) + (n - 1), max=T - 1)  # t + m - 1
    return sums + products * bootstrap[last]


def double_q_values(online_q: torch.Tensor, target_q: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(Q_target(s, a*)) with a* = argmax_a Q_online(s, a): [T, B, A] x2 -> [T, B] (unrescaled)."""
    best = online_q.argmax(-1, keepdim=True)
    return inverse_value_rescale(target_q.gather(-1, best).squeeze(-1), eps)


class R2D2Loss(NamedTuple):
    loss: torch.Tensor  # scalar: mean over the batch of w_b * 0.5 * sum_t mask * delta^2
    td_errors: torch.Tensor  # [T, B] delta_t = h(y_t) - Q(s_t, a_t) (detached), 0 where masked
    targets: torch.Tensor  # [T, B] h(y_t) (detached)


def r2d2_loss(
    q_taken: torch.Tensor,
    targets_unscaled: torch.Tensor,
    weights: torch.Tensor,
    mask: torch.Tensor | None = None,
    eps: float = 1e-3,
) -> R2D2Loss:
    """The sequence loss of R2D2 (Sec. 2.3): delta_t = h(y_t) - Q(s_t, a_t), each sequence's
    0.5 sum_t delta_t^2 weighted by its importance-sampling weight w_b (Schaul et al. 2016,
    Alg. 1), averaged over the batch.  ``q_taken`` [T, B]; ``targets_unscaled`` y_t [T, B];
    ``weights`` [B]; ``mask`` [T, B] drops transitions without a target (time-limit cuts)."""
    targets = value_rescale(targets_unscaled, eps).detach()
    delta = targets - q_taken
    if mask is not None:
        delta = delta * mask
    per_sequence = 0.5 * (delta**2).sum(0)
    return R2D2Loss((weights * per_sequence).mean(), delta.detach(), targets)


def ape_x_epsilons(num_envs: int, base: float = 0.4, alpha: float = 7.0) -> torch.Tensor:
    """epsilon_i = base^(1 + alpha i / (N - 1)) for env i of N (one env: base)."""
    if num_envs == 1:
        return torch.tensor([base])
    i = torch.arange(num_envs, dtype=torch.float64)
    return (base ** (1.0 + alpha * i / (num_envs - 1))).float()
