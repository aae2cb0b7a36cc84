"""An env server: one process hosting K environments for one learner connection.

Protocol (see transport.py for the framing): on connect the server sends HELLO
(the spec as JSON) and a STEP with every env freshly reset (done=True); then, for
each ACTION message of K actions it steps the K envs and answers one STEP:

    obs [K, ...]         observation after the step (the reset one where done)
    reward [K] f32       reward of the step
    done [K] bool        the training episode ended at this step
    truncated [K] bool   ... by a time limit (gymnasium's truncated), not a terminal
                         state: value targets bootstrap there instead of stopping
    episode_end [K] bool the logged episode ended (differs from done for e.g.
                         Atari's episodic life: env info["episode_end"])
    episode_step [K] i32, episode_return [K] f32
                         running counters; where episode_end, the finished episode's
    stat/<name> [K] f32  extra statistics an env puts in info["episode_stats"] at
                         the end of an episode (NaN for the other envs)

A learner on this host may ask, with its first ACTION (``shm_request``), for the STEP arrays and its
actions in shared memory (rl_core/runtime/shared_steps.py): the server then writes each step straight
into the mapping and the socket carries sequence numbers (and any ``stat/<name>``).

A malformed, truncated or oversized message drops the connection with a logged
reason (such lines, and those of peers failing TCP authentication, at most once per
10 s), and the server waits for the next learner.  An exception inside an env
is sent to the learner as an ERROR carrying the traceback, and the server exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Callable, Sequence

import numpy as np

from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation, action_space_of
from rl_core.errors import Stopped
from rl_core.runtime import transport as tp
from rl_core.runtime.shared_steps import SharedSteps, StepLayout, send_answer
from rl_core.runtime.threads import name_os_thread

log = logging.getLogger("env_server")

ENV_ERROR_EXIT_CODE = 3


class RateLimitedWarning:
    """A warning logged at most once per ``interval_s``; the next one says how many were held back.

    A learner with the wrong secret, or a port scanner, would otherwise fill the server's log."""

    def __init__(self, interval_s: float = 10.0):
        self.interval_s = interval_s
        self._last = float("-inf")
        self.held_back = 0

    def warn(self, message: str) -> bool:
        """Log ``message`` unless one was logged within ``interval_s``; True if it was logged."""
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self.held_back += 1
            return False
        if self.held_back:
            message += f" ({self.held_back} more since the last such line; at most one every {self.interval_s:g} s)"
        self._last, self.held_back = now, 0
        log.warning("%s", message)
        return True


class _Superseded(Exception):
    """The connection being served gives way to one waiting (its peer has been silent)."""


class EnvError(Exception):
    def __init__(self, slot: int, text: str):
        super().__init__(text)
        self.slot = slot
        self.text = text


