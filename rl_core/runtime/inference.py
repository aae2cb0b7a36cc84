"""Central inference (as SEED RL's): requests from all env servers, batched dynamically, one forward pass.

Each actor thread submits the inputs of its K envs and waits; an inference thread (``inference_loop``)
takes every pending request from the ``InferenceBatcher`` (up to ``max_batch_size`` envs, waiting at most
``timeout_s`` after the first for more) and answers them together (``answer``: ``agent.act`` on the
inference copy of the model).
"""

from __future__ import annotations

import collections
import threading
import time

import torch

from rl_core.errors import Stopped


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

    def count(self, envs: int, batches: int = 1) -> None:
        """``batches`` inference batches of ``envs`` envs in all (``get_batch``'s, an acting loop's)."""
        with self._counts_lock:
            self._batches += batches
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


def inference_loop(
    batcher: InferenceBatcher, model, lock: threading.Lock, device, stop: threading.Event, agent
) -> None:
    """Answer batched requests with the inference model (central inference): ``agent.act``."""
    while True:
        answer(batcher.get_batch(stop), model, lock, device, agent)


def answer(requests: list, model, lock: threading.Lock, device, agent) -> None:
    """One forward pass for ``requests`` (``batcher.Request``s, concatenated in their order); each gets
    its envs' actions, the agent's per-step fields, new state and the version of the weights that ran
    (``learner.Publisher``)."""
    sizes = [r.size for r in requests]
    if len(requests) == 1:  # (one server's envs: its inputs as they are, no concatenation's copy)
        inputs = {k: v.to(device, non_blocking=True) for k, v in requests[0].inputs.items()}
    else:
        inputs = {
            k: torch.cat([r.inputs[k] for r in requests], dim=1).to(device, non_blocking=True)
            for k in requests[0].inputs
        }
    states = requests[0].state
    if len(states):
        states = tuple(torch.cat([r.state[i] for r in requests], dim=0) for i in range(len(states)))
    with lock, torch.inference_mode():
        version = int(model.policy_version)
        action, extras, new_state = agent.act(model, inputs, states)
    on_host = action.device.type == "cpu"
    action = action[0].numpy() if on_host else action[0].cpu().numpy()
    extras = {
        k: v[0].numpy() if on_host and v.dtype == torch.float32 else v[0].float().cpu().numpy()
        for k, v in extras.items()
    }
    split_state = [torch.split(s, sizes, dim=0) for s in new_state] if len(new_state) else []
    start = 0
    for i, (request, size) in enumerate(zip(requests, sizes)):
        end = start + size
        state_i = tuple(s[i] for s in split_state)
        request.set_result((action[start:end], {k: v[start:end] for k, v in extras.items()}, state_i, version))
        start = end
