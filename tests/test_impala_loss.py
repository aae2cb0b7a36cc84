"""Tests for rl_core.losses.impala against slow loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_core.losses import impala, vtrace


def _softmax_row(row):
    m = max(row)
    exps = [math.exp(x - m) for x in row]
    z = sum(exps)
    return [e / z for e in exps]


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    T, B, A = int(rng.integers(1, 7)), int(rng.integers(1, 5)), int(rng.integers(2, 6))
    return rng, T, B, A


@pytest.mark.parametrize("seed", range(8))
def test_policy_gradient_loss_matches_reference(seed):
    rng, T, B, A = _random_case(seed)
    logits = rng.normal(0.0, 2.0, (T, B, A))
    actions = rng.integers(0, A, (T, B))
    advantages = rng.normal(0.0, 1.0, (T, B))

    expected = 0.0
    for t in range(T):
        for b in range(B):
            pi = _softmax_row(logits[t, b])
            expected += -math.log(pi[actions[t, b]]) * advantages[t, b]

    adv = torch.tensor(advantages, requires_grad=True)
    logits_t = torch.tensor(logits, requires_grad=True)
    loss = impala.policy_gradient_loss(logits_t, torch.tensor(actions), adv)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-10)
    loss.backward()
    assert adv.grad is None  # Advantages are detached.
    assert logits_t.grad is not None


@pytest.mark.parametrize("seed", range(8))
def test_baseline_loss_matches_reference(seed):
    rng, T, B, _ = _random_case(seed)
    vs = rng.normal(0.0, 1.0, (T, B))
    values = rng.normal(0.0, 1.0, (T, B))
    expected = sum(0.5 * (vs[t, b] - values[t, b]) ** 2 for t in range(T) for b in range(B))
    loss = impala.baseline_loss(torch.tensor(vs) - torch.tensor(values))
    assert loss.item() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_entropy_loss_matches_reference(seed):
    rng, T, B, A = _random_case(seed)
    logits = rng.normal(0.0, 2.0, (T, B, A))
    expected = 0.0
    for t in range(T):
        for b in range(B):
            pi = _softmax_row(logits[t, b])
            expected += sum(p * math.log(p) for p in pi)
    loss = impala.entropy_loss(torch.tensor(logits))
    assert loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-10)
    assert loss.item() <= 0.0  # Negative entropy.


def test_entropy_loss_of_uniform_policy_is_minus_log_a():
    T, B, A = 3, 2, 5
    loss = impala.entropy_loss(torch.zeros(T, B, A, dtype=torch.float64))
    assert loss.item() == pytest.approx(-T * B * math.log(A))


def test_policy_gradient_loss_gradcheck():
    torch.manual_seed(0)
    T, B, A = 3, 2, 4
    logits = torch.randn(T, B, A, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, A, (T, B))
    advantages = torch.randn(T, B, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda x: impala.policy_gradient_loss(x, actions, advantages), (logits,))


def test_entropy_loss_gradcheck():
    torch.manual_seed(1)
    logits = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(impala.entropy_loss, (logits,))


def _impala_inputs(seed: int):
    rng, T, B, A = _random_case(seed)
    return dict(
        behavior_policy_logits=torch.tensor(rng.normal(0.0, 1.0, (T, B, A))),
        target_policy_logits=torch.tensor(rng.normal(0.0, 1.0, (T, B, A)), requires_grad=True),
        actions=torch.tensor(rng.integers(0, A, (T, B))),
        rewards=torch.tensor(rng.normal(0.0, 1.0, (T, B))),
        dones=torch.tensor(rng.random((T, B)) < 0.3),
        values=torch.tensor(rng.normal(0.0, 1.0, (T, B)), requires_grad=True),
        bootstrap_value=torch.tensor(rng.normal(0.0, 1.0, (B,))),
    )


@pytest.mark.parametrize("seed", range(6))
def test_impala_loss_assembles_terms(seed):
    inputs = _impala_inputs(seed)
    hyper = dict(discounting=0.97, baseline_cost=0.5, entropy_cost=0.01)
    clips = dict(clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, clip_c_threshold=1.0, lambda_=0.9)
    total, stats = impala.impala_loss(**inputs, **hyper, **clips)

    # Assemble by hand: discount 0 on the step where the episode ended.
    gamma = torch.tensor(0.97, dtype=torch.float64)
    discounts = torch.where(inputs["dones"], torch.zeros_like(gamma), gamma)
    vt = vtrace.from_logits(
        inputs["behavior_policy_logits"],
        inputs["target_policy_logits"],
        inputs["actions"],
        discounts,
        inputs["rewards"],
        inputs["values"],
        inputs["bootstrap_value"],
        **clips,
    )
    pg = impala.policy_gradient_loss(inputs["target_policy_logits"], inputs["actions"], vt.pg_advantages)
    base = 0.5 * impala.baseline_loss(vt.vs - inputs["values"])
    ent = 0.01 * impala.entropy_loss(inputs["target_policy_logits"])

    assert total.item() == pytest.approx((pg + base + ent).item(), rel=1e-12, abs=1e-12)
    assert stats["pg_loss"] == pytest.approx(pg.item(), rel=1e-12, abs=1e-12)
    assert stats["baseline_loss"] == pytest.approx(base.item(), rel=1e-12, abs=1e-12)
    assert stats["entropy_loss"] == pytest.approx(ent.item(), rel=1e-12, abs=1e-12)
    p = torch.softmax(inputs["target_policy_logits"], -1)
    assert stats["entropy"] == pytest.approx(-(p * p.log()).sum(-1).mean().item(), rel=1e-9)
    assert stats["total_loss"] == pytest.approx(total.item(), rel=1e-12, abs=1e-12)
    assert stats["mean_rho"] == pytest.approx(torch.exp(vt.log_rhos).mean().item())
    assert stats["clipped_rho_share"] == pytest.approx((torch.exp(vt.log_rhos) > 1.0).double().mean().item())
    assert 0 < stats["clipped_rho_share"] < 1  # behaviour and target logits drawn apart: some rhos clipped, not all
    # 0-dim tensors without a graph: the learner reads a batch's stats in one host sync
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in stats.values())

    # vs is a fixed target: d(total)/d(values) = -baseline_cost * (vs - values).
    total.backward()
    expected_grad = -0.5 * (vt.vs - inputs["values"].detach())
    torch.testing.assert_close(inputs["values"].grad, expected_grad)
    assert inputs["target_policy_logits"].grad is not None


def test_done_cuts_bootstrap():
    """If dones[t] is True, vs[:t+1] ignores values[t+1:] and bootstrap_value."""
    inputs = _impala_inputs(3)
    T, B = inputs["rewards"].shape
    t_end = T // 2
    dones = torch.zeros(T, B, dtype=torch.bool)
    dones[t_end] = True
    discounts = (~dones).to(torch.float64) * 0.99
    args = (
        inputs["behavior_policy_logits"],
        inputs["target_policy_logits"].detach(),
        inputs["actions"],
        discounts,
        inputs["rewards"],
    )
    values = inputs["values"].detach()
    a = vtrace.from_logits(*args, values, inputs["bootstrap_value"])
    changed = values.clone()
    changed[t_end + 1 :] += 10.0
    b = vtrace.from_logits(*args, changed, inputs["bootstrap_value"] + 10.0)
    torch.testing.assert_close(a.vs[: t_end + 1], b.vs[: t_end + 1])
    torch.testing.assert_close(a.pg_advantages[: t_end + 1], b.pg_advantages[: t_end + 1])
