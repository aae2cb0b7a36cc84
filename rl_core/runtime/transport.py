"""Wire protocol between env servers and the learner: typed arrays, no pickle.

A message is an 8-byte header ``b"PB" | version u8 | kind u8 | payload length u32``
followed by the payload: ``n_fields u16``, then per field ``name_len u8, name,
dtype u8, ndim u8, shape u32 * ndim``, then each field's raw bytes at an 8-byte
aligned offset, in the same order.  Parsing only ever calls ``np.frombuffer``; a
message that does not parse exactly (bad magic, unknown dtype, sizes that do not
add up, trailing bytes, longer than ``max_bytes``) raises :class:`ProtocolError`.

Addresses are ``unix:/path`` (same host; the socket file is created owner-only)
or ``host:port`` (TCP; both peers prove knowledge of a shared secret with an
HMAC challenge in each direction before any message is exchanged; a server
answers a wrong MAC with ``AUTH_REJECTED`` before it closes, so that the client
reports "authentication failed" rather than a server that closed on it).

Measured on this project's machine: a raw AF_UNIX socket with a length prefix
costs ~62 us per 28 KB round trip, so that is what this uses
(``benchmarks/transport_overhead.py`` measures the transport's cost end to end).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import time
from dataclasses import dataclass

import numpy as np

from rl_core.errors import Stopped, UserError

MAGIC = b"PB"
VERSION = 1
HEADER = struct.Struct("<2sBBI")
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

# Message kinds.
HELLO = 1  # server -> learner: the spec, as JSON text
STEP = 2  # server -> learner: the K envs' step outputs
ACTION = 3  # learner -> server: K actions
ERROR = 4  # server -> learner: an env's traceback text
KINDS = {HELLO: "HELLO", STEP: "STEP", ACTION: "ACTION", ERROR: "ERROR"}

_DTYPES = [
    np.dtype(np.bool_),
    np.dtype(np.uint8),
    np.dtype(np.int8),
    np.dtype(np.int16),
    np.dtype(np.int32),
    np.dtype(np.int64),
    np.dtype(np.float16),
    np.dtype(np.float32),
    np.dtype(np.float64),
    np.dtype(np.uint16),
    np.dtype(np.uint32),
]
_CODE_OF = {dt: i + 1 for i, dt in enumerate(_DTYPES)}
_DTYPE_OF = {i + 1: dt for i, dt in enumerate(_DTYPES)}

AUTH_TAG = b"PBAUTH1\n"
_NONCE_BYTES = 32
# What a server sends in place of its MAC when the client's MAC is wrong, before it closes: the
# client then says "authentication failed" instead of retrying a server that closed on it.  32
# bytes, like a MAC (a real MAC equals it with probability 2**-256).
AUTH_REJECTED = b"PBAUTH1 REJECTED: wrong secret\n\0"
assert len(AUTH_REJECTED) == 32


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


class HandshakeTimeout(ProtocolError):
    """The peer did not complete the authentication handshake in time (busy, slow or silent)."""


class AuthenticationFailed(ProtocolError):
    """The peer answered the challenge with a wrong MAC: it does not know the secret."""


class ConnectionClosed(Exception):
    """The peer closed the connection at a message boundary."""


# ---------------------------------------------------------------- addresses


@dataclass(frozen=True)
class Address:
    kind: str  # "unix" or "tcp"
    path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        return f"unix:{self.path}" if self.kind == "unix" else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``unix:/path`` or ``host:port``; anything else is a UserError."""
    if text.startswith("unix:"):
        path = text[len("unix:") :]
        if not path:
            raise UserError(f"address '{text}' has no path: use unix:/tmp/name")
        return Address("unix", path=path)
    host, sep, port = text.rpartition(":")
    if sep and host and port.isdigit() and 0 < int(port) < 65536:
        return Address("tcp", host=host.strip("[]"), port=int(port))
    raise UserError(f"address '{text}' is neither unix:/path nor host:port")


def server_address(basename: str, index: int) -> Address:
    """Address of env server ``index``: ``unix:/path.i``, or ``host:(port + i)``."""
    base = parse_address(basename)
    if base.kind == "unix":
        return Address("unix", path=f"{base.path}.{index}")
    if base.port + index > 65535:
        raise UserError(f"--pipes_basename {basename}: port {base.port}+{index} is out of range")
    return Address("tcp", host=base.host, port=base.port + index)


