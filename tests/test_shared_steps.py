"""Steps and actions through shared memory (rl_core/runtime/shared_steps.py) against a real EnvServer."""

import os
import threading
import types

import gymnasium as gym
import numpy as np
import pytest

from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation
from rl_core.envs.seeds import env_seed
from rl_core.runtime import transport as tp
from rl_core.runtime.actors import connect_server
from rl_core.runtime.env_server import EnvServer
from rl_core.runtime.shared_steps import SharedSteps, StepLayout
from tests.proc_utils import free_port


def learner_flags(shared=True):
    return types.SimpleNamespace(connect_timeout=10, max_message_bytes=1 << 20, shared_memory=shared)


def serve(address, secret=None, num_envs=2):
    server = EnvServer(
        address,
        [lambda: gym.make("CartPole-v1")] * num_envs,
        [env_seed(0, 0, i) for i in range(num_envs)],
        secret=secret,
    )
    stop = threading.Event()
    thread = threading.Thread(target=server.serve_forever, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def mappings() -> int:
    """This process's mappings of a steps memfd."""
    with open("/proc/self/maps") as f:
        return sum("memfd:polybeast-steps" in line for line in f)


def play(link, steps, seed=0):
    """Random actions for ``steps`` steps; every STEP's arrays, copied."""
    rng = np.random.default_rng(seed)
    kind, msg = link.recv()
    seen = [{k: np.array(v) for k, v in msg.items()}]
    for _ in range(steps):
        link.send_action(rng.integers(0, 2, size=len(msg["done"])).astype(np.int64))
        kind, msg = link.recv()
        assert kind == tp.STEP and link.step_intact()
        seen.append({k: np.array(v) for k, v in msg.items()})
    return seen


def test_shared_memory_gives_the_socket_path_s_steps_and_is_unmapped_at_disconnect(tmp_path):
    before = mappings()
    runs = {}
    for shared in (True, False):
        address = tp.Address("unix", path=str(tmp_path / f"srv{shared}.0"))
        stop, thread = serve(address)
        link, spec = connect_server(address, learner_flags(shared), None)
        runs[shared] = play(link, 60)  # CartPole ends episodes within 60 random steps: resets in shared memory
        assert (link.shared is not None) == shared
        if shared:
            assert mappings() == before + 2  # the learner's and the server's (one process here)
        link.close()
        stop.set()
        thread.join(10)
    assert mappings() == before  # both sides unmapped it
    assert len(runs[True]) == len(runs[False]) == 61
    assert any(step["done"].any() for step in runs[True][1:])
    for a, b in zip(runs[True], runs[False]):
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_over_tcp_the_learner_does_not_ask_and_one_that_asks_is_answered_no():
    """Over TCP the learner keeps every array on the socket; a learner that asks anyway (a peer of another build) is
    answered N by the server and served on the socket."""
    from rl_core.runtime.actors import ServerLink

    address = tp.Address("tcp", host="127.0.0.1", port=free_port())
    stop, thread = serve(address, secret=b"k")
    link, spec = connect_server(address, learner_flags(), b"k")  # a unix address alone asks
    assert len(play(link, 5)) == 6 and link.shared is None
    link.close()
    link, spec = connect_server(address, learner_flags(), b"k")
    asking = ServerLink(link.conn, spec, share=True)
    assert len(play(asking, 5)) == 6 and asking.shared is None
    asking.close()
    stop.set()
    thread.join(10)


@pytest.mark.parametrize("action", [DiscreteActions(3), BoxActions((2,), (-1.0, -1.0), (1.0, 1.0))])
def test_a_region_is_read_only_when_both_its_numbers_are_the_notices(action):
    spec = EnvSpec(Observation((4, 3), "|u1"), action, num_envs=5)
    layout = StepLayout(spec)
    writer, fd = SharedSteps.create(layout)
    try:
        reader = SharedSteps(layout, fd)
    finally:
        os.close(fd)
    for offset, _, _ in layout.arrays.values():
        assert offset % 64 == 0
    writer.begin_step(1)
    writer.step["obs"][...] = 7
    with pytest.raises(tp.ProtocolError, match="shared step 1 announced, but the region holds 1..0"):
        reader.read_step(1)  # half written
    writer.end_step(1)
    assert (reader.read_step(1)["obs"] == 7).all() and reader.step_intact(1)
    writer.begin_step(2)
    assert not reader.step_intact(1)  # overwritten while read
    with pytest.raises(tp.ProtocolError, match="shared step 1 announced"):
        reader.read_step(1)  # stale
    reader.write_action(1, np.ones(writer.action.shape))
    np.testing.assert_array_equal(writer.read_action(1), 1)
    with pytest.raises(tp.ProtocolError, match="shared action 2 announced"):
        writer.read_action(2)
    reader.close()
    writer.close()


def test_a_mapping_shorter_than_the_spec_is_refused():
    spec = EnvSpec(Observation((4,), "<f4"), DiscreteActions(2), num_envs=2)
    small = StepLayout(EnvSpec(Observation((1,), "<f4"), DiscreteActions(2), num_envs=1))
    _, fd = SharedSteps.create(small)
    try:
        with pytest.raises(tp.ProtocolError, match="less than the spec's"):
            SharedSteps(StepLayout(spec), fd)
    finally:
        os.close(fd)
