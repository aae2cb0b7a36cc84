"""torchbeast_memory: POPGym's and MiniGrid's memory tasks, their encodings, its flags, the grid stem and real runs."""

import csv
import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_core.errors import UserError
from rl_core.runtime import entry
from tests.proc_utils import run
from torchbeast_memory import env as memory_env

MEMORY = "torchbeast_memory.polybeast"


def flags_for(*argv):
    parser = entry.make_parser(memory_env)
    flags = parser.parse_args(list(argv))
    memory_env.check_flags(parser, flags)
    return flags


def raw_env(env_id: str, **kwargs) -> gym.Env:
    import minigrid  # noqa: F401  (each registers its ids)
    import popgym  # noqa: F401

    return gym.make(env_id, **kwargs)


# ----------------------------------------------------------------- POPGym


@pytest.mark.parametrize(
    "env_id, width, actions",
    [
        ("popgym-RepeatPreviousEasy-v0", 4, 4),
        ("popgym-RepeatFirstMedium-v0", 4, 4),
        ("popgym-CountRecallEasy-v0", 4, 27),
    ],
)
def test_popgym_observations_are_the_raw_ones_one_hot(env_id, width, actions):
    env = memory_env.make_env(flags_for("--env", env_id), seed=0)
    raw = raw_env(env_id)
    assert env.observation_space.shape == (width,) and env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(actions)
    obs, _ = env.reset(seed=5)
    expected, _ = raw.reset(seed=5)
    for t in range(60):
        assert obs.dtype == np.float32 and obs.shape == (width,)
        np.testing.assert_array_equal(obs, gym.spaces.flatten(raw.observation_space, expected))
        # each Discrete part of the observation is one-hot: the ones are as many as the parts
        assert obs.sum() == np.size(expected) and set(np.unique(obs)) <= {0.0, 1.0}
        action = t % actions
        obs, reward, terminated, truncated, _ = env.step(action)
        expected, expected_reward, raw_terminated, raw_truncated, _ = raw.step(action)
        assert (reward, terminated, truncated) == (expected_reward, raw_terminated, raw_truncated)
        if terminated or truncated:
            break


def test_repeat_previous_rewards_the_suit_of_four_cards_ago():
    """What the task asks (POPGym's RepeatPrevious, k = 4): the one action that scores is the suit seen 4 steps ago."""
    env = memory_env.make_env(flags_for(), seed=0)
    obs, _ = env.reset(seed=1)
    seen, total = [int(obs.argmax())], 0.0
    for t in range(51):
        action = seen[-4] if len(seen) >= 4 else 0
        obs, reward, terminated, _, _ = env.step(action)
        if len(seen) >= 4:
            assert reward > 0
        total += reward
        seen.append(int(obs.argmax()))
        if terminated:
            break
    assert t == 50 and total == pytest.approx(1.0)  # returns are scaled to [-1, 1]


# ----------------------------------------------------------------- MiniGrid


@pytest.mark.parametrize("view", [0, 3, 5])
def test_minigrid_view_is_one_hot_per_cell_channels_first(view):
    argv = ["--env", "MiniGrid-MemoryS13-v0"] + (["--view_size", str(view)] if view else [])
    env = memory_env.make_env(flags_for(*argv), seed=0)
    side = view or 7
    assert env.observation_space.shape == (20, side, side) and env.observation_space.dtype == np.uint8
    assert env.action_space == gym.spaces.Discrete(3)  # the Memory rooms' minimal set: left, right, forward
    obs, _ = env.reset(seed=3)
    raw = raw_env("MiniGrid-MemoryS13-v0", **({"agent_view_size": view} if view else {}))
    image = raw.reset(seed=3)[0]["image"]  # [V, V, 3]: object, colour, state indices
    for _ in range(2):
        assert obs.shape == (20, side, side) and obs.dtype == np.uint8 and obs.flags.c_contiguous
        assert (obs.sum(0) == 3).all()  # one object, one colour, one state per cell
        objects, colours, states = obs[:11].argmax(0), obs[11:17].argmax(0), obs[17:].argmax(0)
        np.testing.assert_array_equal(np.stack([objects, colours, states], -1), image)
        obs = env.step(2)[0]  # forward
        image = raw.step(2)[0]["image"]


