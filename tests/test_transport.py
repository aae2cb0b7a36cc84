"""Transport: every dtype and shape in use round-trips; bad peers are refused."""

import os
import socket
import stat
import struct
import threading
import time

import gymnasium as gym
import numpy as np
import pytest

from rl_core.errors import UserError
from rl_core.runtime import transport as tp
from rl_core.envs.seeds import env_seed
from rl_core.runtime.env_server import EnvServer


def socketpair():
    a, b = socket.socketpair()
    return tp.Connection(a, poll_s=0.2, frame_timeout_s=2.0), tp.Connection(b, poll_s=0.2, frame_timeout_s=2.0)


ARRAYS = {
    "atari_obs": np.random.default_rng(0).integers(0, 255, (8, 4, 84, 84), dtype=np.uint8),
    "procgen_obs": np.random.default_rng(1).integers(0, 255, (4, 64, 64, 3), dtype=np.uint8),
    "vector_obs": np.random.default_rng(2).standard_normal((16, 4)).astype(np.float32),
    "reward": np.array([0.5, -1.0, 3.25], np.float32),
    "done": np.array([True, False, True]),
    "episode_step": np.array([1, 2, 3], np.int32),
    "action": np.array([0, 5, 17], np.int64),
    "continuous_action": np.random.default_rng(3).standard_normal((3, 6)).astype(np.float32),
    "float64": np.linspace(0, 1, 7),
    "float16": np.ones((2, 3), np.float16),
    "int8": np.array([-3, 4], np.int8),
    "int16": np.array([[-300]], np.int16),
    "uint16": np.array([65535], np.uint16),
    "uint32": np.array([2**32 - 1], np.uint32),
    "scalar": np.array(7.5, np.float32),
    "empty": np.zeros((0, 3), np.float32),
    "text": tp.text_field("traceback: héllo"),
}


def send_in_thread(conn, kind, fields):
    thread = threading.Thread(target=conn.send, args=(kind, fields))
    thread.start()
    return thread


def test_every_dtype_and_shape_round_trips():
    a, b = socketpair()
    sender = send_in_thread(a, tp.STEP, ARRAYS)
    kind, got = b.recv()
    sender.join()
    assert kind == tp.STEP
    assert list(got) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert got[name].dtype == array.dtype, name
        assert got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array)
    assert tp.field_text(got["text"]) == "traceback: héllo"


def test_non_contiguous_and_json_fields():
    a, b = socketpair()
    strided = np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2]
    a.send(tp.HELLO, {"spec": tp.json_field({"obs_shape": [4, 84, 84]}), "strided": strided})
    kind, got = b.recv()
    assert kind == tp.HELLO
    assert tp.field_json(got["spec"]) == {"obs_shape": [4, 84, 84]}
    np.testing.assert_array_equal(got["strided"], strided)


def test_large_message_round_trips_through_partial_sends():
    a, b = socketpair()
    big = np.random.default_rng(4).integers(0, 255, (64, 4, 84, 84), dtype=np.uint8)  # 1.8 MB
    sender = send_in_thread(a, tp.STEP, {"obs": big})
    kind, got = b.recv()
    sender.join()
    np.testing.assert_array_equal(got["obs"], big)


def test_unsupported_dtype_is_refused_at_send():
    a, _ = socketpair()
    with pytest.raises(TypeError):
        a.send(tp.STEP, {"x": np.array(["a"], dtype=object)})


@pytest.mark.parametrize(
    "payload, reason",
    [
        (struct.pack("<H", 1) + b"\x05obs", "field name runs past"),  # descriptor cut short
        (struct.pack("<HB", 1, 1) + b"x" + struct.pack("<B", 2), "malformed"),
        (struct.pack("<HB", 1, 1) + b"x" + struct.pack("<BB", 99, 0), "unknown dtype"),
        (struct.pack("<HB", 1, 1) + b"x" + struct.pack("<BBI", 2, 1, 100) + b"\0" * 3, "runs past"),
        (struct.pack("<HB", 0, 0) + b"junk", "trailing"),
    ],
)
def test_decode_refuses_malformed_payloads(payload, reason):
    with pytest.raises(tp.ProtocolError, match=reason):
        tp.decode(payload)


def test_oversized_bad_magic_and_truncated_frames_are_refused():
    a, b = socketpair()
    b.max_bytes = 1000
    a.send(tp.STEP, {"x": np.zeros(2000, np.uint8)})
    with pytest.raises(tp.ProtocolError, match="exceeds the limit"):
        b.recv()

    a, b = socketpair()
    a.sock.sendall(b"GARBAGE!" + b"\0" * 100)
    with pytest.raises(tp.ProtocolError, match="not a polybeast peer"):
        b.recv()

    a, b = socketpair()
    buffers = tp.encode(tp.STEP, {"x": np.zeros(100, np.uint8)})
    whole = b"".join(bytes(x) for x in buffers)
    a.sock.sendall(whole[:40])
    a.close()
    with pytest.raises(tp.ProtocolError, match="truncated"):
        b.recv()


