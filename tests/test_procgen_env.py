"""torchbeast_procgen against envpool's real Procgen, alone and through the runtime."""

import collections
import json

import numpy as np
import pytest
import torch

from rl_core.config.env_package import EnvPackage
from rl_core.errors import UserError
from rl_core.runtime.entry import parse_flags
from rl_core.envs.seeds import env_seed
from tests.proc_utils import csv_rows, flag_error_line, run
from torchbeast_procgen import env as procgen
from torchbeast_procgen.env import (
    GAME_MODES,
    MULTI_ENV_ORDER,
    NUM_ACTIONS,
    PROCGEN_GAMES,
    canonical_game,
    create_env,
    final_test_level_sets,
    game_for_env,
    make_env,
    multi_env_games,
)

PROCGEN = "torchbeast_procgen.polybeast"


def flags_of(*argv):
    return parse_flags(procgen, list(argv))


def first_frames(env, actions):
    obs, info = env.reset()
    frames, levels = [obs], [info["level_seed"]]
    for a in actions:
        obs, _, terminated, truncated, info = env.step(a)
        frames.append(obs)
        if terminated or truncated:
            break
    return np.stack(frames), levels


# -- names ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["chaser", "procgen:procgen-chaser-v0", "procgen-chaser-v0", "Chaser", " chaser-v0"])
def test_both_spellings_name_one_game(name):
    assert canonical_game(name) == "chaser"
    assert flags_of("--env", name).env == "chaser"


def test_all_sixteen_games_and_unknown_names():
    assert len(PROCGEN_GAMES) == 16 and set(MULTI_ENV_ORDER) == set(PROCGEN_GAMES)
    for game in PROCGEN_GAMES:
        assert canonical_game(f"procgen:procgen-{game}-v0") == game
    for bad in ["procgen:procgen-pong-v0", "PongNoFrameskip-v4", "chaser-hard", ""]:
        with pytest.raises(UserError, match="unknown Procgen game"):
            canonical_game(bad)


def test_defaults_follow_the_r2ac_procgen_runs():
    f = flags_of()
    assert (f.env, f.model, f.distribution_mode, f.num_levels, f.start_level, f.multi_env) == (
        "chaser",
        "resnet",
        "hard",
        0,
        0,
        1,
    )
    assert (f.unroll_length, f.batch_size, f.learning_rate, f.entropy_cost, f.epsilon, f.hidden_size) == (
        50,
        32,
        0.0006,
        0.01,
        0.01,
        256,
    )
    assert f.num_actors == 48 and f.total_steps == 200_000_000
    assert flags_of("--num_actions", "15").num_actions == 15  # the R2AC scripts pass it


# -- observations and actions -------------------------------------------------


@pytest.mark.parametrize("game", ["chaser", "bigfish", "maze"])
def test_observations_are_channel_first_uint8_and_15_actions(game):
    env = create_env(game, seed=0)
    assert env.observation_space.shape == (3, 64, 64) and env.observation_space.dtype == np.uint8
    assert env.action_space.n == NUM_ACTIONS == 15
    obs, info = env.reset(seed=0)
    assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8 and obs.flags.c_contiguous
    assert env.observation_space.contains(obs)
    assert obs.std() > 5  # a picture, not a blank
    for action in range(15):
        obs, reward, terminated, truncated, info = env.step(action)
        assert obs.shape == (3, 64, 64) and obs.dtype == np.uint8
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
        if terminated or truncated:
            env.reset()
    env.close()


def test_episode_end_reports_level_complete():
    env = create_env("maze", seed=3, num_levels=1, distribution_mode="easy")  # 500-step limit
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(600):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(15)))
        if terminated or truncated:
            break
    assert terminated or truncated
    assert info["episode_stats"] == {"level_complete": 1.0 if reward > 0 else 0.0}


# -- levels and seeds -----------------------------------------------------------


