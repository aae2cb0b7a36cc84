"""Dynamic inference batching: requests from all env servers, one forward pass.

Each actor thread submits the inputs of its K envs and waits; an inference thread
takes every pending request (up to ``max_batch_size`` envs, waiting at most
``timeout_s`` after the first for more) and answers them together, as SEED RL's
central inference does.
"""

from __future__ import annotations

import collections
import threading
import time

from rl_core.runtime.transport import Stopped


class Request:
    __slots__ = ("inputs", "state", "size", "result", "error", "_done")

    def __init__(self, inputs: dict, state: tuple, size: int):
        self.inputs = inputs
        self.state = state
        self.size = size
        self.result = None
        self.error: BaseException | None = None
        self._done = threading.Event()

    def set_result(self, result) -> None:
        self.result = result
        self._done.set()

    def set_error(self, error: BaseException) -> None:
        self.error = error
        self._done.set()

    def wait(self, stop: threading.Event, poll_s: float = 0.5):
        while not self._done.wait(poll_s):
            if stop.is_set():
                raise Stopped()
        if self.error is not None:
            raise Stopped() from self.error
        return self.result


class InferenceBatcher:
    def __init__(self, max_batch_size: int, timeout_s: float):
        self.max_batch_size = max_batch_size
        self.timeout_s = timeout_s
        self._pending: collections.deque[Request] = collections.deque()
        self._cond = threading.Condition()
        self._counts_lock = threading.Lock()
        self._batches = 0  # (``take_counts``)
        self._batched_envs = 0

    def submit(self, inputs: dict, state: tuple, size: int) -> Request:
        request = Request(inputs, state, size)
        with self._cond:
            self._pending.append(request)
            self._cond.notify()
        return request

    def size(self) -> int:
        return sum(r.size for r in list(self._pending))

    def get_batch(self, stop: threading.Event, poll_s: float = 0.5) -> list[Request]:
        """Pending requests totalling at most ``max_batch_size`` envs (at least one request)."""
        with self._cond:
            while not self._pending:
                if stop.is_set():
                    raise Stopped()
                self._cond.wait(poll_s)
            deadline = time.monotonic() + self.timeout_s
            while self._pending_size() < self.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            batch, total = [], 0
            while self._pending and (not batch or total + self._pending[0].size <= self.max_batch_size):
                request = self._pending.popleft()
                batch.append(request)
                total += request.size
        self.count(total)
        return batch

    def count(self, envs: int) -> None:
        """One inference batch of ``envs`` envs (``get_batch``'s, or --deterministic's lockstep's)."""
        with self._counts_lock:
            self._batches += 1
            self._batched_envs += envs

    def take_counts(self) -> tuple[int, int]:
        """(inference batches, envs in them) since the last call: the logs' mean inference batch."""
        with self._counts_lock:
            counts = (self._batches, self._batched_envs)
            self._batches = self._batched_envs = 0
        return counts

    def _pending_size(self) -> int:
        return sum(r.size for r in self._pending)

    def fail_all(self, error: BaseException) -> None:
        with self._cond:
            while self._pending:
                self._pending.popleft().set_error(error)