@pytest.mark.parametrize("full", [False, True])
def test_minigrid_memory_acts_with_its_minimal_action_set_unless_told(full):
    """Left, right and forward keep MiniGrid's indices 0-2; --full_action_space restores all seven."""
    argv = ["--env", "MiniGrid-MemoryS9-v0"] + (["--full_action_space"] if full else [])
    env = memory_env.make_env(flags_for(*argv), seed=0)
    raw = raw_env("MiniGrid-MemoryS9-v0").unwrapped
    assert (
        env.action_space
        == gym.spaces.Discrete(7 if full else 3)
        == gym.spaces.Discrete(len(raw.actions) if full else 3)
    )
    env.reset(seed=5)
    raw.reset(seed=5)
    for action in [2, 0, 2, 1, 1, 2, 2, 2] + ([3, 5, 6] if full else []):
        env.step(action)
        raw.step(action)
        assert (tuple(env.unwrapped.agent_pos), env.unwrapped.agent_dir) == (tuple(raw.agent_pos), raw.agent_dir)


def test_minigrid_memory_ends_truncated_at_its_step_limit():
    env = memory_env.make_env(flags_for("--env", "MiniGrid-MemoryS7-v0"), seed=0)
    env.reset(seed=0)
    for t in range(1000):
        _, reward, terminated, truncated, _ = env.step(0)  # turning left forever: never chooses
        if terminated or truncated:
            break
    assert truncated and not terminated and reward == 0 and t + 1 == 5 * 7**2


def memory_room_episode(env, seed: int, look_back: bool, choose_right: bool):
    """Plays MemoryS13 from ``seed``: optionally back to column 1 (the cue beside the agent) and round again, then
    east to the hallway's end and up or down into the right or the wrong object's cell; the last step's info."""
    env.reset(seed=seed)
    room = env.unwrapped
    left, right, forward = 0, 1, 2
    if look_back:
        for action in [left, left] + [forward] * (room.agent_pos[0] - 1) + [right, right]:
            env.step(action)
    while room.agent_pos[0] < room.success_pos[0]:
        env.step(forward)
    target = room.success_pos if choose_right else room.failure_pos
    env.step(left if target[1] < room.agent_pos[1] else right)
    _, reward, terminated, truncated, info = env.step(forward)
    assert terminated and tuple(room.agent_pos) == tuple(target)
    return reward, info


@pytest.mark.parametrize("look_back", [False, True])
@pytest.mark.parametrize("choose_right", [False, True])
def test_memory_rooms_report_whether_the_cue_was_seen_and_the_choice(look_back, choose_right):
    env = memory_env.make_env(flags_for("--env", "MiniGrid-MemoryS13-v0"), seed=0)
    seed = next(s for s in range(100) if env.reset(seed=s) and env.unwrapped.agent_pos[0] >= 4)  # far from the cue
    reward, info = memory_room_episode(env, seed, look_back, choose_right)
    assert (reward > 0) == choose_right
    assert info["episode_stats"] == {
        "cue_seen": float(look_back),
        "success": float(choose_right),
        "cue_seen_success": float(look_back and choose_right),
    }


