"""The acting loop in a process of its own (``--acting_process``): acting and inference off the learner's GIL.

In one process the learner's update and acting's per-step Python (the servers' messages, the stores, the
inference batches) take turns on one GIL.  With ``--acting_process`` the learner process starts one child
(``multiprocessing``'s spawn) that runs ``ActingLoop`` over the servers' connections (their sockets passed
to it) with the inference copy of the model in shared memory, as sample-factory's policy workers read
theirs:

- the learner publishes into those shared tensors, and the weights' version into a shared scalar, under a
  lock both processes take (``learner.Publisher``; ``inference.answer`` reads them under it);
- a completed sequence is written into a free slot of ``UnrollSlots`` (shared tensors: each field
  [length + 1, K, ...] and the recurrent state at its first step), and its index sent to the learner
  process, whose receiver thread copies it out, frees the slot and puts it on the learner queue; no free
  slot is a full queue to the loop (that server waits);
- the child's episode records, step counts, reconnections and inference batch counts travel with each
  index (and once more at its end), its first error as one message that the receiver raises as the same
  error class, so the run ends as it would in one process.

The child ends when the run's stop is set, and by itself when the learner process is gone (kill -9).
Central inference on the CPU only: a GPU's model stays in the learner process (--no-acting_process).
"""

from __future__ import annotations

import logging
import os
import queue
import threading

import numpy as np
import torch
import torch.multiprocessing as mp

from rl_core import errors as run_errors
from rl_core.data.batch import step_fields
from rl_core.errors import RunFailure, Stopped, UserError

log = logging.getLogger("learner")

RECEIVE_POLL_S = 0.5
JOIN_S = 5.0


class UnrollSlots:
    """``n`` slots of shared tensors, each a sequence of the actors' fields and the state at its first step."""

    def __init__(self, fields: dict, length: int, num_envs: int, state_template: tuple, n: int):
        def tensor(shape, dtype):
            return torch.from_numpy(np.zeros((length + 1, num_envs, *shape), dtype)).share_memory_()

        self.fields = [{name: tensor(shape, dtype) for name, (shape, dtype) in fields.items()} for _ in range(n)]
        self.states = [tuple(torch.zeros_like(s).share_memory_() for s in state_template) for _ in range(n)]


def check_shared_memory(fields: dict, length: int, num_envs: int, n: int, path: str = "/dev/shm") -> None:
    """Room in /dev/shm for ``n`` slots (torch's shared tensors live there; a container's default 64 MB would end
    the run in a bus error when a page past it is touched): one line naming the fix where it is short."""
    need = (
        n
        * (length + 1)
        * num_envs
        * sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in fields.values())
    )
    try:
        stat = os.statvfs(path)
    except OSError:
        return
    free = stat.f_bavail * stat.f_frsize
    if need > free:
        raise UserError(
            f"--acting_process needs {need / 2**20:,.0f} MB of shared memory for its {n} sequence slots, and {path} "
            f"has {free / 2**20:,.0f} MB free: enlarge it (docker run --shm-size=2g) or drop --acting_process"
        )


class SlotQueue:
    """The acting process's learner queue: ``put_nowait`` writes a sequence into a free slot and sends its index
    with the statistics gathered since the last one; ``queue.Full`` where no slot is free."""

    def __init__(self, slots: UnrollSlots, free, out, stats, counts: list):
        self.slots, self.free, self.out, self.stats, self.counts = slots, free, out, stats, counts
        self._sent = [0, 0, 0]  # env steps, dropped unrolls, reconnects

    def put_nowait(self, item) -> None:
        unroll, state = item
        try:
            i = self.free.get_nowait()
        except queue.Empty:
            raise queue.Full from None
        for name, value in unroll.items():
            self.slots.fields[i][name].copy_(value)
        for dst, src in zip(self.slots.states[i], state):
            dst.copy_(src)
        self.out.put(("unroll", i, self.deltas()))

    def deltas(self) -> tuple:
        s = self.stats
        with s.lock:
            totals = [s.env_steps, s.dropped_unrolls, s.reconnects]
        change = [a - b for a, b in zip(totals, self._sent)]
        self._sent = totals
        batches, envs = self.counts
        self.counts[0] = self.counts[1] = 0
        return (s.take_episodes(), *change, batches, envs)


