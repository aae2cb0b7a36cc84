"""Tests for rl_core.losses.vtrace against a slow reference in the paper's notation."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pytest
import torch

from rl_core.losses import vtrace

THRESHOLD_CHOICES = [None, 0.5, 1.0, 1.7, "random"]


def _minimum(threshold: Optional[float], x: float) -> float:
    return x if threshold is None else min(threshold, x)


def reference_vtrace(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar, pg_rho_bar, c_bar, lambda_):
    """IMPALA eq. (1) as explicit sums and products, one batch entry at a time.

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V
    delta_t V = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t))
    A_s = rho^pg_s (r_s + gamma_s v_{s+1} - V(x_s)),   v_T = V(x_T)
    """
    T, B = log_rhos.shape
    vs = np.zeros((T, B))
    advantages = np.zeros((T, B))
    for b in range(B):
        V = [float(values[t, b]) for t in range(T)] + [float(bootstrap_value[b])]
        gamma = [float(discounts[t, b]) for t in range(T)]
        r = [float(rewards[t, b]) for t in range(T)]
        ratio = [math.exp(float(log_rhos[t, b])) for t in range(T)]  # pi / mu
        rho = [_minimum(rho_bar, ratio[t]) for t in range(T)]
        c = [lambda_ * _minimum(c_bar, ratio[t]) for t in range(T)]
        rho_pg = [_minimum(pg_rho_bar, ratio[t]) for t in range(T)]
        delta = [rho[t] * (r[t] + gamma[t] * V[t + 1] - V[t]) for t in range(T)]

        v = [0.0] * (T + 1)
        v[T] = V[T]
        for s in range(T):
            total = 0.0
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):
                    weight *= gamma[i] * c[i]
                total += weight * delta[t]
            v[s] = V[s] + total
        for s in range(T):
            vs[s, b] = v[s]
            advantages[s, b] = rho_pg[s] * (r[s] + gamma[s] * v[s + 1] - V[s])
    return vs, advantages


def _random_threshold(rng: np.random.Generator) -> Optional[float]:
    choice = THRESHOLD_CHOICES[rng.integers(len(THRESHOLD_CHOICES))]
    return float(rng.uniform(0.1, 3.0)) if choice == "random" else choice


def _random_inputs(rng: np.random.Generator, T: int, B: int):
    gamma = rng.uniform(0.5, 1.0)
    dones = rng.random((T, B)) < 0.25  # Episode ends inside the unroll.
    return dict(
        log_rhos=torch.tensor(rng.normal(0.0, 1.0, (T, B))),
        discounts=torch.tensor(gamma * (~dones)),
        rewards=torch.tensor(rng.normal(0.0, 1.0, (T, B))),
        values=torch.tensor(rng.normal(0.0, 1.0, (T, B))),
        bootstrap_value=torch.tensor(rng.normal(0.0, 1.0, (B,))),
    )


@pytest.mark.parametrize("seed", range(40))
def test_from_importance_weights_matches_paper_reference(seed):
    rng = np.random.default_rng(seed)
    T, B = int(rng.integers(1, 9)), int(rng.integers(1, 6))
    inputs = _random_inputs(rng, T, B)
    thresholds = dict(
        clip_rho_threshold=_random_threshold(rng),
        clip_pg_rho_threshold=_random_threshold(rng),
        clip_c_threshold=_random_threshold(rng),
    )
    lambda_ = 1.0 if seed % 3 == 0 else float(rng.uniform(0.0, 1.0))

    out = vtrace.from_importance_weights(**inputs, **thresholds, lambda_=lambda_)
    ref_vs, ref_adv = reference_vtrace(
        *(inputs[k].numpy() for k in ("log_rhos", "discounts", "rewards", "values", "bootstrap_value")),
        rho_bar=thresholds["clip_rho_threshold"],
        pg_rho_bar=thresholds["clip_pg_rho_threshold"],
        c_bar=thresholds["clip_c_threshold"],
        lambda_=lambda_,
    )
    assert out.vs.shape == (T, B) and out.pg_advantages.shape == (T, B)
    assert out.vs.dtype == torch.float64
    np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), ref_adv, rtol=1e-10, atol=1e-10)


def test_on_policy_vs_is_discounted_n_step_return():
    """With pi == mu, no clipping binds and lambda = 1: v_s is the n-step return."""
    rng = np.random.default_rng(0)
    T, B = 6, 3
    inputs = _random_inputs(rng, T, B)
    inputs["log_rhos"] = torch.zeros(T, B, dtype=torch.float64)
    out = vtrace.from_importance_weights(**inputs)

    expected = inputs["bootstrap_value"].clone()
    for t in reversed(range(T)):
        expected = inputs["rewards"][t] + inputs["discounts"][t] * expected
        torch.testing.assert_close(out.vs[t], expected, rtol=1e-12, atol=1e-12)


def _log_softmax_by_hand(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("seed", range(10))
def test_from_logits_matches_from_importance_weights(seed):
    rng = np.random.default_rng(100 + seed)
    T, B, A = int(rng.integers(1, 9)), int(rng.integers(1, 6)), int(rng.integers(2, 7))
    inputs = _random_inputs(rng, T, B)
    del inputs["log_rhos"]
    behavior = rng.normal(0.0, 2.0, (T, B, A))
    target = rng.normal(0.0, 2.0, (T, B, A))
    actions = rng.integers(0, A, (T, B))

    # log pi(a|x) via one-hot selection from a hand-written log-softmax.
    one_hot = np.eye(A)[actions]
    target_lp = (one_hot * _log_softmax_by_hand(target)).sum(-1)
    behavior_lp = (one_hot * _log_softmax_by_hand(behavior)).sum(-1)
    log_rhos = torch.tensor(target_lp - behavior_lp)

    kwargs = dict(clip_rho_threshold=1.3, clip_pg_rho_threshold=None, clip_c_threshold=0.9, lambda_=0.95)
    out = vtrace.from_logits(
        behavior_policy_logits=torch.tensor(behavior),
        target_policy_logits=torch.tensor(target),
        actions=torch.tensor(actions),
        **inputs,
        **kwargs,
    )
    expected = vtrace.from_importance_weights(log_rhos=log_rhos, **inputs, **kwargs)

    np.testing.assert_allclose(out.target_action_log_probs.numpy(), target_lp, atol=1e-12)
    np.testing.assert_allclose(out.behavior_action_log_probs.numpy(), behavior_lp, atol=1e-12)
    np.testing.assert_allclose(out.log_rhos.numpy(), log_rhos.numpy(), atol=1e-12)
    torch.testing.assert_close(out.vs, expected.vs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out.pg_advantages, expected.pg_advantages, rtol=1e-10, atol=1e-10)


def test_outputs_carry_no_gradient():
    rng = np.random.default_rng(7)
    T, B, A = 5, 2, 4
    inputs = {k: v.requires_grad_() for k, v in _random_inputs(rng, T, B).items()}
    out = vtrace.from_importance_weights(**inputs)
    for tensor in out:
        assert not tensor.requires_grad and tensor.grad_fn is None

    del inputs["log_rhos"]
    target = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    behavior = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, A, (T, B))
    out = vtrace.from_logits(behavior, target, actions, **inputs)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad
    # The log-probabilities stay differentiable w.r.t. the target logits.
    assert out.target_action_log_probs.requires_grad


@pytest.mark.parametrize(
    "bad",
    ["discounts", "rewards", "values", "bootstrap_value", "log_rhos_1d"],
)
def test_shape_mismatch_raises(bad):
    T, B = 4, 3
    inputs = dict(
        log_rhos=torch.zeros(T, B),
        discounts=torch.zeros(T, B),
        rewards=torch.zeros(T, B),
        values=torch.zeros(T, B),
        bootstrap_value=torch.zeros(B),
    )
    if bad == "log_rhos_1d":
        inputs = {k: v.reshape(-1) for k, v in inputs.items()}
    elif bad == "bootstrap_value":
        inputs[bad] = torch.zeros(B + 1)
    else:
        inputs[bad] = torch.zeros(T + 1, B)
    with pytest.raises(ValueError, match="V-trace expects"):
        vtrace.from_importance_weights(**inputs)


@pytest.mark.parametrize("bad", ["target", "actions"])
def test_from_logits_shape_mismatch_raises(bad):
    T, B, A = 4, 3, 5
    behavior = torch.zeros(T, B, A)
    target = torch.zeros(T, B, A + (bad == "target"))
    actions = torch.zeros(T, B + (bad == "actions"), dtype=torch.int64)
    with pytest.raises(ValueError, match="V-trace expects"):
        vtrace.from_logits(
            behavior, target, actions, torch.zeros(T, B), torch.zeros(T, B), torch.zeros(T, B), torch.zeros(B)
        )