def test_stalled_frame_times_out():
    a, b = socketpair()
    b.frame_timeout_s = 0.5
    whole = b"".join(bytes(x) for x in tp.encode(tp.STEP, {"x": np.zeros(100, np.uint8)}))
    a.sock.sendall(whole[:20])  # and then nothing
    with pytest.raises(tp.ProtocolError, match="stalled"):
        b.recv()


def test_a_frame_trickling_in_byte_by_byte_times_out_as_a_whole():
    """The frame deadline covers the whole message: a peer sending a byte every 0.1 s (each read
    succeeds, none times out) is dropped once frame_timeout_s has passed since the message began."""
    a, b = socketpair()
    b.frame_timeout_s = 1.0
    whole = b"".join(bytes(x) for x in tp.encode(tp.STEP, {"x": np.zeros(100, np.uint8)}))
    stop_sending = threading.Event()

    def trickle():
        for byte in whole[:-1]:
            if stop_sending.wait(0.1):
                return
            try:
                a.sock.sendall(bytes([byte]))
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(tp.ProtocolError, match="stalled"):
        b.recv()
    # dropped at its 1 s deadline, long before the whole frame could arrive (0.1 s a byte): a loaded machine
    # delays the drop by seconds at most, never to the frame's end
    assert time.monotonic() - started < 0.1 * len(whole) / 2
    stop_sending.set()


def test_an_idle_wait_calls_on_idle_which_may_give_up():
    a, b = socketpair()
    b.poll_s = 0.05
    b.sock.settimeout(0.05)
    waited = []

    def on_idle(seconds):
        waited.append(seconds)
        if seconds > 0.3:
            raise TimeoutError("nobody answers")

    with pytest.raises(TimeoutError):
        b.recv(on_idle=on_idle)
    assert len(waited) >= 3 and waited == sorted(waited)


def test_clean_close_and_stop():
    a, b = socketpair()
    stop = threading.Event()
    stop.set()
    with pytest.raises(tp.Stopped):
        b.recv(stop)
    a.close()
    with pytest.raises(tp.ConnectionClosed):
        b.recv()


def test_addresses():
    assert tp.server_address("unix:/tmp/x", 3) == tp.Address("unix", path="/tmp/x.3")
    assert tp.server_address("localhost:4000", 2) == tp.Address("tcp", host="localhost", port=4002)
    for bad in ["/tmp/x", "unix:", "host:notaport", "host:70000"]:
        with pytest.raises(UserError):
            tp.parse_address(bad)


def test_connect_timeout_names_the_address(tmp_path):
    address = tp.Address("unix", path=str(tmp_path / "nobody"))
    with pytest.raises(UserError, match=f"env server at unix:{tmp_path}/nobody within 0.3 s"):
        tp.connect(address, timeout=0.3)


# ----------------------------------------------------------------- server


def make_server(address, secret=None, k=2):
    seeds = [env_seed(0, 0, i) for i in range(k)]
    return EnvServer(address, [lambda: gym.make("CartPole-v1")] * k, seeds, secret=secret)


def serve_in_thread(server):
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def client(address, secret=None):
    sock = tp.connect(address, timeout=5)
    if address.kind == "tcp":
        tp.client_authenticate(sock, secret)
    conn = tp.Connection(sock, poll_s=0.2, frame_timeout_s=5)
    kind, hello = conn.recv()
    assert kind == tp.HELLO
    kind, first = conn.recv()
    assert kind == tp.STEP and first["done"].all()
    return conn, tp.field_json(hello["spec"])


def step_ok(conn, k=2):
    conn.send(tp.ACTION, {"action": np.zeros(k, np.int64)})
    kind, msg = conn.recv()
    assert kind == tp.STEP
    assert msg["obs"].shape == (k, 4) and msg["obs"].dtype == np.float32
    assert msg["reward"].tolist() == [1.0] * k
    return msg


def test_unix_socket_is_owner_only_and_removed(tmp_path):
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = make_server(address)
    stop, thread = serve_in_thread(server)
    conn, spec = client(address)
    mode = stat.S_IMODE(os.stat(address.path).st_mode)
    assert mode == 0o600, oct(mode)
    assert spec["num_envs"] == 2 and spec["action"] == {"kind": "discrete", "n": 2}
    assert spec["obs_shape"] == [4]
    step_ok(conn)
    conn.close()
    stop.set()
    thread.join(5)
    assert not os.path.exists(address.path)