def layout(env) -> tuple:
    room = env.unwrapped
    return (tuple(room.agent_pos), tuple(room.success_pos), room.grid.get(1, room.height // 2 - 1).type)


def test_num_levels_draws_each_layout_from_its_fixed_seeds_and_tests_on_fresh_ones():
    """--num_levels N: every reset plays one of the layouts that seeds 0..N-1 make, the draw seeded by the first
    reset; the final test's envs draw fresh layouts."""
    flags = flags_for("--env", "MiniGrid-MemoryS13-v0", "--num_levels", "3")
    raw = raw_env("MiniGrid-MemoryS13-v0")
    known = {layout(raw) for _ in range(3) if raw.reset(seed=_)}
    env = memory_env.make_env(flags, seed=0)
    env.reset(seed=7)
    drawn = [layout(env)] + [layout(env) for _ in range(40) if env.reset()]
    assert set(drawn) == known  # all three, and nothing else
    again = memory_env.make_env(flags, seed=0)
    again.reset(seed=7)
    assert [layout(again)] + [layout(again) for _ in range(40) if again.reset()] == drawn
    test = memory_env.make_test_env(flags, seed=0)
    test.reset(seed=7)
    assert len({layout(test)} | {layout(test) for _ in range(40) if test.reset()} - known) > 3


def test_popgym_episodes_report_no_cue_statistics():
    env = memory_env.make_env(flags_for("--env", "popgym-RepeatPreviousEasy-v0"), seed=0)
    env.reset(seed=0)
    done, info = False, {}
    while not done:
        _, _, terminated, truncated, info = env.step(0)
        done = terminated or truncated
    assert "episode_stats" not in info


# ----------------------------------------------------------------- flags


def test_defaults_are_repeat_previous_and_the_grid_stem():
    flags = flags_for()
    assert (flags.env, flags.model, flags.view_size) == ("popgym-RepeatPreviousEasy-v0", "grid", 0)


def test_minigrid_gets_impalas_defaults_for_rewards_once_an_episode_over_popgyms():
    popgym = entry.parse_command_line(memory_env, [])
    assert (popgym.flags.learning_rate, popgym.flags.entropy_cost) == (0.002, 1e-4)
    grid = entry.parse_command_line(memory_env, ["--env", "MiniGrid-MemoryS13-v0", "--use_lstm"])
    assert (grid.flags.learning_rate, grid.flags.entropy_cost, grid.flags.epsilon) == (0.0005, 0.01, 1e-4)
    assert grid.sources["entropy_cost"] == "torchbeast_memory: --agent impala on --env MiniGrid-MemoryS13-v0"
    ppo = entry.parse_command_line(memory_env, ["--env", "MiniGrid-MemoryS13-v0", "--agent", "ppo"])
    assert ppo.sources["entropy_cost"] != grid.sources["entropy_cost"]  # the other agents keep their own


def test_impala_feeds_repeat_firsts_card_straight_into_the_core():
    first = entry.parse_command_line(memory_env, ["--env", "popgym-RepeatFirstMedium-v0", "--use_lstm"])
    assert first.flags.mlp_sizes == "" and first.flags.discounting == 0.0
    assert first.sources["mlp_sizes"] == "torchbeast_memory: --agent impala on --env popgym-RepeatFirstMedium-v0"
    previous = entry.parse_command_line(memory_env, ["--env", "popgym-RepeatPreviousEasy-v0", "--use_lstm"])
    assert previous.flags.mlp_sizes == "256"  # the stem stays where it was measured to learn
    given = entry.parse_command_line(memory_env, ["--env", "popgym-RepeatFirstEasy-v0", "--mlp_sizes", "64"])
    assert given.flags.mlp_sizes == "64"


def test_r2d2_trains_the_memory_rooms_on_99_layouts_and_nothing_else_does():
    """R2D2 in MiniGrid's Memory rooms trains on 99 fixed layouts (its validation and final test play fresh ones);
    POPGym, the other MiniGrid envs and the other agents keep fresh layouts, and a flag given wins."""
    rooms = entry.parse_command_line(memory_env, ["--env", "MiniGrid-MemoryS9-v0", "--agent", "r2d2", "--use_lstm"])
    assert rooms.flags.num_levels == 99
    assert rooms.sources["num_levels"] == "torchbeast_memory: --agent r2d2 on --env MiniGrid-MemoryS9-v0"
    for argv in (
        ["--env", "MiniGrid-MemoryS9-v0", "--agent", "impala"],
        ["--env", "MiniGrid-MemoryS9-v0", "--agent", "ppo"],
        ["--env", "MiniGrid-DoorKey-5x5-v0", "--agent", "r2d2"],
        ["--env", "popgym-RepeatPreviousEasy-v0", "--agent", "r2d2"],
        ["--env", "MiniGrid-MemoryS9-v0", "--agent", "r2d2", "--num_levels", "0"],
    ):
        assert entry.parse_command_line(memory_env, argv).flags.num_levels == 0, argv


@pytest.mark.parametrize(
    "env, discount",
    [
        ("popgym-RepeatPreviousEasy-v0", 0.0),
        ("popgym-RepeatFirstMedium-v0", 0.0),
        ("popgym-CountRecallHard-v0", 0.0),
        ("popgym-MineSweeperEasy-v0", 0.99),  # an answer changes what comes next
        ("MiniGrid-MemoryS13-v0", 0.99),
    ],
)
def test_impala_discounts_nothing_on_the_card_tasks_whose_deal_no_answer_changes(env, discount):
    parsed = entry.parse_command_line(memory_env, ["--env", env])
    assert parsed.flags.discounting == discount
    if discount == 0.0:
        assert parsed.sources["discounting"] == f"torchbeast_memory: --agent impala on --env {env}"
    ppo = entry.parse_command_line(memory_env, ["--env", env, "--agent", "ppo"])
    assert ppo.sources["discounting"] != f"torchbeast_memory: --agent impala on --env {env}"
    given = entry.parse_command_line(memory_env, ["--env", env, "--discounting", "0.9"])
    assert given.flags.discounting == 0.9  # a flag given wins


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--env", "CartPole-v1"], "not a POPGym or MiniGrid id"),
        (["--env", "MiniGrid-MemoryS13-v0", "--view_size", "4"], "odd side of at least 3"),
        (["--env", "MiniGrid-MemoryS13-v0", "--view_size", "1"], "odd side of at least 3"),
        (["--view_size", "3"], "only MiniGrid envs have a view"),
        (["--record_video"], "no frames to record"),
        (["--full_action_space"], "already acts with its full action space"),
        (["--env", "MiniGrid-DoorKey-5x5-v0", "--full_action_space"], "already acts with its full action space"),
        (["--num_levels", "99"], "only MiniGrid's layouts are drawn from seeds"),
    ],
)
def test_bad_flags_are_one_line(capsys, argv, words):
    with pytest.raises((SystemExit, UserError)) as e:
        flags_for(*argv)
    message = str(e.value) if e.type is UserError else capsys.readouterr().err.strip().splitlines()[-1]
    assert words in message and "\n" not in message


