"""torchbeast_mujoco: gymnasium's MuJoCo tasks on envpool, its flags, its videos and a real env server."""

import argparse
import os
import signal

import numpy as np
import pytest

from rl_core.errors import UserError
from rl_core.runtime import entry
from rl_core.runtime import transport as tp
from tests.proc_utils import read, start
from torchbeast_mujoco import env as mujoco_env
from torchbeast_mujoco import presets as mujoco_presets


def flags_for(*argv):
    return entry.make_parser(mujoco_env).parse_args(list(argv))


def rollout(env, actions, seed=None):
    """Observations and rewards of stepping ``actions``, resetting after each episode end."""
    obs, _ = env.reset(seed=seed) if seed is not None else env.reset()
    observations, rewards = [obs], []
    for a in actions:
        obs, r, terminated, truncated, _ = env.step(a)
        rewards.append(r)
        if terminated or truncated:
            obs, _ = env.reset()
        observations.append(obs)
    return np.stack(observations), np.array(rewards)


# ----------------------------------------------------------------- spaces


@pytest.mark.parametrize(
    "env_id, obs_dim, action_dim, bound",
    [
        ("HalfCheetah-v5", 17, 6, 1.0),
        ("Humanoid-v5", 348, 17, 0.4),
        ("InvertedPendulum-v4", 4, 1, 3.0),
    ],
)
def test_observations_are_float32_vectors_and_actions_a_float32_box(env_id, obs_dim, action_dim, bound):
    env = mujoco_env.create_env(env_id, 0)
    assert env.observation_space.shape == (obs_dim,) and env.observation_space.dtype == np.float32
    box = env.action_space
    assert box.shape == (action_dim,) and box.dtype == np.float32
    assert np.all(box.low == np.float32(-bound)) and np.all(box.high == np.float32(bound))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (obs_dim,) and obs.dtype == np.float32
    obs, r, terminated, truncated, info = env.step(box.sample())
    assert obs.shape == (obs_dim,) and obs.dtype == np.float32
    assert type(r) is float and type(terminated) is bool and type(truncated) is bool
    assert info["elapsed_step"] == 1
    env.close()


def test_v4_and_v5_names_and_the_default_version():
    assert mujoco_env.canonical_env_id("HalfCheetah-v4") == "HalfCheetah-v4"
    assert mujoco_env.canonical_env_id("halfcheetah-v5") == "HalfCheetah-v5"
    assert mujoco_env.canonical_env_id("Walker2d") == "Walker2d-v5"
    # The versions differ where gymnasium's do: Ant-v5 observes contact forces, Ant-v4 does not.
    assert mujoco_env.create_env("Ant-v4", 0).observation_space.shape == (27,)
    assert mujoco_env.create_env("Ant-v5", 0).observation_space.shape == (105,)


@pytest.mark.parametrize("name", ["Cheetah-v5", "HalfCheetah-v2", "Hopper-v5-extra", "", "CartPole-v1"])
def test_an_unknown_task_is_a_one_line_user_error_naming_the_tasks(name):
    with pytest.raises(UserError) as e:
        mujoco_env.canonical_env_id(name)
    message = str(e.value)
    assert "\n" not in message and "HalfCheetah" in message and "v5" in message
    with pytest.raises(UserError):
        mujoco_env.make_env(argparse.Namespace(env=name), 0)


# ----------------------------------------------------------------- seeding


def test_reset_with_a_seed_repeats_the_trajectory_and_other_seeds_differ():
    env = mujoco_env.create_env("Hopper-v5", 7)
    rng = np.random.default_rng(0)
    # 300 steps of random actions: several Hopper episodes, so reset() without a seed is covered too.
    actions = rng.uniform(-1, 1, (300, 3)).astype(np.float32)
    obs_a, rew_a = rollout(env, actions, seed=7)  # fresh pool made with 7: no rebuild
    obs_b, rew_b = rollout(env, actions, seed=7)  # played since: rebuilt with 7
    other = mujoco_env.create_env("Hopper-v5", 8)
    obs_c, _ = rollout(other, actions, seed=8)
    np.testing.assert_array_equal(obs_a, obs_b)
    np.testing.assert_array_equal(rew_a, rew_b)
    assert not np.array_equal(obs_a[0], obs_c[0])
    # A new env with the same seed: the same trajectory.
    obs_d, _ = rollout(mujoco_env.create_env("Hopper-v5", 7), actions, seed=7)
    np.testing.assert_array_equal(obs_a, obs_d)


