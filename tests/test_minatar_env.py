"""torchbeast_minatar: MinAtar's games as minatar makes them, their encoding, its flags, the paper's stem and real
runs of the discrete agents (each a few seconds)."""

import csv
import json

import gymnasium as gym
import minatar.gym
import numpy as np
import pytest
import torch

from rl_core.errors import UserError
from rl_core.runtime import entry
from tests.proc_utils import run
from torchbeast_minatar import env as minatar_env

MINATAR = "torchbeast_minatar.polybeast"
# game -> channels of its grid, the size of its minimal action set (minatar's own)
GAMES = {"Asterix": (4, 5), "Breakout": (4, 3), "Freeway": (7, 3), "SpaceInvaders": (6, 4)}


def flags_for(*argv):
    parser = entry.make_parser(minatar_env)
    flags = parser.parse_args(list(argv))
    minatar_env.check_flags(parser, flags)
    return flags


@pytest.mark.parametrize("game", sorted(GAMES))
@pytest.mark.parametrize("version", [0, 1])
def test_games_are_minatars_own_channels_first(game, version):
    env_id = f"MinAtar/{game}-v{version}"
    channels, minimal = GAMES[game]
    env = minatar_env.make_env(flags_for("--env", env_id), seed=0)
    minatar.gym.register_envs()
    raw = gym.make(env_id, sticky_action_prob=0.1)
    assert env.observation_space == gym.spaces.Box(0, 1, (channels, 10, 10), np.uint8)
    assert env.action_space == gym.spaces.Discrete(6 if version == 0 else minimal)
    obs, _ = env.reset(seed=3)
    expected, _ = raw.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(300):
        assert obs.dtype == np.uint8 and obs.shape == (channels, 10, 10)
        np.testing.assert_array_equal(obs, expected.transpose(2, 0, 1))
        action = int(rng.integers(env.action_space.n))
        obs, reward, terminated, truncated, _ = env.step(action)
        expected, raw_reward, raw_terminated, _, _ = raw.step(action)
        assert (reward, terminated, truncated) == (raw_reward, raw_terminated, False)
        if terminated:
            obs, _ = env.reset()
            expected, _ = raw.reset()


def test_sticky_actions_and_the_step_limit_reach_the_game():
    env = minatar_env.make_env(flags_for("--sticky_actions", "0.3", "--max_episode_steps", "7"), seed=0)
    assert env.unwrapped.game.sticky_action_prob == 0.3
    assert minatar_env.make_env(flags_for(), seed=0).unwrapped.game.sticky_action_prob == 0.1  # MinAtar's default
    env = minatar_env.make_env(flags_for("--env", "MinAtar/Freeway-v0", "--max_episode_steps", "7"), seed=0)
    env.reset(seed=0)
    ends = [env.step(0)[2:4] for _ in range(7)]  # standing still: Freeway ends only after 2,500 frames
    assert ends == [(False, False)] * 6 + [(False, True)]


def test_the_same_seed_plays_the_same_game():
    def play(seed):
        env = minatar_env.make_env(flags_for("--env", "MinAtar/Asterix-v0"), seed=0)
        frames = [env.reset(seed=seed)[0]]
        frames += [env.step(t % 6)[0] for t in range(100)]
        return np.stack(frames)

    np.testing.assert_array_equal(play(5), play(5))
    assert not np.array_equal(play(5), play(6))


@pytest.mark.parametrize(
    "env_id", ["MinAtar/Pong-v0", "MinAtar/Breakout-v2", "Breakout", "BreakoutNoFrameskip-v4", "minatar:Breakout"]
)
def test_an_id_that_is_no_minatar_game_is_refused_in_one_line_at_parse_time(env_id, capsys):
    with pytest.raises(UserError, match="not a MinAtar game: give MinAtar/<Game>-v0"):
        minatar_env.game(env_id)
    with pytest.raises(SystemExit) as exit_info:
        entry.parse_flags(minatar_env, ["--env", env_id, "--dry_run"], prog=MINATAR)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert f"--env {env_id}: not a MinAtar game" in err[-1]


def test_every_agent_gets_the_minatar_stem_and_five_million_steps():
    from rl_core.agents import AGENTS

    for agent in AGENTS:
        flags = entry.parse_flags(minatar_env, ["--agent", agent], prog=MINATAR)
        assert (flags.model, flags.total_steps, flags.env) == ("minatar", 5_000_000, "MinAtar/Breakout-v0")
    assert entry.parse_flags(minatar_env, ["--agent", "r2d2"], prog=MINATAR).use_lstm  # R2D2 is the paper's
    vpg = entry.parse_flags(minatar_env, ["--agent", "vpg"], prog=MINATAR)
    assert vpg.num_epochs == 1 and not vpg.deterministic  # one pass, on the asynchronous runtime


def test_minatar_stem_is_the_papers_network():
    from models.vision import MinAtarStem

    stem = MinAtarStem((4, 10, 10))
    # one 3x3 conv of 16 channels, no padding (8x8 left), and a 128-unit layer
    assert [tuple(p.shape) for p in stem.parameters()] == [(16, 4, 3, 3), (16,), (128, 16 * 8 * 8), (128,)]
    obs = torch.randint(0, 2, (5, 3, 4, 10, 10), dtype=torch.uint8)
    out = stem(obs)
    assert out.shape == (5, 3, 128) and (out >= 0).all()
    torch.testing.assert_close(out[2, 1], stem(obs[2, 1].unsqueeze(0))[0])
    # values used as given: a uint8 one is the float one
    torch.testing.assert_close(out, stem(obs.float()))
    with pytest.raises(ValueError, match="expected observations"):
        stem(torch.zeros(2, 4, 9, 9))


def short_run_flags(tmp_path, xpid, **overrides):
    flags = {
        "env": "MinAtar/SpaceInvaders-v1",
        "num_actors": 4,
        "batch_size": 4,
        "unroll_length": 10,
        "total_steps": 2000,
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
    "agent, flags",
    [
        ("impala", {}),
        ("ppo", {"unroll_length": 32, "num_minibatches": 2}),
        # the recurrent Q-network over prioritized sequences, validated greedily on the way
        ("r2d2", {"replay_buffer_min_size": 8, "validate_step_every": 1000, "valid_num_episodes": 1}),
        ("sac", {"random_init_steps": 200, "replay_buffer_min_size": 200}),
    ],
)
def test_a_short_run_trains_and_tests_through_the_runtime(tmp_path, agent, flags):
    args = short_run_flags(tmp_path, agent, agent=agent, **flags)
    result = run(MINATAR, *args, output=str(tmp_path / "out"), timeout=150)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / agent
    with open(rundir / "logs.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and int(rows[-1]["step"]) >= 2000
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt["flags"]["model"] == "minatar" and ckpt["flags"]["agent"] == agent
    assert any(name.endswith("stem.conv.weight") for name in ckpt["model_state_dict"])
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is True and meta["env_spec"]["obs_shape"] == [6, 10, 10]
    final = json.loads((rundir / "final_test.json").read_text())
    assert [(r["name"], r["episodes"], len(r["returns"])) for r in final["runs"]] == [("test", 2, 2)]
    if agent == "r2d2":
        assert (rundir / "model_best_val.tar").exists()