def test_same_seed_and_levels_reproduce_the_first_frames():
    actions = list(np.random.default_rng(1).integers(15, size=30))
    a, levels_a = first_frames(create_env("chaser", 7, num_levels=10, start_level=50), actions)
    b, levels_b = first_frames(create_env("procgen:procgen-chaser-v0", 7, num_levels=10, start_level=50), actions)
    np.testing.assert_array_equal(a, b)
    assert levels_a == levels_b and 50 <= levels_a[0] < 60
    # reset(seed=s) replays a fresh env seeded with s, whatever was played before
    env = create_env("chaser", 123, num_levels=10, start_level=50)
    first_frames(env, actions)
    obs, info = env.reset(seed=7)
    np.testing.assert_array_equal(obs, a[0])
    assert info["level_seed"] == levels_a[0]


def test_different_start_levels_give_different_levels_and_frames():
    frames = {}
    for start in (0, 1000, 1200):
        env = create_env("chaser", 7, num_levels=1, start_level=start)
        obs, info = env.reset()
        assert info["level_seed"] == start  # one level: always start_level
        obs2, info2 = env.reset()
        assert info2["level_seed"] == start
        frames[start] = obs
    assert not np.array_equal(frames[0], frames[1000])
    assert not np.array_equal(frames[1000], frames[1200])
    # unlimited levels: different seeds play different levels
    l1 = create_env("chaser", 1).reset()[1]["level_seed"]
    l2 = create_env("chaser", 2).reset()[1]["level_seed"]
    assert l1 != l2


def test_level_flags_reach_the_env_through_make_env():
    f = flags_of(
        "--env",
        "procgen:procgen-coinrun-v0",
        "--num_levels",
        "1",
        "--start_level",
        "1234",
        "--distribution_mode",
        "easy",
    )
    env = make_env(f, env_seed(f.seed, 0, 0))
    assert env.game == "coinrun" and env.distribution_mode == "easy"
    assert env.reset()[1]["level_seed"] == 1234


# -- flag errors: one line ------------------------------------------------------


def _error_line(capsys, *argv):
    return flag_error_line(capsys, procgen, *argv)


@pytest.mark.parametrize(
    "game,mode", [("chaser", "memory"), ("bigfish", "extreme"), ("chaser", "exploration"), ("starpilot", "memory")]
)
def test_distribution_mode_the_game_lacks_is_one_line(capsys, game, mode):
    line = _error_line(capsys, "--env", f"procgen:procgen-{game}-v0", "--distribution_mode", mode)
    assert f"--distribution_mode {mode} does not exist for {game}" in line
    have = [g for g in PROCGEN_GAMES if mode in GAME_MODES[g]]
    assert ", ".join(have) in line
    with pytest.raises(UserError):
        create_env(game, 0, distribution_mode=mode)


def test_modes_each_game_has_are_accepted():
    for game, modes in [
        ("maze", ["easy", "hard", "memory", "exploration"]),
        ("chaser", ["extreme"]),
        ("heist", ["memory", "exploration"]),
        ("leaper", ["extreme", "exploration"]),
    ]:
        for mode in modes:
            assert flags_of("--env", game, "--distribution_mode", mode).distribution_mode == mode


def test_other_flag_errors_are_one_line(capsys):
    assert "unknown Procgen game 'pong'" in _error_line(capsys, "--env", "pong")
    assert "--num_actions 6 disagrees" in _error_line(capsys, "--num_actions", "6")
    assert "--num_levels must be in [0, inf), got -1" in _error_line(capsys, "--num_levels", "-1")
    assert "exploration plays one fixed level" in _error_line(
        capsys, "--env", "maze", "--distribution_mode", "exploration", "--num_levels", "10"
    )
    assert "exclude each other" in _error_line(capsys, "--env", "chaser", "--multi_env", "4")
    assert "--multi_env 17" in _error_line(capsys, "--multi_env", "17")
    assert "--multi_env 7: with --distribution_mode memory it must be in 1..6" in _error_line(
        capsys, "--multi_env", "7", "--distribution_mode", "memory"
    )
    assert "must be a multiple of --multi_env (5)" in _error_line(capsys, "--multi_env", "5", "--num_actors", "48")


# -- multi-task runs ------------------------------------------------------------