def test_an_id_its_library_lacks_is_one_line():
    with pytest.raises(UserError) as e:
        memory_env.make_env(flags_for("--env", "popgym-RepeatNothing-v0"), seed=0)
    assert "popgym has no such env" in str(e.value) and "\n" not in str(e.value)


# ----------------------------------------------------------------- the grid stem


@pytest.mark.parametrize("side", [1, 3, 7])
def test_grid_stem_takes_any_view_and_uses_uint8_values_as_given(side):
    from models.vision import GridStem

    torch.manual_seed(0)
    stem = GridStem((20, side, side))
    obs = torch.randint(0, 2, (4, 5, 20, side, side), dtype=torch.uint8)
    out = stem(obs)
    assert out.shape == (4, 5, 256)
    torch.testing.assert_close(out, stem(obs.float()))
    flat = stem(obs.flatten(0, 1)).view(4, 5, 256)  # leading dims are only batch dims
    torch.testing.assert_close(out, flat)


# ----------------------------------------------------------------- real runs


def memory_flags(tmp_path, xpid, **overrides):
    flags = {
        "num_actors": 4,
        "num_servers": 2,
        "batch_size": 4,
        "unroll_length": 10,
        "total_steps": 1500,
        "pipes_basename": f"unix:{tmp_path}/pipe_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "test_episodes": 2,
    }
    flags.update(overrides)
    return [f"--{k}={v}" if v is not True else f"--{k}" for k, v in flags.items()]


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    "env_id, flags, obs_shape, stem_weight",
    [
        ("popgym-CountRecallEasy-v0", ["--use_rtrl"], [4], "stem.net.0.weight"),
        ("MiniGrid-MemoryS7-v0", ["--use_lstm", "--record_video"], [20, 3, 3], "stem.conv1.weight"),
        # the grid stem in R2D2's Q-network, SAC's discrete actor on POPGym, RND beside PPO on a MiniGrid view
        ("MiniGrid-MemoryS7-v0", ["--agent=r2d2", "--replay_buffer_min_size=8"], [20, 3, 3], "stem.conv1.weight"),
        ("popgym-RepeatPreviousEasy-v0", ["--agent=sac", "--random_init_steps=200"], [4], None),
        ("MiniGrid-MemoryS7-v0", ["--agent=ppo", "--rnd"], [20, 3, 3], "stem.conv1.weight"),
    ],
)
def test_training_and_final_test_through_the_runtime(tmp_path, env_id, flags, obs_shape, stem_weight):
    extra = {"view_size": 3} if env_id.startswith("MiniGrid") else {}
    args = memory_flags(tmp_path, "m", env=env_id, **extra) + flags
    result = run(MEMORY, *args, output=str(tmp_path / "out"), timeout=150)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "m"
    with open(rundir / "logs.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(rows[-1]["step"]) >= 1500
    if env_id.startswith("MiniGrid-Memory"):  # the cue statistics reach the log (episodes end by 245 steps)
        seen = [float(r["stat/cue_seen"]) for r in rows if r.get("stat/cue_seen") not in (None, "")]
        assert seen and all(0.0 <= x <= 1.0 for x in seen)
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt["flags"]["env"] == env_id
    assert stem_weight is None or stem_weight in ckpt["model_state_dict"]
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is True and meta["env_spec"]["obs_shape"] == obs_shape
    final = json.loads((rundir / "final_test.json").read_text())
    assert [(r["name"], r["episodes"], len(r["lengths"])) for r in final["runs"]] == [("test", 2, 2)]
    if "--record_video" in flags:  # MiniGrid draws its frames with pygame, off-screen
        assert final["video"].endswith("test_first_episode.mp4") and os.path.getsize(final["video"]) > 0
