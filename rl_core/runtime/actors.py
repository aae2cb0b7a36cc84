"""The learner's side of acting: one thread per env server connection.

Each actor thread steps its server's K envs in lock-step: it sends the inputs of
the K envs to the inference batcher, sends the returned actions to the server,
and writes every step into an unroll store of T+1 steps.  Index t of the store
holds obs[t], the reward, done and truncated that came with it, and the action
that led to it with what the agent keeps of that inference step (its
``unroll_fields``: IMPALA's behaviour logits and baseline, PPO's log-probability), and the version of
the weights that chose it (``POLICY_VERSION``: the learner's batch count at their publication; the
learner takes it off the batch for the policy lag).  A full unroll goes to the bounded
learner queue and its last step becomes the first of the next one.  The agent
state of the K envs lives here (it travels through the batcher) and is stored
at the start of every unroll for the learner.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import numpy as np
import torch

from rl_core.data.batch import POLICY_VERSION, step_fields
from rl_core.data.env_spec import EnvSpec
from rl_core.errors import EnvServerError, RunFailure, Stopped, UserError
from rl_core.runtime import transport as tp
from rl_core.runtime.inference import InferenceBatcher
from rl_core.runtime.shared_steps import SharedSteps, StepLayout, receive_answer

log = logging.getLogger("actors")


class RunStats:
    """Counters and finished episodes shared between threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.episodes: list[dict] = []  # since the last log tick
        self.env_steps = 0
        self.dropped_unrolls = 0
        self.reconnects = 0

    def add_episodes(self, episodes: list[dict]) -> None:
        with self.lock:
            self.episodes.extend(episodes)

    def take_episodes(self) -> list[dict]:
        with self.lock:
            episodes, self.episodes = self.episodes, []
            return episodes


# What ends a connection (an actor then reconnects): the peer closed, sent garbage, or the socket failed.
LOST_CONNECTION = (tp.ConnectionClosed, tp.ProtocolError, ConnectionError, OSError)


class _NoAnswer(Exception):
    pass


class ServerLink:
    """The learner's end of one env server's connection: ``recv`` a message, ``send_action``.

    Over a Unix socket with ``--shared_memory`` the first action asks the server for shared memory
    (rl_core/runtime/shared_steps.py): from its answer on, a STEP's arrays are read from the mapping
    (``recv`` returns views of it, valid until the next action: the caller copies them) and an action is
    written there, the socket carrying sequence numbers.  Otherwise every array travels on the socket.
    """

    def __init__(self, conn: tp.Connection, spec: EnvSpec, share: bool):
        self.conn = conn
        self.spec = spec
        self._ask = share  # ask with the next action
        self.shared: SharedSteps | None = None
        self._seq = -1  # the last STEP's sequence number (the reset STEP's is 0)

    def recv(self, stop=None, on_idle=None) -> tuple[int, dict]:
        kind, msg = self.conn.recv(stop, on_idle=on_idle)
        if kind == tp.STEP and self.shared is not None:
            if "shm_seq" not in msg or int(msg["shm_seq"][0]) != self._seq + 1:
                raise tp.ProtocolError(f"expected the notice of shared step {self._seq + 1}, got fields {sorted(msg)}")
            self._seq += 1
            step = self.shared.read_step(self._seq)
            if len(msg) > 1:  # (rare) an episode's extra statistics came with the notice
                step = {**step, **{k: v for k, v in msg.items() if k.startswith("stat/")}}
            msg = step
        elif kind == tp.STEP:
            self._seq += 1
        return kind, msg

    def fileno(self) -> int:
        """The socket's (for ``selectors``: readable when a message has begun to arrive)."""
        return self.conn.sock.fileno()

    def step_intact(self) -> bool:
        """Whether the last STEP's shared arrays were not overwritten while they were read (True on the socket)."""
        return self.shared is None or self.shared.step_intact(self._seq)

    def send_action(self, action: np.ndarray) -> None:
        # The action that answers STEP n carries n; STEP n + 1 follows it.
        if self.shared is not None:
            self.shared.write_action(self._seq, action)
            self.conn.send(tp.ACTION, {"shm_seq": np.array([self._seq], np.int64)})
            return
        if not self._ask:
            self.conn.send(tp.ACTION, {"action": action})
            return
        self._ask = False
        self.conn.send(tp.ACTION, {"action": action, "shm_request": np.ones(1, np.uint8)})
        self.shared = receive_answer(self.conn.sock, StepLayout(self.spec), self.conn.frame_timeout_s)

    def close(self) -> None:
        self.conn.close()
        if self.shared is not None:
            self.shared.close()
            self.shared = None


