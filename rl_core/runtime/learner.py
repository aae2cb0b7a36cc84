"""Learner threads: [T+1, B] batches from the agent's data source -> its losses -> optimizer steps.

Actor threads enqueue unroll chunks of K envs each; the data source (the agent's
``make_data_source``) makes batches of them: ``UnrollBatcher`` cuts and joins them into
batches of exactly B columns, a replay source samples them from a prioritized replay.  The agent turns a batch into one
loss (IMPALA) or several (epochs x minibatches); each gets an optimizer step.
After the batch the new weights are published to the inference model.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time

import numpy as np
import torch
from torch import nn

from rl_core.errors import TrainingDiverged
from rl_core.errors import Stopped
from rl_core.data.batch import POLICY_VERSION


def inference_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` for acting, without the parts it names in ``learner_only`` (target
    networks, critics: what only the learner computes), which are neither copied nor published."""
    skip = getattr(model, "learner_only", ())
    parts = {name: getattr(model, name) for name in skip}
    try:
        for name in skip:
            setattr(model, name, None)
        inference_model = copy.deepcopy(model)
        inference_model.policy_version = 0  # (``Publisher``: the learner's batch count at its last publication)
        return inference_model
    finally:
        for name, part in parts.items():
            setattr(model, name, part)


def publish(model: nn.Module, inference_model: nn.Module, lock: threading.Lock, version: int = 0) -> None:
    """Copy the learner's weights (and buffers: normalizer statistics) into the inference copy, by name."""
    Publisher(model, inference_model, lock)(version)


class Publisher:
    """``publish`` with the pairs of tensors found once: one foreach copy per call instead of two
    ``state_dict()`` walks.  The pairs hold the parameters and buffers themselves (not aliases of their
    storage), so a later ``.to(device)`` or in-place load is seen.

    Each call gives the weights a version, the learner's batch count: ``inference_model.policy_version``,
    set under the same lock, so that an inference pass reads the version of the weights it runs."""

    def __init__(self, model: nn.Module, inference_model: nn.Module, lock: threading.Lock):
        source = model.state_dict(keep_vars=True)
        pairs = [(dst, source[name]) for name, dst in inference_model.state_dict(keep_vars=True).items()]
        self.dst = [d for d, _ in pairs]
        self.src = [s for _, s in pairs]
        self.inference_model = inference_model
        self.lock = lock

    def __call__(self, version: int) -> None:
        with self.lock, torch.no_grad():
            if self.dst:
                torch._foreach_copy_(self.dst, self.src)
            shared = getattr(self.inference_model, "policy_version", None)
            if isinstance(shared, torch.Tensor):  # in shared memory: an acting process reads it (acting_process.py)
                shared.fill_(version)
            else:
                self.inference_model.policy_version = version


class GradientNorms:
    """``clip_grad_norm_`` and ``get_total_norm`` (norm 2) as a handful of ops: where every tensor shares one
    device and dtype, the per-tensor norms of one ``_foreach_norm``, their norm, one ``_foreach_mul_`` (the
    same arithmetic as torch's, without its per-call grouping, which costs a small model's update about 50
    Python-level calls).  Mixed tensors go to torch's functions."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.uniform = len({(p.device, p.dtype) for p in params}) == 1

    @staticmethod
    def _total(tensors: list[torch.Tensor]) -> torch.Tensor:
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(tensors)))

    def clip(self, max_norm: float) -> torch.Tensor:
        """Scales the gradients to a total norm of at most ``max_norm``; returns their norm before (0-dim)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not self.uniform or not grads:
            return nn.utils.clip_grad_norm_(self.params, max_norm, foreach=True)
        total = self._total(grads)
        if math.isfinite(max_norm):
            torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))
        return total

    def weights(self) -> torch.Tensor:
        """The parameters' total norm (0-dim; no autograd graph over the parameters)."""
        with torch.no_grad():
            if not self.uniform:
                return nn.utils.get_total_norm(self.params, foreach=True)
            return self._total(self.params)