def remove_stale_socket(address: Address) -> bool:
    """Remove a unix socket file nobody listens on; True if none is left.  A live one (another
    process's server) is never touched: False."""
    if address.kind != "unix" or not os.path.exists(address.path):
        return True
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(address.path)
    except OSError:
        try:
            os.unlink(address.path)  # stale: nobody listens there
        except FileNotFoundError:
            pass
        return True
    finally:
        probe.close()
    return False


def listen(address: Address) -> socket.socket:
    """Bind and listen.  A unix socket file is owner-only; a stale one is replaced."""
    if address.kind == "unix":
        if not remove_stale_socket(address):
            raise UserError(f"{address} is in use by another server: stop it or choose another --pipes_basename")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(address.path)
        except OSError as e:
            sock.close()
            directory = os.path.dirname(os.path.abspath(address.path))
            fix = f"create {directory}" if not os.path.isdir(directory) else "check the directory's permissions"
            raise UserError(
                f"cannot listen on {address}: {e.strerror}: {fix} or choose another --pipes_basename"
            ) from None
        finally:
            os.umask(old_umask)
        os.chmod(address.path, 0o600)
    else:
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address.host, address.port))
        except OSError as e:
            sock.close()
            raise UserError(f"cannot listen on {address}: {e.strerror}; choose another --pipes_basename") from e
    sock.listen(4)
    return sock