def connect_server(address: tp.Address, flags, secret: bytes | None, stop=None, on_retry=None):
    """Connect (retrying until --connect_timeout), authenticate over TCP, read HELLO.

    Returns ``(ServerLink, EnvSpec)``; a malformed spec is a RunFailure.
    """
    deadline = time.monotonic() + flags.connect_timeout

    def no_answer(waited: float) -> None:
        if time.monotonic() >= deadline:
            raise _NoAnswer(f"it accepted the connection but sent nothing for {waited:.0f} s")

    while True:
        sock = tp.connect(address, flags.connect_timeout, stop, on_retry, deadline=deadline)
        conn = tp.Connection(sock, max_bytes=flags.max_message_bytes, poll_s=0.5)
        try:
            if address.kind == "tcp":
                tp.client_authenticate(sock, secret, timeout=max(0.5, min(10.0, deadline - time.monotonic())))
                sock.settimeout(conn.poll_s)
            kind, msg = conn.recv(stop, on_idle=no_answer)
        except tp.AuthenticationFailed as e:
            conn.close()
            raise UserError(
                f"env server at {address}: authentication failed ({e}): give the learner and the "
                f"servers the same secret (--server_secret or $POLYBEAST_SECRET)"
            ) from None
        except (ConnectionError, tp.ConnectionClosed, tp.ProtocolError, _NoAnswer) as e:
            # A server that is dying (e.g. just killed) can still accept into its backlog, then
            # reset; one busy with another peer answers late: retry until the deadline.
            conn.close()
            if time.monotonic() >= deadline:
                raise UserError(
                    f"env server at {address} did not answer within --connect_timeout {flags.connect_timeout:g} s "
                    f"({e or type(e).__name__}): another learner or peer may hold it (a server serves one at a "
                    f"time); stop that one, or check the server's log"
                ) from None
            time.sleep(0.1)
            continue
        if kind != tp.HELLO:
            conn.close()
            raise tp.ProtocolError(f"{address} sent {tp.KINDS[kind]} before HELLO")
        try:
            spec = EnvSpec.from_json(tp.field_json(msg["spec"]))
        except (ValueError, tp.ProtocolError, KeyError) as e:
            conn.close()
            raise RunFailure(f"env server at {address} sent a malformed HELLO: {e}") from None
        share = address.kind == "unix" and flags.shared_memory
        return ServerLink(conn, spec, share), spec


def spec_key(spec: EnvSpec) -> tuple:
    """What every server of a run must agree on."""
    return (spec.obs, spec.action, spec.num_envs)


