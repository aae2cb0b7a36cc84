"""torchbeast_football against envpool's real Google Research Football, alone and through the runtime."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest
import torch

from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
from rl_core.errors import UserError
from rl_core.runtime.entry import parse_flags
from tests.proc_utils import csv_rows, flag_error_line, run
from torchbeast_football import env as football
from torchbeast_football.env import (
    NUM_ACTIONS,
    OBS_SHAPE,
    SCENARIOS,
    canonical_scenario,
    create_env,
    smm_to_rgb,
)

FOOTBALL = "torchbeast_football.polybeast"
CLOSE = "academy_empty_goal_close"


def flags_of(*argv):
    return parse_flags(football, list(argv))


def play(env, actions, seed=None):
    """Frames, rewards and the end info of one episode (or of len(actions) steps)."""
    obs, _ = env.reset(seed=seed)
    frames, rewards, info = [obs], [], {}
    for a in actions:
        obs, r, terminated, truncated, info = env.step(int(a))
        frames.append(obs)
        rewards.append(r)
        if terminated or truncated:
            break
    return np.stack(frames), rewards, info


# -- names ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [CLOSE, f"gfootball/{CLOSE}", f"gfootball/{CLOSE}-v1", f"{CLOSE}-v1", " Academy_Empty_Goal_Close"]
)
def test_scenario_names_in_both_spellings(name):
    assert canonical_scenario(name) == CLOSE
    assert flags_of("--env", name).env == CLOSE


def test_every_scenario_envpool_ships_and_no_other():
    import envpool

    shipped = {e[len("gfootball/") : -len("-v1")] for e in envpool.list_all_envs() if e.startswith("gfootball/")}
    assert shipped == set(SCENARIOS)
    for bad in ["11_vs_11", "academy_empty_goal_far", "PongNoFrameskip-v4", ""]:
        with pytest.raises(UserError, match="unknown Football scenario"):
            canonical_scenario(bad)


def _error_line(capsys, *argv):
    return flag_error_line(capsys, football, *argv)


def test_flag_errors_are_one_line(capsys):
    assert "unknown Football scenario 'academy_nowhere'" in _error_line(capsys, "--env", "academy_nowhere")
    assert "envpool's Football does not give" in _error_line(capsys, "--rewards", "scoring,checkpoints")
    for agent in ("r2d2", "sac"):  # the agents whose traits say they replay
        line = _error_line(capsys, "--agent", agent)
        assert "learns from a replay, which is not set up for Football" in line and "use impala or vpg or" in line
    assert "disagrees with Football's 19 actions" in _error_line(capsys, "--num_actions", "18")
    assert "--resnet_channels '16,,-2'" in _error_line(capsys, "--resnet_channels", "16,,-2")


def test_defaults_follow_seed_rls_football_vtrace_runs():
    f = flags_of()
    assert (f.env, f.agent, f.rewards, f.model, f.resnet_channels) == (
        "11_vs_11_easy_stochastic",
        "impala",
        "scoring",
        "resnet",
        "16,32,32,32",
    )
    assert (f.unroll_length, f.batch_size, f.discounting, f.vtrace_lambda, f.entropy_cost) == (
        32,
        32,
        0.997,
        0.9,
        3.1948e-5,
    )
    assert (f.optimizer, f.learning_rate, f.lr_decay, f.reward_clipping, f.grad_norm_clipping) == (
        "adam",
        3e-4,
        "none",
        "none",
        0.0,
    )
    p = flags_of("--agent", "ppo")
    assert (p.unroll_length, p.num_epochs, p.num_minibatches, p.ppo_clip, p.learning_rate) == (
        512,
        2,
        4,
        0.115,
        1.1879e-4,
    )
    assert flags_of("--learning_rate", "1e-3").learning_rate == 1e-3  # given flags win


def test_the_network_is_seeds_four_stage_resnet_sized_from_the_observation():
    from models import build_model

    f = flags_of()
    model = build_model(f, EnvSpec(Observation(OBS_SHAPE, "|u1"), DiscreteActions(NUM_ACTIONS)))
    assert len(model.stem.stages) == 4
    assert model.stem.conv_out_size == 32 * 5 * 6  # 72 x 96 halved four times (rounding up)


# -- observations, stacking, episodes ------------------------------------------


def test_observations_are_16_stacked_minimap_planes_uint8_and_19_actions():
    env = create_env(CLOSE, seed=0)
    assert env.observation_space.shape == OBS_SHAPE == (16, 72, 96)
    assert env.observation_space.dtype == np.uint8 and env.action_space.n == NUM_ACTIONS == 19
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.uint8 and obs.flags.c_contiguous and env.observation_space.contains(obs)
    assert set(np.unique(obs)) <= {0, 255}
    assert (obs[2] > 0).sum() == 1 and (obs[3] > 0).sum() == 1  # one ball, one active player
    assert (obs[0] > 0).sum() >= 1  # our players
    assert info["score"] == (0, 0)
    env.close()


def test_stack_holds_the_last_four_frames_oldest_first_and_reset_fills_it():
    env = create_env("academy_3_vs_1_with_keeper", seed=5)
    frames, _, _ = play(env, [5] * 12)  # run right: the players move every step
    assert all(np.array_equal(frames[0][4 * k : 4 * k + 4], frames[0][12:]) for k in range(3))
    newest = frames[:, 12:]
    for t in range(3, len(frames)):
        for k in range(4):  # slot k holds the frame of step t - 3 + k
            np.testing.assert_array_equal(frames[t][4 * k : 4 * k + 4], newest[t - 3 + k])
    assert not np.array_equal(newest[0], newest[-1])
    obs, _ = env.reset()
    assert all(np.array_equal(obs[4 * k : 4 * k + 4], obs[12:]) for k in range(3))
    env.close()


def test_episodes_end_with_goals_and_reset_starts_a_new_one():
    env = create_env(CLOSE, seed=1)
    rng = np.random.default_rng(0)
    ends = []
    while len(ends) < 4:
        _, rewards, info = play(env, rng.integers(NUM_ACTIONS, size=400))
        stats = info["episode_stats"]
        assert stats["goals_scored"] - stats["goals_conceded"] == sum(rewards)  # scoring reward: the goal difference
        assert stats["win"] == float(stats["goals_scored"] > stats["goals_conceded"])
        ends.append((len(rewards), sum(rewards)))
    assert all(1 <= n <= 401 for n, _ in ends)
    # Shooting at the empty goal from close range scores (action 12: shot) where wandering rarely does.
    _, rewards, info = play(env, [5] * 3 + [12] * 30)
    assert info.get("episode_stats", {}).get("goals_scored") == 1.0 and sum(rewards) == 1.0
    env.close()


def test_the_full_game_ends_at_its_step_limit_as_a_termination():
    env = create_env("1_vs_1_easy", seed=2)  # 500 steps
    env.reset()
    for n in range(1, 600):
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            break
    assert terminated and not truncated and n == SCENARIOS["1_vs_1_easy"] + 1
    assert info["steps_left"] == 0 and set(info["episode_stats"]) == {"goals_scored", "goals_conceded", "win"}
    env.close()


# not a process: plays 150 steps of 11 vs 11 in 4 fresh envs (about 17 s on 2 loaded cores), kept out of the fast tier
@pytest.mark.multiprocess
def test_seeds_give_repeatable_episodes_and_different_seeds_differ():
    actions = np.random.default_rng(3).integers(NUM_ACTIONS, size=150)
    a, ra, _ = play(create_env("11_vs_11_easy_stochastic", 7), actions)
    b, rb, _ = play(create_env("gfootball/11_vs_11_easy_stochastic", 7), actions)
    np.testing.assert_array_equal(a, b)
    assert ra == rb
    c, _, _ = play(create_env("11_vs_11_easy_stochastic", 8), actions)
    assert not np.array_equal(a, c)
    # reset(seed=s) replays a fresh env seeded with s, whatever was played before
    env = create_env("11_vs_11_easy_stochastic", 123)
    play(env, actions[:40])
    d, _, _ = play(env, actions, seed=7)
    np.testing.assert_array_equal(a, d)


def test_minimap_video_frames():
    smm = np.zeros((4, 72, 96), np.uint8)
    smm[0, 10, 20] = smm[1, 30, 40] = smm[2, 50, 60] = 255
    image = smm_to_rgb(smm)
    assert image.shape == (288, 384, 3) and image.dtype == np.uint8
    assert tuple(image[10 * 4, 20 * 4]) == (230, 60, 60)  # left team red
    assert tuple(image[(30 - 1) * 4, (40 + 1) * 4]) == (70, 110, 255)  # right team blue, grown to 3 x 3
    assert tuple(image[50 * 4 + 3, 60 * 4 + 3]) == (255, 255, 255)  # the ball
    assert tuple(image[0, 0]) == (20, 90, 30)  # the pitch
    env = football.create_env(CLOSE, 0, record=True)
    env.reset()
    frame = env.render()
    assert frame.shape == (288, 384, 3) and len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3


# -- through the runtime ------------------------------------------------------


def _run_flags(tmp_path, xpid, **kw):
    base = {
        "env": CLOSE,
        "num_actors": 4,
        "num_servers": 2,
        "batch_size": 4,
        "unroll_length": 16,
        "pipes_basename": f"unix:{tmp_path}/p_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
    }
    base.update(kw)
    return [f"--{k}" if v is True else f"--{k}={v}" for k, v in base.items()]


@pytest.mark.multiprocess
def test_two_env_servers_train_log_checkpoint_resume_and_evaluate(tmp_path):
    rundir = tmp_path / "runs" / "fb"
    result = run(
        FOOTBALL,
        *_run_flags(tmp_path, "fb", total_steps=640, disable_final_test=True),
        output=str(tmp_path / "a"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    first = torch.load(rundir / "model.tar", weights_only=True)
    assert first["step"] >= 640 and first["flags"]["env"] == CLOSE
    assert "stem.stages.3.conv.weight" in first["model_state_dict"]  # the fourth stage
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["env_spec"]["obs_shape"] == [16, 72, 96] and meta["env_spec"]["obs_dtype"] == "|u1"
    assert meta["env_spec"]["action"] == {"kind": "discrete", "n": 19}
    rows = csv_rows(str(rundir / "logs.csv"))
    assert int(rows[-1]["step"]) >= 640
    assert {"stat/goals_scored", "stat/goals_conceded", "stat/win"} <= set(rows[-1])
    assert any(r["stat/goals_scored"] not in ("", "nan") for r in rows)  # episodes ended and were counted

    result = run(
        FOOTBALL,
        *_run_flags(tmp_path, "fb", total_steps=1280, test_episodes=2, learning_rate=2e-4),
        output=str(tmp_path / "b"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resumed from" in result.stdout
    # The rate given to the resumed run is the one it trains at, not the checkpoint's.
    assert "resumed with --learning_rate 0.0002; the checkpoint trained at 0.0003" in result.stdout
    assert float(csv_rows(str(rundir / "logs.csv"))[-1]["learning_rate"]) == pytest.approx(2e-4)
    second = torch.load(rundir / "model.tar", weights_only=True)
    assert second["step"] >= 1280 and second["optimizer_state_dict"]["state"]
    final = json.loads((rundir / "final_test.json").read_text())
    assert [r["name"] for r in final["runs"]] == ["test_0", "test_1", "test_2"]  # 3 runs (of 100 by default)
    for r in final["runs"]:
        assert r["episodes"] == 2 and 0.0 <= r["mean_win"] <= 1.0
        assert r["mean_return"] == pytest.approx(r["mean_goals_scored"] - r["mean_goals_conceded"])

    result = run(
        FOOTBALL,
        "--mode=test",
        f"--checkpoint={rundir}/model.tar",
        "--test_episodes=1",
        "--record_video",
        output=str(tmp_path / "c"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (path,) = glob.glob(os.path.join(rundir, "eval-*.json"))
    evaluation = json.load(open(path))
    assert evaluation["env"] == CLOSE and len(evaluation["runs"]) == 3
    videos = glob.glob(os.path.join(rundir, "*.mp4"))
    assert videos and os.path.getsize(videos[0]) > 1000