def test_seeds_beyond_int32_work():
    env = mujoco_env.create_env("Swimmer-v5", 2**32 - 1)
    obs, _ = env.reset(seed=2**32 - 1)
    assert np.all(np.isfinite(obs))


# ----------------------------------------------------- episode ends


def test_time_limit_is_a_truncation_not_a_termination():
    env = mujoco_env.create_env("HalfCheetah-v5", 0)
    env.reset(seed=0)
    action = np.zeros(6, np.float32)
    for t in range(1, 1001):
        _, _, terminated, truncated, info = env.step(action)
        if t < 1000:
            assert not (terminated or truncated), t
    assert truncated is True and terminated is False and info["elapsed_step"] == 1000


def test_falling_over_is_a_termination():
    env = mujoco_env.create_env("Hopper-v5", 0)
    env.reset(seed=0)
    action = np.array([1.0, -1.0, 1.0], np.float32)
    for t in range(1, 1001):
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    assert terminated is True and truncated is False and t < 1000


def test_no_step_is_spent_on_envpool_auto_reset():
    env = mujoco_env.create_env("Hopper-v5", 0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros(3, np.float32))  # before the first reset
    env.reset(seed=0)
    action = np.array([1.0, -1.0, 1.0], np.float32)
    while not env.step(action)[2]:
        pass
    with pytest.raises(RuntimeError, match="reset"):
        env.step(action)  # envpool would auto-reset here, ignoring the action
    obs, info = env.reset()
    assert info["elapsed_step"] == 0
    _, r, _, _, info = env.step(action)
    assert info["elapsed_step"] == 1 and r != 0.0


def test_actions_are_clipped_to_the_box_and_non_finite_ones_refused():
    a, b = mujoco_env.create_env("HalfCheetah-v5", 3), mujoco_env.create_env("HalfCheetah-v5", 3)
    a.reset(seed=3)
    b.reset(seed=3)
    big = np.array([5, -5, 0.5, 2, -0.3, 9], np.float32)
    out_a, out_b = a.step(big), b.step(np.clip(big, -1, 1))
    np.testing.assert_array_equal(out_a[0], out_b[0])
    assert out_a[1] == out_b[1] and out_a[4]["reward_ctrl"] == pytest.approx(-0.1 * np.sum(np.clip(big, -1, 1) ** 2))
    with pytest.raises(ValueError, match="non-finite"):
        a.step(np.array([np.nan, 0, 0, 0, 0, 0], np.float32))
    with pytest.raises(ValueError, match="shape"):
        a.step(np.zeros(5, np.float32))


# ----------------------------------------------------------------- flags


def test_flags_parse_with_the_halfcheetah_baseline_defaults():
    flags = flags_for()
    assert flags.env == "HalfCheetah-v5" and flags.agent == "ppo"
    assert flags.mlp_sizes == "64,64" and flags.value_net == "separate"
    assert flags.unroll_length == 16
    assert flags.discounting == 0.99 and flags.grad_norm_clipping == 0.5
    assert flags.reward_clipping == "none" and flags.total_steps == 2_000_000
    assert flags.num_actors == 16 and flags.num_servers == 2
    assert flags.render_size == 240
    assert flags_for("--env", "Hopper-v4", "--unroll_length", "32").unroll_length == 32


def test_check_flags_canonicalises_the_task_and_refuses_bad_ones(capsys):
    parser = entry.make_parser(mujoco_env)
    flags = parser.parse_args(["--env", "walker2d"])
    mujoco_env.check_flags(parser, flags)
    assert flags.env == "Walker2d-v5"
    for argv, needle in (
        [["--env", "Pong-v5"], "unknown MuJoCo task"],
        [["--num_actions", "6"], "continuous"],
        [["--render_size", "0"], "--render_size"],
    ):
        flags = parser.parse_args(argv)
        with pytest.raises(SystemExit):
            mujoco_env.check_flags(parser, flags)
        assert needle in capsys.readouterr().err