def test_multi_env_games_follow_the_r2ac_order():
    assert multi_env_games(4) == ("bigfish", "fruitbot", "maze", "leaper")
    assert multi_env_games(16) == MULTI_ENV_ORDER
    assert multi_env_games(6, "memory") == ("dodgeball", "heist", "maze", "miner", "caveflyer", "jumper")
    assert multi_env_games(4, "extreme") == ("leaper", "starpilot", "chaser", "dodgeball")
    for mode, most in [("easy", 16), ("hard", 16), ("extreme", 4), ("memory", 6), ("exploration", 8)]:
        assert all(mode in GAME_MODES[game] for game in multi_env_games(most, mode))
        with pytest.raises(UserError):
            multi_env_games(most + 1, mode)


def test_multi_env_spreads_the_games_over_all_envs():
    # game of global env index g = server * K + slot is games[g % N]
    games = ("a", "b", "c", "d")
    layout = [[game_for_env(games, s, k, 6) for k in range(6)] for s in range(8)]
    assert layout[0] == ["a", "b", "c", "d", "a", "b"] and layout[1] == ["c", "d", "a", "b", "c", "d"]
    assert collections.Counter(g for row in layout for g in row) == {g: 12 for g in games}

    # through make_env, as the env servers call it: each server derives its slot from the seed
    argv = ["--multi_env", "4", "--num_actors", "8", "--num_servers", "2"]
    f = flags_of(*argv)
    assert f.env == "bigfish,fruitbot,maze,leaper"
    played = {}
    for server in range(2):
        fs = flags_of(*argv, "--server_index", str(server))
        for slot in range(4):
            env = make_env(fs, env_seed(fs.seed, server, slot))
            played[(server, slot)] = env.game
            assert env.per_game_return
            env.close()
    expected = multi_env_games(4)
    assert [played[(s, k)] for s in range(2) for k in range(4)] == [expected[i % 4] for i in range(8)]


def test_multi_env_logs_each_games_return():
    f = flags_of("--multi_env", "2", "--num_actors", "2", "--num_servers", "1", "--server_index", "0")
    env = make_env(f, env_seed(f.seed, 0, 1))  # slot 1: fruitbot
    assert env.game == "fruitbot"
    env.reset()
    total, rng = 0.0, np.random.default_rng(0)
    for _ in range(1100):
        _, r, terminated, truncated, info = env.step(int(rng.integers(15)))
        total += r
        if terminated or truncated:
            break
    assert info["episode_stats"]["return_fruitbot"] == pytest.approx(total)


# -- final test protocol data -----------------------------------------------------


def test_final_test_level_sets_of_the_r2ac_protocol():
    f = flags_of("--num_levels", "500", "--start_level", "0")
    sets = final_test_level_sets(f)
    assert procgen.LEVEL_SETS is final_test_level_sets
    assert [(s.name, s.group, s.start_level, s.num_levels, s.episodes, s.held_out) for s in sets] == [
        ("train", "train", 0, 200, 200, False),
        ("test_1000", "test", 1000, 200, 200, True),
        ("test_1200", "test", 1200, 200, 200, True),
        ("test_1400", "test", 1400, 200, 200, True),
    ]
    assert sets[1].protocol_run() == {
        "name": "test_1000",
        "episodes": 200,
        "group": "test",
        "overrides": {"start_level": 1000, "num_levels": 200},
    }
    # unlimited training levels: nothing is held out; training levels that reach into a set: that set is not
    assert not any(s.held_out for s in final_test_level_sets(flags_of()))
    held = [s.held_out for s in final_test_level_sets(flags_of("--num_levels", "1100", "--start_level", "0"))]
    assert held == [False, False, True, True]
    assert [s.num_levels for s in final_test_level_sets(flags_of("--num_levels", "50"))][0] == 50
    assert [s.name for s in final_test_level_sets(flags_of("--env", "maze", "--distribution_mode", "exploration"))] == [
        "train"
    ]


# -- through the runtime ------------------------------------------------------------


def procgen_flags(tmp_path, xpid, **overrides):
    flags = {
        "num_actors": 4,
        "num_servers": 2,
        "batch_size": 4,
        "unroll_length": 20,
        "total_steps": 2000,
        "pipes_basename": f"unix:{tmp_path}/pipe_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "disable_final_test": True,
    }
    flags.update(overrides)
    return [f"--{k}={v}" if v is not True else f"--{k}" for k, v in flags.items() if v is not False]


