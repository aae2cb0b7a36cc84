"""Tests for rl_core.data.replay against slow references in the papers' notation."""

from __future__ import annotations

import io
import math
import threading

import numpy as np
import pytest
import torch

from rl_core.data.replay import PrioritizedReplay, SumTree, sequence_priorities


def _reference_find(leaves: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """i with prefix(i) <= t < prefix(i) + leaf(i), via cumulative sums."""
    return np.searchsorted(np.cumsum(leaves), targets, side="right")


def _ids(replay: PrioritizedReplay, n: int, start: int = 0, **kw) -> np.ndarray:
    """Insert n one-field sequences whose content is their global id."""
    return replay.insert({"id": np.arange(start, start + n, dtype=np.int64)}, **kw)


# -- SumTree ------------------------------------------------------------------


def test_sum_tree_matches_cumsum_reference_on_random_floats():
    rng = np.random.default_rng(0)
    capacity = 37  # not a power of two: 27 padding leaves
    leaves = rng.uniform(0.0, 3.0, capacity)
    leaves[[0, 5, 6, 20, 36]] = 0.0  # zeros at both ends and in a run
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)

    np.testing.assert_array_equal(tree.get(np.arange(capacity)), leaves)
    assert tree.total() == pytest.approx(leaves.sum(), rel=1e-12)
    assert tree.max() == leaves.max()

    total = tree.total()
    targets = np.concatenate([rng.uniform(0.0, total, 20000), [0.0, total * (1 - 1e-15)]])
    # Tree and cumsum add in different orders: skip targets within round-off of a boundary.
    bounds = np.cumsum(leaves)
    near = np.abs(targets[:, None] - bounds[None, :]).min(axis=1) < 1e-9 * total
    assert near.sum() < 5
    found = tree.find(targets)
    np.testing.assert_array_equal(found[~near], _reference_find(leaves, targets)[~near])
    assert found[-2] == 1  # target 0 skips the zero leaf 0
    assert found[-1] == 35  # total - tiny: the last positive leaf, not the zero leaf 36
    assert np.all(leaves[found] > 0) and np.all(found < capacity)


def test_sum_tree_exact_boundaries_with_dyadic_values():
    rng = np.random.default_rng(1)
    capacity = 37
    leaves = rng.integers(0, 5, capacity).astype(np.float64) / 8.0  # all sums exact
    leaves[[0, 1, 36]] = 0.0
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), leaves)
    total = leaves.sum()
    assert tree.total() == total

    bounds = np.concatenate([[0.0], np.cumsum(leaves)[:-1]])  # prefix(i), each a boundary
    positive = leaves > 0
    targets = np.concatenate(
        [
            bounds[positive],  # exactly at prefix(i): leaf i
            bounds[positive] + leaves[positive] - 1.0 / 64,  # just inside leaf i
            [np.nextafter(total, 0.0), total, total + 5.0, -1.0],  # clamped into [0, total)
        ]
    )
    found = tree.find(targets)
    expected = _reference_find(leaves, np.clip(targets, 0.0, np.nextafter(total, 0.0)))
    np.testing.assert_array_equal(found, expected)
    k = positive.sum()
    np.testing.assert_array_equal(found[:k], np.flatnonzero(positive))
    np.testing.assert_array_equal(found[k : 2 * k], np.flatnonzero(positive))
    assert np.all(leaves[found] > 0)


def test_sum_tree_round_off_never_lands_on_zero_or_padding():
    # Found by search: with these leaves the plain descent for this target (< total)
    # rounds past leaf 6 into padding leaf 7; find() must step back to leaf 6.
    leaves = np.array(
        [7.0416750391302165e-06, 0.0, 0.0, 0.6409749216681863, 8.950103245771361e-12, 0.0, 2.1825793477955937]
    )
    tree = SumTree(len(leaves))
    tree.update(np.arange(len(leaves)), leaves)
    target = 2.823561311147769
    assert target < tree.total()
    np.testing.assert_array_equal(tree.find(np.array([target, target])), [6, 6])

    rng = np.random.default_rng(2)
    for capacity in [1, 2, 3, 5, 37, 100, 129]:
        tree = SumTree(capacity)
        for _ in range(20):
            leaves = rng.uniform(0, 1, capacity) * 10.0 ** rng.integers(-8, 8, capacity)
            leaves[rng.random(capacity) < 0.3] = 0.0
            leaves[rng.integers(capacity)] = rng.uniform(0.1, 1.0)  # at least one positive
            tree.update(np.arange(capacity), leaves)
            total = tree.total()
            targets = np.concatenate(
                [
                    rng.uniform(0, total, 200),
                    np.nextafter(total, 0.0) - np.arange(5) * np.spacing(total),
                    [total, 0.0],
                ]
            )
            found = tree.find(targets)
            assert found.dtype == np.int64 and found.shape == targets.shape
            assert np.all(found < capacity)
            assert np.all(leaves[found] > 0)


