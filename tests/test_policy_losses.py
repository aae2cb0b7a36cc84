"""Tests for rl_core.losses.policy_gradient against slow loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_core.losses import policy_gradient as pg

SEEDS = range(8)


def _random_case(seed: int):
    rng = np.random.default_rng(seed)
    T, B = int(rng.integers(1, 8)), int(rng.integers(1, 5))
    return rng, T, B


def _t(x, requires_grad=False):
    return torch.tensor(x, dtype=torch.float64, requires_grad=requires_grad)


def _random_mask(rng, T, B):
    mask = rng.random((T, B)) < 0.7
    mask[rng.integers(0, T), rng.integers(0, B)] = True  # At least one step in.
    return mask


def _assert_close(actual, expected):
    # numpy's check: torch.testing is slow to import on first use.
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=1e-7, atol=1e-7)


def _close(actual, expected, tol=1e-10):
    np.testing.assert_allclose(actual.detach().numpy(), np.asarray(expected, dtype=np.float64), rtol=tol, atol=tol)


# --------------------------------------------------------------------------- #
# Reductions.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
def test_masked_mean_and_reduce_match_reference(seed):
    rng, T, B = _random_case(seed)
    x = rng.normal(0.0, 1.0, (T, B))
    mask = rng.random((T, B)) < 0.6
    total, count, plain = 0.0, 0, 0.0
    for t in range(T):
        for b in range(B):
            plain += x[t, b]
            if mask[t, b]:
                total += x[t, b]
                count += 1
    xt = _t(x)
    assert pg.masked_mean(xt).item() == pytest.approx(plain / (T * B), abs=1e-12)
    assert pg.masked_mean(xt, torch.tensor(mask)).item() == pytest.approx(total / max(count, 1), abs=1e-12)
    assert pg.reduce(xt, torch.tensor(mask), "mean").item() == pytest.approx(total / max(count, 1), abs=1e-12)
    summed = pg.reduce(xt, torch.tensor(mask).double(), "sum")
    assert summed.item() == pytest.approx(total, abs=1e-12)
    assert pg.reduce(xt, None, "sum").item() == pytest.approx(plain, abs=1e-12)
    assert pg.reduce(xt, None, "mean").item() == pytest.approx(plain / (T * B), abs=1e-12)


def test_masked_mean_edge_cases():
    x = torch.tensor([[1.0, math.inf], [math.nan, 3.0]], dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    out = pg.masked_mean(x, mask)
    assert out.item() == 2.0  # inf/NaN under a zero mask do not leak.
    out.backward()
    assert torch.equal(x.grad, torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=torch.float64))
    assert pg.masked_mean(torch.ones(2, 3), torch.zeros(2, 3)).item() == 0.0  # max(sum(mask), 1).
    # the same with a bool mask (the loss terms' path)
    x.grad = None
    out = pg.masked_mean(x, mask != 0)
    assert out.item() == 2.0 and out.dtype == torch.float64
    out.backward()
    assert torch.equal(x.grad, torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=torch.float64))
    assert pg.masked_mean(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool)).item() == 0.0
    with pytest.raises(ValueError, match="reduction"):
        pg.reduce(torch.ones(2, 2), None, "max")


# --------------------------------------------------------------------------- #
# Vanilla PG.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
def test_vpg_matches_reference_and_gradients(seed):
    rng, T, B = _random_case(seed)
    logp, adv = -rng.exponential(1.0, (T, B)), rng.normal(0.0, 1.0, (T, B))
    expected = [[-adv[t, b] * logp[t, b] for b in range(B)] for t in range(T)]
    logp_t, adv_t = _t(logp, True), _t(adv, True)
    loss = pg.vpg(logp_t, adv_t)
    _close(loss, expected)
    loss.sum().backward()
    _close(logp_t.grad, -adv)
    assert adv_t.grad is None  # Advantages are detached.


def test_vpg_gradcheck():
    torch.manual_seed(0)
    adv = torch.randn(3, 2, dtype=torch.float64)
    logp = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: pg.vpg(x, adv), (logp,))


# --------------------------------------------------------------------------- #
# PPO.
# --------------------------------------------------------------------------- #


def ppo_reference(logp, blogp, adv, eps):
    T, B = logp.shape
    loss = np.zeros((T, B))
    grad = np.zeros((T, B))  # d loss / d log pi.
    frac = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            r = math.exp(logp[t, b] - blogp[t, b])
            a = adv[t, b]
            clipped_r = min(max(r, 1 - eps), 1 + eps)
            loss[t, b] = -min(r * a, clipped_r * a)
            # The unclipped term is the minimum unless r is outside the range on
            # the side that would increase the objective.
            clipped = (a > 0 and r > 1 + eps) or (a < 0 and r < 1 - eps)
            grad[t, b] = 0.0 if clipped else -r * a
            frac[t, b] = 1.0 if abs(r - 1) > eps else 0.0
    return loss, grad, frac


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_ppo_clip_matches_reference_and_gradients(seed, eps):
    rng, T, B = _random_case(seed)
    blogp = -rng.exponential(1.0, (T, B))
    logp = blogp + rng.normal(0.0, 0.4, (T, B))
    adv = rng.normal(0.0, 1.0, (T, B))
    loss_ref, grad_ref, frac_ref = ppo_reference(logp, blogp, adv, eps)
    logp_t, blogp_t, adv_t = _t(logp, True), _t(blogp, True), _t(adv, True)
    loss = pg.ppo_clip(logp_t, blogp_t, adv_t, eps)
    _close(loss, loss_ref)
    loss.sum().backward()
    _close(logp_t.grad, grad_ref)
    assert adv_t.grad is None and blogp_t.grad is None
    frac = pg.ppo_clip_fraction(logp_t, blogp_t, eps)
    _close(frac, frac_ref)
    assert frac.dtype == torch.float64 and not frac.requires_grad


def test_approx_kl_estimates_the_kl_of_the_behaviour_policy_to_the_current_one():
    """Per step (r - 1) - log r >= 0, 0 on-policy; over actions drawn from mu its mean is KL(mu || pi),
    computed exactly from the two categorical distributions."""
    g = torch.Generator().manual_seed(0)
    mu_logits, pi_logits = torch.randn(5, generator=g), torch.randn(5, generator=g)
    mu, pi = mu_logits.log_softmax(-1), pi_logits.log_softmax(-1)
    exact = float((mu.exp() * (mu - pi)).sum())
    actions = torch.multinomial(mu.exp(), 200_000, replacement=True, generator=g).view(400, 500)
    estimate = pg.approx_kl(pi[actions], mu[actions])
    assert estimate.shape == (400, 500) and bool((estimate >= 0).all())
    assert float(estimate.mean()) == pytest.approx(exact, rel=0.02)
    reference = [[math.exp(float(pi[a] - mu[a])) - 1 - float(pi[a] - mu[a]) for a in row] for row in actions[:2]]
    assert torch.allclose(estimate[:2].double(), torch.tensor(reference, dtype=torch.float64), atol=1e-6)
    assert torch.equal(pg.approx_kl(mu[actions], mu[actions]), torch.zeros(400, 500))


def test_ppo_clip_on_policy_is_vpg_gradient_and_gradcheck():
    torch.manual_seed(1)
    logp = -torch.rand(4, 3, dtype=torch.float64) - 0.1
    adv = torch.randn(4, 3, dtype=torch.float64)
    x = logp.clone().requires_grad_(True)
    pg.ppo_clip(x, logp, adv, 0.2).sum().backward()
    _assert_close(x.grad, -adv)  # r = 1: d/dlogpi of -r A is -A.
    blogp = logp + 0.3 * torch.randn(4, 3, dtype=torch.float64)
    x = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda y: pg.ppo_clip(y, blogp, adv, 0.2), (x,))


# --------------------------------------------------------------------------- #
# AWR.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("beta,max_weight", [(1.0, 20.0), (0.3, 5.0), (0.5, None)])
def test_awr_matches_reference_and_gradients(seed, beta, max_weight):
    rng, T, B = _random_case(seed)
    logp, adv = -rng.exponential(1.0, (T, B)), rng.normal(0.0, 1.5, (T, B))
    w_ref = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            w = math.exp(adv[t, b] / beta)
            w_ref[t, b] = w if max_weight is None else min(w, max_weight)
    logp_t, adv_t = _t(logp, True), _t(adv, True)
    w = pg.awr_weights(adv_t, beta, max_weight)
    _close(w, w_ref)
    assert not w.requires_grad
    loss = pg.awr(logp_t, adv_t, beta, max_weight)
    _close(loss, -w_ref * logp)
    loss.sum().backward()
    _close(logp_t.grad, -w_ref)
    assert adv_t.grad is None


def test_awr_weights_do_not_overflow():
    adv = torch.tensor([[1e4, -1e4]], dtype=torch.float32)
    w = pg.awr_weights(adv, beta=0.05, max_weight=20.0)
    assert torch.all(torch.isfinite(w))
    assert w[0, 0].item() == pytest.approx(20.0) and w[0, 1].item() == 0.0


# --------------------------------------------------------------------------- #
# V-MPO.
# --------------------------------------------------------------------------- #


def vmpo_reference(logp, adv, eta, eps_eta, top_fraction, mask):
    """V-MPO eqs. 3-4 over the top ceil(top_fraction * N) masked-in steps."""
    T, B = logp.shape
    steps = [(t, b) for t in range(T) for b in range(B) if mask[t, b]]
    steps.sort(key=lambda tb: -adv[tb])
    k = max(1, math.ceil(top_fraction * len(steps) - 1e-9))
    top = steps[:k]
    z = sum(math.exp(adv[tb] / eta) for tb in top)
    psi = np.zeros((T, B))
    top_mask = np.zeros((T, B))
    for tb in top:
        psi[tb] = math.exp(adv[tb] / eta) / z
        top_mask[tb] = 1.0
    policy = -psi * logp
    temperature_loss = eta * eps_eta + eta * math.log(z / k)
    # dL_eta/deta = eps + log mean exp(A/eta) - sum_D~ psi A / eta.
    grad_eta = eps_eta + math.log(z / k) - sum(psi[tb] * adv[tb] for tb in top) / eta
    return policy, temperature_loss, psi, top_mask, grad_eta


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("top_fraction", [0.5, 0.3, 1.0])
@pytest.mark.parametrize("use_mask", [False, True])
def test_vmpo_matches_reference(seed, top_fraction, use_mask):
    rng, T, B = _random_case(seed)
    logp, adv = -rng.exponential(1.0, (T, B)), rng.normal(0.0, 2.0, (T, B))
    eta, eps_eta = float(rng.uniform(0.2, 3.0)), 0.1
    mask = _random_mask(rng, T, B) if use_mask else np.ones((T, B), dtype=bool)
    policy_ref, temp_ref, psi_ref, top_ref, grad_eta_ref = vmpo_reference(logp, adv, eta, eps_eta, top_fraction, mask)

    logp_t, adv_t = _t(logp, True), _t(adv, True)
    eta_t = _t(eta, True)
    out = pg.vmpo(logp_t, adv_t, eta_t, eps_eta, top_fraction, mask=torch.tensor(mask) if use_mask else None)
    assert isinstance(out, pg.VMPOTerms)
    _close(out.policy, policy_ref)
    _close(out.weights, psi_ref)
    _close(out.top_mask, top_ref)
    assert out.temperature.dim() == 0
    assert out.temperature.item() == pytest.approx(temp_ref, rel=1e-10, abs=1e-10)
    assert out.policy.sum().item() == pytest.approx(-(psi_ref * logp).sum(), abs=1e-10)  # = L_pi.
    assert out.weights.sum().item() == pytest.approx(1.0)

    # Policy term: gradient to log pi only (-psi on D~), none to eta or A.
    out.policy.sum().backward(retain_graph=True)
    _close(logp_t.grad, -psi_ref)
    assert eta_t.grad is None and adv_t.grad is None
    # Temperature loss: gradient to eta only.
    logp_t.grad = None
    out.temperature.backward()
    assert logp_t.grad is None and adv_t.grad is None
    assert eta_t.grad.item() == pytest.approx(grad_eta_ref, rel=1e-9, abs=1e-9)


def test_vmpo_gradcheck_and_edge_cases():
    torch.manual_seed(2)
    logp = -torch.rand(3, 2, dtype=torch.float64)
    adv = torch.randn(3, 2, dtype=torch.float64)
    eta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda e: pg.vmpo(logp, adv, e, 0.05).temperature, (eta,))
    x = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda y: pg.vmpo(y, adv, eta, 0.05).policy, (x,))

    # T = B = 1: the single step is kept with psi = 1, and L_eta = eta * eps + A.
    one = pg.vmpo(logp[:1, :1], adv[:1, :1], eta, 0.05)
    assert one.top_mask.item() == 1.0 and one.weights.item() == pytest.approx(1.0)
    assert one.temperature.item() == pytest.approx(0.7 * 0.05 + adv[0, 0].item())

    # Huge advantages and a tiny temperature stay finite.
    big = pg.vmpo(logp, 1e3 * adv, torch.tensor(1e-2, dtype=torch.float64, requires_grad=True), 0.1)
    assert torch.isfinite(big.temperature) and torch.all(torch.isfinite(big.policy))

    # A mask that selects nothing gives zero terms.
    none = pg.vmpo(x, adv, eta, 0.05, mask=torch.zeros(3, 2, dtype=torch.bool))
    assert torch.all(none.policy == 0) and torch.all(none.top_mask == 0)
    assert none.temperature.item() == 0.0
    with pytest.raises(ValueError, match="top_fraction"):
        pg.vmpo(logp, adv, eta, 0.05, top_fraction=0.0)


def test_vmpo_temperature_descends_towards_kl_bound():
    # Minimising L_eta over eta makes the KL of psi from uniform-on-D~ approach epsilon_eta.
    torch.manual_seed(3)
    adv = torch.randn(6, 4, dtype=torch.float64)
    logp = -torch.rand(6, 4, dtype=torch.float64)
    param = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    eps_eta = 0.2
    for _ in range(120):  # Plain gradient descent, lr = 1.
        out = pg.vmpo(logp, adv, torch.nn.functional.softplus(param), eps_eta)
        (grad,) = torch.autograd.grad(out.temperature, param)
        with torch.no_grad():
            param -= grad
    psi = out.weights[out.top_mask.bool()]
    kl = (psi * torch.log(psi * psi.numel())).sum().item()
    assert kl == pytest.approx(eps_eta, abs=1e-3)


# --------------------------------------------------------------------------- #
# Lagrange multipliers.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["upper", "lower"])
@pytest.mark.parametrize("use_mask", [False, True])
def test_lagrange_penalty_matches_reference(seed, kind, use_mask):
    rng, T, B = _random_case(seed)
    value = rng.exponential(1.0, (T, B))
    mult, target = float(rng.uniform(0.1, 2.0)), float(rng.uniform(0.2, 2.0))
    mask = _random_mask(rng, T, B) if use_mask else np.ones((T, B), dtype=bool)
    m = sum(value[t, b] for t in range(T) for b in range(B) if mask[t, b]) / mask.sum()
    sign = 1.0 if kind == "upper" else -1.0
    policy_ref = sign * mult * value
    mult_loss_ref = mult * (target - m) if kind == "upper" else mult * (m - target)

    value_t, mult_t = _t(value, True), _t(mult, True)
    policy, mult_loss = pg.lagrange_penalty(
        value_t, mult_t, target, mask=torch.tensor(mask) if use_mask else None, kind=kind
    )
    _close(policy, policy_ref)
    assert mult_loss.dim() == 0
    assert mult_loss.item() == pytest.approx(mult_loss_ref, abs=1e-10)
    policy.sum().backward(retain_graph=True)
    _close(value_t.grad, np.full((T, B), sign * mult))
    assert mult_t.grad is None  # The policy term does not train the multiplier.
    value_t.grad = None
    mult_loss.backward()
    assert value_t.grad is None  # The multiplier loss does not train the policy.
    assert mult_t.grad.item() == pytest.approx(mult_loss_ref / mult, abs=1e-10)


@pytest.mark.parametrize("kind", ["upper", "lower"])
@pytest.mark.parametrize("violated", [True, False])
def test_lagrange_multiplier_moves_in_the_right_direction(kind, violated):
    target = 1.0
    # upper: violated when value > target; lower: violated when value < target.
    high = (kind == "upper") == violated
    value = torch.full((3, 2), 1.5 if high else 0.5, dtype=torch.float64)
    param = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    before = torch.nn.functional.softplus(param).item()
    for _ in range(3):  # Plain gradient descent on the multiplier loss, lr = 0.1.
        _, loss = pg.lagrange_penalty(value, torch.nn.functional.softplus(param), target, kind=kind)
        (grad,) = torch.autograd.grad(loss, param)
        with torch.no_grad():
            param -= 0.1 * grad
    after = torch.nn.functional.softplus(param).item()
    assert (after > before) == violated
    assert after != before
    with pytest.raises(ValueError, match="kind"):
        pg.lagrange_penalty(value, param, target, kind="both")


# --------------------------------------------------------------------------- #
# Value loss.
# --------------------------------------------------------------------------- #


def _loss_ref(x, kind, delta):
    if kind == "mse":
        return 0.5 * x * x
    return 0.5 * x * x if abs(x) <= delta else delta * (abs(x) - delta / 2)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind,delta", [("mse", 1.0), ("huber", 1.0), ("huber", 0.3)])
@pytest.mark.parametrize("clip_epsilon", [None, 0.2])
def test_value_loss_matches_reference(seed, kind, delta, clip_epsilon):
    rng, T, B = _random_case(seed)
    values, returns = rng.normal(0.0, 1.5, (T, B)), rng.normal(0.0, 1.5, (T, B))
    old = values + rng.normal(0.0, 0.4, (T, B))
    expected = np.zeros((T, B))
    grad = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            v, g = values[t, b], returns[t, b]
            l_unclipped = _loss_ref(v - g, kind, delta)
            quadratic = kind == "mse" or abs(v - g) <= delta
            d_unclipped = (v - g) if quadratic else delta * np.sign(v - g)
            expected[t, b], grad[t, b] = l_unclipped, d_unclipped
            if clip_epsilon is not None:
                v_clip = old[t, b] + min(max(v - old[t, b], -clip_epsilon), clip_epsilon)
                l_clipped = _loss_ref(v_clip - g, kind, delta)
                if l_clipped > l_unclipped:
                    inside = abs(v - old[t, b]) < clip_epsilon
                    expected[t, b] = l_clipped
                    d = (v_clip - g) if kind == "mse" or abs(v_clip - g) <= delta else delta * np.sign(v_clip - g)
                    grad[t, b] = d if inside else 0.0
    values_t, returns_t, old_t = _t(values, True), _t(returns, True), _t(old, True)
    loss = pg.value_loss(
        values_t,
        returns_t,
        kind=kind,
        huber_delta=delta,
        clip_epsilon=clip_epsilon,
        old_values=old_t if clip_epsilon is not None else None,
    )
    _close(loss, expected)
    loss.sum().backward()
    _close(values_t.grad, grad)
    assert returns_t.grad is None and old_t.grad is None


def test_value_loss_huber_agrees_with_torch_and_gradcheck():
    torch.manual_seed(4)
    v, g = 2 * torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    _assert_close(
        pg.value_loss(v, g, kind="huber", huber_delta=0.7),
        torch.nn.functional.huber_loss(v, g, reduction="none", delta=0.7),
    )
    x = v.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda y: pg.value_loss(y, g), (x,))
    assert torch.autograd.gradcheck(lambda y: pg.value_loss(y, g, kind="huber", huber_delta=0.5), (x,))
    with pytest.raises(ValueError, match="clip_epsilon"):
        pg.value_loss(v, g, clip_epsilon=0.2)
    with pytest.raises(ValueError, match="kind"):
        pg.value_loss(v, g, kind="l1")


# --------------------------------------------------------------------------- #
# Advantage normalisation.
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("use_mask", [False, True])
def test_normalize_advantages_matches_reference(seed, use_mask):
    rng, T, B = _random_case(seed)
    adv = rng.normal(0.5, 2.0, (T, B))
    mask = _random_mask(rng, T, B) if use_mask else np.ones((T, B), dtype=bool)
    entries = [adv[t, b] for t in range(T) for b in range(B) if mask[t, b]]
    mean = sum(entries) / len(entries)
    std = math.sqrt(sum((a - mean) ** 2 for a in entries) / len(entries))
    expected = np.zeros((T, B))
    for t in range(T):
        for b in range(B):
            if mask[t, b]:
                expected[t, b] = (adv[t, b] - mean) / (std + 1e-8)
    adv_t = _t(adv, True)
    out = pg.normalize_advantages(adv_t, mask=torch.tensor(mask) if use_mask else None)
    _close(out, expected, tol=1e-9)
    assert not out.requires_grad


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("use_mask", [False, True])
def test_normalize_advantages_over_ranks_is_the_whole_minibatchs(seed, use_mask):
    """Two ranks holding the columns [0, k) and [k, B) of one minibatch, their ``advantage_moments`` summed
    (as under torchrun), normalise by the whole minibatch's mean and std: the reference above on every column
    together; each rank's half alone would not."""
    rng, T, B = _random_case(seed)
    B = max(B, 2)
    adv = rng.normal(0.5, 2.0, (T, B))
    adv[:, : B // 2] += 3.0  # the halves differ: a rank's own statistics would give other values
    mask = _random_mask(rng, T, B) if use_mask else np.ones((T, B), dtype=bool)
    mask[0, :] = True  # every half holds entries
    entries = [adv[t, b] for t in range(T) for b in range(B) if mask[t, b]]
    mean = sum(entries) / len(entries)
    std = math.sqrt(sum((a - mean) ** 2 for a in entries) / len(entries))
    expected = np.where(mask, (adv - mean) / (std + 1e-8), 0.0)
    halves = [slice(0, B // 2), slice(B // 2, B)]

    def part_mask(part):
        return torch.tensor(mask[:, part]) if use_mask else None

    # each rank's own sums, as it hands them to the all-reduce
    moments = [pg.advantage_moments(_t(adv[:, part], False), part_mask(part)) for part in halves]
    for part in halves:
        out = pg.normalize_advantages(_t(adv[:, part], False), mask=part_mask(part), moments=moments[0] + moments[1])
        _close(out, expected[:, part], tol=1e-9)
        alone = pg.normalize_advantages(_t(adv[:, part], False), mask=torch.tensor(mask[:, part]) if use_mask else None)
        assert not torch.allclose(alone, torch.as_tensor(expected[:, part]), atol=1e-3)


def test_normalize_single_entry_is_zero():
    out = pg.normalize_advantages(torch.tensor([[3.0]], dtype=torch.float64))
    assert out.item() == 0.0
