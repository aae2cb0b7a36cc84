"""The replay data path: sequences from the actors into a prioritized replay, batches sampled
from it for the learner, at a set replay ratio.

A feeder thread takes the actors' chunks (K sequences [L+1, K, ...] and the recurrent
state at their first step) off the learner queue and inserts them with the highest priority
seen so far (Schaul et al. 2016); the learner thread samples batches of B sequences.  The
replay ratio rho (``--replay_ratio``: trained steps per inserted env step, counted from the
moment learning starts) holds in both directions:

* the learner samples only while S <= rho I  (S: steps trained, B x unroll_length per batch;
  I: env steps inserted), so it waits for data;
* the feeder inserts only while rho I <= S + 2 B T, so a learner that is behind leaves the
  queue full and the actors wait (their puts block), instead of data being made and
  trained on less.

Batches are time-major like the unroll batches: {field: [L+1, B, ...]}, plus
``replay/index`` [B] and ``replay/weight`` [B] (importance-sampling weights); the agent
writes new priorities back with ``update_priorities``.  The actors' ``policy_version`` field is
kept with each sequence, so that the learner's ``policy_lag`` of a replay batch is the age of its
data in learner batches (a replay.tar saved without the field is restored, and the field then left out).

With ``window`` (SAC: 2) a batch holds, of each drawn sequence, only ``window`` consecutive
steps from a uniformly drawn offset: with equal priorities (exponent 0) every transition of
the replay is equally likely, and a batch is {field: [window, B, ...]}.  ``capacity`` and
``min_size`` count sequences; an agent that counts transitions divides by the steps per
sequence and passes ``unit=("transitions", steps per sequence)``, so that the log and the
``replay_size`` column count what its flags count.
"""

from __future__ import annotations

import logging
import os
import queue
import threading

import numpy as np
import torch

from rl_core.records import checkpoint_file
from rl_core.data import frame_stacks
from rl_core.errors import RunFailure, Stopped, UserError
from rl_core.data.replay import PrioritizedReplay
from rl_core.data.batch import POLICY_VERSION, REPLAY_INDEX, REPLAY_WEIGHT

log = logging.getLogger("replay")

STATE = "state/"
PREFETCH = 2  # batches sampled ahead of the learner
FRAMES, INDEX = "obs/frames", "obs/index"  # --replay_frame_stack: each frame once (rl_core.data.frame_stacks)