@pytest.mark.multiprocess
@pytest.mark.parametrize("name,steps", [("procgen:procgen-chaser-v0", 2000), ("chaser", 1200)])
def test_training_through_the_runtime(tmp_path, name, steps):
    args = procgen_flags(tmp_path, "pg", env=name, total_steps=steps, num_levels=200)
    result = run(PROCGEN, *args, output=str(tmp_path / "out"), timeout=150)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "pg"
    rows = csv_rows(str(rundir / "logs.csv"))
    assert rows and int(rows[-1]["step"]) >= steps
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt["step"] >= steps
    assert ckpt["flags"]["env"] == "chaser" and ckpt["flags"]["model"] == "resnet"
    assert "stem.stages.0.conv.weight" in ckpt["model_state_dict"]
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is True and meta["flags"]["num_actions"] == 15
    assert meta["env_spec"]["obs_shape"] == [3, 64, 64] and meta["env_spec"]["obs_dtype"] == "|u1"


# -- multi-task evaluation: every game, the same number of episodes each ------------------


def _built_env_facts(env_fn, seed):
    env = env_fn(seed)
    try:
        return env.game, env.start_level, env.num_levels, env.distribution_mode
    finally:
        env.close()


@pytest.mark.parametrize("n", [16, 4])
def test_multi_task_final_test_plays_every_game_on_every_set(n):
    from rl_core.evaluation import episodes

    f = flags_of("--multi_env", str(n), "--num_levels", "500")
    games = multi_env_games(n)
    runs = episodes.protocol(EnvPackage(procgen), f)
    sets = final_test_level_sets(f)
    assert [(r["set"], r["task"]) for r in runs] == [(s.name, g) for s in sets for g in games]
    assert {r["episodes"] for r in runs} == {200}
    # the env each run builds, for every seed the final test gives it, is the run's game on the set's levels
    for r, planned in enumerate(runs):
        level_set = sets[[s.name for s in sets].index(planned["set"])]
        env_fn = episodes.make_test_env_fn(EnvPackage(procgen), f, planned["overrides"], record=False)
        seeds = episodes.test_seeds(f, r)
        for seed in (seeds[0], seeds[-1]) if n == 16 else seeds:
            assert _built_env_facts(env_fn, seed) == (
                planned["task"],
                level_set.start_level,
                level_set.num_levels,
                "hard",
            )
    # --test_runs keeps whole sets (every game of the first set of each group)
    f1 = flags_of("--multi_env", str(n), "--num_levels", "500", "--test_runs", "1", "--test_episodes", "3")
    kept = episodes.protocol(EnvPackage(procgen), f1)
    assert [(r["set"], r["task"], r["episodes"]) for r in kept] == [
        (s, g, 3) for s in ("train", "test_1000") for g in games
    ]


def test_multi_task_groups_report_each_game_and_weigh_games_equally():
    from rl_core.evaluation import episodes

    results = [
        {"name": "train/a", "set": "train", "task": "a", "group": "train", "mean_return": 1.0},
        {"name": "train/b", "set": "train", "task": "b", "group": "train", "mean_return": 3.0},
        {"name": "t1/a", "set": "t1", "task": "a", "group": "test", "mean_return": 2.0},
        {"name": "t1/b", "set": "t1", "task": "b", "group": "test", "mean_return": 6.0},
        {"name": "t2/a", "set": "t2", "task": "a", "group": "test", "mean_return": 4.0},
        {"name": "t2/b", "set": "t2", "task": "b", "group": "test", "mean_return": 0.0},
    ]
    groups = episodes.summarize_groups(results)
    assert groups["train"] == {"runs": 1, "mean": 2.0, "std": 0.0, "tasks": {"a": 1.0, "b": 3.0}}
    # sets' means 4 and 2: mean 3, std 1 (over the held-out sets, as the single-task protocol)
    assert groups["test"] == {"runs": 2, "mean": 3.0, "std": 1.0, "tasks": {"a": 3.0, "b": 3.0}}
    single = [{"name": "x", "group": "test", "mean_return": 1.0}, {"name": "y", "group": "test", "mean_return": 3.0}]
    assert episodes.summarize_groups(single) == {"test": {"runs": 2, "mean": 2.0, "std": 1.0}}


