"""The acting loop in a process of its own (``--acting_process``): acting and inference off the learner's GIL.

In one process the learner's update and acting's per-step Python (the servers' messages, the stores, the
inference batches) take turns on one GIL.  With ``--acting_process`` the learner process starts one child
(``multiprocessing``'s spawn; ``--acting_processes N``: N children, each for a contiguous share of the servers)
that runs ``ActingLoop`` over the servers' connections (their sockets passed to it) with the inference copy of
the model in shared memory, as sample-factory's policy workers read theirs:

- the learner publishes into those shared tensors, and the weights' version into a shared scalar, under a
  lock both processes take (``FileLock``: flock on a file both opened, unlinked once the child is ready;
  ``learner.Publisher``; ``inference.answer`` reads them under it);
- a completed sequence is written into a free slot of ``UnrollSlots`` (shared tensors: each field
  [length + 1, K, ...] and the recurrent state at its first step), and its index sent to the learner
  process, whose receiver thread copies it out, frees the slot and puts it on the learner queue; no free
  slot is a full queue to the loop (that server waits);
- the child's episode records, step counts, reconnections and inference batch counts travel with each
  index (and once more at its end), its first error as one message that the receiver raises as the same
  error class, so the run ends as it would in one process.

The two talk through pipes, one way each (``Pipe(duplex=False)``: slot indices to the child, JSON messages back;
nothing is unpickled after the start) and hold no semaphore, so an exit of either leaves nothing for
multiprocessing's resource tracker to clean.  The child ends when the run's stop is sent, and by itself when
the learner process is gone (its pipe's end closes: kill -9 included).

On a GPU learner (``--acting_process`` given; unset, a GPU run acts in the learner process) the inference copy
stays on the GPU and the child gets its tensors through CUDA IPC (``torch.multiprocessing``, as sample-factory's
policy workers share theirs): one copy of the weights, no host round trip.  The two processes' kernels are not
ordered by one stream, so the lock is a ``DeviceSyncedLock``: whoever holds it waits for its own kernels on the
device before letting go (the learner's copy of the weights, the child's forward that reads them).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
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


class FileLock:
    """A lock between processes: ``fcntl.flock`` on a file each process opened itself (flock excludes open files),
    with a thread lock inside a process.  The file is unlinked at once: each process reaches it through the
    learner process's descriptor (/proc/PID/fd/N, a new open file each time), so no exit leaves it behind."""

    def __init__(self, path: str | None = None):
        self._threads = threading.Lock()
        if path is None:  # the learner process: a new file, nameless from the start
            fd, name = tempfile.mkstemp(prefix="polybeast-weights-", suffix=".lock")
            os.unlink(name)
            self._fd = fd
            self.path = f"/proc/{os.getpid()}/fd/{fd}"
        else:
            self._fd = os.open(path, os.O_RDWR)
            self.path = path

    def __enter__(self):
        self._threads.acquire()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._threads.release()

    def __getstate__(self):  # the child opens the learner's file anew
        return {"path": self.path}

    def __setstate__(self, state):
        self.__init__(state["path"])


class DeviceSyncedLock:
    """``lock``, whose holder waits for its work on a CUDA ``device`` before it lets go: across processes the
    device's streams order nothing, so a forward would otherwise read weights half copied, or a copy overwrite
    weights a forward still reads.  Pickled with its lock (the child opens the learner's file anew)."""

    def __init__(self, lock: FileLock, device: str):
        self.lock, self.device = lock, device

    def __enter__(self):
        self.lock.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        try:
            torch.cuda.synchronize(self.device)
        finally:
            self.lock.__exit__(*exc)


def weights_lock(device: torch.device) -> FileLock | DeviceSyncedLock:
    """The lock of the inference copy shared with acting processes: a ``FileLock``, on a GPU one that waits for
    the holder's kernels (``DeviceSyncedLock``)."""
    lock = FileLock()
    return DeviceSyncedLock(lock, str(device)) if device.type == "cuda" else lock


def _send(conn, *message) -> None:
    conn.send_bytes(json.dumps(message).encode())


def _recv(conn) -> list:
    return json.loads(conn.recv_bytes())