class EnvServer:
    """Hosts ``len(env_fns)`` environments at ``address``; serves learners one at a time."""

    def __init__(
        self,
        address: tp.Address,
        env_fns: Sequence[Callable[[], object]],
        seeds: Sequence[int],
        server_index: int = 0,
        secret: bytes | None = None,
        max_bytes: int = tp.DEFAULT_MAX_BYTES,
        env_name: str = "",
        idle_peer_s: float = 30.0,
        stall_warn_s: float = 150.0,
        frame_timeout_s: float = 30.0,
        auth_timeout_s: float = 10.0,
        step_lock: threading.Lock | None = None,
    ):
        if address.kind == "tcp" and not secret:
            raise ValueError("a TCP env server needs a secret")
        self.address = address
        self.server_index = server_index
        self.secret = secret
        self.max_bytes = max_bytes
        self.envs = [fn() for fn in env_fns]
        self.seeds = list(seeds)
        self.num_envs = len(self.envs)
        self.env_name = env_name
        self._first_reset = True
        self._socket_id: tuple[int, int] | None = None  # (dev, inode) of the socket file this server made
        obs, _ = self.envs[0].reset(seed=self.seeds[0])
        self._first_obs0 = np.asarray(obs)
        self.obs_shape = self._first_obs0.shape
        self.obs_dtype = self._first_obs0.dtype
        self.action_space = action_space_of(self.envs[0].action_space)
        self._listener: socket.socket | None = None
        self.connections_served = 0
        # A peer silent for idle_peer_s while another connection waits is dropped for it.
        self.idle_peer_s = idle_peer_s
        # An env step/reset running longer than stall_warn_s is logged with its slot (a watchdog).
        self.stall_warn_s = stall_warn_s
        self._busy: tuple[str, int, float] | None = None  # (what, slot, since) of the env call running
        # Deadlines for a whole message once begun, and for the whole TCP handshake.
        self.frame_timeout_s = frame_timeout_s
        self.auth_timeout_s = auth_timeout_s
        self.auth_failures = 0
        self._auth_warning = RateLimitedWarning(10.0)
        self._drop_warning = RateLimitedWarning(10.0)  # malformed handshakes or messages
        # Held while this server steps its envs: the splits of one process (``serve_splits``) share one, so they
        # step in turn, each while the others' actions are in flight.
        self._step_lock = step_lock if step_lock is not None else contextlib.nullcontext()

    # ------------------------------------------------------------- spec
    def spec(self) -> EnvSpec:
        return EnvSpec(
            Observation(tuple(self.obs_shape), self.obs_dtype.str),
            self.action_space,
            self.num_envs,
            self.server_index,
            self.env_name,
        )

    # ----------------------------------------------------------- serving
    def serve_forever(self, stop: threading.Event | None = None) -> None:
        name_os_thread(f"env-server-{self.server_index}")
        self._listener = tp.listen(self.address)
        self._socket_id = _file_id(self.address.path) if self.address.kind == "unix" else None
        self._listener.settimeout(0.5)
        log.info("env server %d: %d envs at %s", self.server_index, self.num_envs, self.address)
        if self.stall_warn_s > 0:
            threading.Thread(target=self._watch_envs, name="env-watchdog", daemon=True).start()
        try:
            while stop is None or not stop.is_set():
                try:
                    sock, peer_address = self._listener.accept()
                except socket.timeout:
                    continue
                self._serve_one(sock, stop, peer_address)
        finally:
            self.close()

    def _watch_envs(self) -> None:
        """Log, once per stall, an env call that has not returned for stall_warn_s: the learner only
        sees a silent server, this names the slot."""
        warned = None
        while self._listener is not None:
            time.sleep(min(1.0, self.stall_warn_s / 4))
            busy = self._busy
            if busy is not None and busy != warned and time.monotonic() - busy[2] >= self.stall_warn_s:
                warned = busy
                log.warning(
                    "env server %d: env slot %d's %s() has not returned for %.0f s (env %s)",
                    self.server_index,
                    busy[1],
                    busy[0],
                    time.monotonic() - busy[2],
                    self.env_name,
                )

    def _drop_if_superseded(self, waited: float) -> None:
        """A peer silent for idle_peer_s while another connection waits in the backlog is dropped for it."""
        if waited < self.idle_peer_s or self._listener is None:
            return
        ready, _, _ = select.select([self._listener], [], [], 0)
        if ready:
            raise _Superseded(f"its peer sent nothing for {waited:.0f} s while another connection waited")

    def _serve_one(self, sock: socket.socket, stop, peer_address=None) -> None:
        peer = "learner"
        try:
            if self.address.kind == "tcp":
                try:
                    tp.server_authenticate(sock, self.secret, timeout=self.auth_timeout_s)
                except tp.AuthenticationFailed:
                    self.auth_failures += 1
                    who = f"{peer_address[0]}:{peer_address[1]}" if peer_address else "a peer"
                    self._auth_warning.warn(
                        f"env server {self.server_index}: authentication failed: the peer at {who} does not know "
                        f"this server's secret; its connection is dropped (give the learner and the servers the "
                        f"same --server_secret or $POLYBEAST_SECRET)"
                    )
                    return
            conn = tp.Connection(
                sock,
                max_bytes=self.max_bytes,
                poll_s=min(1.0, self.idle_peer_s / 2),
                frame_timeout_s=self.frame_timeout_s,
            )
            self.connections_served += 1
            self._serve(conn, stop)
        except tp.ConnectionClosed:
            log.info("env server %d: %s disconnected; waiting for the next", self.server_index, peer)
        except _Superseded as e:
            log.warning("env server %d: dropped a connection: %s", self.server_index, e)
        except tp.ProtocolError as e:
            self._drop_warning.warn(f"env server {self.server_index}: dropped connection: {e}")
        except (ConnectionError, BrokenPipeError) as e:
            log.info("env server %d: connection lost (%s); waiting for the next", self.server_index, e)
        except Stopped:
            pass
        except EnvError as e:
            log.error("env server %d: env %d raised:\n%s", self.server_index, e.slot, e.text)
            try:
                conn.send(tp.ERROR, {"slot": np.array([e.slot], np.int32), "traceback": tp.text_field(e.text)})
            except OSError:
                pass
            raise
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _reset(self, slot: int) -> np.ndarray:
        env = self.envs[slot]
        if self._first_reset and slot == 0:
            return self._first_obs0
        self._busy = ("reset", slot, time.monotonic())
        try:
            if self._first_reset:
                obs, _ = env.reset(seed=self.seeds[slot])
            else:
                obs, _ = env.reset()
        except Exception:  # noqa: BLE001 - whatever the env raised is its slot's error, with its traceback
            raise EnvError(slot, traceback.format_exc()) from None
        self._busy = None
        return obs

    def _serve(self, conn: tp.Connection, stop) -> None:
        K = self.num_envs
        conn.send(tp.HELLO, {"spec": tp.json_field(self.spec().to_json())})
        fields = {
            "obs": np.empty((K, *self.obs_shape), self.obs_dtype),
            "reward": np.zeros(K, np.float32),
            "done": np.ones(K, np.bool_),
            "truncated": np.zeros(K, np.bool_),
            "episode_end": np.zeros(K, np.bool_),
            "episode_step": np.zeros(K, np.int32),  # where episode_end, the finished episode's
            "episode_return": np.zeros(K, np.float32),
        }
        for slot in range(K):
            fields["obs"][slot] = self._reset(slot)
        self._first_reset = False
        conn.send(tp.STEP, fields)
        episode_step = np.zeros(K, np.int32)  # the running counters
        episode_return = np.zeros(K, np.float32)
        space = self.action_space
        if isinstance(space, DiscreteActions):
            n_actions, action_shape = space.n, (K,)
        else:  # a Gaussian policy's samples are clipped to the bounds here (gymnasium's ClipAction)
            n_actions, action_shape = None, (K, *space.shape)
            low, high = space.bounds()
        shared: SharedSteps | None = None
        seq = 0  # the STEP's sequence number: 0 the reset one, always on the socket
        try:
            while True:
                kind, msg = conn.recv(stop, on_idle=self._drop_if_superseded)
                if kind != tp.ACTION:
                    raise tp.ProtocolError(f"expected ACTION, got {tp.KINDS[kind]} with fields {sorted(msg)}")
                if shared is not None:
                    if "shm_seq" not in msg or int(msg["shm_seq"][0]) != seq:
                        raise tp.ProtocolError(f"expected the notice of shared action {seq}, got fields {sorted(msg)}")
                    actions = shared.read_action(seq)
                elif "action" in msg:
                    actions = msg["action"]
                else:
                    raise tp.ProtocolError(f"expected ACTION with an action, got fields {sorted(msg)}")
                if actions.shape != action_shape:
                    raise tp.ProtocolError(f"action shape {actions.shape} != expected {action_shape}")
                if n_actions is not None:
                    if actions.dtype.kind not in "iu":
                        raise tp.ProtocolError(f"discrete actions must be integers, got {actions.dtype}")
                    if actions.size and (actions.min() < 0 or actions.max() >= n_actions):
                        raise tp.ProtocolError(f"action out of range [0, {n_actions})")
                    actions = actions.tolist()
                else:
                    if actions.dtype.kind != "f":
                        raise tp.ProtocolError(f"box actions must be floats, got {actions.dtype}")
                    actions = np.clip(actions, low, high)
                if "shm_request" in msg and shared is None:
                    shared = self._share_steps(conn, fields)
                    if shared is not None:
                        fields = shared.step
                seq += 1
                if shared is not None:
                    shared.begin_step(seq)
                stats = self._step_envs(actions, fields, episode_step, episode_return)
                if shared is not None:
                    shared.end_step(seq)
                    message = {"shm_seq": np.array([seq], np.int64)}
                else:
                    message = dict(fields) if stats else fields
                message.update({f"stat/{k}": v for k, v in stats.items()})
                conn.send(tp.STEP, message)
        finally:
            if shared is not None:
                shared.close()

    def _step_envs(self, actions, fields: dict, episode_step: np.ndarray, episode_return: np.ndarray) -> dict:
        """Step every env once, writing its outputs into ``fields``; the extra statistics of the
        episodes that ended (``info["episode_stats"]``, NaN for the other envs)."""
        obs, reward, done = fields["obs"], fields["reward"], fields["done"]
        truncated_out, episode_end = fields["truncated"], fields["episode_end"]
        out_step, out_return = fields["episode_step"], fields["episode_return"]
        stats: dict[str, np.ndarray] = {}
        with self._step_lock:
            for slot, env in enumerate(self.envs):
                self._busy = ("step", slot, time.monotonic())
                try:
                    o, r, terminated, truncated, info = env.step(actions[slot])
                except Exception:  # noqa: BLE001 - whatever the env raised is its slot's error
                    raise EnvError(slot, traceback.format_exc()) from None
                self._busy = None
                d = bool(terminated or truncated)
                episode_return[slot] += r
                episode_step[slot] += 1
                end = bool(info.get("episode_end", d)) if info else d
                reward[slot] = r
                done[slot] = d
                truncated_out[slot] = bool(truncated) and not terminated
                episode_end[slot] = end
                out_step[slot] = episode_step[slot]
                out_return[slot] = episode_return[slot]
                if end:
                    episode_step[slot] = 0
                    episode_return[slot] = 0.0
                    extra = info.get("episode_stats") if info else None
                    if extra:
                        for name, value in extra.items():
                            arr = stats.get(name)
                            if arr is None:
                                arr = stats[name] = np.full(self.num_envs, np.nan, np.float32)
                            arr[slot] = value
                obs[slot] = self._reset(slot) if d else o
        return stats

    def _share_steps(self, conn: tp.Connection, fields: dict) -> SharedSteps | None:
        """Answer a learner's ``shm_request``: the STEP arrays from now on in a new memfd (a Unix socket's
        peer is on this host), their current values copied there; over TCP, no."""
        if self.address.kind != "unix":
            send_answer(conn.sock, None, None)
            return None
        shared, fd = SharedSteps.create(StepLayout(self.spec()))
        try:
            for name, array in shared.step.items():
                array[...] = fields[name]
            send_answer(conn.sock, shared, fd)
        except BaseException:
            shared.close()
            raise
        finally:
            os.close(fd)
        return shared

    def remove_socket_file(self) -> None:
        """Remove the socket file this server created (not one another server put at its path)."""
        if self.address.kind == "unix" and self._socket_id is not None:
            if _file_id(self.address.path) == self._socket_id:
                try:
                    os.unlink(self.address.path)
                except FileNotFoundError:
                    pass

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            self.remove_socket_file()
        for env in self.envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - an env that fails to close is being dropped anyway
                pass
        self.envs = []