def _acting_main(
    flags, spec, addresses, sockets, secret, model, lock, stop, slots, free, out, parent_pid, logs
) -> None:
    """The child: the acting loop over the passed connections, until ``stop`` or the learner process is gone; its log
    lines on the console and in ``logs`` (the learner process's log files: out.log)."""
    from rl_core.agents import make_agent
    from rl_core.runtime import transport as tp
    from rl_core.runtime.acting_loop import ActingLoop
    from rl_core.runtime.actor_pool import ActorThread, RunStats, ServerLink
    from rl_core.runtime.inference import answer
    from rl_core.runtime.threads import ErrorBox, name_os_thread, start_thread

    from rl_core.records.run_log import setup_logging

    setup_logging(None)
    for path in logs:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.getLogger().handlers[0].formatter)
        logging.getLogger().addHandler(handler)
    torch.set_num_threads(1)
    name_os_thread("actor-loop")

    def watch_parent():
        while not stop.wait(0.5):
            if os.getppid() != parent_pid:
                stop.set()

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    agent = make_agent(flags, spec)
    stats, counts = RunStats(), [0, 0]
    slot_queue = SlotQueue(slots, free, out, stats, counts)

    def infer(requests):
        answer(requests, model, lock, "cpu", agent)
        counts[0] += 1
        counts[1] += sum(r.size for r in requests)

    actors = []
    for i, (address, sock) in enumerate(zip(addresses, sockets)):
        link = ServerLink(
            tp.Connection(sock, max_bytes=flags.max_message_bytes, poll_s=0.5),
            spec,
            address.kind == "unix" and flags.shared_memory,
        )
        actors.append(
            ActorThread(
                i, address, link, spec, flags, secret, None, slot_queue, model.initial_state, stats, stop, agent
            )
        )
    errors = ErrorBox(stop)
    loop = ActingLoop(
        actors,
        infer,
        slot_queue,
        stop,
        flags.max_inference_batch_size or flags.num_actors,
        flags.inference_batch_timeout_ms / 1000.0,
        lambda name, target: start_thread(name, target, errors),
    )
    try:
        loop.run()
    except Stopped:
        pass
    except BaseException as e:  # noqa: BLE001 - sent to the learner process, which ends the run with it
        errors.put("actor-loop", e)
    finally:
        for actor in actors:
            actor.conn.close()
    out.put(("stats", slot_queue.deltas()))
    if errors.error is not None:
        out.put(("error", type(errors.error).__name__, str(errors.error), errors.thread_name))
    out.put(("end",))


def _error_from(name: str, text: str) -> BaseException:
    """The child's error as the learner process raises it: the same class where it is one of rl_core.errors."""
    cls = getattr(run_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Stopped:
        return cls(text)
    return RunFailure(f"the acting process failed: {name}: {text}")


class ActingProcess:
    """The learner process's side: the child started with the servers' sockets, the receiver thread."""

    def __init__(self, parts, flags, stop: threading.Event):
        self.parts, self.flags, self.stop = parts, flags, stop
        p, ctx = parts, mp.get_context("spawn")
        actor = p.actors[0]
        template = p.inference_model.initial_state(actor.K)
        fields = {**step_fields(actor.spec), **p.agent.unroll_fields()}
        n = p.learner_queue.maxsize + 2 * len(p.actors)
        check_shared_memory(fields, actor.length, actor.K, n)
        self.slots = UnrollSlots(fields, actor.length, actor.K, template, n)
        self.free, self.out, self.child_stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        for i in range(n):
            self.free.put(i)
        self.process = ctx.Process(
            target=_acting_main,
            name="acting",
            args=(
                flags,
                actor.spec,
                [a.address for a in p.actors],
                [a.conn.conn.sock for a in p.actors],
                actor.secret,
                p.inference_model,
                p.inference_lock,
                self.child_stop,
                self.slots,
                self.free,
                self.out,
                os.getpid(),
                [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)],
            ),
            daemon=True,
        )

    def start(self, start_thread) -> list[threading.Thread]:
        self.process.start()
        for actor in self.parts.actors:  # the child holds its own copies of the sockets now
            actor.conn.close()
        log.info("acting and central inference in process %d (--acting_process)", self.process.pid)

        def pass_stop_on():  # at once: the servers are stopped right after the run's stop, before the joins
            self.stop.wait()
            self.child_stop.set()

        threading.Thread(target=pass_stop_on, name="acting-stop", daemon=True).start()
        return [start_thread("actor-receiver", self.receive)]

    def receive(self) -> None:
        try:
            while True:
                if self.stop.is_set():
                    raise Stopped()
                try:
                    message = self.out.get(timeout=RECEIVE_POLL_S)
                except queue.Empty:
                    if self.stop.is_set():
                        raise Stopped() from None
                    if not self.process.is_alive():
                        raise RunFailure(
                            f"the acting process exited (code {self.process.exitcode}) without a word: killed, or "
                            f"out of memory; the run's log above says what it did last"
                        ) from None
                    continue
                kind = message[0]
                if kind == "unroll":
                    self._hand_over(message[1])
                    self._count(message[2])
                elif kind == "stats":
                    self._count(message[1])
                elif kind == "error":
                    raise _error_from(message[1], message[2])
                elif kind == "end":
                    if self.stop.is_set():
                        raise Stopped()
                    raise RunFailure("the acting process ended before the run")
        finally:
            self.child_stop.set()
            self.process.join(JOIN_S)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(JOIN_S)

    def _hand_over(self, i: int) -> None:
        unroll = {name: value.clone() for name, value in self.slots.fields[i].items()}
        state = tuple(s.clone() for s in self.slots.states[i])
        self.free.put(i)
        while True:
            try:
                self.parts.learner_queue.put((unroll, state), timeout=RECEIVE_POLL_S)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise Stopped() from None

    def _count(self, deltas: tuple) -> None:
        episodes, env_steps, dropped, reconnects, batches, envs = deltas
        stats = self.parts.stats
        stats.add_episodes(episodes)
        with stats.lock:
            stats.env_steps += env_steps
            stats.dropped_unrolls += dropped
            stats.reconnects += reconnects
        if batches:
            self.parts.batcher.count(envs, batches)
