"""Prioritized replay of fixed-length sequences on a sum tree.

* Proportional prioritization (Schaul et al. 2016, "Prioritized Experience
  Replay", ICLR, Sec. 3.3): sequence i is drawn with probability
  P(i) = p_i^α / Σ_k p_k^α, and its loss is scaled by the importance-sampling
  weight w_i = (N·P(i))^-β / max_j w_j, N the number of stored sequences.  The
  max is taken over the sampled batch.  New sequences without a priority get
  the largest raw priority seen so far (1.0 before any).  Sampling is
  stratified: [0, Σ p^α) is split into B equal segments, one uniform draw in
  each.
* Sequence priorities (Kapturowski et al. 2019, "Recurrent Experience Replay
  in Distributed Reinforcement Learning" (R2D2), ICLR):
  p = η·max_t|δ_t| + (1−η)·mean_t|δ_t|, η = 0.9.

:class:`SumTree` keeps the p^α (and their max) in a binary tree, so an update
and a draw cost O(log N).  :class:`PrioritizedReplay` is a ring buffer of
``capacity`` sequences stored batch-major in numpy arrays allocated once at the
first insert; one lock makes it safe to share between an actor-side feeder and
the learner.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

__all__ = ["sequence_priorities", "SumTree", "PrioritizedReplay"]


def _to_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def sequence_priorities(
    abs_td: torch.Tensor | np.ndarray,
    eta: float = 0.9,
    mask: torch.Tensor | np.ndarray | None = None,
) -> np.ndarray:
    """R2D2 priorities η·max_t|δ| + (1−η)·mean_t|δ| of time-major ``abs_td`` [T, B].

    Only steps with ``mask[t, b] > 0`` count (``mask`` [T, B], optional); a
    column without a valid step gets priority 0.  The absolute value is taken
    again here, so signed TD errors work too.  Returns [B] float64 numpy.
    """
    td = np.abs(_to_numpy(abs_td).astype(np.float64, copy=False))
    if td.ndim != 2:
        raise ValueError(f"abs_td must be [T, B], got shape {td.shape}")
    if mask is None:
        valid = np.ones(td.shape, dtype=bool)
    else:
        valid = _to_numpy(mask) > 0
        if valid.shape != td.shape:
            raise ValueError(f"mask shape {valid.shape} != abs_td shape {td.shape}")
    count = valid.sum(axis=0)
    peak = np.where(valid, td, -np.inf).max(axis=0, initial=-np.inf)
    mean = np.where(valid, td, 0.0).sum(axis=0) / np.maximum(count, 1)
    return np.where(count > 0, eta * peak + (1.0 - eta) * mean, 0.0)


def _last_wins(indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated indices, keeping the value given last for each."""
    _, first_in_reversed = np.unique(indices[::-1], return_index=True)
    keep = len(indices) - 1 - first_in_reversed
    return indices[keep], values[keep]