def serve_splits(servers: Sequence[EnvServer]) -> None:
    """Serve one process's splits (``--server_splits``: EnvServers at consecutive indices sharing a step lock),
    each in its own thread, until the process is stopped (SystemExit from the termination handlers) or one
    of them fails, whose exception is raised here.  While one split steps its envs the others wait for
    their actions (sample-factory's double-buffered sampling), so the core is not idle during the round trip.
    One server is served in this thread.
    """
    if len(servers) == 1:
        servers[0].serve_forever()
        return
    sys.setswitchinterval(0.001)  # a split whose actions came in takes the GIL from a stepping one sooner
    stop = threading.Event()
    failures: list[BaseException] = []

    def run(server: EnvServer) -> None:
        try:
            server.serve_forever(stop)
        except BaseException as e:  # noqa: BLE001 - raised in the main thread below
            failures.append(e)
            stop.set()

    threads = [
        threading.Thread(target=run, args=(s,), name=f"env-split-{s.server_index}", daemon=True) for s in servers
    ]
    for t in threads:
        t.start()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        stop.set()
        for t in threads:
            t.join(5.0)
        for server in servers:
            server.close()
    if failures:
        raise failures[0]


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def watch_parent(parent_pid: int, on_orphan: Callable[[], None]) -> None:
    """End this process when its launcher goes away (it may have been SIGKILLed)."""

    def loop():
        while True:
            if os.getppid() != parent_pid:
                on_orphan()
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=loop, name="parent-watch", daemon=True).start()


def install_termination_handlers() -> None:
    """SIGTERM/SIGINT end the server through SystemExit, so ``finally`` cleans up; a repeat while
    it exits is ignored (it would interrupt the cleanup or the interpreter's own exit).

    The repeat is ignored by a Python handler that does nothing, not by SIG_IGN: a Ctrl-C reaches the
    server from the terminal and the launcher's SIGTERM right after it, and when both arrive before
    Python runs the first handler, Python finds the second's handler gone and raises "OSError: Signal 15
    ignored due to race condition" (CPython's signal module) into the cleanup."""

    def ignore(signum, frame):
        pass

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, ignore)
        signal.signal(signal.SIGINT, ignore)
        sys.exit(0)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