class StepStats:
    """The stats of a batch's optimizer steps, kept on the device until the batch's one host sync.

    An agent's stats may be tensors (read at the sync) or Python numbers; the result is the mean of
    each over the steps, with ``grad_norm``."""

    def __init__(self):
        self.rows: list[torch.Tensor] = []  # per step: [loss, grad norm, *tensor stats]
        self.keys: list[str] | None = None
        self.numbers: dict[str, float] = {}  # sums over the steps
        self.last_numbers: dict[str, float] = {}

    def add(self, loss: torch.Tensor, grad_norm: torch.Tensor, stats: dict) -> torch.Tensor:
        if self.keys is None:
            self.keys = [k for k, v in stats.items() if isinstance(v, torch.Tensor)]
        with torch.no_grad():  # (no detach needed: nothing here is part of a graph)
            values = [loss, grad_norm]
            for k in self.keys:
                v = stats[k]
                values.append(v if isinstance(v, torch.Tensor) else torch.tensor(float(v), device=loss.device))
            values = [v if v.dtype == torch.float32 else v.float() for v in values]  # (a cast of each other one)
            row = torch.stack([v.reshape(()) if v.dim() else v for v in values])
        self.last_numbers = {k: float(v) for k, v in stats.items() if not isinstance(v, torch.Tensor)}
        for k, v in self.last_numbers.items():
            self.numbers[k] = self.numbers.get(k, 0.0) + v
        self.rows.append(row)
        return row

    def named(self, row: list[float]) -> dict[str, float]:
        return dict(self.last_numbers, **dict(zip(self.keys or [], row[2:])))

    def read(self, extra: torch.Tensor | None = None) -> tuple[list[list[float]], float | None]:
        """The host sync: every step's [loss, grad norm, *stats] and ``extra`` (a 0-dim tensor: the
        weights' norm) as Python floats, in one transfer."""
        if not self.rows:
            return [], None
        rows = torch.stack(self.rows)
        flat = rows.flatten() if extra is None else torch.cat([rows.flatten(), extra.detach().float().reshape(1)])
        values = flat.tolist()
        width = rows.shape[1]
        table = [values[i : i + width] for i in range(0, rows.numel(), width)]
        return table, (values[-1] if extra is not None else None)

    def means(self, rows: list[list[float]]) -> dict[str, float]:
        n = max(len(rows), 1)
        out = {k: v / n for k, v in self.numbers.items()}
        for j, k in enumerate(["grad_norm"] + (self.keys or []), start=1):
            out[k] = sum(r[j] for r in rows) / n
        return out


def policy_lag(versions: torch.Tensor, learner_steps: int) -> dict[str, float]:
    """The policy lag of a batch trained after ``learner_steps`` batches, in learner batches: over its steps
    beyond the first (those whose actions it trains on), the mean and the largest of ``learner_steps`` minus the
    version of the weights that chose the action (0: the weights being trained acted)."""
    if versions.shape[0] < 2:
        return {}
    lag = learner_steps - versions.numpy()[1:].astype(np.int64)  # (numpy: a few microseconds, no torch op)
    return {"policy_lag": float(lag.mean()), "policy_lag_max": float(lag.max())}


# Stats whose logs.csv value is their maximum over the batches of the row, not their mean
PEAK_STATS = frozenset({"policy_lag_max", "recycled_units"})


# An update faster than this ends well within a Ctrl-C's 5 s on its own: the abort hooks (a Python call
# per module call and per parameter gradient) are removed once an update has been seen to be this fast.
FAST_UPDATE_S = 0.1


