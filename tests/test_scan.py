"""rl_core/losses/scan.py and the recurrences over time built on it (no per-timestep Python
loops): equal in float64 to the loops they replaced (tests/loop_reference.py) at the unroll lengths
runs use, and a number of torch ops that does not grow with T."""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from rl_core.agents.rnd.agent import RNDAgent, occurrence_groups
from rl_core.losses import advantages as adv_lib
from rl_core.losses import r2d2 as r2d2_lib
from rl_core.losses import rnd as rnd_lib
from rl_core.losses import scan as scan_lib
from rl_core.losses import vtrace as vtrace_lib
from tests import loop_reference as ref

SHAPES = [(1, 1), (1, 4), (2, 3), (3, 2), (7, 5), (16, 32), (20, 32), (33, 1), (80, 32), (128, 8), (333, 5), (512, 32)]


def _close(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-8, atol=1e-8)


def _factors(g, T, B, kind):
    """Factors in [0, 1] with zeros (episode ends), random positive ones above 1 (rho unclipped), or all zero."""
    if kind == "ends":
        return 0.99 * (torch.rand(T, B, generator=g, dtype=torch.float64) > 0.2).double()
    if kind == "random":
        return torch.rand(T, B, generator=g, dtype=torch.float64) * 1.2
    return torch.zeros(T, B, dtype=torch.float64)


# --------------------------------------------------------------------------- the scan itself


@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("kind", ["ends", "random", "zeros"])
def test_scan_matches_the_loop_both_ways_with_and_without_init(T, B, kind):
    g = torch.Generator().manual_seed(T * 1000 + B)
    x = torch.randn(T, B, generator=g, dtype=torch.float64)
    f = _factors(g, T, B, kind)
    init = torch.randn(B, generator=g, dtype=torch.float64)
    for reverse in (True, False):
        for i in (None, init):
            _close(scan_lib.discounted_scan(x, f, i, reverse=reverse), ref.scan(x, f, i, reverse=reverse))