class SumTree:
    """Sum tree over `capacity` leaves (any capacity >= 1, not only powers of two).

    Heap layout: node 1 is the root, node n has children 2n and 2n+1, leaves are
    nodes P..P+capacity-1 with P the next power of two >= capacity; the padding
    leaves stay 0.  Each inner node is recomputed as left + right (never updated
    by deltas), so its value depends only on the leaves: no drift, and a
    rebuild reproduces it bit for bit.  A second tree holds maxima.
    """

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._leaf0 = 1 << (self.capacity - 1).bit_length()  # P
        self._depth = self._leaf0.bit_length() - 1
        self._sum = np.zeros(2 * self._leaf0, dtype=np.float64)
        self._max = np.zeros(2 * self._leaf0, dtype=np.float64)

    def _check_indices(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        if indices.size and (indices.min() < 0 or indices.max() >= self.capacity):
            raise IndexError(f"leaf indices must be in [0, {self.capacity})")
        return indices

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` to ``values`` (>= 0); for a repeated index the last value wins."""
        indices = self._check_indices(indices)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.shape != indices.shape:
            raise ValueError(f"{indices.size} indices but {values.size} values")
        if not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError("sum tree values must be finite and >= 0")
        if indices.size == 0:
            return
        indices, values = _last_wins(indices, values)
        nodes = indices + self._leaf0
        self._sum[nodes] = values
        self._max[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            left, right = 2 * nodes, 2 * nodes + 1
            self._sum[nodes] = self._sum[left] + self._sum[right]
            self._max[nodes] = np.maximum(self._max[left], self._max[right])
            nodes = np.unique(nodes // 2)

    def rebuild(self, leaves: np.ndarray) -> None:
        """Set all ``capacity`` leaves at once, O(N)."""
        leaves = np.asarray(leaves, dtype=np.float64).reshape(-1)
        if leaves.size != self.capacity:
            raise ValueError(f"expected {self.capacity} leaves, got {leaves.size}")
        if not np.all(np.isfinite(leaves)) or np.any(leaves < 0):
            raise ValueError("sum tree values must be finite and >= 0")
        self._sum[:] = 0.0
        self._max[:] = 0.0
        self._sum[self._leaf0 : self._leaf0 + self.capacity] = leaves
        self._max[self._leaf0 : self._leaf0 + self.capacity] = leaves
        lo = self._leaf0 // 2
        while lo >= 1:
            self._sum[lo : 2 * lo] = self._sum[2 * lo : 4 * lo : 2] + self._sum[2 * lo + 1 : 4 * lo : 2]
            self._max[lo : 2 * lo] = np.maximum(self._max[2 * lo : 4 * lo : 2], self._max[2 * lo + 1 : 4 * lo : 2])
            lo //= 2

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self._sum[self._check_indices(indices) + self._leaf0]

    def total(self) -> float:
        return float(self._sum[1])

    def max(self) -> float:
        return float(self._max[1])

    def find(self, targets: np.ndarray) -> np.ndarray:
        """Leaf i with prefix_sum(i) <= target < prefix_sum(i) + leaf(i), for each target in [0, total).

        Targets are clamped into [0, total); never returns a zero leaf or an
        index >= capacity (a descent that round-off sends onto one moves to
        the nearest positive leaf on its left, or the first one).
        """
        total = self.total()
        if not total > 0.0:
            raise ValueError("cannot search a sum tree whose total is 0")
        targets = np.asarray(targets, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(targets)):
            raise ValueError("targets must be finite")
        remaining = np.clip(targets, 0.0, np.nextafter(total, 0.0))
        nodes = np.ones(remaining.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._sum[left]
            go_right = remaining >= left_sum
            remaining = np.where(go_right, remaining - left_sum, remaining)
            nodes = left + go_right
        leaves = nodes - self._leaf0
        bad = (leaves >= self.capacity) | (self._sum[nodes] <= 0.0)
        if np.any(bad):
            positive = np.flatnonzero(self._sum[self._leaf0 : self._leaf0 + self.capacity] > 0.0)
            pos = np.searchsorted(positive, leaves[bad], side="right") - 1
            leaves[bad] = positive[np.maximum(pos, 0)]
        return leaves


def _plain(obj: Any) -> Any:
    """numpy scalars/arrays inside a bit-generator state -> Python ints/floats/lists."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _numpy_state(obj: Any) -> Any:
    """Inverse of :func:`_plain` for bit generators (MT19937 wants its key as an array)."""
    if isinstance(obj, dict):
        return {k: _numpy_state(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return np.asarray(obj, dtype=np.uint32)
    return obj


class PrioritizedReplay:
    """Capacity `capacity` sequences; storage allocated at the first insert from the items' shapes and dtypes.

    ``priority_exponent`` is α, ``importance_sampling_exponent`` is β.  Raw
    priorities are kept in ``[capacity]`` float64 beside the tree, which holds
    p^α (p = 0 gives 0, so a zero-priority sequence is never drawn, even for
    α = 0).  If every stored priority is 0, :meth:`sample` draws uniformly
    (weights 1).

    ``lock`` (reentrant) guards insert, sample, update_priorities and the
    state; hold it across ``state_dict()`` and its ``torch.save`` for a
    consistent snapshot while another thread inserts (the storage tensors in
    the state share memory with the buffer).
    """

    def __init__(
        self,
        capacity: int,
        priority_exponent: float = 0.9,
        importance_sampling_exponent: float = 0.6,
        seed: int | None = None,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.alpha = float(priority_exponent)
        self.beta = float(importance_sampling_exponent)
        self.rng = np.random.default_rng(seed)
        self.inserted = 0
        self._tree = SumTree(self.capacity)
        self._priorities = np.zeros(self.capacity, dtype=np.float64)
        self._storage: dict[str, np.ndarray] = {}
        self._position = 0  # next slot written
        self._size = 0
        self._max_priority: float | None = None  # largest raw priority seen
        # Reentrant so that a caller can hold it around state_dict() and the save.
        self.lock = threading.RLock()

    # -- helpers (callers hold the lock) --------------------------------------

    def _scaled(self, priorities: np.ndarray) -> np.ndarray:
        return np.where(priorities > 0.0, np.power(priorities, self.alpha), 0.0)

    @staticmethod
    def _check_priorities(priorities: Any, n: int) -> np.ndarray:
        priorities = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if priorities.size != n:
            raise ValueError(f"expected {n} priorities, got {priorities.size}")
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError("priorities must be finite and >= 0")
        return priorities

    def _see(self, priorities: np.ndarray) -> None:
        if priorities.size:
            top = float(priorities.max())
            self._max_priority = top if self._max_priority is None else max(self._max_priority, top)

    def _set_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        indices, priorities = _last_wins(indices, priorities)
        self._priorities[indices] = priorities
        self._tree.update(indices, self._scaled(priorities))

    # -- public API -----------------------------------------------------------

    def insert(
        self,
        items: dict[str, torch.Tensor | np.ndarray],
        priorities: np.ndarray | None = None,
    ) -> np.ndarray:
        """Store N sequences (every value [N, ...]), overwriting the oldest when full.

        ``priorities`` [N] are raw (before α); None gives each the largest raw
        priority seen so far (1.0 before any).  Returns the slots written (only
        the last ``capacity`` sequences are kept when N > capacity).
        """
        if not items:
            raise ValueError("insert needs at least one field")
        arrays = {name: _to_numpy(value) for name, value in items.items()}
        sizes = {name: (a.shape[0] if a.ndim else None) for name, a in arrays.items()}
        n = next(iter(sizes.values()))
        for name, size in sizes.items():
            if size is None or size != n:
                raise ValueError(f"field {name!r}: leading dim {size} differs from {n} (all fields need the same N)")
        with self.lock:
            if priorities is None:
                fill = 1.0 if self._max_priority is None else self._max_priority
                raw = np.full(n, fill, dtype=np.float64)
            else:
                raw = self._check_priorities(priorities, n)
            if self._storage:
                self._check_fields(arrays)
            else:
                self._storage = {
                    name: np.zeros((self.capacity, *a.shape[1:]), dtype=a.dtype) for name, a in arrays.items()
                }
            if n == 0:
                return np.zeros(0, dtype=np.int64)
            keep = min(n, self.capacity)
            start = (self._position + n - keep) % self.capacity
            first = min(keep, self.capacity - start)  # before the wrap
            for name, a in arrays.items():
                store = self._storage[name]
                store[start : start + first] = a[n - keep : n - keep + first]
                store[: keep - first] = a[n - keep + first :]
            indices = (start + np.arange(keep, dtype=np.int64)) % self.capacity
            raw = raw[n - keep :]
            self._see(raw)
            self._priorities[indices] = raw
            self._tree.update(indices, self._scaled(raw))
            self._position = (self._position + n) % self.capacity
            self._size = min(self.capacity, self._size + n)
            self.inserted += n
            return indices

    def _check_fields(self, arrays: dict[str, np.ndarray]) -> None:
        for name in sorted(set(arrays) ^ set(self._storage)):
            where = "missing from" if name in self._storage else "not in"
            raise ValueError(f"field {name!r} is {where} this insert vs. the first one ({sorted(self._storage)})")
        for name, a in arrays.items():
            store = self._storage[name]
            if a.shape[1:] != store.shape[1:] or a.dtype != store.dtype:
                raise ValueError(
                    f"field {name!r}: got shape [N, {', '.join(map(str, a.shape[1:]))}] {a.dtype}, "
                    f"stored as [N, {', '.join(map(str, store.shape[1:]))}] {store.dtype}"
                )

    def sample(
        self, batch_size: int, window: int | None = None, window_extra: dict[str, int] | None = None
    ) -> tuple[np.ndarray, dict[str, torch.Tensor], torch.Tensor]:
        """Stratified proportional draw of ``batch_size`` sequences (with replacement).

        Returns (indices [B] int64, {name: [B, ...] tensor copies}, IS weights [B] float32).

        ``window``: of each drawn sequence only ``window`` consecutive steps (axis 1 of every field)
        are read, from an offset drawn uniformly in [0, S - window], S the steps of a sequence; a field
        named in ``window_extra`` gets ``window + extra`` steps from the same offset (stored frame
        stacks hold C - 1 frames more than steps).  The offsets come back as ``items["offset"]`` [B].
        With equal priorities (alpha = 0) this draws every window of the replay uniformly.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        with self.lock:
            if self._size == 0:
                raise ValueError("cannot sample from an empty replay")
            total = self._tree.total()
            if total > 0.0:
                segment = total / batch_size
                targets = (np.arange(batch_size) + self.rng.random(batch_size)) * segment
                indices = self._tree.find(targets)
                probs = self._tree.get(indices) / total
                # w_i / max_j w_j = (N P(i))^-β / (N min_j P(j))^-β, computed as a
                # ratio so that tiny probabilities cannot overflow to inf.
                weights = np.power(probs / probs.min(), -self.beta)
            else:  # every stored priority is 0: uniform, as if all were equal
                indices = self.rng.integers(0, self._size, size=batch_size)
                weights = np.ones(batch_size)
            if window is None:
                items = {name: torch.from_numpy(store[indices]) for name, store in self._storage.items()}
            else:
                items = self._read_windows(indices, window, window_extra or {})
            return indices.astype(np.int64), items, torch.from_numpy(weights.astype(np.float32))

    def _read_windows(self, indices: np.ndarray, window: int, extra: dict[str, int]) -> dict[str, torch.Tensor]:
        steps = min(store.shape[1] for name, store in self._storage.items() if name not in extra)
        if not 1 <= window <= steps:
            raise ValueError(f"window {window} does not fit sequences of {steps} steps")
        offsets = self.rng.integers(0, steps - window + 1, size=indices.size)
        rows = indices[:, None]
        items = {}
        for name, store in self._storage.items():
            cols = offsets[:, None] + np.arange(window + extra.get(name, 0))
            items[name] = torch.from_numpy(store[rows, cols])
        items["offset"] = torch.from_numpy(offsets.astype(np.int64))
        return items

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set raw priorities (finite, >= 0) of stored slots; for a repeated index the last wins."""
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        with self.lock:
            priorities = self._check_priorities(priorities, indices.size)
            if indices.size == 0:
                return
            if indices.min() < 0 or indices.max() >= self._size:
                raise ValueError(f"indices must be stored slots in [0, {self._size})")
            self._see(priorities)
            self._set_priorities(indices, priorities)

    def __len__(self) -> int:
        return self._size

    def field_shape(self, name: str) -> tuple[int, ...] | None:
        """Stored shape [...] of one sequence's field ``name`` (None before the first insert)."""
        with self.lock:
            store = self._storage.get(name)
            return None if store is None else tuple(store.shape[1:])

    @property
    def nbytes(self) -> int:
        return sum(store.nbytes for store in self._storage.values())

    def mean_priority(self) -> float:
        """Mean raw priority of the stored sequences (0.0 when empty)."""
        with self.lock:
            return float(self._priorities[: self._size].mean()) if self._size else 0.0

    def state_dict(self) -> dict:
        """Everything needed to restore exactly; readable by ``torch.load(weights_only=True)``.

        The storage tensors share memory with the buffer (no copy): save them
        before inserting again (hold ``self.lock`` across this call and the
        save if another thread may insert), or clone them.
        """
        with self.lock:
            return {
                "capacity": self.capacity,
                "alpha": self.alpha,
                "beta": self.beta,
                "storage": {name: torch.from_numpy(store) for name, store in self._storage.items()},
                "priorities": torch.from_numpy(self._priorities.copy()),
                "position": self._position,
                "size": self._size,
                "inserted": self.inserted,
                "max_priority": self._max_priority,
                "rng_state": _plain(self.rng.bit_generator.state),
            }

    def load_state_dict(self, state: dict) -> None:
        """Restore from :meth:`state_dict`; the storage is copied into this buffer's own arrays."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"replay state has capacity {int(state['capacity'])}, this replay has capacity {self.capacity}"
            )
        priorities = self._check_priorities(_to_numpy(state["priorities"]), self.capacity)
        storage = {name: _to_numpy(t) for name, t in state["storage"].items()}
        for name, a in storage.items():
            if a.ndim == 0 or a.shape[0] != self.capacity:
                raise ValueError(f"field {name!r}: stored shape {a.shape} does not start with {self.capacity}")
        rng_state = _numpy_state(state["rng_state"])
        bit_generator = getattr(np.random, str(rng_state["bit_generator"]), None)
        if not (isinstance(bit_generator, type) and issubclass(bit_generator, np.random.BitGenerator)):
            raise ValueError(f"unknown bit generator {rng_state['bit_generator']!r} in replay state")
        rng = np.random.Generator(bit_generator())
        rng.bit_generator.state = rng_state
        with self.lock:
            self.alpha = float(state["alpha"])
            self.beta = float(state["beta"])
            new_storage = {}
            for name, a in storage.items():
                own = self._storage.get(name)
                if own is None or own.shape != a.shape or own.dtype != a.dtype:
                    own = np.empty(a.shape, dtype=a.dtype)
                np.copyto(own, a)
                new_storage[name] = own
            self._storage = new_storage
            self._priorities[:] = priorities
            self._tree.rebuild(self._scaled(priorities))
            self._position = int(state["position"])
            self._size = int(state["size"])
            self.inserted = int(state["inserted"])
            mp = state["max_priority"]
            self._max_priority = None if mp is None else float(mp)
            self.rng = rng