@dataclasses.dataclass
class Weights:
    """What the learner trains and publishes: the model, its optimizer and schedule, and the inference copy
    (with the lock that guards it) that the learner's weights are published to."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    inference_model: nn.Module
    inference_lock: threading.Lock


class Learner:
    """The agent's updates on the data source's batches, one at a time, the weights published after each.

    ``start``: (env steps, learner batches) of a resumed run; ``on_step(step before, step after)`` runs after
    each update, outside the lock; ``saved_step()``: the step of model.tar as on disk (None: none saved), for
    a divergence's message; ``recycler``: --recycle_period's (recycler.py), after each batch's steps.  Under
    torchrun (``group``) ``rl_core.runtime.distributed.Peers`` drives it."""

    def __init__(
        self,
        flags,
        agent,
        weights: Weights,
        data_source,
        device,
        stop: threading.Event,
        *,
        start: tuple[int, int] = (0, 0),
        group=None,
        on_step=None,
        saved_step=lambda: None,
        recycler=None,
    ):
        self.flags = flags
        self.model = weights.model
        self.inference_model = weights.inference_model
        self.inference_lock = weights.inference_lock
        self.agent = agent
        self.optimizer = weights.optimizer
        self.scheduler = weights.scheduler
        self.data_source = data_source
        self.device = device
        self.stop = stop
        self.lock = threading.Lock()  # one optimizer step at a time
        self.step, self.learner_steps = start
        self.optimizer_steps = 0
        self.stats_lock = threading.Lock()
        self._stats_sum: dict[str, float] = {}
        self._stats_max: dict[str, float] = {}  # (``PEAK_STATS``)
        self._stats_n = 0
        self.learn_seconds = 0.0
        self.on_step = on_step
        self.saved_step = saved_step
        self.recycler = recycler  # (--recycle_period: rl_core/runtime/recycler.py)
        self.diverged: str | None = None  # set (under the lock) when an update was not finite: nothing is saved
        model = weights.model
        self.params = list(model.parameters())
        self._trained = [p for p in self.params if p.requires_grad]  # (targets, frozen layers: no gradient to average)
        self.norms = GradientNorms(self.params)
        self._publisher = Publisher(model, weights.inference_model, weights.inference_lock)
        # --publish_interval k: the inference copy gets the weights after every k-th batch (1: every batch).
        self.publish_interval = max(1, int(flags.publish_interval or 1))
        # Set at shutdown (Ctrl-C, an error): an update under way gives up at the next module call or
        # parameter gradient, so that the learner thread ends within a fraction of a second instead of
        # finishing a batch that can take many seconds on a CPU.  Its optimizer step is not taken:
        # the weights stay those of the last finished update, which the final checkpoint saves.
        self.abort = threading.Event()
        self._updating = False
        # Under torchrun (``group``, rl_core/runtime/distributed.py) an update is never given up half way:
        # its peers wait in its all-reduces.  The ranks stop together, after a batch (``Peers.loop``).
        self.group = group
        self._abort_hooks = self._add_abort_hooks(model) if group is None else []

    def _add_abort_hooks(self, model: nn.Module) -> list:
        abort = self.abort

        def check(*_):  # a plain function (not a bound method): a deepcopy of the model shares it
            if self._updating and abort.is_set():
                raise Stopped()

        handles = [module.register_forward_pre_hook(check) for module in model.modules()]
        # a hook returning None keeps the gradient as computed
        handles += [p.register_hook(check) for p in model.parameters() if p.requires_grad]
        return handles

    def _drop_abort_hooks_if_fast(self, seconds: float) -> None:
        if self._abort_hooks and seconds < FAST_UPDATE_S:
            for handle in self._abort_hooks:
                handle.remove()
            self._abort_hooks = []

    def take_stats(self) -> dict[str, float]:
        """The batches' stats since the last call: their means (``PEAK_STATS``: their maximum); and the
        learning rate now, in every row (an interval without an update, the first's under load, has no mean)."""
        with self.stats_lock:
            n = max(self._stats_n, 1)
            stats = {k: v / n for k, v in self._stats_sum.items()}
            stats.update(self._stats_max)
            self._stats_sum, self._stats_max, self._stats_n = {}, {}, 0
            stats["learning_rate"] = self.scheduler.get_last_lr()[0]
        return stats

    def publish_weights(self) -> None:
        self._publisher(self.learner_steps)

    def to_device(self, batch: dict, state: tuple) -> tuple[dict, tuple, torch.Tensor | None]:
        """A data source's batch and state on the learner's device, and apart, on the host, the batch's
        ``POLICY_VERSION`` field (None without one): for ``learn``'s policy lag, never the agent's."""
        versions = batch.get(POLICY_VERSION)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items() if k != POLICY_VERSION}
        state = tuple(s.to(self.device, non_blocking=True) for s in state)
        return batch, state, versions

    def learn(
        self, batch: dict, state: tuple, new_steps: int | None = None, versions: torch.Tensor | None = None
    ) -> dict[str, float]:
        """The agent's optimizer steps on one batch already on the device; the step count grows by
        ``new_steps``, the env steps that arrived with it (default: T x B of the batch).  ``versions``
        ([T+1, B] on the host, ``to_device``): the weights' version that chose each step's action; the
        stats then hold ``policy_lag`` and ``policy_lag_max`` (``policy_lag``).

        Host synchronisation: with a fused Adam, one per batch (every step's loss, gradient norm and
        stats read together; a non-finite step is skipped on the device by the optimizer's
        ``found_inf``); otherwise one per optimizer step, before it (the gradient norm's float).
        Either way a non-finite loss or gradient never reaches the weights."""
        f = self.flags
        max_norm = f.grad_norm_clipping if f.grad_norm_clipping > 0 else float("inf")
        with self.lock:
            start = time.perf_counter()
            lag = policy_lag(versions, self.learner_steps) if versions is not None else {}
            steps = StepStats()
            # A fused Adam skips a step on the device when its ``found_inf`` is set: each step's finiteness
            # is then read with the batch's one sync.  (Per batch: a resumed optimizer's param_groups come
            # from its checkpoint.)
            self.deferred_checks = all(g.get("fused") for g in getattr(self.optimizer, "param_groups", [{}]))
            self._updating = True
            try:
                for loss, stats in self.agent.updates(self.model, batch, state):
                    n = len(steps.rows)
                    for group in self.optimizer.param_groups:  # zero_grad(set_to_none=True), without its profiling
                        for p in group["params"]:
                            p.grad = None
                    loss.backward()
                    if self.group is not None:  # every rank takes the step of the ranks' mean gradient
                        loss = self.group.average_gradients(self._trained, loss)
                    elif self.abort.is_set():  # between the gradient and its step: no step taken
                        raise Stopped()
                    grad_norm = self.norms.clip(max_norm)
                    row = steps.add(loss, grad_norm, stats)
                    if self.deferred_checks:
                        self.optimizer.found_inf = (~torch.isfinite(row[:2]).all()).float()
                    else:
                        row = row.tolist()
                        if not (math.isfinite(row[0]) and math.isfinite(row[1])):
                            where = f", its optimizer step {n + 1}" if n else ""
                            self._diverged(where, self._nonfinite_loss(row[0], row[1], steps.named(row)))
                    self.optimizer.step()
            except Exception:
                if self.abort.is_set():  # raised by the hooks (or wrapped on its way out of backward)
                    raise Stopped() from None
                raise
            finally:
                self._updating = False
                if self.deferred_checks:
                    self.optimizer.found_inf = None
            n = len(steps.rows)
            param_norm = self.norms.weights() if n else None
            rows, param_norm = steps.read(param_norm)  # the batch's one host sync
            if self.deferred_checks:
                for i, row in enumerate(rows):
                    if not (math.isfinite(row[0]) and math.isfinite(row[1])):
                        self._diverged(
                            f", its optimizer step {i + 1}" if n > 1 else "",
                            self._nonfinite_loss(row[0], row[1], steps.named(row)),
                        )
            if n:  # a batch that only fed statistics (RND's random start) moves no schedule
                self.scheduler.step()
                # Weights whose norm is not finite (a value beyond ~1e19 overflows float32's squares)
                # are not published: the inference copy would sample from inf / nan logits.
                if not math.isfinite(param_norm):
                    self._diverged(f", after its {n} optimizer steps" if n > 1 else "", self._nonfinite_parameter())
            self.learner_steps += 1
            self.optimizer_steps += n
            recycled = self.recycler(self.learner_steps, batch["obs"]) if self.recycler is not None else {}
            if self.learner_steps % self.publish_interval == 0:
                self.publish_weights()
            previous_step = self.step
            self.step += f.unroll_length * batch["reward"].shape[1] if new_steps is None else new_steps
            seconds = time.perf_counter() - start
            self.learn_seconds += seconds
            stats = steps.means(rows)
            stats.update(learning_rate=self.scheduler.get_last_lr()[0], optimizer_steps=n, **lag, **recycled)
            crossed = (previous_step, self.step)
        self._drop_abort_hooks_if_fast(seconds)
        with self.stats_lock:
            for k, v in stats.items():
                if k in PEAK_STATS:
                    self._stats_max[k] = max(self._stats_max.get(k, float(v)), float(v))
                else:
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
                return (
                    f"parameter {name} diverged after the optimizer step (max |x| = "
                    f"{float(p.abs().max()):.3g}: its norm overflows float32)"
                )
        return "the parameters' norm is not finite after the optimizer step"

    def _diverged(self, within: str, what: str) -> None:
        """Ends the run (in the learner thread, under the lock): nothing of this batch is published, and
        ``diverged`` keeps every later save from replacing model.tar."""
        f = self.flags
        where = f"at step {self.step:,} (learner update {self.learner_steps + 1}{within})"
        if f.disable_checkpoint:
            kept = "no checkpoint is written (--disable_checkpoint)"
        elif (saved := self.saved_step()) is None:
            kept = "no checkpoint had been saved yet"
        else:
            kept = f"model.tar keeps the last good checkpoint (step {saved:,})"
        self.diverged = (
            f"training diverged {where}: {what}; {kept}; lower --learning_rate "
            f"(now {f.learning_rate:g}) or clip the gradients (--grad_norm_clipping)"
        )
        raise TrainingDiverged(self.diverged)

    def loop(self) -> None:
        """Batches until --total_steps or a stop (one process; under torchrun ``Peers.loop``)."""
        f = self.flags
        while not self.stop.is_set():
            batch, state, versions = self.to_device(*self.data_source.next_batch(self.stop))
            self.learn(batch, state, self.data_source.take_new_steps(), versions)
            if self.step >= f.total_steps:
                self.stop.set()