def test_presets_name_the_runtimes_flags():
    from rl_core.config.resolve import package_defaults

    ppo = package_defaults(mujoco_env, ["--agent", "ppo"])
    assert ppo["optimizer"] == "adam" and ppo["learning_rate"] == 3e-4
    assert ppo["batch_size"] * ppo["unroll_length"] == 2048  # SEED's transitions per learner step
    assert ppo["batch_size"] * ppo["unroll_length"] // ppo["num_minibatches"] == 64  # ... in minibatches of 64
    assert ppo["num_epochs"] == 10 and ppo["gae_lambda"] == 0.95 and ppo["ppo_clip"] == 0.2
    assert ppo["obs_normalization"] is True and ppo["obs_clip"] == 10.0
    parser = entry.make_parser(mujoco_env)
    dests = {action.dest for action in parser._actions}
    for row in mujoco_presets.PRESETS:
        unknown = set(row.values) - dests
        assert not unknown, f"a row for {row.agents} names flags the parser lacks: {sorted(unknown)}"
    # The runtime sets the defaults of the agent that --agent names; flags given explicitly win.
    flags = entry.parse_flags(mujoco_env, [])
    assert flags.agent == "ppo" and flags.num_epochs == 10 and flags.optimizer == "adam"
    assert flags.batch_size == 128 and flags.learning_rate == 3e-4 and flags.env == "HalfCheetah-v5"
    flags = entry.parse_flags(mujoco_env, ["--agent", "vpg", "--learning_rate", "1e-3"])
    assert flags.agent == "vpg" and flags.learning_rate == 1e-3
    assert flags.num_epochs == entry.make_parser(mujoco_env).get_default("num_epochs")  # no PPO epochs


def test_test_protocol_is_ten_episodes():
    assert mujoco_env.test_protocol(flags_for()) == [{"name": "test", "episodes": 10, "group": "test", "overrides": {}}]


# ----------------------------------------------------------------- video


@pytest.mark.multiprocess
def test_a_recorded_test_env_renders_rgb_frames():
    from rl_core.evaluation.episodes import frame_of

    problem = mujoco_env.enable_rendering()
    if problem is not None:
        pytest.skip(problem)
    env = mujoco_env.make_test_env(flags_for("--render_size", "64"), 5, record=True)
    assert env.render_mode == "rgb_array"
    obs, _ = env.reset(seed=5)
    first = frame_of(env, obs)
    assert first.shape == (64, 64, 3) and first.dtype == np.uint8 and first.std() > 0
    for _ in range(5):
        obs, *_ = env.step(np.ones(6, np.float32))
    assert not np.array_equal(frame_of(env, obs), first)  # the cheetah moved
    env.close()
    plain = mujoco_env.make_test_env(flags_for(), 5)
    assert plain.render_mode is None and plain.render() is None


# ----------------------------------------------------------------- env server


@pytest.mark.multiprocess
def test_a_real_env_server_speaks_box_actions(tmp_path):
    basename = f"unix:{tmp_path}/mj"
    proc = start(
        "torchbeast_mujoco.polybeast_env",
        "--server_index",
        "0",
        "--num_actors",
        "6",
        "--num_servers",
        "2",
        "--pipes_basename",
        basename,
        output=str(tmp_path / "server.log"),
    )
    try:
        sock = tp.connect(tp.server_address(basename, 0), timeout=60)
        conn = tp.Connection(sock, poll_s=0.2, frame_timeout_s=30)
        kind, hello = conn.recv()
        assert kind == tp.HELLO
        spec = tp.field_json(hello["spec"])
        assert spec["num_envs"] == 3 and spec["obs_shape"] == [17] and spec["obs_dtype"] == "<f4"
        assert spec["action"] == {"kind": "box", "shape": [6], "low": [-1.0] * 6, "high": [1.0] * 6}
        assert spec["env_name"] == "HalfCheetah-v5"
        kind, first = conn.recv()
        assert kind == tp.STEP and first["done"].all() and first["obs"].shape == (3, 17)
        rng = np.random.default_rng(0)
        for _ in range(3):
            conn.send(tp.ACTION, {"action": rng.uniform(-1, 1, (3, 6)).astype(np.float32)})
            kind, msg = conn.recv()
            assert kind == tp.STEP, tp.KINDS[kind]
            assert msg["obs"].shape == (3, 17) and msg["obs"].dtype == np.float32
            assert not msg["done"].any() and np.all(msg["reward"] != 0)
        assert msg["episode_step"].tolist() == [3, 3, 3]
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, read(str(tmp_path / "server.log"))
    assert not os.path.exists(f"{tmp_path}/mj.0")