def _model_for(flags):
    from rl_core.agents import make_agent
    from rl_core.runtime.evaluate_checkpoint import local_spec

    probe = make_env(flags, 0)
    spec = local_spec(probe)
    probe.close()
    agent = make_agent(flags, spec)
    return agent, agent.build_model().eval()


# (2, 4, 2) plays whole Procgen episodes with a model, about a minute on 2 loaded cores: kept out of the fast tier
@pytest.mark.parametrize("n,num_episodes,each", [(4, 10, 3), pytest.param(2, 4, 2, marks=pytest.mark.multiprocess)])
def test_multi_task_validation_plays_every_game_on_the_valid_levels(n, num_episodes, each):
    import types

    from rl_core.evaluation import episodes

    argv = [
        "--multi_env",
        str(n),
        "--valid_start_level",
        "5000",
        "--valid_num_levels",
        "7",
        "--valid_distribution_mode",
        "easy",
        "--valid_num_episodes",
        str(num_episodes),
        "--test_num_envs",
        "2",
    ]
    f = flags_of(*argv)
    games = multi_env_games(n)
    runs = episodes.validation_runs(EnvPackage(procgen), f)
    assert [(r["task"], r["episodes"]) for r in runs] == [(g, each) for g in games]
    for planned in runs:
        env_fn = episodes.make_test_env_fn(EnvPackage(procgen), f, planned["overrides"], record=False)
        for seed in episodes.test_seeds(f, -1):
            assert _built_env_facts(env_fn, seed) == (planned["task"], 5000, 7, "easy")
    if n != 2:
        return
    # played for real (bigfish and fruitbot end quickly): every episode on a validation level of its game
    made, levels = [], collections.Counter()

    def make_test_env(flags, seed, record=False):
        env = make_env(flags, seed)
        made.append(env.game)
        step = env.step

        def observed_step(action):
            out = step(action)
            if out[2] or out[3]:
                assert 5000 <= out[4]["prev_level_seed"] < 5007
                levels[env.game] += 1
            return out

        env.step = observed_step
        return env

    pkg = EnvPackage(
        types.SimpleNamespace(
            add_flags=procgen.add_flags,
            make_env=make_env,
            make_test_env=make_test_env,
            validation_protocol=procgen.validation_protocol,
        )
    )
    agent, model = _model_for(f)
    result = episodes.validate(model, pkg, f, agent=agent)
    assert result["episodes"] == n * each and sorted(result["tasks"]) == sorted(games)
    assert levels == {g: each for g in games} and set(made) == set(games)
    assert result["mean_return"] == pytest.approx(np.mean(list(result["tasks"].values())))
    # single task: one run of --valid_num_episodes on the valid levels
    single = episodes.validation_runs(
        EnvPackage(procgen), flags_of("--valid_start_level", "9", "--valid_num_episodes", "5")
    )
    assert single == [{"name": "valid", "episodes": 5, "overrides": {"start_level": 9}}]


@pytest.mark.multiprocess
def test_multi_task_run_final_test_reports_every_game(tmp_path):
    args = procgen_flags(
        tmp_path,
        "mt",
        multi_env=2,
        total_steps=800,
        num_levels=200,
        disable_final_test=False,
        test_episodes=2,
        test_runs=1,
        test_num_envs=2,
    )
    result = run(PROCGEN, *args, output=str(tmp_path / "out"), timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    final = json.loads((tmp_path / "runs" / "mt" / "final_test.json").read_text())
    assert [(r["set"], r["task"], r["episodes"]) for r in final["runs"]] == [
        (s, g, 2) for s in ("train", "test_1000") for g in ("bigfish", "fruitbot")
    ]
    assert [r["overrides"] for r in final["runs"]][1] == {
        "start_level": 0,
        "num_levels": 200,
        "env": "fruitbot",
        "multi_env": 1,
    }
    for group in ("train", "test"):
        g = final["groups"][group]
        assert sorted(g["tasks"]) == ["bigfish", "fruitbot"] and g["runs"] == 1
        assert g["mean"] == pytest.approx(np.mean(list(g["tasks"].values())))
    assert "final test [test] fruitbot: mean" in result.stdout