@pytest.mark.parametrize("bad", ["truncated", "garbage", "wrong_action", "oversized"])
def test_bad_client_is_dropped_and_next_client_served(tmp_path, bad):
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = make_server(address)
    server.max_bytes = 4096
    stop, thread = serve_in_thread(server)
    conn, _ = client(address)
    step_ok(conn)
    if bad == "truncated":
        whole = b"".join(bytes(x) for x in tp.encode(tp.ACTION, {"action": np.zeros(2, np.int64)}))
        conn.sock.sendall(whole[:13])
        conn.close()
    elif bad == "garbage":
        conn.sock.sendall(os.urandom(64))
    elif bad == "wrong_action":
        conn.send(tp.ACTION, {"action": np.array([0, 7], np.int64)})  # 7 is out of range
    else:
        conn.send(tp.ACTION, {"action": np.zeros(10_000, np.int64)})
    if bad != "truncated":
        # The server drops the connection: the client sees it closed.
        with pytest.raises((tp.ConnectionClosed, ConnectionError)):
            conn.recv()
        conn.close()
    conn2, _ = client(address)
    step_ok(conn2)
    assert server.connections_served == 2
    conn2.close()
    stop.set()
    thread.join(5)


def test_tcp_requires_the_shared_secret():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = tp.Address("tcp", host="127.0.0.1", port=port)
    server = make_server(address, secret=b"s3cret")
    stop, thread = serve_in_thread(server)

    # A peer with the wrong secret is refused ...
    sock = tp.connect(address, timeout=5)
    with pytest.raises(tp.ProtocolError):
        tp.client_authenticate(sock, b"wrong")
    sock.close()
    # ... and so is one that ignores authentication and sends a message.
    sock = tp.connect(address, timeout=5)
    conn = tp.Connection(sock, poll_s=0.2, frame_timeout_s=5)
    conn.sock.recv(64)  # the challenge
    conn.send(tp.ACTION, {"action": np.zeros(2, np.int64)})
    with pytest.raises((tp.ConnectionClosed, ConnectionError, tp.ProtocolError)):
        conn.recv()
    conn.close()
    assert server.connections_served == 0
    # The next proper client is served.
    conn, _ = client(address, secret=b"s3cret")
    step_ok(conn)
    assert server.connections_served == 1
    conn.close()
    stop.set()
    thread.join(5)


@pytest.mark.parametrize("answer", ["wrong_secret", "reflected", "truncated"])
def test_the_client_refuses_a_server_that_cannot_prove_the_secret(answer):
    """Authentication is mutual: an impostor that challenges the learner correctly but answers the
    learner's challenge with a wrong MAC (another secret, the learner's own MAC sent back, or too few
    bytes) is refused before any message is read from it."""
    import hashlib
    import hmac
    import types

    from rl_core.runtime.actors import connect_server

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    address = tp.Address("tcp", host="127.0.0.1", port=listener.getsockname()[1])
    hello_sent = threading.Event()

    def impostor():
        sock, _ = listener.accept()
        with sock:
            sock.sendall(tp.AUTH_TAG + bytes(32))  # a well-formed challenge
            reply = tp._recv_exact_raw(sock, len(tp.AUTH_TAG) + 64)
            client_mac, client_nonce = reply[len(tp.AUTH_TAG) :][:32], reply[len(tp.AUTH_TAG) :][32:]
            if answer == "wrong_secret":
                sock.sendall(hmac.new(b"guess", b"server" + client_nonce, hashlib.sha256).digest())
            elif answer == "reflected":
                sock.sendall(client_mac)
            else:
                sock.sendall(client_mac[:16])
                time.sleep(0.1)
                sock.shutdown(socket.SHUT_WR)
            try:  # then speaks as a server would
                for frame in tp.encode(tp.HELLO, {"spec": tp.json_field({"num_envs": 1})}):
                    sock.sendall(frame)
                hello_sent.set()
            except OSError:
                pass
            time.sleep(0.5)

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    flags = types.SimpleNamespace(connect_timeout=5, max_message_bytes=1 << 20)
    expected = "did not answer within" if answer == "truncated" else "server failed authentication"
    with pytest.raises(UserError, match=expected):
        connect_server(address, flags, b"s3cret")
    thread.join(5)
    listener.close()


def test_stale_socket_file_is_replaced_and_live_one_refused(tmp_path):
    path = tmp_path / "srv.0"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # a file nobody listens on
    address = tp.Address("unix", path=str(path))
    listener = tp.listen(address)
    with pytest.raises(UserError, match="in use by another server"):
        tp.listen(address)
    listener.close()


