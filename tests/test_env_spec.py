"""The env spec: HELLO's JSON as frozen dataclasses, the wire format unchanged, a malformed one refused."""

from __future__ import annotations

import math
import threading

import gymnasium as gym
import numpy as np
import pytest

from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation, action_space_of
from rl_core.errors import RunFailure
from rl_core.runtime import transport as tp
from rl_core.envs.seeds import env_seed
from rl_core.runtime.env_server import EnvServer


def test_the_wire_format_is_the_hello_json_as_it_was():
    server = EnvServer(
        tp.Address("unix", path="/nonexistent/srv.0"),
        [lambda: gym.make("Pendulum-v1")] * 3,
        [env_seed(0, 0, i) for i in range(3)],
        server_index=4,
        env_name="Pendulum-v1",
    )
    wire = server.spec().to_json()
    assert wire == {
        "num_envs": 3,
        "obs_shape": [3],
        "obs_dtype": "<f4",
        "action": {"kind": "box", "shape": [1], "low": [-2.0], "high": [2.0]},
        "server_index": 4,
        "env_name": "Pendulum-v1",
    }
    assert list(wire) == ["num_envs", "obs_shape", "obs_dtype", "action", "server_index", "env_name"]
    spec = EnvSpec.from_json(wire)
    assert spec == server.spec() and spec.to_json() == wire and not spec.discrete
    assert spec.action.bounds()[0].dtype == np.float32 and spec.action.size == 1
    for e in server.envs:
        e.close()


def test_discrete_specs_and_local_specs():
    spec = EnvSpec.from_json(
        {
            "num_envs": 2,
            "obs_shape": [4, 84, 84],
            "obs_dtype": "|u1",
            "action": {"kind": "discrete", "n": 6},
            "server_index": 0,
            "env_name": "",
        }
    )
    assert spec.obs == Observation((4, 84, 84), "|u1") and spec.action == DiscreteActions(6)
    assert spec.discrete and spec.num_actions == 6 and spec.env_name == ""
    local = EnvSpec.of_env(np.zeros(4, np.float32), gym.spaces.Discrete(2))
    assert local.to_json() == {"obs_shape": [4], "obs_dtype": "<f4", "action": {"kind": "discrete", "n": 2}}
    box = action_space_of(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
    assert box == BoxActions((2,), (-math.inf,) * 2, (math.inf,) * 2)
    with pytest.raises(ValueError, match="no number of actions"):
        EnvSpec(Observation((3,), "<f4"), box).num_actions


@pytest.mark.parametrize(
    "spec",
    [
        {"obs_dtype": "<f4", "action": {"kind": "discrete", "n": 2}},
        {"obs_shape": [4], "obs_dtype": "<f4", "action": {"kind": "multi_binary"}},
        {"obs_shape": [4], "obs_dtype": "nonsense", "action": {"kind": "discrete", "n": 2}},
        {"obs_shape": [4], "obs_dtype": "<f4", "action": {"kind": "box", "shape": [2], "low": [0.0], "high": [1.0]}},
        {"obs_shape": [4], "obs_dtype": "<f4", "action": {"kind": "discrete", "n": 2}, "num_envs": "two"},
        ["not", "a", "dict"],
    ],
    ids=["no obs_shape", "unknown kind", "bad dtype", "bounds", "num_envs", "a list"],
)
def test_a_malformed_spec_is_one_line(spec):
    with pytest.raises(ValueError, match="^malformed env spec ") as e:
        EnvSpec.from_json(spec)
    assert "\n" not in str(e.value)


def test_a_server_sending_a_malformed_hello_ends_the_run_in_one_line(tmp_path):
    from rl_core.runtime.actors import connect_server

    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    listener = tp.listen(address)

    def serve():
        sock, _ = listener.accept()
        tp.Connection(sock).send(tp.HELLO, {"spec": tp.json_field({"obs_shape": [4]})})

    threading.Thread(target=serve, daemon=True).start()
    flags = type("F", (), {"connect_timeout": 10.0, "max_message_bytes": tp.DEFAULT_MAX_BYTES})
    with pytest.raises(
        RunFailure,
        match=rf"^env server at unix:{tmp_path}/srv.0 sent a malformed HELLO: "
        r"malformed env spec .*KeyError",
    ):
        connect_server(address, flags, None)
    listener.close()
