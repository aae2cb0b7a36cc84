"""Tests for rl_core.numerics.normalization against numpy and slow references."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import torch
from torch import nn

from rl_core.numerics.normalization import RunningMeanStd, ValueNormalizer


def _feed_in_chunks(rms, data, rng):
    start = 0
    while start < len(data):
        size = int(rng.integers(0, 40))  # Includes empty chunks.
        chunk = data[start : start + size]
        rms.update(torch.tensor(chunk))
        start += size


@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_running_mean_std_matches_numpy(shape):
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, (500, *shape)) * np.arange(1, 1 + int(np.prod(shape))).reshape(shape)

    rms = RunningMeanStd(shape, epsilon=0.0)
    _feed_in_chunks(rms, data, rng)
    assert rms.count.item() == 500
    np.testing.assert_allclose(rms.mean.numpy(), data.mean(0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(rms.var.numpy(), data.var(0), rtol=1e-10, atol=1e-10)

    # Default epsilon: the initial state is epsilon pseudo-samples of mean 0, variance 1.
    eps = 1e-4
    rms = RunningMeanStd(shape, epsilon=eps)
    _feed_in_chunks(rms, data, rng)
    n, m, v = len(data), data.mean(0), data.var(0)
    total = n + eps
    expected_mean = n * m / total
    expected_var = (eps * 1.0 + n * v + m**2 * eps * n / total) / total
    np.testing.assert_allclose(rms.mean.numpy(), expected_mean, rtol=1e-10)
    np.testing.assert_allclose(rms.var.numpy(), expected_var, rtol=1e-10)
    np.testing.assert_allclose(rms.mean.numpy(), m, rtol=1e-6)
    np.testing.assert_allclose(rms.var.numpy(), v, rtol=1e-6)
    np.testing.assert_allclose(rms.std.numpy(), np.sqrt(expected_var), rtol=1e-10)
    assert rms.count.item() == pytest.approx(total)


def test_running_mean_std_leading_dims_are_samples_and_shape_is_checked():
    x = torch.randn(4, 5, 3, dtype=torch.float64)
    a, b = RunningMeanStd((3,), epsilon=0.0), RunningMeanStd((3,), epsilon=0.0)
    a.update(x)
    b.update(x.reshape(20, 3))
    assert torch.equal(a.mean, b.mean) and torch.equal(a.var, b.var)
    with pytest.raises(ValueError):
        a.update(torch.randn(4, 2))


def test_normalize_and_clip():
    rms = RunningMeanStd((2,))
    rms.update(torch.tensor([[0.0, 10.0], [2.0, 30.0], [4.0, 20.0]]))
    x = torch.tensor([[1.0, 100.0], [-3.0, 20.0]], dtype=torch.float32)
    y = rms.normalize(x)
    assert y.dtype == torch.float32
    expected = (x.double() - rms.mean) / torch.sqrt(rms.var + 1e-8)
    assert torch.allclose(y.double(), expected, atol=1e-6)
    clipped = rms.normalize(x, clip=2.0)
    assert clipped.abs().max().item() == 2.0
    assert torch.allclose(clipped.double(), expected.clamp(-2, 2), atol=1e-6)
    assert rms.normalize(x.double()).dtype == torch.float64
    assert rms.normalize(torch.tensor([[1, 2]], dtype=torch.uint8)).dtype == torch.float32


def test_running_mean_std_state_dict_round_trip():
    rms = RunningMeanStd((3,))
    rms.update(torch.randn(50, 3) * 4 + 1)
    state = rms.state_dict()
    assert set(state) == {"mean", "var", "count"}
    assert all(t.dtype == torch.float64 for t in state.values())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    restored = RunningMeanStd((3,))
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.randn(7, 3)
    assert torch.equal(restored.normalize(x, clip=5.0), rms.normalize(x, clip=5.0))
    batch = torch.randn(9, 3)
    rms.update(batch)
    restored.update(batch)
    assert torch.equal(restored.mean, rms.mean) and torch.equal(restored.var, rms.var)
    # As a submodule, its buffers are part of the model's state_dict.
    model = nn.Module()
    model.obs_rms = rms
    assert {"obs_rms.mean", "obs_rms.var", "obs_rms.count"} <= set(model.state_dict())


# ------------------------------------------------------------ ValueNormalizer


def _reference_update(kind, mu, nu, targets, beta):
    mean = sum(targets) / len(targets)
    mean_sq = sum(t * t for t in targets) / len(targets)
    new_mu = (1 - beta) * mu + beta * mean if kind == "popart" else 0.0
    new_nu = (1 - beta) * nu + beta * mean_sq
    return new_mu, new_nu


def _reference_std(mu, nu, min_std, max_std):
    return min(max(math.sqrt(max(nu - mu * mu, 0.0)), min_std), max_std)


@pytest.mark.parametrize("kind", ["popart", "return_std"])
def test_value_normalizer_statistics_and_head_rescale_match_reference(kind):
    torch.manual_seed(0)
    beta, min_std, max_std = 0.05, 1e-4, 1e6
    vn = ValueNormalizer(kind, beta=beta, min_std=min_std, max_std=max_std)
    head = nn.Linear(4, 2).double()
    mu, nu = 0.0, 1.0
    for step in range(20):
        targets = torch.randn(6, 3, dtype=torch.float64) * 50 + 200 + 10 * step
        w, b = head.weight.detach().clone(), head.bias.detach().clone()
        sigma = _reference_std(mu, nu, min_std, max_std)
        new_mu, new_nu = _reference_update(kind, mu, nu, targets.flatten().tolist(), beta)
        new_sigma = _reference_std(new_mu, new_nu, min_std, max_std)
        vn.update(targets, head)
        assert vn.mu.item() == pytest.approx(new_mu, rel=1e-12, abs=1e-12)
        assert vn.nu.item() == pytest.approx(new_nu, rel=1e-12)
        assert vn.std.item() == pytest.approx(new_sigma, rel=1e-12)
        assert torch.allclose(head.weight, w * sigma / new_sigma, rtol=1e-12)
        assert torch.allclose(head.bias, (sigma * b + mu - new_mu) / new_sigma, rtol=1e-12)
        mu, nu = new_mu, new_nu
    if kind == "return_std":
        assert vn.mu.item() == 0.0
        assert vn.std.item() == pytest.approx(math.sqrt(vn.nu.item()), rel=1e-12)
    else:
        assert vn.mu.item() > 50  # It tracks the targets' mean.


@pytest.mark.parametrize("kind", ["popart", "return_std"])
@pytest.mark.parametrize("out_features", [1, 3])
@pytest.mark.parametrize(
    "dtype, scales, tol",
    [
        # float32 rounding of W' h + b' grows with |mu| / sigma (~1e-7 |mu|), so
        # the float32 case keeps the statistics O(10); float64 takes any scale.
        (torch.float32, (1.0, 10.0, 0.1, 3.0), 1e-5),
        (torch.float64, (1.0, 100.0, 0.01, 1000.0, 1e5), 1e-9),
    ],
)
def test_value_normalizer_preserves_unnormalised_outputs(kind, out_features, dtype, scales, tol):
    torch.manual_seed(1)
    vn = ValueNormalizer(kind, beta=0.3)
    head = nn.Linear(8, out_features).to(dtype)
    h = torch.randn(16, 8, dtype=dtype)
    for scale in scales:
        before = vn.denormalize(head(h)).detach()
        vn.update(torch.randn(32) * scale + 3 * scale, head)
        after = vn.denormalize(head(h)).detach()
        assert after.dtype == dtype
        assert torch.allclose(after, before, rtol=tol, atol=tol)
    assert head.weight.grad is None
    # normalize and denormalize are inverses.
    v = torch.randn(5, dtype=dtype) * 40
    assert torch.allclose(vn.denormalize(vn.normalize(v)), v, rtol=tol, atol=tol)


def test_value_normalizer_none_is_identity():
    vn = ValueNormalizer("none")
    head = nn.Linear(3, 1)
    w, b = head.weight.detach().clone(), head.bias.detach().clone()
    v = torch.randn(4, 2)
    vn.update(v * 1000, head)
    assert vn.normalize(v) is v and vn.denormalize(v) is v
    assert torch.equal(head.weight, w) and torch.equal(head.bias, b)
    assert vn.mu.item() == 0.0 and vn.nu.item() == 1.0


def test_value_normalizer_std_is_clamped():
    vn = ValueNormalizer("popart", beta=1.0, min_std=1e-3)
    vn.update(torch.full((10,), 5.0))  # Variance 0.
    assert vn.std.item() == pytest.approx(1e-3)
    assert torch.isfinite(vn.normalize(torch.tensor([5.0, 6.0]))).all()
    vn = ValueNormalizer("return_std", beta=1.0, max_std=10.0)
    vn.update(torch.full((10,), 1e3))
    assert vn.std.item() == 10.0


def test_value_normalizer_state_dict_and_errors():
    vn = ValueNormalizer("popart", beta=0.1)
    vn.update(torch.randn(100) * 7 + 2)
    state = vn.state_dict()
    assert set(state) == {"mu", "nu", "count"} and all(
        t.dtype == torch.float64 and t.dim() == 0 for t in state.values()
    )
    restored = ValueNormalizer("popart", beta=0.1)
    restored.load_state_dict(state)
    v = torch.randn(10)
    assert torch.equal(restored.normalize(v), vn.normalize(v))
    assert torch.equal(restored.denormalize(v), vn.denormalize(v))
    with pytest.raises(ValueError):
        ValueNormalizer("minmax")
    with pytest.raises(ValueError):
        ValueNormalizer("popart", beta=-0.1)
    with pytest.raises(ValueError):
        vn.update(torch.ones(3), nn.Linear(2, 1, bias=False))


def test_value_normalizer_beta_zero_is_the_running_average_of_all_targets():
    """beta=0: mu and nu are the plain averages of every target so far (SEED's AverageMeanStd)."""
    from rl_core.numerics.normalization import ValueNormalizer

    torch.manual_seed(0)
    chunks = [torch.randn(n) * 5 + 3 for n in (7, 1, 30, 12)]
    norm = ValueNormalizer("popart", beta=0.0)
    head = torch.nn.Linear(3, 1)
    h = torch.randn(4, 3)
    before = norm.denormalize(head(h).squeeze(-1)).detach()
    for chunk in chunks:
        norm.update(chunk, head=head)
    seen = torch.cat(chunks).double()
    assert abs(norm.mu.item() - seen.mean().item()) < 1e-9
    assert abs(norm.nu.item() - seen.pow(2).mean().item()) < 1e-9
    assert norm.count.item() == len(seen)
    after = norm.denormalize(head(h).squeeze(-1)).detach()
    assert torch.allclose(before, after, atol=1e-4)
