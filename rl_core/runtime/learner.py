"""Learner threads: [T+1, B] batches from the agent's data source -> its losses -> optimizer steps.

Actor threads enqueue unroll chunks of K envs each; the data source (the agent's
``make_data_source``) makes batches of them: ``UnrollBatcher`` cuts and joins them into
batches of exactly B columns, a replay source samples them from a prioritized replay.  The agent turns a batch into one
loss (IMPALA) or several (epochs x minibatches); each gets an optimizer step.
After the batch the new weights are published to the inference model.
"""

from __future__ import annotations

import copy
import math
import queue
import threading
import time

import torch
from torch import nn

from rl_core.errors import TrainingDiverged
from rl_core.runtime.transport import Stopped


def inference_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` for acting, without the parts it names in ``learner_only`` (target
    networks, critics: what only the learner computes), which are neither copied nor published."""
    skip = getattr(model, "learner_only", ())
    parts = {name: getattr(model, name) for name in skip}
    try:
        for name in skip:
            setattr(model, name, None)
        return copy.deepcopy(model)
    finally:
        for name, part in parts.items():
            setattr(model, name, part)


def publish(model: nn.Module, inference_model: nn.Module, lock: threading.Lock) -> None:
    """Copy the learner's weights (and buffers: normalizer statistics) into the inference copy, by name."""
    with lock, torch.no_grad():
        source = model.state_dict()
        for name, dst in inference_model.state_dict().items():
            dst.copy_(source[name])


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

    def take_new_steps(self) -> int:
        steps, self._new_steps = self._new_steps, 0
        return steps


class Learner:
    def __init__(self, flags, model: nn.Module, inference_model: nn.Module, inference_lock: threading.Lock,
                 agent, optimizer, scheduler, batcher: UnrollBatcher, device, stop: threading.Event, step: int = 0):
        self.flags = flags
        self.model = model
        self.inference_model = inference_model
        self.inference_lock = inference_lock
        self.agent = agent
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.batcher = batcher
        self.device = device
        self.stop = stop
        self.lock = threading.Lock()  # one optimizer step at a time
        self.step = step
        self.learner_steps = 0
        self.stats_lock = threading.Lock()
        self._stats_sum: dict[str, float] = {}
        self._stats_n = 0
        self.learn_seconds = 0.0
        self.on_step = None  # called with (step before, step after) after each update, outside the lock
        self.diverged: str | None = None  # set (under the lock) when an update was not finite: nothing is saved
        self.last_saved_step: int | None = None  # the step of model.tar as on disk (the run sets it)
        # Set at shutdown (Ctrl-C, an error): an update under way gives up at the next module call or
        # parameter gradient, so that the learner thread ends within a fraction of a second instead of
        # finishing a batch that can take many seconds on a CPU.  Its optimizer step is not taken:
        # the weights stay those of the last finished update, which the final checkpoint saves.
        self.abort = threading.Event()
        self._updating = False
        self._add_abort_hooks(model)

    def _add_abort_hooks(self, model: nn.Module) -> None:
        abort = self.abort

        def check(*_):  # a plain function (not a bound method): a deepcopy of the model shares it
            if self._updating and abort.is_set():
                raise Stopped()

        for module in model.modules():
            module.register_forward_pre_hook(check)
        for param in model.parameters():
            if param.requires_grad:
                param.register_hook(check)  # returns None: the gradient is kept as computed

    def take_stats(self) -> dict[str, float]:
        with self.stats_lock:
            n = max(self._stats_n, 1)
            stats = {k: v / n for k, v in self._stats_sum.items()}
            self._stats_sum, self._stats_n = {}, 0
        return stats

    def publish_weights(self) -> None:
        publish(self.model, self.inference_model, self.inference_lock)

    def learn(self, batch: dict, state: tuple, new_steps: int | None = None) -> dict[str, float]:
        """The agent's optimizer steps on one batch already on the device; the step count grows by
        ``new_steps``, the env steps that arrived with it (default: T x B of the batch)."""
        f = self.flags
        max_norm = f.grad_norm_clipping if f.grad_norm_clipping > 0 else float("inf")
        with self.lock:
            start = time.perf_counter()
            sums: dict[str, float] = {}
            n = 0
            self._updating = True
            try:
                for loss, stats in self.agent.updates(self.model, batch, state):
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if self.abort.is_set():  # between the gradient and its step: no step taken
                        raise Stopped()
                    grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                    # One host sync for both (the grad norm's float was one already), before the step: a
                    # non-finite loss or gradient never reaches the weights.
                    loss_value, grad_value = torch.stack([loss.detach().float(), grad_norm.float()]).tolist()
                    if not (math.isfinite(loss_value) and math.isfinite(grad_value)):
                        where = f", its optimizer step {n + 1}" if n else ""
                        self._diverged(where, self._nonfinite_loss(loss_value, grad_value, stats))
                    self.optimizer.step()
                    stats = dict(stats, grad_norm=grad_value)
                    for k, v in stats.items():
                        sums[k] = sums.get(k, 0.0) + float(v)
                    n += 1
            except Exception:
                if self.abort.is_set():  # raised by the hooks (or wrapped on its way out of backward)
                    raise Stopped() from None
                raise
            finally:
                self._updating = False
            if n:  # a batch that only fed statistics (RND's random start) moves no schedule
                self.scheduler.step()
                # Weights whose norm is not finite (a value beyond ~1e19 overflows float32's squares)
                # are not published: the inference copy would sample from inf / nan logits.
                if not math.isfinite(float(nn.utils.get_total_norm(list(self.model.parameters())))):
                    self._diverged(f", after its {n} optimizer steps" if n > 1 else "", self._nonfinite_parameter())
            self.publish_weights()
            previous_step = self.step
            self.step += f.unroll_length * batch["reward"].shape[1] if new_steps is None else new_steps
            self.learner_steps += 1
            self.learn_seconds += time.perf_counter() - start
            stats = {k: v / max(n, 1) for k, v in sums.items()}
            stats.update(learning_rate=self.scheduler.get_last_lr()[0], optimizer_steps=n)
            crossed = (previous_step, self.step)
        with self.stats_lock:
            for k, v in stats.items():
                self._stats_sum[k] = self._stats_sum.get(k, 0.0) + float(v)
            self._stats_n += 1
        if self.on_step is not None:
            self.on_step(*crossed)
        return stats

    def _nonfinite_loss(self, loss_value: float, grad_value: float, stats: dict) -> str:
        if not math.isfinite(loss_value):
            terms = [k for k, v in stats.items() if "loss" in k and not math.isfinite(float(v))]
            return f"the loss is {loss_value}" + (f" ({', '.join(terms)} not finite)" if terms else "")
        return f"the gradient norm is {grad_value} (the loss is {loss_value:.4g})"

    def _nonfinite_parameter(self) -> str:
        for name, p in self.model.named_parameters():
            p = p.detach()
            if not bool(torch.isfinite(p).all()):
                return f"parameter {name} is not finite after the optimizer step"
            if not math.isfinite(float(torch.linalg.vector_norm(p))):
                return (f"parameter {name} diverged after the optimizer step (max |x| = "
                        f"{float(p.abs().max()):.3g}: its norm overflows float32)")
        return "the parameters' norm is not finite after the optimizer step"

    def _diverged(self, within: str, what: str) -> None:
        """Ends the run (in the learner thread, under the lock): nothing of this batch is published, and
        ``diverged`` keeps every later save from replacing model.tar."""
        f = self.flags
        where = f"at step {self.step:,} (learner update {self.learner_steps + 1}{within})"
        if f.disable_checkpoint:
            kept = "no checkpoint is written (--disable_checkpoint)"
        elif self.last_saved_step is None:
            kept = "no checkpoint had been saved yet"
        else:
            kept = f"model.tar keeps the last good checkpoint (step {self.last_saved_step:,})"
        self.diverged = (f"training diverged {where}: {what}; {kept}; lower --learning_rate "
                         f"(now {f.learning_rate:g}) or clip the gradients (--grad_norm_clipping)")
        raise TrainingDiverged(self.diverged)

    def loop(self) -> None:
        f = self.flags
        while not self.stop.is_set():
            batch, state = self.batcher.next_batch(self.stop)
            batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
            state = tuple(s.to(self.device, non_blocking=True) for s in state)
            self.learn(batch, state, self.batcher.take_new_steps())
            if self.step >= f.total_steps:
                self.stop.set()