class SlotQueue:
    """The acting process's learner queue: ``put_nowait`` writes a sequence into a free slot and sends its index
    with the statistics gathered since the last one; ``queue.Full`` where no slot is free."""

    def __init__(self, slots: UnrollSlots, free, out, stats, counts: list):
        self.slots, self.free, self.out, self.stats, self.counts = slots, free, out, stats, counts
        self._sent = [0, 0, 0]  # env steps, dropped unrolls, reconnects

    def put_nowait(self, item) -> None:
        unroll, state = item
        if not self.free.poll():
            raise queue.Full
        i = _recv(self.free)[0]
        for name, value in unroll.items():
            self.slots.fields[i][name].copy_(value)
        for dst, src in zip(self.slots.states[i], state):
            dst.copy_(src)
        _send(self.out, "unroll", i, self.deltas())

    def deltas(self) -> list:
        s = self.stats
        with s.lock:
            totals = [s.env_steps, s.dropped_unrolls, s.reconnects]
        change = [a - b for a, b in zip(totals, self._sent)]
        self._sent = totals
        batches, envs = self.counts
        self.counts[0] = self.counts[1] = 0
        return [s.take_episodes(), *change, batches, envs]


def _acting_main(flags, spec, addresses, sockets, secret, model, lock, control, slots, free, out, index, logs) -> None:
    """The child: the acting loop over the passed connections (``addresses``: each server's index in the run and
    address) until ``control`` says stop or closes (the learner process is gone); its log lines on the console and in
    ``logs`` (the learner process's log files: out.log).  ``index``: its number among several acting processes (None:
    the one).  Inference runs where ``model`` is (the CPU, or the learner's GPU through CUDA IPC)."""
    from rl_core.agents import make_agent
    from rl_core.records.run_log import setup_logging
    from rl_core.runtime import transport as tp
    from rl_core.runtime.acting_loop import ActingLoop
    from rl_core.runtime.actors import ActorThread, RunStats, ServerLink
    from rl_core.runtime.inference import answer
    from rl_core.runtime.threads import ErrorBox, name_os_thread, start_thread

    setup_logging(None)
    for path in logs:
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.getLogger().handlers[0].formatter)
        logging.getLogger().addHandler(handler)
    torch.set_num_threads(1)
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    name_os_thread("actor-loop" if index is None else f"actor-loop-{index}")
    stop = threading.Event()

    def watch_learner():  # a word from the learner process, or its end
        try:
            control.recv_bytes()
        except (EOFError, OSError):
            pass
        stop.set()

    threading.Thread(target=watch_learner, name="learner-watch", daemon=True).start()
    agent = make_agent(flags, spec)
    stats, counts = RunStats(), [0, 0]
    slot_queue = SlotQueue(slots, free, out, stats, counts)

    def infer(requests):
        answer(requests, model, lock, device, agent)
        counts[0] += 1
        counts[1] += sum(r.size for r in requests)

    actors = []
    for (i, address), sock in zip(addresses, sockets):  # (i: the server's index in the run)
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
        _send(out, "ready")
        loop.run()
    except Stopped:
        pass
    except BaseException as e:  # noqa: BLE001 - sent to the learner process, which ends the run with it
        errors.put("actor-loop", e)
    finally:
        for actor in actors:
            actor.conn.close()
    try:
        _send(out, "stats", slot_queue.deltas())
        if errors.error is not None:
            _send(out, "error", type(errors.error).__name__, str(errors.error))
        _send(out, "end")
    except OSError:  # the learner process is gone
        pass