class ActorThread:
    def __init__(
        self,
        index: int,
        address: tp.Address,
        conn: ServerLink,
        spec: EnvSpec,
        flags,
        secret: bytes | None,
        batcher: InferenceBatcher,
        learner_queue,
        initial_state_fn,
        stats: RunStats,
        stop: threading.Event,
        agent,
    ):
        self.index = index
        self.address = address
        self.conn = conn
        self.spec = spec
        self.flags = flags
        self.env_timeout = float(flags.env_timeout)
        self._warned_silent = False
        self.secret = secret
        self.batcher = batcher
        self.learner_queue = learner_queue
        self.initial_state_fn = initial_state_fn
        self.stats = stats
        self.stop = stop
        self.K = spec.num_envs
        self.fields = {**step_fields(spec), **agent.unroll_fields()}  # rl_core/data/batch.py's, then the agent's
        self.length, self.stride = agent.sequence()
        env_ids = np.arange(index * self.K, (index + 1) * self.K)
        self.constant_inputs = agent.actor_inputs(env_ids, flags.num_actors)

    # ------------------------------------------------------------ buffers
    def _new_store(self) -> dict[str, np.ndarray]:
        T1, K = self.length + 1, self.K
        return {name: np.zeros((T1, K, *shape), dtype) for name, (shape, dtype) in self.fields.items()}

    def _check_finite(self, msg: dict) -> None:
        """A NaN or inf in a float observation or a reward ends the run naming where it came from
        (it would otherwise surface as a sampling error deep in inference)."""
        for field in ("obs", "reward"):
            value = msg[field]
            if value.dtype.kind != "f":
                continue
            finite = np.isfinite(value.reshape(value.shape[0], -1)).all(axis=1)
            if not finite.all():
                slot = int(np.flatnonzero(~finite)[0])
                bad = value[slot][~np.isfinite(value[slot])].flat[0]
                raise RunFailure(
                    f"env server {self.index} ({self.address}), env slot {slot}: its {field} holds "
                    f"{bad} (NaN or inf): the environment produced it; fix the env or clip what it "
                    f"returns"
                )

    def _record_env(self, store, t: int, msg: dict) -> None:
        self._check_finite(msg)
        store["obs"][t] = msg["obs"]
        store["reward"][t] = msg["reward"]
        store["done"][t] = msg["done"]
        if "truncated" in msg:
            store["truncated"][t] = msg["truncated"]
        ends = msg["episode_end"]
        if ends.any():
            stat_names = [k for k in msg if k.startswith("stat/")]
            episodes = []
            for slot in np.flatnonzero(ends):
                episode = {"return": float(msg["episode_return"][slot]), "length": int(msg["episode_step"][slot])}
                for name in stat_names:
                    value = float(msg[name][slot])
                    if value == value:
                        episode[name] = value
                episodes.append(episode)
            self.stats.add_episodes(episodes)
        if not self.conn.step_intact():
            raise tp.ProtocolError("the shared step was overwritten while it was read")

    def _silent_server(self, waited: float) -> None:
        """Warn at half --env_timeout, end the run at it: an env that never returns is named, not waited on."""
        limit = self.env_timeout
        if waited >= limit:
            raise RunFailure(
                f"env server {self.index} ({self.address}) has not answered for {waited:.0f} s (--env_timeout "
                f"{limit:g}): one of its envs hangs in step() or reset() (the server's log names the slot); the "
                f"run ends rather than wait forever"
            )
        if waited >= limit / 2 and not self._warned_silent:
            self._warned_silent = True
            log.warning(
                "env server %d (%s) has not answered for %.0f s; the run ends at %g s (--env_timeout)",
                self.index,
                self.address,
                waited,
                limit,
            )

    def _recv_step(self) -> dict:
        self._warned_silent = False
        kind, msg = self.conn.recv(self.stop, on_idle=self._silent_server)
        if kind == tp.ERROR:
            slot = int(msg["slot"][0]) if "slot" in msg else -1
            raise EnvServerError(
                f"env {slot} of env server {self.index} ({self.address}) raised:\n{tp.field_text(msg['traceback'])}"
            )
        if kind != tp.STEP:
            raise tp.ProtocolError(f"expected STEP, got {tp.KINDS[kind]}")
        return msg

    # --------------------------------------------------------------- loop
    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self._act()
            except LOST_CONNECTION as e:
                if self.stop.is_set():
                    return
                self.reconnect(e)

    def reconnect(self, error: BaseException) -> None:
        """After the connection failed with ``error``: its unroll in flight counted as dropped, a line logged,
        and a new connection to the same server (the same spec) in its place; ``begin()`` starts acting again."""
        with self.stats.lock:
            self.stats.dropped_unrolls += 1
            self.stats.reconnects += 1
        reason = "closed the connection" if isinstance(error, tp.ConnectionClosed) else str(error)
        log.warning(
            "env server %d (%s) %s: dropped its unroll in flight; reconnecting", self.index, self.address, reason
        )
        self.conn.close()
        self.conn, spec = connect_server(self.address, self.flags, self.secret, self.stop)
        if spec_key(spec) != spec_key(self.spec):
            raise tp.ProtocolError(f"env server {self.index} came back with a different spec: {spec}")

    def _act(self) -> None:
        """Steps the K envs until the connection fails or the run stops; every ``stride`` steps once
        the store is full, hands its ``length + 1`` steps and the state at its first step to the
        learner queue (``receive``)."""
        K = self.K
        self.begin()
        finished = None
        while True:
            request = self.batcher.submit(self.inputs(), self.state, K)
            if finished is not None:
                # Handed to the learner only now, while this request is in inference: a full
                # learner queue then holds back this server alone, not the others' batch.
                self._put(*finished)
                finished = None
            action, extras, state, version = request.wait(self.stop)
            self.send(action)
            finished = self.receive(action, extras, state, version)

    # The steps of ``_act`` one at a time, for a caller that acts for every server in turn
    # (rl_core/runtime/lockstep.py): begin(), then per step inputs() -> inference -> send(action) ->
    # receive(action, extras, state, version).
    def begin(self) -> None:
        """A new store whose first step is the reset observations (done=True), and the envs' initial state."""
        self.store = self._new_store()
        msg = self._recv_step()
        self._record_env(self.store, 0, msg)
        self.state = self.initial_state_fn(self.K)
        self.step_states = [self.state] + [()] * self.length  # step_states[t]: the state that reads obs[t]
        self.t = 0

    def inputs(self) -> dict:
        """The inference inputs of the K envs at the store's current step."""
        store, t = self.store, self.t
        return {
            "obs": torch.from_numpy(store["obs"][t : t + 1]),
            "reward": torch.from_numpy(store["reward"][t : t + 1]),
            "done": torch.from_numpy(store["done"][t : t + 1]),
            "last_action": torch.from_numpy(store["action"][t : t + 1]),
            **self.constant_inputs,
        }

    def send(self, action: np.ndarray) -> None:
        self.conn.send_action(action)

    def receive(self, action: np.ndarray, extras: dict, state: tuple, version: int):
        """The step that ``action`` led to, recorded with what inference kept of it and the ``version`` of
        the weights that chose it; returns a full
        sequence ``(unroll, state at its first step)`` when one is complete, else None.  The next store
        starts ``stride`` steps later (the agent's ``sequence()``: IMPALA's unrolls share one step,
        R2D2's sequences overlap by more)."""
        msg = self._recv_step()
        T, stride = self.length, self.stride
        store = self.store
        self.t = t = self.t + 1
        store["action"][t] = action
        store[POLICY_VERSION][t] = version
        for name, value in extras.items():
            store[name][t] = value
        self._record_env(store, t, msg)
        self.state = state
        self.step_states[t] = state
        with self.stats.lock:
            self.stats.env_steps += self.K
        if t < T:
            return None
        finished = ({k: torch.from_numpy(v) for k, v in store.items()}, self.step_states[0])
        self.store = self._new_store()
        for key in store:
            self.store[key][: T + 1 - stride] = store[key][stride:]
        self.step_states = self.step_states[stride:] + [()] * stride
        self.t = T - stride
        return finished

    def _put(self, unroll: dict, state: tuple) -> None:
        item = (unroll, state)
        while True:
            try:
                self.learner_queue.put(item, timeout=0.5)
                return
            except queue.Full:
                if self.stop.is_set():
                    raise Stopped()
