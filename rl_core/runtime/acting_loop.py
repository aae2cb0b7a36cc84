"""Acting for every env server of the process in one thread (``--acting_loop``, the default).

The thread-per-server runtime (``ActorThread.run``, ``--no-acting_loop``) hands every env step between
threads twice: an actor thread submits its envs' inputs, the inference thread answers them, the actor
thread wakes to send the actions.  Under one GIL each hand-over is a context switch and a wait.  This loop
does the same work in one thread, as the --deterministic lockstep does, but asynchronously:

1. the servers whose steps came in (``ready``) are answered in one inference batch (``answer``: one
   ``agent.act``; at most ``--max_inference_batch_size`` envs a batch, the rest in the next), and each
   one's actions sent at once;
2. it waits (``selectors``) for the next step of any server with actions in flight, then for up to
   ``--inference_batch_timeout_ms`` for more of them, so that servers stepping at once share a batch;
3. each step received is recorded into its server's store (``ActorThread.receive``); a completed
   sequence goes to the learner queue, and a server whose sequence the full queue does not take waits
   (holds its next action) until it does: a full queue holds back that server alone.

The per-server state (store, agent state, connection) stays in each ``ActorThread``.  A server whose
connection fails is reconnected in a thread of its own (``ActorThread.reconnect``, its unroll in flight
dropped) while the others act; one silent past ``--env_timeout`` ends the run naming it, as before.
"""

from __future__ import annotations

import queue
import selectors
import time

from rl_core.runtime.actors import LOST_CONNECTION, ActorThread
from rl_core.runtime.inference import Request

POLL_S = 0.5  # how often the loop wakes with nothing to do, to check stop and silent servers
HELD_POLL_S = 0.005  # ... while a completed sequence waits for room in the learner queue
LOST_GRACE_S = 0.5  # how long a lost connection waits for a stop that may be on its way before reconnecting


class ActingLoop:
    def __init__(
        self,
        actors: list[ActorThread],
        answer,
        learner_queue: queue.Queue,
        stop,
        max_batch_envs: int,
        batch_wait_s: float,
        start_thread,
    ):
        """``answer(requests)``: one inference pass (``inference.answer`` bound to the inference model, counted
        in the batcher's statistics); ``start_thread(name, target)``: a thread whose error ends the run (the
        reconnections)."""
        self.actors = actors
        self.answer = answer
        self.queue = learner_queue
        self.stop = stop
        self.max_batch_envs = max_batch_envs
        self.batch_wait_s = batch_wait_s
        self.start_thread = start_thread
        self.selector = selectors.DefaultSelector()
        self.ready: list[ActorThread] = []  # their step recorded: waiting for inference
        self.in_flight: dict[ActorThread, tuple] = {}  # actions sent: (inference result, sent at)
        self.held: dict[ActorThread, tuple] = {}  # a completed sequence the learner queue has not taken
        self.rejoined: queue.SimpleQueue = queue.SimpleQueue()  # reconnected, begun: back to ready

    def run(self) -> None:
        try:
            for actor in self.actors:
                actor.begin()
                self.ready.append(actor)
            while not self.stop.is_set():
                self._take_rejoined()
                self._hand_over_held()
                if self.ready:
                    self._infer_and_send()
                self._receive(self._wait())
                self._check_silent()
        finally:
            self.selector.close()

    # ------------------------------------------------------------------ steps
    def _take_rejoined(self) -> None:
        while True:
            try:
                self.ready.append(self.rejoined.get_nowait())
            except queue.Empty:
                return

    def _hand_over_held(self) -> None:
        for actor in list(self.held):
            try:
                self.queue.put_nowait(self.held[actor])
            except queue.Full:
                continue
            del self.held[actor]
            self.ready.append(actor)

    def _infer_and_send(self) -> None:
        batch, envs = [], 0
        while self.ready and (not batch or envs + self.ready[0].K <= self.max_batch_envs):
            actor = self.ready.pop(0)
            batch.append(actor)
            envs += actor.K
        requests = [Request(actor.inputs(), actor.state, actor.K) for actor in batch]
        self.answer(requests)
        now = time.monotonic()
        for actor, request in zip(batch, requests):
            try:
                actor.send(request.result[0])
            except LOST_CONNECTION as e:
                self._lost(actor, e)
                continue
            self.in_flight[actor] = (request.result, now)
            self.selector.register(actor.conn, selectors.EVENT_READ, actor)

    def _wait(self) -> list[ActorThread]:
        """The servers whose next message has begun to arrive: after the first, any others within the batch wait."""
        if not self.in_flight:
            if not self.ready:
                self.stop.wait(HELD_POLL_S if self.held else POLL_S)  # (reconnections under way, or held)
            return []
        timeout = 0.0 if self.ready else (HELD_POLL_S if self.held else POLL_S)
        arrived = self._arrivals(timeout)
        if arrived and self.batch_wait_s > 0 and len(arrived) < len(self.in_flight):
            deadline = time.monotonic() + self.batch_wait_s
            envs = sum(actor.K for actor in arrived) + sum(actor.K for actor in self.ready)
            while envs < self.max_batch_envs and len(arrived) < len(self.in_flight):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                more = self._arrivals(left)
                arrived.extend(more)
                envs += sum(actor.K for actor in more)
        return arrived

    def _arrivals(self, timeout: float) -> list[ActorThread]:
        """The servers whose message has begun to arrive within ``timeout``, taken out of the selector at once: the
        selector is level-triggered, so one left in would answer every later wait for the batch at once (a spin)."""
        arrived = [key.data for key, _ in self.selector.select(timeout)]
        for actor in arrived:
            self.selector.unregister(actor.conn)
        return arrived

    def _receive(self, arrived: list[ActorThread]) -> None:
        for actor in arrived:  # (out of the selector already: _arrivals)
            result, _ = self.in_flight.pop(actor)
            try:
                finished = actor.receive(*result)
            except LOST_CONNECTION as e:
                self._lost(actor, e)
                continue
            if finished is not None:
                try:
                    self.queue.put_nowait(finished)
                except queue.Full:
                    self.held[actor] = finished
                    continue
            self.ready.append(actor)

    def _check_silent(self) -> None:
        now = time.monotonic()
        for actor, (_, sent_at) in self.in_flight.items():
            actor._silent_server(now - sent_at)  # warns at half --env_timeout, ends the run at it

    # -------------------------------------------------------------- failures
    def _lost(self, actor: ActorThread, error: BaseException) -> None:
        """A server's connection failed: reconnected in a thread of its own while the others act.  The run's stop
        may be on its way (from the learner process, which stops the servers right after it): it is given
        ``LOST_GRACE_S`` to arrive, so that a shutdown is not taken for a lost server."""
        if self.stop.wait(LOST_GRACE_S):
            return
        if actor in self.in_flight:
            self.in_flight.pop(actor)
            self.selector.unregister(actor.conn)

        def rejoin():
            actor.reconnect(error)
            while True:
                try:
                    actor.begin()
                except LOST_CONNECTION as e:  # it went again before its first step
                    if self.stop.is_set():
                        return
                    actor.reconnect(e)
                    continue
                self.rejoined.put(actor)
                return

        self.start_thread(f"actor-{actor.index}-reconnect", rejoin)
