"""The learner's batches of unrolls: ``UnrollBatcher`` joins the actors' chunks of K envs into batches
of exactly B columns (the data source of the agents that learn from their latest unrolls)."""

from __future__ import annotations

import queue
import threading

import torch

from rl_core.errors import Stopped


class UnrollBatcher:
    """Joins (unroll [T+1, K, ...], state [K, ...]) chunks into batches of B columns.

    A data source: ``next_batch(stop) -> (batch, state)``, and ``take_new_steps()``, the env
    steps that reached the learner since the last call (here T per column of each batch)."""

    def __init__(self, learner_queue: queue.Queue, batch_size: int, unroll_length: int | None = None):
        self.queue = learner_queue
        self.batch_size = batch_size
        self.unroll_length = unroll_length
        self._new_steps = 0
        self._lock = threading.Lock()
        self._leftover: list[tuple[dict, tuple, int]] = []

    def _get(self, stop: threading.Event):
        while True:
            try:
                unroll, state = self.queue.get(timeout=0.5)
                return unroll, state, next(iter(unroll.values())).shape[1]
            except queue.Empty:
                if stop.is_set():
                    raise Stopped()

    def next_batch(self, stop: threading.Event) -> tuple[dict, tuple]:
        with self._lock:
            chunks, total = self._leftover, sum(c[2] for c in self._leftover)
            self._leftover = []
            while total < self.batch_size:
                chunk = self._get(stop)
                chunks.append(chunk)
                total += chunk[2]
        B = self.batch_size
        keys = chunks[0][0].keys()
        batch = {k: torch.cat([c[0][k] for c in chunks], dim=1) for k in keys}
        n_state = len(chunks[0][1])
        state = tuple(torch.cat([c[1][i] for c in chunks], dim=0) for i in range(n_state))
        if total > B:
            rest = ({k: v[:, B:] for k, v in batch.items()}, tuple(s[B:] for s in state), total - B)
            with self._lock:
                self._leftover.insert(0, rest)
            batch = {k: v[:, :B] for k, v in batch.items()}
            state = tuple(s[:B] for s in state)
        T = self.unroll_length if self.unroll_length is not None else next(iter(batch.values())).shape[0] - 1
        self._new_steps += T * B
        return batch, state

    def ready_batch(self) -> tuple[dict, tuple] | None:
        """The next batch if the queued chunks fill one, else None, without waiting (--deterministic's
        learner, rl_core/runtime/lockstep.py)."""
        with self._lock:
            while True:
                try:
                    unroll, state = self.queue.get_nowait()
                except queue.Empty:
                    break
                self._leftover.append((unroll, state, next(iter(unroll.values())).shape[1]))
            if sum(c[2] for c in self._leftover) < self.batch_size:
                return None
        return self.next_batch(threading.Event())

    def take_new_steps(self) -> int:
        steps, self._new_steps = self._new_steps, 0
        return steps
