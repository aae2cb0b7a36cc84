"""Tests for rl_core.losses.advantages against slow loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_core.losses import advantages as adv_lib

SEEDS = range(8)


def _random_case(seed: int, min_t: int = 1, terminal_prob: float = 0.2):
    rng = np.random.default_rng(seed)
    T, B = int(rng.integers(min_t, 8)), int(rng.integers(1, 5))
    gamma = float(rng.uniform(0.8, 1.0))
    case = dict(
        values=rng.normal(0.0, 1.0, (T, B)),
        rewards=rng.normal(0.0, 1.0, (T, B)),
        discounts=gamma * (rng.random((T, B)) >= terminal_prob),
        bootstrap_value=rng.normal(0.0, 1.0, (B,)),
    )
    return rng, T, B, case


def _torch(case, requires_grad=False):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=requires_grad) for k, v in case.items()}


def _assert_close(actual, expected, msg=""):
    # numpy's check: torch.testing is slow to import on first use.
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1e-7, atol=1e-7, err_msg=msg)


def _v(values, bootstrap_value, t, b):
    """V(x_t), with V(x_T) = bootstrap_value."""
    return values[t][b] if t < len(values) else bootstrap_value[b]


# --------------------------------------------------------------------------- #
# Slow references, in the papers' notation.
# --------------------------------------------------------------------------- #


def gae_reference(values, rewards, discounts, bootstrap_value, lam):
    """A_t = sum_l (prod_{i<l} gamma_{t+i} lambda) delta_{t+l} (Schulman et al. eq. 16)."""
    T, B = len(rewards), len(rewards[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            total, weight = 0.0, 1.0
            for l in range(T - t):
                s = t + l
                delta = rewards[s][b] + discounts[s][b] * _v(values, bootstrap_value, s + 1, b) - values[s][b]
                total += weight * delta
                weight *= discounts[s][b] * lam
            adv[t][b] = total
    ret = [[adv[t][b] + values[t][b] for b in range(B)] for t in range(T)]
    return np.array(adv), np.array(ret)


def nstep_reference(values, rewards, discounts, bootstrap_value, n):
    """G_t = sum_{k<m} (prod_{i<k} gamma_{t+i}) r_{t+k} + (prod_{i<m} gamma_{t+i}) V(x_{t+m})."""
    T, B = len(rewards), len(rewards[0])
    ret = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for t in range(T):
            m = T - t if n <= 0 else min(n, T - t)
            g, prod = 0.0, 1.0
            for k in range(m):
                g += prod * rewards[t + k][b]
                prod *= discounts[t + k][b]
            g += prod * _v(values, bootstrap_value, t + m, b)
            ret[t][b] = g
    adv = [[ret[t][b] - values[t][b] for b in range(B)] for t in range(T)]
    return np.array(adv), np.array(ret)


def _clip(x, threshold):
    return x if threshold is None else min(x, threshold)


def vtrace_reference(log_rhos, values, rewards, discounts, bootstrap_value, rho_bar, c_bar, pg_rho_bar, lam):
    """IMPALA eq. 1 as an explicit sum, and A_s = rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s))."""
    T, B = len(rewards), len(rewards[0])
    vs = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for s in range(T):
            total = values[s][b]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= discounts[i][b] * lam * _clip(math.exp(log_rhos[i][b]), c_bar)
                rho_t = _clip(math.exp(log_rhos[t][b]), rho_bar)
                v_next = _v(values, bootstrap_value, t + 1, b)
                delta = rho_t * (rewards[t][b] + discounts[t][b] * v_next - values[t][b])
                total += weight * delta
            vs[s][b] = total
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        for s in range(T):
            v_next = vs[s + 1][b] if s + 1 < T else bootstrap_value[b]
            rho_pg = _clip(math.exp(log_rhos[s][b]), pg_rho_bar)
            adv[s][b] = rho_pg * (rewards[s][b] + discounts[s][b] * v_next - values[s][b])
    return np.array(adv), np.array(vs)


def _check(out, expected_adv, expected_ret):
    assert isinstance(out, adv_lib.AdvantagesAndReturns)
    np.testing.assert_allclose(out.advantages.numpy(), expected_adv, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.returns.numpy(), expected_ret, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- #
# GAE.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_gae_matches_reference(seed, lam):
    _, _, _, case = _random_case(seed)
    out = adv_lib.gae(**_torch(case), lambda_=lam)
    _check(out, *gae_reference(case["values"], case["rewards"], case["discounts"], case["bootstrap_value"], lam))


def test_gae_lambda_zero_is_td_error_and_all_terminal_is_r_minus_v():
    _, T, B, case = _random_case(3, min_t=3)
    c = _torch(case)
    out = adv_lib.gae(**c, lambda_=0.0)
    values_tp1 = torch.cat([c["values"][1:], c["bootstrap_value"][None]])
    _assert_close(out.advantages, c["rewards"] + c["discounts"] * values_tp1 - c["values"])
    c["discounts"] = torch.zeros(T, B, dtype=torch.float64)
    for lam in (0.0, 0.5, 1.0):
        out = adv_lib.gae(**c, lambda_=lam)
        _assert_close(out.advantages, c["rewards"] - c["values"])
        _assert_close(out.returns, c["rewards"])


# --------------------------------------------------------------------------- #
# N-step.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("n", [-1, 0, 1, 2, 3, 5, 100])
def test_nstep_matches_reference(seed, n):
    _, _, _, case = _random_case(seed)
    out = adv_lib.nstep(**_torch(case), n=n)
    _check(out, *nstep_reference(case["values"], case["rewards"], case["discounts"], case["bootstrap_value"], n))


@pytest.mark.parametrize("seed", SEEDS)
def test_nstep_special_cases_agree_with_gae(seed):
    _, T, _, case = _random_case(seed)
    c = _torch(case)
    gae1 = adv_lib.gae(**c, lambda_=1.0)
    for n in (0, -3, T, T + 4):  # Monte-Carlo to the unroll's end.
        out = adv_lib.nstep(**c, n=n)
        _assert_close(out.advantages, gae1.advantages)
        _assert_close(out.returns, gae1.returns)
    gae0 = adv_lib.gae(**c, lambda_=0.0)
    _assert_close(adv_lib.nstep(**c, n=1).advantages, gae0.advantages)


def test_nstep_t1_and_all_terminal():
    c = _torch(_random_case(0)[3])
    c1 = {k: v[:1] if k != "bootstrap_value" else v for k, v in c.items()}
    out = adv_lib.nstep(**c1, n=3)
    _assert_close(out.returns, c1["rewards"] + c1["discounts"] * c1["bootstrap_value"][None])
    c["discounts"] = torch.zeros_like(c["discounts"])
    out = adv_lib.nstep(**c, n=4)
    _assert_close(out.returns, c["rewards"])


# --------------------------------------------------------------------------- #
# V-trace.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0, 1.0), (2.0, 0.9, 1.5, 0.8), (None, None, None, 0.95)])
def test_vtrace_matches_reference(seed, clips):
    rng, T, B, case = _random_case(seed)
    log_rhos = rng.normal(0.0, 0.8, (T, B))
    rho_bar, c_bar, pg_rho_bar, lam = clips
    out = adv_lib.vtrace(
        torch.tensor(log_rhos),
        **_torch(case),
        clip_rho_threshold=rho_bar,
        clip_c_threshold=c_bar,
        clip_pg_rho_threshold=pg_rho_bar,
        lambda_=lam,
    )
    _check(
        out,
        *vtrace_reference(
            log_rhos,
            case["values"],
            case["rewards"],
            case["discounts"],
            case["bootstrap_value"],
            rho_bar,
            c_bar,
            pg_rho_bar,
            lam,
        ),
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_vtrace_on_policy_equals_gae(seed):
    _, T, B, case = _random_case(seed)
    c = _torch(case)
    out = adv_lib.vtrace(torch.zeros(T, B, dtype=torch.float64), **c, lambda_=0.9)
    gae = adv_lib.gae(**c, lambda_=0.9)
    _assert_close(out.returns, gae.returns)
    # pg advantage uses v_{s+1}: r + gamma v_{s+1} - V = TD(lambda)-style one-step-ahead target.
    vs_tp1 = torch.cat([gae.returns[1:], c["bootstrap_value"][None]])
    _assert_close(out.advantages, c["rewards"] + c["discounts"] * vs_tp1 - c["values"])


# --------------------------------------------------------------------------- #
# Shapes and gradients.
# --------------------------------------------------------------------------- #


def _all_estimators(c, log_rhos):
    return {
        "gae": adv_lib.gae(**c, lambda_=0.95),
        "nstep": adv_lib.nstep(**c, n=3),
        "vtrace": adv_lib.vtrace(log_rhos, **c, lambda_=0.95),
    }


def test_outputs_are_gradient_free():
    rng, T, B, case = _random_case(5)
    c = _torch(case, requires_grad=True)
    log_rhos = torch.tensor(rng.normal(0.0, 0.5, (T, B)), requires_grad=True)
    for name, out in _all_estimators(c, log_rhos).items():
        assert not out.advantages.requires_grad, name
        assert not out.returns.requires_grad, name
        assert out.advantages.shape == out.returns.shape == (T, B), name


def test_bad_shapes_raise():
    c = _torch(_random_case(1, min_t=2)[3])
    c["bootstrap_value"] = c["values"]
    with pytest.raises(ValueError, match="bootstrap_value"):
        adv_lib.gae(**c, lambda_=1.0)
    with pytest.raises(ValueError):
        adv_lib.nstep(**c, n=2)


# --------------------------------------------------------------------------- #
# Time-limit truncation.
# --------------------------------------------------------------------------- #


def test_bootstrap_truncations_rewrites_truncated_steps():
    rng, T, B, case = _random_case(2, min_t=3)
    c = _torch(case)
    values = c["values"].clone().requires_grad_(True)
    truncated = torch.tensor(rng.random((T, B)) < 0.4)
    rewards0, discounts0 = c["rewards"].clone(), c["discounts"].clone()
    rewards, discounts, mask = adv_lib.bootstrap_truncations(c["rewards"], c["discounts"], values, truncated)
    for t in range(T):
        for b in range(B):
            if truncated[t, b]:
                assert rewards[t, b].item() == values[t, b].item()
                assert discounts[t, b].item() == 0.0
                assert mask[t, b].item() == 0.0
            else:
                assert rewards[t, b].item() == rewards0[t, b].item()
                assert discounts[t, b].item() == discounts0[t, b].item()
                assert mask[t, b].item() == 1.0
    assert mask.dtype == torch.float64
    assert not rewards.requires_grad  # The value is detached.
    _assert_close(c["rewards"], rewards0)  # Inputs untouched.
    _assert_close(c["discounts"], discounts0)


@pytest.mark.parametrize("seed", SEEDS)
def test_truncation_bootstraps_from_last_known_value(seed):
    rng, T, B, case = _random_case(seed, min_t=3)
    t_cut = int(rng.integers(1, T - 1))  # Truncation in the middle of the unroll.
    truncated = np.zeros((T, B), dtype=bool)
    truncated[t_cut] = True
    truncated[t_cut + 1 :] = rng.random((T - t_cut - 1, B)) < 0.3  # Later episodes may be cut too.
    log_rhos = torch.tensor(rng.normal(0.0, 0.8, (T, B)))
    c = _torch(case)
    rewards, discounts, mask = adv_lib.bootstrap_truncations(
        c["rewards"], c["discounts"], c["values"], torch.tensor(truncated)
    )
    full = dict(values=c["values"], rewards=rewards, discounts=discounts, bootstrap_value=c["bootstrap_value"])
    # The shorter unroll that ends at x_{t_cut} with bootstrap V(x_{t_cut}).
    short = dict(
        values=c["values"][:t_cut],
        rewards=c["rewards"][:t_cut],
        discounts=c["discounts"][:t_cut],
        bootstrap_value=c["values"][t_cut],
    )
    full_out = _all_estimators(full, log_rhos)
    short_out = _all_estimators(short, log_rhos[:t_cut])
    for name in full_out:
        f, s = full_out[name], short_out[name]
        _assert_close(f.advantages[:t_cut], s.advantages, msg=name)
        _assert_close(f.returns[:t_cut], s.returns, msg=name)
        # At every truncated step: A_t = 0 and return_t = V(x_t).
        tr = torch.tensor(truncated)
        assert torch.all(f.advantages[tr] == 0.0), name
        _assert_close(f.returns[tr], c["values"][tr], msg=name)
        assert torch.all(mask[tr] == 0.0) and torch.all(mask[~tr] == 1.0)
    # Treating the truncation as a terminal state of value 0 gives other targets.
    naive = adv_lib.gae(
        c["values"],
        c["rewards"],
        torch.where(torch.tensor(truncated), torch.zeros_like(c["discounts"]), c["discounts"]),
        c["bootstrap_value"],
        lambda_=0.95,
    )
    assert not torch.allclose(naive.returns[t_cut - 1], full_out["gae"].returns[t_cut - 1]) or bool(
        torch.all(c["discounts"][t_cut - 1] == 0)
    )
