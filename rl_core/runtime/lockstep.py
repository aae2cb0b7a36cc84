"""--deterministic: acting and learning alternate in one thread, in a fixed order.

The default runtime is asynchronous (actor threads, a dynamic inference batcher, a learner
thread): which weights acted, which unrolls share a batch and the order of the random draws
(action sampling, minibatch permutations, replay sampling) depend on the threads' timing, so the
same seed gives a different curve.  ``Lockstep`` runs the same parts in one thread instead, one
round at a time:

1. inference for every server's K envs in one batch, in server order (one ``agent.act``);
2. every server's actions sent, then every server's step received (the servers step in parallel);
   the sequences completed go to the data source in server order;
3. every batch the data source can make without waiting is learned (``Learner.learn``: its
   optimizer steps, then the weights published); a row of logs.csv when a batch crosses a multiple
   of ``--log_step_interval``.

Every random draw then comes in the same order, from torch's and numpy's generators seeded by
``--seed`` (the replay's from its own seeded generator), and the env servers' envs are seeded per
slot: two runs of one command on one machine (the same torch threads) write the same logs.csv rows,
timings aside.  Acting waits for learning and learning for acting, which costs the overlap the
asynchronous runtime has (README, "Reproducible runs").
"""

from __future__ import annotations

import threading

from rl_core.errors import RunFailure
from rl_core.runtime import transport as tp
from rl_core.runtime.inference import Request


class Lockstep:
    def __init__(
        self,
        actors: list,
        answer,
        learner,
        data_source,
        learner_queue,
        stop: threading.Event,
        total_steps: int,
        after_batch=None,
    ):
        """``actors``: ``ActorThread``s of the servers, in order; ``answer(requests)``: one inference pass
        (``inference.answer`` bound to the inference model); ``after_batch(step before, step after)``:
        called after each learned batch (the run's logs)."""
        self.actors = actors
        self.answer = answer
        self.learner = learner
        self.data_source = data_source
        self.queue = learner_queue
        self.stop = stop
        self.total_steps = total_steps
        self.after_batch = after_batch
        self.rounds = 0
        self.current = None  # the actor whose server is being talked to (named if its connection fails)

    def run(self) -> None:
        try:
            for actor in self.actors:
                self.current = actor
                actor.begin()
            while not self.stop.is_set():
                self._act()
                self._learn()
        except (tp.ConnectionClosed, tp.ProtocolError, OSError) as e:
            if self.stop.is_set():
                return
            actor = self.current
            reason = "closed the connection" if isinstance(e, tp.ConnectionClosed) else f"failed ({e})"
            raise RunFailure(
                f"env server {actor.index} ({actor.address}) {reason}: --deterministic does not "
                f"reconnect (a restarted server's envs would not reproduce the run); the server's log "
                f"says why it went"
            ) from None

    def _act(self) -> None:
        requests = [Request(actor.inputs(), actor.state, actor.K) for actor in self.actors]
        self.answer(requests)
        for actor, request in zip(self.actors, requests):
            self.current = actor
            actor.send(request.result[0])
        for actor, request in zip(self.actors, requests):
            self.current = actor
            finished = actor.receive(*request.result)
            if finished is not None:
                self.queue.put_nowait(finished)
        self.rounds += 1

    def _learn(self) -> None:
        learner, source = self.learner, self.data_source
        while not self.stop.is_set():
            ready = source.ready_batch()
            if ready is None:
                return
            batch, state, versions = learner.to_device(*ready)
            before = learner.step
            learner.learn(batch, state, source.take_new_steps(), versions)
            if self.after_batch is not None:
                self.after_batch(before, learner.step)
            if learner.step >= self.total_steps:
                self.stop.set()