def test_sum_tree_repeated_indices_last_value_wins_and_max_tracks_decreases():
    tree = SumTree(37)
    tree.update(np.arange(37), np.arange(37, dtype=np.float64))
    assert tree.max() == 36.0
    tree.update(np.array([3, 3, 5, 3]), np.array([1.0, 2.0, 4.0, 7.5]))
    expected = np.arange(37, dtype=np.float64)
    expected[3], expected[5] = 7.5, 4.0
    np.testing.assert_array_equal(tree.get(np.arange(37)), expected)
    assert tree.total() == expected.sum()

    tree.update(np.array([36, 35]), np.array([0.5, 0.25]))  # lower the two largest
    expected[36], expected[35] = 0.5, 0.25
    assert tree.max() == 34.0 == expected.max()
    tree.update(np.arange(37), np.zeros(37))
    assert tree.max() == 0.0 and tree.total() == 0.0
    with pytest.raises(ValueError):
        tree.find(np.array([0.0]))
    with pytest.raises(ValueError):
        tree.update(np.array([0]), np.array([-1.0]))
    with pytest.raises(IndexError):
        tree.update(np.array([37]), np.array([1.0]))


def test_sum_tree_incremental_updates_equal_rebuild():
    rng = np.random.default_rng(3)
    tree, fresh = SumTree(50), SumTree(50)
    leaves = np.zeros(50)
    for _ in range(200):
        idx = rng.integers(0, 50, rng.integers(1, 8))
        val = rng.uniform(0, 2, idx.size)
        tree.update(idx, val)
        for i, v in zip(idx, val):
            leaves[i] = v
    fresh.rebuild(leaves)
    np.testing.assert_array_equal(tree.get(np.arange(50)), leaves)
    assert tree.total() == fresh.total()  # inner nodes depend only on the leaves
    assert tree.max() == leaves.max()


# -- sampling distribution ------------------------------------------------------