def _error_from(name: str, text: str) -> BaseException:
    """The child's error as the learner process raises it: the same class where it is one of rl_core.errors."""
    cls = getattr(run_errors, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and cls is not Stopped:
        return cls(text)
    return RunFailure(f"the acting process failed: {name}: {text}")


class ActingProcess:
    """The learner process's side of acting process ``index``: the child started with the sockets of its share of the
    servers (``actors``: their ActorThreads, all of them with one acting process), the receiver thread."""

    def __init__(self, parts, actors: list, index: int, flags, stop: threading.Event):
        self.parts, self.actors, self.index, self.flags, self.stop = parts, actors, index, flags, stop
        p, ctx = parts, mp.get_context("spawn")
        actor = actors[0]
        template = tuple(s.cpu() for s in p.inference_model.initial_state(actor.K))  # (the slots: host memory)
        fields = {**step_fields(actor.spec), **p.agent.unroll_fields()}
        n = p.learner_queue.maxsize + 2 * len(actors)
        check_shared_memory(fields, actor.length, actor.K, n)
        self.slots = UnrollSlots(fields, actor.length, actor.K, template, n)
        free_r, self.free = ctx.Pipe(duplex=False)
        self.out, out_w = ctx.Pipe(duplex=False)
        control_r, self.control = ctx.Pipe(duplex=False)
        for i in range(n):
            _send(self.free, i)
        self.process = ctx.Process(
            target=_acting_main,
            name="acting",
            args=(
                flags,
                actor.spec,
                [(a.index, a.address) for a in actors],
                [a.conn.conn.sock for a in actors],
                actor.secret,
                p.inference_model,
                p.inference_lock,
                control_r,
                self.slots,
                free_r,
                out_w,
                index if flags.acting_processes > 1 else None,
                [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)],
            ),
            daemon=True,
        )
        self._child_ends = (free_r, out_w, control_r)

    def start(self, start_thread) -> list[threading.Thread]:
        """The child started and ready (its imports, agent and connections made), then the receiver thread."""
        self.process.start()
        for end in self._child_ends:  # the child holds its own now: an exit of either closes the pipes
            end.close()
        for actor in self.actors:  # ... and its own copies of the sockets
            actor.conn.close()
        message = self._next(startup=True)
        if message[0] != "ready":
            self._raise(message)
        if self.flags.acting_processes > 1:
            log.info(
                "acting and central inference for env servers %s in process %d (--acting_processes %d)",
                ", ".join(str(a.index) for a in self.actors),
                self.process.pid,
                self.flags.acting_processes,
            )
        else:
            log.info("acting and central inference in process %d (--acting_process)", self.process.pid)

        def pass_stop_on():  # at once: the servers are stopped right after the run's stop, before the joins
            self.stop.wait()
            self._stop_child()

        threading.Thread(target=pass_stop_on, name="acting-stop", daemon=True).start()
        suffix = f"-{self.index}" if self.flags.acting_processes > 1 else ""
        return [start_thread(f"actor-receiver{suffix}", self.receive)]

    def _stop_child(self) -> None:
        try:
            self.control.send_bytes(b"stop")
        except OSError:
            pass

    def _next(self, startup: bool = False) -> list:
        """The child's next message; Stopped at the run's stop; a child that died is a RunFailure."""
        while True:
            if self.stop.is_set():
                raise Stopped()
            try:
                if self.out.poll(RECEIVE_POLL_S):
                    return _recv(self.out)
            except (EOFError, OSError):
                pass
            else:
                if self.process.is_alive():
                    continue
            self.process.join(JOIN_S)
            raise RunFailure(
                f"the acting process exited (code {self.process.exitcode}) "
                f"{'while starting' if startup else 'without a word'}: killed, or out of memory; the log above says "
                f"what it did last"
            )

    def _raise(self, message: list) -> None:
        if message[0] == "error":
            raise _error_from(message[1], message[2])
        if message[0] == "end":
            if self.stop.is_set():
                raise Stopped()
            raise RunFailure("the acting process ended before the run")

    def receive(self) -> None:
        try:
            while True:
                message = self._next()
                if message[0] == "unroll":
                    self._hand_over(message[1])
                    self._count(message[2])
                elif message[0] == "stats":
                    self._count(message[1])
                else:
                    self._raise(message)
        finally:
            self._stop_child()
            self.process.join(JOIN_S)
            if self.process.is_alive():
                self.process.terminate()
                self.process.join(JOIN_S)

    def _hand_over(self, i: int) -> None:
        unroll = {name: value.clone() for name, value in self.slots.fields[i].items()}
        state = tuple(s.clone() for s in self.slots.states[i])
        _send(self.free, i)
        while True:
            try:
                self.parts.learner_queue.put((unroll, state), timeout=RECEIVE_POLL_S)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise Stopped() from None

    def _count(self, deltas: list) -> None:
        episodes, env_steps, dropped, reconnects, batches, envs = deltas
        stats = self.parts.stats
        stats.add_episodes(episodes)
        with stats.lock:
            stats.env_steps += env_steps
            stats.dropped_unrolls += dropped
            stats.reconnects += reconnects
        if batches:
            self.parts.batcher.count(envs, batches)