def _configure(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def connect(address: Address, timeout: float, stop=None, on_retry=None, deadline: float | None = None) -> socket.socket:
    """Connect, retrying until ``timeout`` seconds have passed, then one clear error.

    ``on_retry()`` runs before every retry (the launcher checks its servers there);
    ``deadline`` (time.monotonic) replaces ``timeout`` for a caller already retrying.
    """
    deadline = time.monotonic() + timeout if deadline is None else deadline
    last_error = "no attempt"
    while True:
        if stop is not None and stop.is_set():
            raise Stopped()
        if address.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target = address.path
        else:
            family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            target = (address.host, address.port)
        try:
            sock.settimeout(5.0)
            sock.connect(target)
            _configure(sock)
            return sock
        except OSError as e:
            sock.close()
            last_error = e.strerror or str(e)
        if time.monotonic() >= deadline:
            raise UserError(
                f"could not connect to env server at {address} within {timeout:g} s ({last_error}): "
                f"start it (python -m <env package>.polybeast_env) or raise --connect_timeout"
            )
        if on_retry is not None:
            on_retry()
        time.sleep(0.1)


# ---------------------------------------------------------- authentication


def _mac(secret: bytes, role: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def _recv_exact_raw(sock: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes; with a ``deadline`` (time.monotonic()) all of them by then, however they trickle."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            sock.settimeout(left)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ProtocolError("peer closed the connection during authentication")
        buf += chunk
    return bytes(buf)


def server_authenticate(sock: socket.socket, secret: bytes, timeout: float = 10.0) -> None:
    """Challenge the client, then answer its challenge.  Raises ProtocolError on failure."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout  # for the whole handshake, not per read
    try:
        nonce = secrets.token_bytes(_NONCE_BYTES)
        sock.sendall(AUTH_TAG + nonce)
        if _recv_exact_raw(sock, len(AUTH_TAG), deadline) != AUTH_TAG:
            raise ProtocolError("peer did not speak the authentication protocol")
        reply = _recv_exact_raw(sock, 2 * _NONCE_BYTES, deadline)
        mac, client_nonce = reply[:32], reply[32:]
        if not hmac.compare_digest(mac, _mac(secret, b"client", nonce)):
            try:  # tell the peer why it is dropped (not a proof of anything: no MAC of ours)
                sock.sendall(AUTH_REJECTED)
            except OSError:
                pass
            raise AuthenticationFailed("peer failed authentication: it does not know this server's secret")
        sock.sendall(_mac(secret, b"server", client_nonce))
    except socket.timeout as e:
        raise HandshakeTimeout("peer did not authenticate in time") from e


def client_authenticate(sock: socket.socket, secret: bytes, timeout: float = 10.0) -> None:
    """Answer the server's challenge and check its answer to ours."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        hello = _recv_exact_raw(sock, len(AUTH_TAG) + _NONCE_BYTES, deadline)
        if hello[: len(AUTH_TAG)] != AUTH_TAG:
            raise ProtocolError("server did not ask for authentication")
        nonce = hello[len(AUTH_TAG) :]
        my_nonce = secrets.token_bytes(_NONCE_BYTES)
        sock.sendall(AUTH_TAG + _mac(secret, b"client", nonce) + my_nonce)
        answer = _recv_exact_raw(sock, 32, deadline)
        if answer == AUTH_REJECTED:
            raise AuthenticationFailed("the server refused the learner's secret: the two secrets differ")
        if not hmac.compare_digest(answer, _mac(secret, b"server", my_nonce)):
            raise AuthenticationFailed("server failed authentication: it does not know the learner's secret")
    except socket.timeout as e:
        raise HandshakeTimeout("server did not complete authentication in time") from e


# ------------------------------------------------------------------ framing


def text_field(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def field_text(array: np.ndarray) -> str:
    if array.dtype != np.uint8 or array.ndim != 1:
        raise ProtocolError("text field is not a 1-D uint8 array")
    try:
        return array.tobytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError("text field is not UTF-8") from e


def json_field(obj) -> np.ndarray:
    return text_field(json.dumps(obj))


def field_json(array: np.ndarray):
    try:
        return json.loads(field_text(array))
    except json.JSONDecodeError as e:
        raise ProtocolError(f"JSON field does not parse: {e}") from e


def _pad(n: int) -> int:
    return (-n) % 8


def encode(kind: int, fields: dict[str, np.ndarray]) -> list:
    """The buffers of one message (header + descriptors, then the arrays' bytes)."""
    descr = [struct.pack("<H", len(fields))]
    arrays = []
    for name, value in fields.items():
        array = np.asarray(value)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        code = _CODE_OF.get(array.dtype.newbyteorder("=") if array.dtype.byteorder == ">" else array.dtype)
        if code is None or array.dtype.byteorder == ">":
            raise TypeError(f"field {name!r}: dtype {array.dtype} cannot be sent")
        raw_name = name.encode("utf-8")
        if len(raw_name) > 255 or array.ndim > 255:
            raise ValueError(f"field {name!r}: name or rank too large")
        descr.append(struct.pack("<B", len(raw_name)) + raw_name)
        descr.append(struct.pack(f"<BB{array.ndim}I", code, array.ndim, *array.shape))
        arrays.append(array)
    head = b"".join(descr)
    buffers = [None, head]
    length = len(head)
    for array in arrays:
        pad = _pad(length)
        if pad:
            buffers.append(b"\0" * pad)
            length += pad
        if array.nbytes:
            buffers.append(memoryview(array).cast("B"))
        length += array.nbytes
    buffers[0] = HEADER.pack(MAGIC, VERSION, kind, length)
    return buffers


def decode(payload: bytes | bytearray | memoryview) -> dict[str, np.ndarray]:
    """Parse a payload into named arrays (views of ``payload``).  Strict."""
    view = memoryview(payload)
    size = len(view)
    try:
        (n_fields,) = struct.unpack_from("<H", view, 0)
        offset = 2
        descriptors = []
        for _ in range(n_fields):
            (name_len,) = struct.unpack_from("<B", view, offset)
            offset += 1
            if offset + name_len > size:
                raise ProtocolError("field name runs past the end of the message")
            name = bytes(view[offset : offset + name_len]).decode("utf-8")
            offset += name_len
            code, ndim = struct.unpack_from("<BB", view, offset)
            offset += 2
            shape = struct.unpack_from(f"<{ndim}I", view, offset)
            offset += 4 * ndim
            dtype = _DTYPE_OF.get(code)
            if dtype is None:
                raise ProtocolError(f"field {name!r} has unknown dtype code {code}")
            descriptors.append((name, dtype, shape))
    except (struct.error, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed field descriptors ({e})") from e
    fields = {}
    for name, dtype, shape in descriptors:
        offset += _pad(offset)
        count = 1
        for dim in shape:
            count *= dim
        nbytes = count * dtype.itemsize
        if offset + nbytes > size:
            raise ProtocolError(f"field {name!r} runs past the end of the message")
        if name in fields:
            raise ProtocolError(f"field {name!r} appears twice")
        fields[name] = np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += nbytes
    if offset != size:
        raise ProtocolError(f"{size - offset} unexpected trailing bytes")
    return fields


class Connection:
    """A framed, typed-array connection over a connected stream socket.

    ``poll_s`` is how often a wait for the next message wakes to check ``stop``;
    once a message has begun, the rest must arrive within ``frame_timeout_s``.
    """

    def __init__(
        self,
        sock: socket.socket,
        max_bytes: int = DEFAULT_MAX_BYTES,
        poll_s: float = 1.0,
        frame_timeout_s: float = 30.0,
    ):
        self.sock = sock
        self.max_bytes = max_bytes
        self.poll_s = poll_s
        self.frame_timeout_s = frame_timeout_s
        sock.settimeout(poll_s)
        self._header = bytearray(HEADER.size)
        self._frame_deadline = float("inf")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, kind: int, fields: dict[str, np.ndarray]) -> None:
        buffers = encode(kind, fields)
        total = sum(len(b) for b in buffers)
        sent = self.sock.sendmsg(buffers)
        if sent == total:
            return
        # Partial send: finish the rest buffer by buffer.
        for buf in buffers:
            mv = memoryview(buf).cast("B")
            if sent >= len(mv):
                sent -= len(mv)
                continue
            self._sendall(mv[sent:])
            sent = 0

    def _sendall(self, mv: memoryview) -> None:
        deadline = time.monotonic() + self.frame_timeout_s
        while len(mv):
            try:
                n = self.sock.send(mv)
            except socket.timeout:
                if time.monotonic() > deadline:
                    raise ProtocolError("peer stopped reading mid-message")
                continue
            mv = mv[n:]

    def _recv_into(self, mv: memoryview, stop, at_boundary: bool, on_idle=None) -> None:
        got = 0
        idle_since = time.monotonic()
        while got < len(mv):
            waiting = at_boundary and got == 0  # for the next message: no deadline, only stop and on_idle
            if not waiting and time.monotonic() > self._frame_deadline:
                raise ProtocolError(
                    f"truncated message: the peer stalled, {got} of {len(mv)} bytes of a part "
                    f"not complete within {self.frame_timeout_s:g} s"
                )
            try:
                n = self.sock.recv_into(mv[got:])
            except socket.timeout:
                if waiting:
                    if stop is not None and stop.is_set():
                        raise Stopped()
                    if on_idle is not None:
                        on_idle(time.monotonic() - idle_since)
                continue
            if n == 0:
                if waiting:
                    raise ConnectionClosed()
                raise ProtocolError(f"truncated message: connection closed after {got} of {len(mv)} bytes")
            if waiting:  # a message began: all of it must arrive within frame_timeout_s
                self._frame_deadline = time.monotonic() + self.frame_timeout_s
            got += n
            at_boundary = False

    def recv(self, stop=None, on_idle=None) -> tuple[int, dict[str, np.ndarray]]:
        """The next message as ``(kind, fields)``.

        While no message has begun, the wait wakes every ``poll_s`` to check ``stop`` and to call
        ``on_idle(seconds waited)``, which may raise.  Once one has begun, the whole message
        (header and payload) must arrive within ``frame_timeout_s``, however slowly it trickles.
        """
        header = memoryview(self._header)
        self._recv_into(header, stop, at_boundary=True, on_idle=on_idle)
        magic, version, kind, length = HEADER.unpack(self._header)
        if magic != MAGIC or version != VERSION:
            raise ProtocolError(f"bad frame header {bytes(self._header)!r}: not a polybeast peer")
        if kind not in KINDS:
            raise ProtocolError(f"unknown message kind {kind}")
        if length > self.max_bytes:
            raise ProtocolError(f"message of {length} bytes exceeds the limit of {self.max_bytes}")
        payload = bytearray(length)
        self._recv_into(memoryview(payload), stop, at_boundary=False)
        return kind, decode(payload)