class ReplaySource:
    def __init__(
        self,
        learner_queue: queue.Queue,
        flags,
        stride: int,
        seed: int = 0,
        *,
        capacity: int | None = None,
        min_size: int | None = None,
        trained_per_batch: int | None = None,
        priority_exponent: float | None = None,
        importance_sampling_exponent: float | None = None,
        window: int | None = None,
        unit: tuple[str, int] = ("sequences", 1),
        pin: bool = False,
    ):
        """Sizes in sequences and exponents default to R2D2's flags; ``trained_per_batch`` (steps
        trained per batch, for the replay ratio) to batch_size x unroll_length; ``unit``: what
        --replay_buffer_size counts and how many of those a sequence holds, for the log; ``pin``: batches
        sampled ahead into pinned memory (a learner on CUDA: an async copy)."""
        self.queue = learner_queue
        self.flags = flags
        self.batch_size = flags.batch_size
        self.trained_per_batch = (
            flags.batch_size * flags.unroll_length if trained_per_batch is None else trained_per_batch
        )
        self.stride = stride
        self.window = window
        self.unit, self.per_sequence = unit
        self.ratio = flags.replay_ratio
        self.min_size = flags.replay_buffer_min_size if min_size is None else min_size
        self.replay = PrioritizedReplay(
            flags.replay_buffer_size if capacity is None else capacity,
            flags.priority_exponent if priority_exponent is None else priority_exponent,
            flags.importance_sampling_exponent
            if importance_sampling_exponent is None
            else importance_sampling_exponent,
            seed=seed,
        )
        self.cond = threading.Condition()
        self.inserted_steps = 0  # env steps of every inserted sequence (stride each)
        self.steps_at_start = None  # inserted_steps when learning started
        self.trained_steps = 0
        self._new_steps = 0
        self._sampled = 0
        self._inserted_since = 0
        # Batches sampled ahead by the prefetch thread (sampling and batch assembly are off the learner
        # thread's critical path); pinned when the learner is on CUDA (``pin``), for an async copy.
        self.prefetched: queue.Queue = queue.Queue(maxsize=PREFETCH)
        self.pin = pin
        self._prefetching = False  # without the thread (a test driving the source), next_batch samples
        self._versions = True  # False once a replay.tar saved without POLICY_VERSION is restored

    def amount(self, sequences: int) -> str:
        """``sequences`` stored sequences in the unit the flags count: "128 sequences", "1024 transitions"."""
        return f"{sequences * self.per_sequence} {self.unit}"

    # ----------------------------------------------------------- counters
    def _learning(self) -> bool:
        return self.steps_at_start is not None

    def _ratio_budget(self) -> float:
        """rho I - S: positive when the learner may train, very positive when it is behind."""
        return self.ratio * (self.inserted_steps - self.steps_at_start) - self.trained_steps

    def _may_insert(self) -> bool:
        return not self._learning() or self._ratio_budget() <= 2 * self.trained_per_batch

    def _may_sample(self) -> bool:
        return self._learning() and self._ratio_budget() >= 0

    # -------------------------------------------------------------- feeder
    def threads(self):
        """(name, target(stop)) of the threads this source runs beside the learner."""
        return [("replay-feeder", self.feed), ("replay-prefetch", self.prefetch)]

    def feed(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self.cond:
                while not self._may_insert():
                    if stop.is_set():
                        raise Stopped()
                    self.cond.wait(0.5)
            try:
                unroll, state = self.queue.get(timeout=0.5)
            except queue.Empty:
                continue
            self.insert(unroll, state)

    def insert(self, unroll: dict, state: tuple) -> None:
        items = {k: v.transpose(0, 1) for k, v in unroll.items()}  # [K, L+1, ...]: a row per sequence
        if not self._versions:
            items.pop(POLICY_VERSION, None)
        if self.flags.replay_frame_stack:
            try:
                frames, index = frame_stacks.encode(items.pop("obs").numpy())
            except frame_stacks.NotFrameStacks as e:
                raise RunFailure(
                    f"--replay_frame_stack: the observations are not frame stacks ({e}): run with "
                    f"--no-replay_frame_stack"
                ) from None
            items.update({FRAMES: frames, INDEX: index})
        if self.window is None:  # windows start anywhere: a feedforward agent's, no state kept
            items.update({f"{STATE}{i}": s.cpu() for i, s in enumerate(state)})
        K = next(iter(unroll.values())).shape[1]
        self.replay.insert(items)
        with self.cond:
            self.inserted_steps += K * self.stride
            self._new_steps += K * self.stride
            self._inserted_since += K * self.stride
            if not self._learning() and len(self.replay) >= self.min_size:
                self.steps_at_start = self.inserted_steps
                log.info(
                    "replay holds %s (>= --replay_buffer_min_size): learning starts", self.amount(len(self.replay))
                )
            self.cond.notify_all()

    # ------------------------------------------------------------- learner
    def prefetch(self, stop: threading.Event) -> None:
        """The prefetch thread: samples batches (as the replay ratio allows) into ``prefetched``."""
        self._prefetching = True
        while not stop.is_set():
            batch = self.sample_batch(stop)
            while True:
                try:
                    self.prefetched.put(batch, timeout=0.5)
                    break
                except queue.Full:
                    if stop.is_set():
                        raise Stopped()

    def next_batch(self, stop: threading.Event) -> tuple[dict, tuple]:
        """The next batch the prefetch thread sampled."""
        if not self._prefetching:
            return self.sample_batch(stop)
        while True:
            try:
                return self.prefetched.get(timeout=0.5)
            except queue.Empty:
                if stop.is_set():
                    raise Stopped()

    def sample_batch(self, stop: threading.Event) -> tuple[dict, tuple]:
        """One batch from the replay, once the replay ratio allows it (the caller waits until then)."""
        with self.cond:
            while not self._may_sample():
                if stop.is_set():
                    raise Stopped()
                self.cond.wait(0.5)
            self.trained_steps += self.trained_per_batch
            self._sampled += self.trained_per_batch
            self.cond.notify_all()
        if self.window is None:
            indices, items, weights = self.replay.sample(self.batch_size)
        else:
            frames, index = self.replay.field_shape(FRAMES), self.replay.field_shape(INDEX)
            extra = {FRAMES: frames[0] - index[0]} if frames is not None else {}  # a stack's C - 1 older frames
            indices, items, weights = self.replay.sample(self.batch_size, self.window, extra)
            offsets = items.pop("offset")
            if FRAMES in items:
                items[INDEX] = items[INDEX] - offsets.view(-1, 1, 1).to(items[INDEX].dtype)
        state_keys = sorted((k for k in items if k.startswith(STATE)), key=lambda k: int(k[len(STATE) :]))
        state = tuple(items.pop(k) for k in state_keys)
        if FRAMES in items:
            items["obs"] = frame_stacks.decode(items.pop(FRAMES), items.pop(INDEX))
        batch = {k: v.transpose(0, 1) for k, v in items.items()}
        batch[REPLAY_INDEX] = torch.from_numpy(indices)
        batch[REPLAY_WEIGHT] = weights
        if self.pin:
            batch = {k: v.pin_memory() for k, v in batch.items()}
            state = tuple(s.pin_memory() for s in state)
        return batch, state

    def ready_batch(self) -> tuple[dict, tuple] | None:
        """Without threads or waiting (--deterministic, rl_core/runtime/lockstep.py): the queued chunks
        inserted while the replay ratio allows, then a batch if it allows one, else None."""
        while self._may_insert():
            try:
                unroll, state = self.queue.get_nowait()
            except queue.Empty:
                break
            self.insert(unroll, state)
        if not self._may_sample():
            return None
        return self.sample_batch(threading.Event())

    def take_new_steps(self) -> int:
        with self.cond:
            steps, self._new_steps = self._new_steps, 0
        return steps

    def update_priorities(self, indices: torch.Tensor, priorities: np.ndarray) -> None:
        self.replay.update_priorities(indices.cpu().numpy(), priorities)

    # -------------------------------------------------------------- logs
    def log_stats(self) -> dict[str, float]:
        with self.cond:
            sampled, inserted = self._sampled, self._inserted_since
            self._sampled = self._inserted_since = 0
        return {
            "replay_size": len(self.replay) * self.per_sequence,
            "replay_mb": round(self.replay.nbytes / 2**20, 1),
            "replay_sample_insert_ratio": sampled / inserted if inserted else float("nan"),
            "replay_mean_priority": self.replay.mean_priority() if len(self.replay) else float("nan"),
        }

    # -------------------------------------------------------- checkpoints
    def save(self, rundir: str) -> None:
        """replay.tar beside model.tar, with --checkpoint_replay."""
        if not self.flags.checkpoint_replay:
            return
        with self.cond:
            counters = {
                "inserted_steps": self.inserted_steps,
                "trained_steps": self.trained_steps,
                "steps_at_start": -1 if self.steps_at_start is None else self.steps_at_start,
            }
        with self.replay.lock:  # the state shares the replay's arrays: no insert while they are written
            checkpoint_file.save(os.path.join(rundir, "replay.tar"), {"replay": self.replay.state_dict(), **counters})
        log.info("saved the replay (%s, %.1f MB)", self.amount(len(self.replay)), self.replay.nbytes / 2**20)

    def restore(self, rundir: str) -> None:
        """A resumed run restores replay.tar with --checkpoint_replay; else it refills before learning."""
        path = os.path.join(rundir, "replay.tar")
        if not self.flags.checkpoint_replay or not os.path.exists(path):
            log.info("the replay starts empty: learning resumes once it holds %s", self.amount(self.min_size))
            return
        state = checkpoint_file.load(path, key="replay", fix="delete it to refill the replay before learning")
        try:
            self.replay.load_state_dict(state["replay"])
        except (KeyError, ValueError) as e:
            raise UserError(
                f"{path} does not fit this run ({e}): delete it to refill the replay, or "
                f"resume with the --replay_buffer_size it was saved with"
            ) from None
        if self.replay.nbytes and self.replay.field_shape(POLICY_VERSION) is None:  # (fields stored, not it)
            self._versions = False
            log.info("%s holds no policy versions (saved before they were stored): no policy_lag is logged", path)
        self.inserted_steps = int(state["inserted_steps"])
        self.trained_steps = int(state["trained_steps"])
        start = int(state["steps_at_start"])
        self.steps_at_start = None if start < 0 else start
        log.info("restored the replay from %s: %s", path, self.amount(len(self.replay)))
