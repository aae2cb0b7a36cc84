"""Tests for rl_core.numerics.distributions against slow Python references."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from rl_core.numerics import distributions as D
from rl_core.data.env_spec import BoxActions, DiscreteActions, action_space_from_json


def _softmax_row(row):
    m = max(row)
    exps = [math.exp(x - m) for x in row]
    z = sum(exps)
    return [e / z for e in exps]


def _normal_logpdf(x, m, s):
    return -((x - m) ** 2) / (2 * s * s) - math.log(s) - 0.5 * math.log(2 * math.pi)


def _random_shape(rng):
    return int(rng.integers(1, 5)), int(rng.integers(1, 4))


# ---------------------------------------------------------------- Categorical


@pytest.mark.parametrize("seed", range(6))
def test_categorical_log_prob_entropy_kl_match_loops(seed):
    rng = np.random.default_rng(seed)
    T, B = _random_shape(rng)
    A = int(rng.integers(2, 6))
    logits_p = rng.normal(0.0, 2.0, (T, B, A))
    logits_q = rng.normal(0.0, 2.0, (T, B, A))
    actions = rng.integers(0, A, (T, B))

    p = D.Categorical(torch.tensor(logits_p))
    q = D.Categorical(torch.tensor(logits_q))
    log_prob = p.log_prob(torch.tensor(actions))
    entropy = p.entropy()
    kl = p.kl(q)
    assert log_prob.shape == entropy.shape == kl.shape == (T, B)
    for t in range(T):
        for b in range(B):
            pi = _softmax_row(logits_p[t, b])
            qi = _softmax_row(logits_q[t, b])
            assert log_prob[t, b].item() == pytest.approx(math.log(pi[actions[t, b]]), abs=1e-10)
            assert entropy[t, b].item() == pytest.approx(-sum(x * math.log(x) for x in pi), abs=1e-10)
            expected_kl = sum(x * (math.log(x) - math.log(y)) for x, y in zip(pi, qi))
            assert kl[t, b].item() == pytest.approx(expected_kl, abs=1e-10)
    assert (kl >= -1e-12).all()
    assert torch.allclose(p.kl(p), torch.zeros(T, B, dtype=torch.float64), atol=1e-12)


def test_categorical_masked_logits_and_low_precision():
    logits = torch.tensor([[0.0, -float("inf"), 1.0]])
    p = D.Categorical(logits)
    assert torch.isfinite(p.entropy()).all()
    assert torch.isfinite(p.kl(D.Categorical(torch.zeros(1, 3)))).all()
    expected = -sum(x * math.log(x) for x in _softmax_row([0.0, 1.0]))
    assert p.entropy().item() == pytest.approx(expected, abs=1e-6)
    half = D.Categorical(torch.zeros(2, 4, dtype=torch.float16))
    assert half.log_probs.dtype == torch.float32
    assert half.entropy()[0].item() == pytest.approx(math.log(4), abs=1e-6)


def test_categorical_sample_and_mode():
    torch.manual_seed(0)
    probs = [0.1, 0.2, 0.3, 0.4]
    logits = torch.tensor(probs).log()
    p = D.Categorical(logits.expand(4, 10000, 4))
    sample = p.sample()
    assert sample.shape == (4, 10000) and sample.dtype == torch.int64
    freq = torch.bincount(sample.flatten(), minlength=4).double() / sample.numel()
    # Standard error sqrt(p (1 - p) / 40000) <= 0.0025.
    assert torch.allclose(freq, torch.tensor(probs, dtype=torch.float64), atol=0.01)
    assert torch.equal(p.mode(), torch.full((4, 10000), 3))
    scalar = D.Categorical(torch.tensor([0.0, 5.0, -1.0]))
    assert scalar.sample().shape == () and scalar.mode().item() == 1


# ------------------------------------------------------------------- Gaussian


@pytest.mark.parametrize("seed", range(4))
def test_gaussian_log_prob_and_entropy_match_reference(seed):
    rng = np.random.default_rng(seed)
    T, B = _random_shape(rng)
    dim = int(rng.integers(1, 4))
    mean = rng.normal(0.0, 1.0, (T, B, dim))
    std = rng.uniform(0.1, 2.0, (T, B, dim))
    x = rng.normal(0.0, 2.0, (T, B, dim))
    g = D.Gaussian(torch.tensor(mean), torch.tensor(std))
    log_prob, entropy = g.log_prob(torch.tensor(x)), g.entropy()
    assert log_prob.shape == entropy.shape == (T, B)
    for t in range(T):
        for b in range(B):
            expected = sum(_normal_logpdf(x[t, b, i], mean[t, b, i], std[t, b, i]) for i in range(dim))
            assert log_prob[t, b].item() == pytest.approx(expected, abs=1e-10)
            h = sum(0.5 * math.log(2 * math.pi * math.e * std[t, b, i] ** 2) for i in range(dim))
            assert entropy[t, b].item() == pytest.approx(h, abs=1e-10)


def test_gaussian_state_independent_std_broadcasts():
    mean = torch.zeros(3, 2, 4)
    std = torch.tensor([0.5, 1.0, 2.0, 3.0])
    g = D.Gaussian(mean, std)
    assert g.sample().shape == (3, 2, 4)
    assert g.entropy().shape == (3, 2)
    assert g.kl(D.Gaussian(mean + 1, std)).shape == (3, 2)
    with pytest.raises(ValueError):
        D.Gaussian(mean, torch.ones(5))


def _squashed_case(seed, dim=3, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    low = rng.uniform(-3.0, 0.0, dim)
    high = low + rng.uniform(0.5, 4.0, dim)
    mean = rng.normal(0.0, 0.7, (5, dim))
    std = rng.uniform(0.2, 1.0, (5, dim))
    kw = dict(dtype=dtype)
    g = D.Gaussian(
        torch.tensor(mean, **kw),
        torch.tensor(std, **kw),
        squash=True,
        low=torch.tensor(low, **kw),
        high=torch.tensor(high, **kw),
    )
    return g, low, high, mean, std, rng


@pytest.mark.parametrize("seed", range(3))
def test_squashed_log_prob_matches_finite_difference_change_of_variables(seed):
    g, low, high, mean, std, rng = _squashed_case(seed)
    loc, scale = (high + low) / 2, (high - low) / 2
    u = rng.normal(mean, std)  # Moderate |u|: away from the bounds.

    def f(v, i):
        return loc[i] + scale[i] * math.tanh(v)

    h = 1e-5
    expected = []
    for n in range(u.shape[0]):
        total = 0.0
        for i in range(u.shape[1]):
            jac = (f(u[n, i] + h, i) - f(u[n, i] - h, i)) / (2 * h)  # da_i / du_i.
            total += _normal_logpdf(u[n, i], mean[n, i], std[n, i]) - math.log(jac)
        expected.append(total)
    actions = torch.tensor([[f(u[n, i], i) for i in range(u.shape[1])] for n in range(u.shape[0])])
    assert torch.allclose(g.log_prob(actions), torch.tensor(expected, dtype=torch.float64), atol=1e-6)


def test_squashed_density_integrates_to_one_in_1d():
    low, high = -2.0, 3.0
    g = D.Gaussian(
        torch.tensor([[0.3]], dtype=torch.float64),
        torch.tensor([[0.8]], dtype=torch.float64),
        squash=True,
        low=[low],
        high=[high],
    )
    grid = torch.linspace(low, high, 200001, dtype=torch.float64)[1:-1]
    density = g.log_prob(grid.view(-1, 1)).exp()  # Batch shape broadcasts over the grid.
    integral = torch.trapezoid(density, grid).item()
    assert integral == pytest.approx(1.0, abs=1e-4)


def test_sample_with_log_prob_equals_log_prob_of_sample_away_from_bounds():
    torch.manual_seed(1)
    g, low, high, *_ = _squashed_case(3)
    action, log_prob = g.sample_with_log_prob()
    assert action.shape == (5, 3) and log_prob.shape == (5,)
    y = (action - g.loc) / g.scale
    inside = (y.abs() < 0.999).all(-1)
    assert inside.any()
    assert torch.allclose(log_prob[inside], g.log_prob(action)[inside], atol=1e-6)
    # Unsquashed: identical too.
    plain = D.Gaussian(g.mean, g.std)
    a, lp = plain.sample_with_log_prob()
    assert torch.allclose(lp, plain.log_prob(a), atol=1e-10)


def test_squashed_samples_inside_bounds_and_finite_log_probs():
    torch.manual_seed(2)
    low, high = torch.tensor([-1.0, 0.0, 10.0]), torch.tensor([1.0, 0.5, 20.0])
    # Large std: many samples saturate tanh (in float32 to exactly +-1).
    g = D.Gaussian(torch.zeros(1000, 3), torch.full((1000, 3), 20.0), squash=True, low=low, high=high)
    for action in (g.sample(), g.sample_with_log_prob()[0]):
        assert action.dtype == torch.float32
        assert ((action >= low) & (action <= high)).all()
        assert torch.isfinite(g.log_prob(action)).all()
    assert torch.isfinite(g.sample_with_log_prob()[1]).all()
    # Actions beyond the bounds are clamped by eps, not NaN.
    assert torch.isfinite(g.log_prob(torch.tensor([[5.0, -3.0, 100.0]]))).all()


def test_mode():
    mean, std = torch.tensor([[0.5, -2.0]]), torch.tensor([[1.0, 1.0]])
    assert torch.equal(D.Gaussian(mean, std).mode(), mean)
    low, high = torch.tensor([0.0, -4.0]), torch.tensor([2.0, 0.0])
    expected = torch.tensor([[1.0 + math.tanh(0.5), -2.0 + 2.0 * math.tanh(-2.0)]])
    mode = D.Gaussian(mean, std, squash=True, low=low, high=high).mode()
    assert torch.allclose(mode, expected, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_gaussian_kl_matches_closed_form(seed):
    rng = np.random.default_rng(seed)
    m1, m2 = rng.normal(0, 1, (4, 3)), rng.normal(0, 1, (4, 3))
    s1, s2 = rng.uniform(0.2, 2, (4, 3)), rng.uniform(0.2, 2, (4, 3))
    p = D.Gaussian(torch.tensor(m1), torch.tensor(s1))
    q = D.Gaussian(torch.tensor(m2), torch.tensor(s2))
    kl = p.kl(q)
    for n in range(4):
        expected = sum(
            math.log(s2[n, i] / s1[n, i]) + (s1[n, i] ** 2 + (m1[n, i] - m2[n, i]) ** 2) / (2 * s2[n, i] ** 2) - 0.5
            for i in range(3)
        )
        assert kl[n].item() == pytest.approx(expected, abs=1e-10)
    assert torch.allclose(p.kl(p), torch.zeros(4, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_kl_matches_monte_carlo(squash):
    torch.manual_seed(3)
    n = 200_000
    kw = dict(dtype=torch.float64)
    bounds = dict(low=torch.tensor([-1.0, 0.0], **kw), high=torch.tensor([2.0, 5.0], **kw)) if squash else {}
    m1, s1 = torch.tensor([0.2, -0.3], **kw), torch.tensor([0.5, 0.4], **kw)
    m2, s2 = torch.tensor([-0.1, 0.1], **kw), torch.tensor([0.6, 0.3], **kw)
    p = D.Gaussian(m1.expand(n, 2), s1.expand(n, 2), squash=squash, **bounds)
    q = D.Gaussian(m2.expand(n, 2), s2.expand(n, 2), squash=squash, **bounds)
    # Squashed: KL of the action distributions, estimated in action space.
    action, log_p = p.sample_with_log_prob()
    diff = log_p - q.log_prob(action)
    estimate, stderr = diff.mean().item(), diff.std().item() / math.sqrt(n)
    assert p.kl(q)[0].item() == pytest.approx(estimate, abs=5 * stderr + 1e-3)


def test_gradients_flow_through_rsample():
    for squash in (False, True):
        mean = torch.tensor([[0.3, -0.2]], requires_grad=True)
        std = torch.tensor([[0.5, 1.5]], requires_grad=True)
        g = D.Gaussian(mean, std, squash=squash, low=[-2.0, -1.0], high=[2.0, 3.0])
        g.sample().sum().backward()
        assert mean.grad is not None and std.grad is not None
        assert (mean.grad != 0).all() and (std.grad != 0).all()
        if not squash:
            assert torch.equal(mean.grad, torch.ones_like(mean))
        mean.grad = std.grad = None
        action, log_prob = g.sample_with_log_prob()
        (action.sum() + log_prob.sum()).backward()
        assert torch.isfinite(mean.grad).all() and (std.grad != 0).all()


# ----------------------------------------------------------- helper functions


def test_std_from_param_min_std_and_range():
    x = torch.tensor([-1e4, -30.0, 0.0, 1.0, 50.0])
    soft = D.std_from_param(x, "softplus", min_std=1e-3)
    assert soft[0].item() == pytest.approx(1e-3)
    assert (soft >= 1e-3).all() and torch.isfinite(soft).all()
    assert soft[2].item() == pytest.approx(math.log(2) + 1e-3, rel=1e-6)
    ex = D.std_from_param(x, "exp", min_std=1e-3)
    assert ex[0].item() == pytest.approx(1e-3 + math.exp(-20), rel=1e-6)
    assert ex[3].item() == pytest.approx(math.e + 1e-3, rel=1e-6)
    assert ex[4].item() == pytest.approx(math.exp(2) + 1e-3, rel=1e-6)
    assert (ex >= 1e-3).all()
    y = torch.tensor([0.5], requires_grad=True)
    D.std_from_param(y, "exp").sum().backward()
    assert y.grad.item() == pytest.approx(math.exp(0.5), rel=1e-6)
    with pytest.raises(ValueError):
        D.std_from_param(x, "relu")


def test_make_distribution():
    logits = torch.zeros(3, 2, 5)
    dist = D.make_distribution(DiscreteActions(5), {"policy_logits": logits})
    assert isinstance(dist, D.Categorical) and dist.sample().shape == (3, 2)
    with pytest.raises(ValueError):
        D.make_distribution(DiscreteActions(4), {"policy_logits": logits})
    with pytest.raises(ValueError):
        D.make_distribution(DiscreteActions(5), {"policy_logits": logits}, squash=True)

    spec = BoxActions((2,), (-1.0, 0.0), (1.0, 4.0))
    params = {"policy_mean": torch.zeros(3, 2, 2, dtype=torch.float64), "policy_std": torch.ones(3, 2, 2)}
    for squash in (False, True):
        dist = D.make_distribution(spec, params, squash=squash)
        assert isinstance(dist, D.Gaussian) and dist.squash == squash
        assert dist.low.dtype == dist.high.dtype == torch.float64
        assert dist.low.device == params["policy_mean"].device
        assert torch.equal(dist.high, torch.tensor([1.0, 4.0], dtype=torch.float64))
        assert dist.sample().shape == (3, 2, 2) and dist.log_prob(dist.sample()).shape == (3, 2)
    unbounded = dataclasses.replace(spec, low=(-math.inf, 0.0), high=(math.inf, 4.0))
    assert not D.make_distribution(unbounded, params).squash
    with pytest.raises(ValueError):
        D.make_distribution(unbounded, params, squash=True)
    with pytest.raises(ValueError):
        D.make_distribution(dataclasses.replace(spec, shape=(3,)), params)
    with pytest.raises(ValueError):
        D.make_distribution(action_space_from_json({"kind": "multi_binary"}), params)
