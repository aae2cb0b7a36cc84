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

Under torchrun (``peers``) every rank runs its own lockstep on its own servers, and the ranks agree
before each batch (``Peers.exchange``: one all-reduce), which a rank enters once it holds a batch or
stops: a batch is learned when every rank holds one (with the run's totals split evenly they fill on
the same round; a rank that is ahead waits in the agreement for the others), the global step grows by
every rank's new steps, and a rank that stops (a signal, a lost server) stops them all at the next
agreement.  Agreeing after every round of acting instead cost an all-reduce per env step, the
2-rank job's time going to the ranks waiting on each other.  The
collectives then come in one order, each rank's draws from its own seeded generators
(``torch.manual_seed(seed + rank)``), and two runs of one torchrun command write the same rows.
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
        peers=None,
    ):
        """``actors``: ``ActorThread``s of the servers, in order; ``answer(requests)``: one inference pass
        (``inference.answer`` bound to the inference model); ``after_batch(step before, step after)``:
        called after each learned batch (the run's logs); ``peers``: the other torchrun ranks
        (``rl_core.runtime.distributed.Peers``; None in one process)."""
        self.actors = actors
        self.answer = answer
        self.learner = learner
        self.data_source = data_source
        self.queue = learner_queue
        self.stop = stop
        self.total_steps = total_steps
        self.after_batch = after_batch
        self.peers = peers
        self.pending = None  # (torchrun) this rank's batch, held until every rank has one
        self.new_steps = 0  # (torchrun) every rank's steps taken in since the last batch learned
        self.rounds = 0
        self.current = None  # the actor whose server is being talked to (named if its connection fails)

    def run(self) -> None:
        try:
            for actor in self.actors:
                self.current = actor
                actor.begin()
            while True:
                if not self.stop.is_set():
                    self._act()
                if not (self._learn() if self.peers is None else self._learn_with_peers()):
                    return
        except (tp.ConnectionClosed, tp.ProtocolError, OSError) as e:
            stopped = self.stop.is_set()
            if self.peers is not None:
                self._leave()
            if stopped:
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

    def _learn(self) -> bool:
        """Every batch the data source can make; False: the run is over."""
        learner, source = self.learner, self.data_source
        while not self.stop.is_set():
            ready = source.ready_batch()
            if ready is None:
                return True
            batch, state, versions = learner.to_device(*ready)
            self._learn_batch(batch, state, source.take_new_steps(), versions)
        return False

    def _learn_with_peers(self) -> bool:
        """(torchrun) Every batch that every rank holds, the ranks agreeing before each; False: the run is
        over on every rank (a rank's stop, or --total_steps)."""
        learner, source, peers = self.learner, self.data_source, self.peers
        while True:
            stopping = self.stop.is_set()
            if self.pending is None and not stopping:
                self.pending = source.ready_batch()
                if self.pending is None:
                    return True  # another round of acting: a rank agrees only once it holds a batch or stops
            agreed = peers.exchange(stopping, source.take_new_steps(), ready=self.pending is not None)
            self.new_steps += agreed.new_steps
            if agreed.stopping:
                self.stop.set()
                peers.finish(learner)
                return False
            if len(agreed.ready) < peers.group.size:
                return True  # (a rank that left without a batch stops every rank above: not reached)
            batch, state, versions = learner.to_device(*self.pending)
            self.pending, new_steps, self.new_steps = None, self.new_steps, 0
            self._learn_batch(batch, state, new_steps, versions)
            if learner.step >= self.total_steps:  # every rank's step is the same (a signal's stop: agreed first)
                peers.finish(learner)
                return False

    def _learn_batch(self, batch, state, new_steps: int, versions) -> None:
        learner = self.learner
        before = learner.step
        learner.learn(batch, state, new_steps, versions)
        if self.after_batch is not None:
            self.after_batch(before, learner.step)
        if learner.step >= self.total_steps:
            self.stop.set()

    def _leave(self) -> None:
        """(torchrun) This rank's acting stopped: the agreement its peers wait in tells them to stop too."""
        self.peers.exchange(True, 0, ready=False)
        self.peers.finish(self.learner)