def _chi_square_counts(seed: int):
    capacity, alpha, draws, batch = 50, 0.9, 200_000, 16
    rng = np.random.default_rng(seed)
    raw = rng.uniform(0.05, 5.0, capacity)
    replay = PrioritizedReplay(capacity, priority_exponent=alpha, seed=seed)
    _ids(replay, capacity, priorities=raw)
    counts = np.zeros(capacity, dtype=np.int64)
    for _ in range(draws // batch):
        idx, items, _ = replay.sample(batch)
        np.testing.assert_array_equal(items["id"].numpy(), idx)
        counts += np.bincount(idx, minlength=capacity)
    return raw, counts


def _chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def test_sampling_frequencies_match_priorities_chi_square():
    raw, counts = _chi_square_counts(seed=4)
    df = len(raw) - 1
    # 0.999 quantile of chi2(df) by the normal approximation chi2(df) ~ N(df, 2 df),
    # z_0.999 = 3.09: 49 + 3.09 * sqrt(98) = 79.6.  It is below the exact quantile
    # (85.4: chi2 is right-skewed), so the criterion is stricter than 0.1%, and
    # stratified draws vary less than multinomial ones, which only helps a correct
    # sampler pass.  The seed is fixed, so the test is deterministic.
    critical = df + 3.09 * math.sqrt(2 * df)

    def p_alpha(alpha):
        scaled = raw**alpha
        return scaled / scaled.sum()

    right = _chi_square(counts, p_alpha(0.9))
    wrong = _chi_square(counts, p_alpha(1.0))  # control: the wrong exponent
    assert right < critical, (right, critical)
    assert wrong > critical, (wrong, critical)
    assert wrong > 10 * right


def test_is_weights_match_paper_formula():
    rng = np.random.default_rng(5)
    alpha, beta = 0.7, 0.4
    replay = PrioritizedReplay(64, priority_exponent=alpha, importance_sampling_exponent=beta, seed=5)
    raw = rng.uniform(0.01, 3.0, 40)
    _ids(replay, 40, priorities=raw)  # 40 of 64 slots used: N = 40
    for batch in [1, 7, 32]:
        idx, items, weights = replay.sample(batch)
        assert weights.dtype == torch.float32 and weights.shape == (batch,)
        N = len(replay)
        denom = sum(p**alpha for p in raw)
        w = []
        for i in idx:
            P_i = raw[i] ** alpha / denom
            w.append((N * P_i) ** (-beta))
        w = np.array(w) / max(w)
        np.testing.assert_allclose(weights.numpy(), w, rtol=1e-6)
        assert weights.max().item() == 1.0
        np.testing.assert_array_equal(items["id"].numpy(), idx)


def test_update_priorities_changes_the_distribution():
    replay = PrioritizedReplay(50, priority_exponent=0.9, seed=6)
    _ids(replay, 50, priorities=np.ones(50))
    replay.update_priorities(np.array([7]), np.array([0.0]))
    seen = np.concatenate([replay.sample(64)[0] for _ in range(300)])
    assert 7 not in seen
    assert len(np.unique(seen)) == 49  # all the others are still drawn

    replay.update_priorities(np.array([13]), np.array([1e6]))
    seen = np.concatenate([replay.sample(64)[0] for _ in range(100)])
    expected = 1e6**0.9 / (1e6**0.9 + 48)
    assert np.mean(seen == 13) > 0.99
    assert np.mean(seen == 13) == pytest.approx(expected, abs=2e-3)
    assert 7 not in seen
    assert replay.mean_priority() == pytest.approx((48 + 1e6) / 50)

    with pytest.raises(ValueError):
        replay.update_priorities(np.array([1]), np.array([np.nan]))
    with pytest.raises(ValueError):
        replay.update_priorities(np.array([1]), np.array([-0.5]))


def test_all_zero_priorities_still_sample_uniformly():
    replay = PrioritizedReplay(8, seed=7)
    _ids(replay, 5, priorities=np.zeros(5))
    idx, _, weights = replay.sample(400)
    assert set(idx.tolist()) == set(range(5))
    assert torch.all(weights == 1.0)
    with pytest.raises(ValueError, match="empty"):
        PrioritizedReplay(4).sample(2)


# -- ring buffer ----------------------------------------------------------------


def test_wrap_around_keeps_the_last_capacity_in_ring_order():
    capacity, alpha = 10, 0.5
    replay = PrioritizedReplay(capacity, priority_exponent=alpha, seed=8)
    start = 0
    for n in [3, 4, 5, 7, 2, 13, 10, 1]:  # straddle the end; 13 > capacity
        ids = np.arange(start, start + n)
        written = replay.insert(
            {"id": torch.from_numpy(ids), "twice": 2.0 * ids[:, None].repeat(3, 1)},
            priorities=ids + 1.0,
        )
        start += n
        kept = ids[-capacity:]
        np.testing.assert_array_equal(written, kept % capacity)
        assert len(replay) == min(start, capacity)
        assert replay.inserted == start

        live = np.arange(max(0, start - capacity), start)  # the last `capacity` ids ever inserted
        slots = live % capacity  # ring order: id g lives in slot g mod capacity
        state = replay.state_dict()
        np.testing.assert_array_equal(state["storage"]["id"].numpy()[slots], live)
        np.testing.assert_array_equal(state["storage"]["twice"].numpy()[slots], 2.0 * live[:, None].repeat(3, 1))
        np.testing.assert_array_equal(state["priorities"].numpy()[slots], live + 1.0)  # overwritten slots replaced
        np.testing.assert_allclose(replay._tree.get(slots), (live + 1.0) ** alpha, rtol=1e-15)
        assert replay._tree.total() == pytest.approx(((live + 1.0) ** alpha).sum(), rel=1e-12)
        assert replay.mean_priority() == pytest.approx(np.mean(live + 1.0))
        assert state["position"] == start % capacity

        idx, items, _ = replay.sample(32)
        assert np.all(idx < len(replay))
        np.testing.assert_array_equal(items["id"].numpy(), state["storage"]["id"].numpy()[idx])


def test_insert_without_priorities_uses_running_max():
    replay = PrioritizedReplay(20, seed=9)
    _ids(replay, 3)
    assert replay.state_dict()["priorities"][:3].tolist() == [1.0, 1.0, 1.0]  # none seen yet
    _ids(replay, 3, start=3, priorities=np.array([0.5, 2.5, 0.1]))
    replay.update_priorities(np.array([1]), np.array([7.0]))
    replay.update_priorities(np.array([1]), np.array([0.2]))  # a running max: lowering does not lower it
    written = _ids(replay, 2, start=6)
    np.testing.assert_array_equal(written, [6, 7])
    assert replay.state_dict()["priorities"][6:8].tolist() == [7.0, 7.0]


def test_sequence_priorities_match_slow_loop():
    rng = np.random.default_rng(10)
    T, B, eta = 7, 5, 0.9
    td = rng.normal(size=(T, B))
    mask = (rng.random((T, B)) < 0.6).astype(np.float32)
    mask[:, 2] = 0.0  # no valid step
    mask[:, 3] = 1.0

    def slow(x, m):
        out = []
        for b in range(B):
            vals = [abs(x[t, b]) for t in range(T) if m is None or m[t, b] > 0]
            out.append(eta * max(vals) + (1 - eta) * sum(vals) / len(vals) if vals else 0.0)
        return np.array(out)

    for m in [None, mask]:
        got = sequence_priorities(np.abs(td), eta=eta, mask=m)
        assert got.dtype == np.float64 and got.shape == (B,)
        np.testing.assert_allclose(got, slow(td, m), rtol=1e-12)
        got_torch = sequence_priorities(
            torch.from_numpy(np.abs(td)).float().requires_grad_(),
            eta=eta,
            mask=None if m is None else torch.from_numpy(m) > 0,
        )
        np.testing.assert_allclose(got_torch, slow(td.astype(np.float32), m), rtol=1e-6)
    assert sequence_priorities(np.abs(td), mask=mask)[2] == 0.0
    with pytest.raises(ValueError):
        sequence_priorities(np.zeros((3, 2)), mask=np.ones((2, 3)))


# -- state, dtypes, validation --------------------------------------------------


def _filled(seed: int, capacity: int = 16) -> PrioritizedReplay:
    rng = np.random.default_rng(seed)
    replay = PrioritizedReplay(capacity, priority_exponent=0.8, importance_sampling_exponent=0.5, seed=seed)
    for n in [5, 9, 7]:  # wraps around
        replay.insert(
            {
                "obs": torch.from_numpy(rng.integers(0, 256, (n, 4, 3, 3), dtype=np.uint8)),
                "done": rng.random((n, 4)) < 0.2,
                "action": rng.integers(0, 6, (n, 4)),
                "reward": rng.normal(size=(n, 4)).astype(np.float32),
            },
            priorities=rng.uniform(0.1, 2.0, n),
        )
    return replay


def test_state_dict_round_trip_gives_identical_samples():
    replay = _filled(11)
    idx, _, _ = replay.sample(6)
    replay.update_priorities(idx, np.linspace(0.5, 4.0, len(idx)))
    replay.sample(3)  # advance the rng

    buffer = io.BytesIO()
    torch.save(replay.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)

    restored = PrioritizedReplay(16, priority_exponent=0.1, importance_sampling_exponent=0.9, seed=999)
    restored.load_state_dict(state)
    assert len(restored) == len(replay) and restored.inserted == replay.inserted == 21
    assert (restored.alpha, restored.beta) == (0.8, 0.5)
    assert restored.mean_priority() == replay.mean_priority()
    for batch in [4, 8, 1]:
        a_idx, a_items, a_w = replay.sample(batch)
        b_idx, b_items, b_w = restored.sample(batch)
        np.testing.assert_array_equal(a_idx, b_idx)
        assert torch.equal(a_w, b_w)
        assert a_items.keys() == b_items.keys()
        for name in a_items:
            assert a_items[name].dtype == b_items[name].dtype
            assert torch.equal(a_items[name], b_items[name])
    # Both evolve identically afterwards, including running max and ring position.
    for r in (replay, restored):
        r.update_priorities(np.array([2]), np.array([9.0]))
        r.insert({k: v[:2] for k, v in a_items.items()})
    np.testing.assert_array_equal(replay.sample(8)[0], restored.sample(8)[0])
    np.testing.assert_array_equal(replay.state_dict()["priorities"], restored.state_dict()["priorities"])

    # The restored buffer owns its storage.
    restored.insert({k: v[:1] for k, v in a_items.items()}, priorities=np.array([1.0]))
    assert not torch.equal(replay.state_dict()["priorities"], restored.state_dict()["priorities"])

    with pytest.raises(ValueError, match="capacity"):
        PrioritizedReplay(17).load_state_dict(state)

    empty = PrioritizedReplay(16, seed=1)
    buffer = io.BytesIO()
    torch.save(empty.state_dict(), buffer)
    buffer.seek(0)
    other = _filled(12)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert len(other) == 0 and other.nbytes == 0
    with pytest.raises(ValueError):
        other.sample(1)


def test_dtypes_preserved_and_nbytes():
    replay = _filled(13, capacity=16)
    _, items, _ = replay.sample(5)
    assert items["obs"].dtype == torch.uint8 and items["obs"].shape == (5, 4, 3, 3)
    assert items["done"].dtype == torch.bool and items["done"].shape == (5, 4)
    assert items["action"].dtype == torch.int64
    assert items["reward"].dtype == torch.float32
    expected = 16 * (4 * 3 * 3 * 1 + 4 * 1 + 4 * 8 + 4 * 4)
    assert replay.nbytes == expected
    assert replay.nbytes == sum(t.numpy().nbytes for t in replay.state_dict()["storage"].values())
    assert PrioritizedReplay(16).nbytes == 0
    # Samples are copies: writing into them leaves the buffer alone.
    idx, items, _ = replay.sample(1)
    before = replay.state_dict()["storage"]["obs"][idx[0]].clone()
    items["obs"].fill_(7)
    assert torch.equal(replay.state_dict()["storage"]["obs"][idx[0]], before)


def test_mismatched_field_raises_naming_it():
    replay = PrioritizedReplay(8)
    good = {"obs": np.zeros((2, 3), np.uint8), "action": np.zeros(2, np.int64)}
    replay.insert(good)
    cases = [
        ({"obs": np.zeros((2, 3), np.uint8), "action": np.zeros(2, np.int32)}, "action"),  # dtype
        ({"obs": np.zeros((2, 4), np.uint8), "action": np.zeros(2, np.int64)}, "obs"),  # shape
        ({"obs": np.zeros((2, 3), np.uint8)}, "action"),  # missing
        ({**good, "reward": np.zeros(2, np.float32)}, "reward"),  # extra
        ({"obs": np.zeros((3, 3), np.uint8), "action": np.zeros(2, np.int64)}, "action"),  # N differs
    ]
    for items, name in cases:
        with pytest.raises(ValueError, match=f"'{name}'"):
            replay.insert(items)
    assert len(replay) == 2 and replay.inserted == 2  # nothing was written
    with pytest.raises(ValueError):
        replay.insert(good, priorities=np.array([1.0, np.inf]))
    with pytest.raises(ValueError):
        replay.insert(good, priorities=np.array([1.0]))


def test_concurrent_insert_sample_update():
    replay = PrioritizedReplay(64, seed=14)
    _ids(replay, 8)
    errors = []

    def feeder():
        try:
            for k in range(300):
                _ids(replay, 3, start=8 + 3 * k, priorities=np.full(3, 0.5 + k % 7))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def learner():
        try:
            for _ in range(300):
                idx, items, weights = replay.sample(8)
                assert torch.all(weights <= 1.0) and torch.all(weights > 0)
                replay.update_priorities(idx, np.full(len(idx), 1.5))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=feeder), threading.Thread(target=learner)]
    for t in threads:
        t.start()
    snapshots = []
    for _ in range(20):  # a consistent snapshot while both run: hold the (reentrant) lock across the save
        with replay.lock:
            buffer = io.BytesIO()
            torch.save(replay.state_dict(), buffer)
            snapshots.append(buffer)
    for t in threads:
        t.join()
    assert not errors, errors
    for buffer in snapshots:
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        n, pos = state["inserted"], state["position"]
        assert pos == n % 64
        ids = state["storage"]["id"].numpy()[: state["size"]]
        np.testing.assert_array_equal(np.sort(ids), np.arange(max(0, n - 64), n))  # no torn or stale rows
    assert replay.inserted == 8 + 900 and len(replay) == 64
    raw = replay.state_dict()["priorities"].numpy()
    assert replay._tree.total() == pytest.approx((raw**0.9).sum(), rel=1e-12)