# ------------------------------------------------ slow, silent and stalling peers


def _server_in_thread(address, **kwargs):
    server = EnvServer(address, [lambda: gym.make("CartPole-v1")] * 2, [env_seed(0, 0, i) for i in range(2)], **kwargs)
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, args=(stop,), daemon=True)
    thread.start()
    return server, stop, thread


def _learner_flags(connect_timeout):
    import types

    return types.SimpleNamespace(connect_timeout=connect_timeout, max_message_bytes=1 << 20, shared_memory=True)


def test_a_silent_peer_gives_way_to_a_learner(tmp_path):
    """A peer that took the server and then says nothing is dropped when a learner connects, once it has
    been silent for idle_peer_s; the learner gets its HELLO."""
    from rl_core.runtime.actors import connect_server

    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server, stop, thread = _server_in_thread(address, idle_peer_s=1.0)
    squatter = tp.connect(address, timeout=10)
    squat = tp.Connection(squatter, poll_s=0.2, frame_timeout_s=5)
    assert squat.recv()[0] == tp.HELLO  # served, then silent
    started = time.monotonic()
    conn, spec = connect_server(address, _learner_flags(120), None)
    assert spec.num_envs == 2 and time.monotonic() - started < 60  # served, not at --connect_timeout 120
    conn.close()
    squatter.close()
    stop.set()
    thread.join(5)


def test_a_peer_trickling_a_frame_is_dropped_and_the_learner_served(tmp_path):
    from rl_core.runtime.actors import connect_server

    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server, stop, thread = _server_in_thread(address, idle_peer_s=1000.0, frame_timeout_s=1.5)
    slow = tp.connect(address, timeout=10)
    slow_conn = tp.Connection(slow, poll_s=0.2, frame_timeout_s=5)
    slow_conn.recv(), slow_conn.recv()  # HELLO, first STEP
    frame = b"".join(bytes(x) for x in tp.encode(tp.ACTION, {"action": np.zeros(2, np.int64)}))
    halt = threading.Event()

    def trickle():  # a byte every 0.3 s: no single read ever times out
        for byte in frame[:-1]:
            if halt.wait(0.3):
                return
            try:
                slow.sendall(bytes([byte]))
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    started = time.monotonic()
    conn, _ = connect_server(address, _learner_flags(120), None)
    assert time.monotonic() - started < 60  # served, not at --connect_timeout 120
    halt.set()
    conn.close()
    slow.close()
    stop.set()
    thread.join(5)


def test_a_tcp_peer_that_never_authenticates_gives_way_and_a_held_server_is_one_line(tmp_path):
    from rl_core.runtime.actors import connect_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = tp.Address("tcp", host="127.0.0.1", port=port)
    server, stop, thread = _server_in_thread(address, secret=b"k", auth_timeout_s=1.5, idle_peer_s=1000.0)
    mute = tp.connect(address, timeout=10)  # connects and says nothing: the handshake's deadline drops it
    started = time.monotonic()
    conn, _ = connect_server(address, _learner_flags(120), b"k")
    assert time.monotonic() - started < 60  # served, not at --connect_timeout 120
    # Now this learner holds the server (and is not silent for 1000 s): another learner is told in one line.
    started = time.monotonic()
    with pytest.raises(
        UserError,
        match=rf"env server at 127.0.0.1:{port} did not answer within "
        r"--connect_timeout 3 s .*another learner or peer may hold it",
    ):
        connect_server(address, _learner_flags(3), b"k")
    assert 3 <= time.monotonic() - started < 30  # at --connect_timeout, retrying until then; not hung
    conn.close()
    mute.close()
    stop.set()
    thread.join(5)


def test_a_learner_facing_a_held_unix_server_says_so_at_connect_timeout(tmp_path):
    """Before, a learner on a unix socket whose server served another peer hung silently past
    --connect_timeout; now it retries until then and ends with one line naming the server."""
    from rl_core.runtime.actors import connect_server

    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server, stop, thread = _server_in_thread(address, idle_peer_s=1000.0)
    holder = tp.connect(address, timeout=10)
    holding = tp.Connection(holder, poll_s=0.2, frame_timeout_s=5)
    assert holding.recv()[0] == tp.HELLO
    started = time.monotonic()
    with pytest.raises(
        UserError,
        match=rf"env server at unix:{tmp_path}/srv.0 did not answer within "
        r"--connect_timeout 2 s \(it accepted the connection but sent nothing",
    ):
        connect_server(address, _learner_flags(2), None)
    assert 2 <= time.monotonic() - started < 30  # at --connect_timeout, retrying until then; not hung
    holder.close()
    stop.set()
    thread.join(5)