@pytest.mark.parametrize("T,B,budget", [(7, 5, 1), (128, 8, 3000), (512, 32, 50_000), (33, 7, 200)])
def test_a_tiny_memory_budget_chunks_the_columns_and_changes_nothing(T, B, budget, monkeypatch):
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, B, generator=g, dtype=torch.float64)
    f = _factors(g, T, B, "ends")
    init = torch.randn(B, generator=g, dtype=torch.float64)
    calls = []
    inner = scan_lib._reverse_scan
    monkeypatch.setattr(scan_lib, "_reverse_scan", lambda *a: calls.append(a[0].shape[1]) or inner(*a))
    for reverse in (True, False):
        _close(
            scan_lib.discounted_scan(x, f, init, reverse=reverse, max_elements=budget),
            ref.scan(x, f, init, reverse=reverse),
        )
    assert len(calls) > 2 and sum(calls) == 2 * B  # several chunks, every column once per direction
    sums, products = scan_lib.discounted_window_sums(x, f, 5, max_elements=budget // 10)
    want_s, want_p = _window_reference(x, f, 5)
    _close(sums, want_s)
    _close(products, want_p)


def test_short_sequences_take_one_window_and_long_ones_the_blocks(monkeypatch):
    """The one-window form where T^2 B <= DENSE_ELEMENTS (IMPALA's T = 20, B = 8), the two-level one past it;
    both equal to the loop (the test above runs every SHAPE through whichever form it takes)."""
    calls = []
    inner = scan_lib._reverse_scan
    monkeypatch.setattr(scan_lib, "_reverse_scan", lambda *a: calls.append(a[0].shape) or inner(*a))
    g = torch.Generator().manual_seed(5)
    for T, B, blocks in [(20, 8, False), (64, 16, False), (65, 16, True), (80, 32, True)]:
        calls.clear()
        x = torch.randn(T, B, generator=g, dtype=torch.float64)
        f = _factors(g, T, B, "ends")
        init = torch.randn(B, generator=g, dtype=torch.float64)
        _close(scan_lib.discounted_scan(x, f, init), ref.scan(x, f, init))
        assert bool(calls) == blocks == (T * T * B > scan_lib.DENSE_ELEMENTS), (T, B)


def _window_reference(x, f, n):
    """S_t = sum_{k<m} (prod_{j<k} f_{t+j}) x_{t+k}, P_t = prod_{j<m} f_{t+j}, m = min(n, T - t)."""
    T, B = x.shape
    sums, products = torch.zeros_like(x), torch.ones_like(x)
    for t in range(T):
        for k in range(min(n, T - t)):
            sums[t] += products[t] * x[t + k]
            products[t] *= f[t + k]
    return sums, products


@pytest.mark.parametrize("T,B", [(1, 3), (6, 2), (40, 5)])
@pytest.mark.parametrize("n", [1, 2, 5, 6, 100])
def test_window_sums_match_their_definition(T, B, n):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(T, B, generator=g, dtype=torch.float64)
    f = _factors(g, T, B, "ends")
    sums, products = scan_lib.discounted_window_sums(x, f, n)
    want_s, want_p = _window_reference(x, f, n)
    _close(sums, want_s)
    _close(products, want_p)


def test_dtype_shapes_and_empty_time_axis():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 6, generator=g)
    f = torch.rand(50, 6, generator=g)
    y = scan_lib.discounted_scan(x, f, torch.ones(6, dtype=torch.float64))
    assert y.dtype == torch.float32 and y.shape == (50, 6)
    torch.testing.assert_close(y, ref.scan(x, f, torch.ones(6)), rtol=1e-5, atol=1e-5)
    assert scan_lib.discounted_scan(x[:0], f[:0]).shape == (0, 6)
    assert [t.shape for t in scan_lib.discounted_window_sums(x[:0], f[:0], 3)] == [(0, 6), (0, 6)]
    for bad in [(x, f[:, :5], None), (x, f, torch.ones(5)), (x[:, 0], f[:, 0], None)]:
        with pytest.raises(ValueError, match="discounted_scan expects"):
            scan_lib.discounted_scan(*bad)
    with pytest.raises(ValueError, match="n >= 1"):
        scan_lib.discounted_window_sums(x, f, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_scan_stays_on_the_device():
    x = torch.randn(80, 32, dtype=torch.float64, device="cuda")
    f = torch.rand(80, 32, dtype=torch.float64, device="cuda")
    y = scan_lib.discounted_scan(x, f, torch.ones(32, device="cuda"), reverse=False)
    assert y.device == x.device
    _close(y.cpu(), ref.scan(x.cpu(), f.cpu(), torch.ones(32, dtype=torch.float64), reverse=False))


# --------------------------------------------------------------------------- the estimators at long T


def _case(T, B, seed=0):
    g = torch.Generator().manual_seed(seed * 7919 + T)
    return dict(
        values=torch.randn(T, B, generator=g, dtype=torch.float64),
        rewards=torch.randn(T, B, generator=g, dtype=torch.float64),
        discounts=_factors(g, T, B, "ends"),
        bootstrap_value=torch.randn(B, generator=g, dtype=torch.float64),
    ), g


@pytest.mark.parametrize("T,B", SHAPES)
def test_gae_and_nstep_match_their_loops(T, B):
    case, _ = _case(T, B)
    for lam in (0.0, 0.95, 1.0):
        out = adv_lib.gae(**case, lambda_=lam)
        for got, want in zip(out, ref.gae(**case, lambda_=lam)):
            _close(got, want)
    for n in (0, 1, 5, T - 1, T, T + 3):
        out = adv_lib.nstep(**case, n=n)
        for got, want in zip(out, ref.nstep(**case, n=n)):
            _close(got, want)


@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("clips", [(1.0, 1.0, 1.0), (None, None, None), (2.0, 0.5, 1.7)])
def test_vtrace_matches_its_loop(T, B, clips):
    case, g = _case(T, B, seed=1)
    log_rhos = torch.randn(T, B, generator=g, dtype=torch.float64) * 0.5
    rho, pg_rho, c = clips
    args = dict(
        log_rhos=log_rhos,
        discounts=case["discounts"],
        rewards=case["rewards"],
        values=case["values"],
        bootstrap_value=case["bootstrap_value"],
        clip_rho_threshold=rho,
        clip_pg_rho_threshold=pg_rho,
        clip_c_threshold=c,
        lambda_=0.9,
    )
    out = vtrace_lib.from_importance_weights(**args)
    want_vs, want_adv = ref.vtrace(**args)
    _close(out.vs, want_vs)
    _close(out.pg_advantages, want_adv)


@pytest.mark.parametrize("T,B", SHAPES)
def test_reward_forward_filter_and_n_step_targets_match_their_loops(T, B):
    case, g = _case(T, B, seed=2)
    rewards = case["rewards"].abs()
    initial = torch.rand(B, generator=g, dtype=torch.float64) * 10
    filtered, last = rnd_lib.reward_forward_filter(rewards, initial, 0.99)
    want_filtered, want_last = ref.reward_forward_filter(rewards, initial, 0.99)
    _close(filtered, want_filtered)
    _close(last, want_last)
    for n in (1, 5, T + 2):
        _close(
            r2d2_lib.n_step_targets(case["rewards"], case["discounts"], case["values"], n),
            ref.n_step_targets(case["rewards"], case["discounts"], case["values"], n),
        )


@pytest.mark.parametrize("seed", range(3))
def test_the_intrinsic_episode_returns_match_the_loop(seed):
    """RNDAgent._track_episodes: one env twice in the batch, episodes ending anywhere (at t = 0 and at
    the last step too): the finished returns in the order the loop meets them, the carried returns."""
    g = torch.Generator().manual_seed(seed)
    T, env_ids = 128, torch.tensor([3, 0, 5, 3, 1, 0, 3])
    B = len(env_ids)
    reward = torch.rand(T, B, generator=g, dtype=torch.float64)
    done = torch.rand(T, B, generator=g) < 0.05
    done[0, 1] = done[-1, 2] = True
    start = torch.rand(6, generator=g, dtype=torch.float64) * 5
    agent = SimpleNamespace(_stats_lock=threading.Lock(), _episode_returns=[])
    rnd = SimpleNamespace(episode_return=start.clone())
    RNDAgent._track_episodes(agent, rnd, reward, done, env_ids)

    want_finished, want_state = [], start.clone()
    for columns in occurrence_groups(env_ids):
        envs = env_ids[columns]
        finished, want_state[envs] = ref.track_episodes(want_state[envs], reward[:, columns], done[:, columns])
        want_finished.extend(finished)
    assert len(agent._episode_returns) == len(want_finished) > 0
    np.testing.assert_allclose(agent._episode_returns, want_finished, rtol=1e-8, atol=1e-8)
    _close(rnd.episode_return, want_state)


# --------------------------------------------------------------------------- op counts


def aten_op_counts(fn, *args, **kwargs) -> Counter:
    """How many times each ``aten::`` op runs in one call of fn (the CPU profiler's call counts)."""
    fn(*args, **kwargs)  # anything done once per process stays out of the count
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args, **kwargs)
    return Counter({e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")})


def _calls(T, B=32):
    case, g = _case(T, B, seed=3)
    log_rhos = torch.randn(T, B, generator=g, dtype=torch.float64)
    initial = torch.rand(B, generator=g, dtype=torch.float64)
    return {
        "gae": (adv_lib.gae, dict(case, lambda_=0.95)),
        "nstep n=5": (adv_lib.nstep, dict(case, n=5)),
        "nstep n=0": (adv_lib.nstep, dict(case, n=0)),
        "vtrace": (
            vtrace_lib.from_importance_weights,
            dict(
                log_rhos=log_rhos,
                discounts=case["discounts"],
                rewards=case["rewards"],
                values=case["values"],
                bootstrap_value=case["bootstrap_value"],
            ),
        ),
        "reward_forward_filter": (
            rnd_lib.reward_forward_filter,
            dict(rewards=case["rewards"], initial=initial, gamma=0.99),
        ),
        "n_step_targets n=5": (
            r2d2_lib.n_step_targets,
            dict(rewards=case["rewards"], discounts=case["discounts"], bootstrap=case["values"], n=5),
        ),
    }


def test_the_number_of_torch_ops_does_not_grow_with_T():
    # T = 16 (T^2 B = 8,192) takes the one-window form, T = 128 and 512 the two-level one
    short, medium, long = _calls(16), _calls(128), _calls(512)
    for name in short:
        fn, kwargs = short[name]
        counts_16 = aten_op_counts(fn, **kwargs)
        counts_128 = aten_op_counts(medium[name][0], **medium[name][1])
        counts_512 = aten_op_counts(long[name][0], **long[name][1])
        assert counts_128 == counts_512, name
        assert sum(counts_16.values()) <= sum(counts_512.values()) < 200, (name, counts_16, counts_512)
    # the counter sees the loops grow
    loop_16 = aten_op_counts(ref.gae, **short["gae"][1])
    loop_512 = aten_op_counts(ref.gae, **long["gae"][1])
    assert sum(loop_512.values()) > 10 * sum(loop_16.values())
