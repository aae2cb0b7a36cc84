"""The per-timestep Python loops that rl_core's recurrences over time replaced, kept as
slow references: tests/test_scan.py checks the library against them and benchmarks/scan_ops.py
counts and times both.  Each is the library's code as it was before, a few small torch ops per
step."""

from __future__ import annotations

from typing import Optional

import torch


def scan(
    x: torch.Tensor, factors: torch.Tensor, init: Optional[torch.Tensor] = None, reverse: bool = True
) -> torch.Tensor:
    """reverse: y_t = x_t + f_t y_{t+1}, y_T = init; forward: y_t = f_t y_{t-1} + x_t, y_{-1} = init."""
    acc = torch.zeros_like(x[0]) if init is None else init.to(x.dtype)
    out = torch.empty_like(x)
    for t in reversed(range(x.shape[0])) if reverse else range(x.shape[0]):
        acc = x[t] + factors[t] * acc
        out[t] = acc
    return out


@torch.no_grad()
def gae(values, rewards, discounts, bootstrap_value, lambda_):
    """(advantages, returns): A_t = delta_t + gamma_t lambda A_{t+1}, A_T = 0."""
    values_tp1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rewards + discounts * values_tp1 - values
    acc = torch.zeros_like(bootstrap_value)
    advantages = torch.empty_like(values)
    for t in reversed(range(values.shape[0])):
        acc = deltas[t] + discounts[t] * lambda_ * acc
        advantages[t] = acc
    return advantages, advantages + values


@torch.no_grad()
def nstep(values, rewards, discounts, bootstrap_value, n):
    """(advantages, returns) of n-step returns bootstrapped at min(t + n, T) (n <= 0: T)."""
    T = values.shape[0]
    n_eff = T if n <= 0 else min(int(n), T)
    pad_shape = (n_eff,) + tuple(values.shape[1:])
    rewards_pad = torch.cat([rewards, rewards.new_zeros(pad_shape)], dim=0)
    discounts_pad = torch.cat([discounts, discounts.new_ones(pad_shape)], dim=0)
    values_ext = torch.cat([values, bootstrap_value.unsqueeze(0)], dim=0)
    returns = torch.zeros_like(values)
    discount_prod = torch.ones_like(values)
    for k in range(n_eff):
        returns = returns + discount_prod * rewards_pad[k : k + T]
        discount_prod = discount_prod * discounts_pad[k : k + T]
    bootstrap_index = torch.clamp(torch.arange(T, device=values.device) + n_eff, max=T)
    returns = returns + discount_prod * values_ext[bootstrap_index]
    return returns - values, returns


@torch.no_grad()
def vtrace(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    clip_c_threshold=1.0,
    lambda_=1.0,
):
    """(vs, pg_advantages) of V-trace (IMPALA eq. 1) by the backward recursion of Remark 1."""

    def clip(x, threshold):
        return x if threshold is None else torch.clamp(x, max=threshold)

    rhos = torch.exp(log_rhos)
    clipped_rhos = clip(rhos, clip_rho_threshold)
    cs = lambda_ * clip(rhos, clip_c_threshold)
    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
    acc = torch.zeros_like(bootstrap_value)
    vs_minus_v_xs = []
    for t in reversed(range(log_rhos.shape[0])):
        acc = deltas[t] + discounts[t] * cs[t] * acc
        vs_minus_v_xs.append(acc)
    vs = torch.stack(vs_minus_v_xs[::-1], dim=0) + values
    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    pg_advantages = clip(rhos, clip_pg_rho_threshold) * (rewards + discounts * vs_t_plus_1 - values)
    return vs, pg_advantages


@torch.no_grad()
def reward_forward_filter(rewards, initial, gamma):
    """(R [T, B], R_{T-1} [B]): R_t = gamma R_{t-1} + i_t, R_{-1} = initial."""
    acc = initial.to(rewards.dtype)
    out = torch.empty_like(rewards)
    for t in range(rewards.shape[0]):
        acc = gamma * acc + rewards[t]
        out[t] = acc
    return out, acc


def n_step_targets(rewards, discounts, bootstrap, n):
    """R2D2's n-step targets by n - 1 shifted recursions y^(k)_t = r_t + gamma_t y^(k-1)_{t+1}."""
    one_step = rewards + discounts * bootstrap
    y = one_step
    for _ in range(n - 1):
        y = torch.cat([rewards[:-1] + discounts[:-1] * y[1:], one_step[-1:]], dim=0)
    return y


def track_episodes(episode_return, reward, done):
    """(finished returns in the order met, new episode_return [B]) of RNDAgent._track_episodes for
    one group of columns: acc += r_t; where done_t the return is finished and acc restarts at 0."""
    finished = []
    acc = episode_return.clone()
    for t in range(reward.shape[0]):
        acc += reward[t]
        ends = done[t]
        if bool(ends.any()):
            finished.extend(acc[ends].tolist())
            acc[ends] = 0.0
    return finished, acc
