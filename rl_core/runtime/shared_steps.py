"""One same-host connection's step and action arrays in shared memory; the socket carries notices.

A learner connected over a Unix socket asks for it with its first ACTION (field ``shm_request``); the
server answers with one byte, ``M`` carrying a memfd (``SCM_RIGHTS``) or ``N`` (no shared memory: a
TCP connection), and from then on writes each STEP's arrays straight into the mapping and sends a
STEP of ``shm_seq`` (and, where an episode ended with extra statistics, its ``stat/<name>`` fields);
the learner writes each ACTION's array there and sends an ACTION of ``shm_seq``.  Handshake, errors,
liveness and shutdown stay on the socket (transport.py), as does every message over TCP.

The mapping (``StepLayout``, computed by both peers from the spec): a header of four int64 (step
written from, step written to, action written from, action written to: the sequence numbers a
writer sets before and after its write), then obs [K, ...], reward f32 [K], done, truncated,
episode_end (bool [K]), episode_step i32 [K], episode_return f32 [K] and the action (int64 [K] or
f32 [K, ...]), each 64-byte aligned.  A reader takes a region only when both of its numbers equal
the notice's sequence number (``ProtocolError`` otherwise: a torn or stale write is never data).
The peers alternate (a server writes step n+1 only after the action that read step n), so one
region each suffices.  A memfd has no name: the kernel frees it when the last process holding it
exits, however it exits (kill -9 included), so nothing is left to clean up.
"""

from __future__ import annotations

import mmap
import os
import socket

import numpy as np

from rl_core.data.env_spec import DiscreteActions, EnvSpec
from rl_core.runtime import transport as tp

ACCEPT = b"M"
DECLINE = b"N"
_ALIGN = 64
_HEADER = 4  # int64: step from, step to, action from, action to
STEP_ARRAYS = ("obs", "reward", "done", "truncated", "episode_end", "episode_step", "episode_return")


class StepLayout:
    """Where each array of a spec's K envs lives in the mapping."""

    def __init__(self, spec: EnvSpec):
        K = spec.num_envs
        if isinstance(spec.action, DiscreteActions):
            action = ((K,), np.dtype(np.int64))
        else:
            action = ((K, *spec.action.shape), np.dtype(np.float32))
        arrays = {
            "obs": ((K, *spec.obs.shape), np.dtype(spec.obs.dtype)),
            "reward": ((K,), np.dtype(np.float32)),
            "done": ((K,), np.dtype(np.bool_)),
            "truncated": ((K,), np.dtype(np.bool_)),
            "episode_end": ((K,), np.dtype(np.bool_)),
            "episode_step": ((K,), np.dtype(np.int32)),
            "episode_return": ((K,), np.dtype(np.float32)),
            "action": action,
        }
        self.arrays: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
        offset = _HEADER * 8
        for name, (shape, dtype) in arrays.items():
            offset += (-offset) % _ALIGN
            self.arrays[name] = (offset, shape, dtype)
            offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.nbytes = max(offset, 1)


class SharedSteps:
    """A mapping of ``layout``: ``step`` (the STEP arrays), ``action``, and the sequence checks."""

    def __init__(self, layout: StepLayout, fd: int):
        size = os.fstat(fd).st_size
        if size < layout.nbytes:
            raise tp.ProtocolError(f"shared memory of {size} bytes, less than the spec's {layout.nbytes}")
        self._map = mmap.mmap(fd, layout.nbytes)
        self.header = np.frombuffer(self._map, np.int64, _HEADER, 0)
        views = {
            name: np.frombuffer(self._map, dtype, int(np.prod(shape, dtype=np.int64)), offset).reshape(shape)
            for name, (offset, shape, dtype) in layout.arrays.items()
        }
        self.action = views.pop("action")
        self.step = views

    @classmethod
    def create(cls, layout: StepLayout) -> tuple[SharedSteps, int]:
        """A new memfd of the layout's size and its mapping; the caller sends the fd, then closes it."""
        fd = os.memfd_create("polybeast-steps", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, layout.nbytes)
            return cls(layout, fd), fd
        except BaseException:
            os.close(fd)
            raise

    # ---------------------------------------------------------------- the server's side
    def begin_step(self, seq: int) -> None:
        self.header[0] = seq

    def end_step(self, seq: int) -> None:
        self.header[1] = seq

    def read_action(self, seq: int) -> np.ndarray:
        """The action written as ``seq`` (a view)."""
        if self.header[2] != seq or self.header[3] != seq:
            raise tp.ProtocolError(
                f"shared action {seq} announced, but the region holds {self.header[2]}..{self.header[3]}"
            )
        return self.action

    # --------------------------------------------------------------- the learner's side
    def write_action(self, seq: int, action: np.ndarray) -> None:
        self.header[2] = seq
        self.action[...] = action
        self.header[3] = seq

    def read_step(self, seq: int) -> dict[str, np.ndarray]:
        """The STEP arrays written as ``seq`` (views: copy them before the next action)."""
        if self.header[0] != seq or self.header[1] != seq:
            raise tp.ProtocolError(
                f"shared step {seq} announced, but the region holds {self.header[0]}..{self.header[1]}"
            )
        return self.step

    def step_intact(self, seq: int) -> bool:
        """Whether step ``seq`` was not overwritten while it was read."""
        return self.header[0] == seq

    def close(self) -> None:
        self.header = self.action = self.step = None
        try:
            self._map.close()
        except BufferError:  # a view is still referenced somewhere: the mapping goes with it
            pass


def send_answer(sock: socket.socket, shared: SharedSteps | None, fd: int | None) -> None:
    """The server's answer to ``shm_request``: ``M`` with the memfd, or ``N``."""
    if shared is None:
        sock.sendall(DECLINE)
    else:
        socket.send_fds(sock, [ACCEPT], [fd])


def receive_answer(sock: socket.socket, layout: StepLayout, timeout_s: float) -> SharedSteps | None:
    """The learner's side of ``send_answer``: the mapping, or None where the server declined."""
    old = sock.gettimeout()
    sock.settimeout(timeout_s)
    try:
        data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except socket.timeout:
        raise tp.ProtocolError(f"no answer to the shared-memory request within {timeout_s:g} s") from None
    finally:
        sock.settimeout(old)
    try:
        if data == DECLINE and not fds:
            return None
        if data != ACCEPT or len(fds) != 1:
            if not data:
                raise tp.ConnectionClosed()
            raise tp.ProtocolError(f"answer {data!r} with {len(fds)} descriptors to the shared-memory request")
        return SharedSteps(layout, fds[0])
    finally:
        for fd in fds:
            os.close(fd)
