"""torchbeast_atari.env against the real ALE (ale-py ROMs)."""

import hashlib

import ale_py
import ale_py.roms
import numpy as np
import pytest

from rl_core.errors import UserError
from torchbeast_atari.env import (
    AreaResize,
    AtariEnv,
    DistinctRamValues,
    EpisodeStats,
    FrameStack,
    canonical_env_id,
    create_env,
    num_actions,
)

PONG = "PongNoFrameskip-v4"
BREAKOUT = "BreakoutNoFrameskip-v4"
FIRE_FRAMES = 8  # FIRE-on-reset: FIRE then action #2, 4 frames each


def _random_steps(env, rng, n):
    """Up to n random steps, stopping at terminated/truncated; returns the list of step tuples."""
    out = []
    for _ in range(n):
        step = env.step(int(rng.integers(env.action_space.n)))
        out.append(step)
        if step[2] or step[3]:
            break
    return out


# -- observations -----------------------------------------------------------


def test_observation_shape_dtype_and_spaces():
    env = create_env(PONG, seed=0)
    assert env.observation_space.shape == (4, 84, 84)
    assert env.observation_space.dtype == np.uint8
    assert env.action_space.n == 6 == num_actions(PONG)
    obs, info = env.reset()
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    # reset fills the stack with the reset frame
    assert all((obs[i] == obs[-1]).all() for i in range(4))
    assert obs.max() > obs.min()  # a real picture, not a blank
    obs, reward, terminated, truncated, info = env.step(0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert isinstance(reward, float)
    assert not terminated and not truncated
    from torchbeast_atari import presets  # R2D2's replay sizing counts these frames without the ALE

    assert (presets.FRAME_STACK, presets.FRAME_BYTES) == (obs.shape[0], obs[0].nbytes)


def test_stack_order_newest_last():
    """Stacked obs at step t are the single-frame obs f[t-3..t], oldest first, and shift by one each step."""
    stacked = create_env(PONG, seed=5)
    single = AtariEnv(PONG, 5)  # same seed, same preprocessing, no stack
    s_obs, _ = stacked.reset()
    f_obs, _ = single.reset()
    frames = [f_obs] * 4
    np.testing.assert_array_equal(s_obs, np.stack(frames))
    rng = np.random.default_rng(0)
    changed = 0
    for _ in range(40):
        action = int(rng.integers(6))
        new_s, *_ = stacked.step(action)
        new_f, *_ = single.step(action)
        frames = frames[1:] + [new_f]
        np.testing.assert_array_equal(new_s, np.stack(frames))
        np.testing.assert_array_equal(new_s[:-1], s_obs[1:])  # shifted by one
        changed += not np.array_equal(new_s[-1], s_obs[-1])
        s_obs = new_s
    assert changed > 20  # frames really move, so the order checks mean something


def test_frames_are_maxpooled_area_resized_last_two_of_four():
    """Replay the pipeline on a bare ALE: FIRE reset, 4-frame repeat, max of last 2 screens, resize."""
    env = AtariEnv(BREAKOUT, 0, noop_max=0)
    env.reset()
    ale = ale_py.ALEInterface()
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(ale_py.roms.get_rom_path("breakout"))
    ale.reset_game()
    minimal = ale.getMinimalActionSet()
    for action in (ale_py.Action.FIRE, minimal[2]):
        for _ in range(4):
            ale.act(action)
    resize = AreaResize((210, 160))
    rng = np.random.default_rng(1)
    for _ in range(30):
        a = int(rng.integers(4))
        obs, *_ = env.step(a)
        screens = []
        for _ in range(4):
            ale.act(minimal[a])
            screens.append(ale.getScreenGrayscale())
        np.testing.assert_array_equal(obs, resize(np.maximum(screens[-2], screens[-1])))


def test_area_resize_matches_opencv_inter_area():
    """Bytes identical to cv2.resize(img, (84, 84), interpolation=cv2.INTER_AREA) as baselines' WarpFrame does.

    The digests were recorded with opencv-python-headless 5.0.0 (not a dependency).
    """
    resize = AreaResize((210, 160))
    img = ((np.arange(210 * 160, dtype=np.int64) * 7919) % 256).astype(np.uint8).reshape(210, 160)
    digest = hashlib.sha256(resize(img).tobytes()).hexdigest()
    assert digest == "808bf1b9d8dbd51f74129424fe20d54fae5d760609602720be2ad79e1ba26fec"
    ale = ale_py.ALEInterface()
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(ale_py.roms.get_rom_path("breakout"))
    ale.reset_game()
    for _ in range(60):
        ale.act(ale_py.Action.FIRE)
    digest = hashlib.sha256(resize(ale.getScreenGrayscale()).tobytes()).hexdigest()
    assert digest == "741506aebdb8488047fddeb26825080b105a623347e7db29089bf0d5b1b20650"
    # and area averaging itself: exact on a constant image, mean-preserving within rounding
    assert (resize(np.full((210, 160), 77, np.uint8)) == 77).all()
    assert abs(resize(img).mean() - img.mean()) < 1.0


# -- resets: no-ops, FIRE, seeding -----------------------------------------


def test_noop_count_in_range_and_counted_in_frames():
    noops = []
    for seed in range(12):
        env = create_env(PONG, seed=seed, noop_max=30)
        _, info = env.reset()
        assert info["new_game"] is True
        assert 0 <= info["noops"] <= 30
        assert info["frame_number"] == info["noops"] + FIRE_FRAMES
        noops.append(info["noops"])
    assert len(set(noops)) > 3  # really random
    env = create_env(PONG, seed=0, noop_max=0)
    for _ in range(3):
        _, info = env.reset()
        assert info["noops"] == 0 and info["frame_number"] == FIRE_FRAMES


def test_fire_on_reset_only_for_games_with_fire():
    _, info = create_env("MsPacmanNoFrameskip-v4", seed=0, noop_max=0).reset()  # no FIRE action
    assert info["frame_number"] == 0
    _, info = create_env(BREAKOUT, seed=0, noop_max=0).reset()
    assert info["frame_number"] == FIRE_FRAMES


def test_same_seed_same_observations():
    a, b, c = (create_env(BREAKOUT, seed=s, noop_max=30) for s in (7, 7, 8))
    obs_a, info_a = a.reset()
    obs_b, info_b = b.reset()
    np.testing.assert_array_equal(obs_a, obs_b)
    assert info_a["noops"] == info_b["noops"]
    for action in [1, 2, 3, 2, 0, 3]:
        np.testing.assert_array_equal(a.step(action)[0], b.step(action)[0])
    # reseeding through reset(seed=...) restarts the same way
    obs_1, info_1 = c.reset(seed=123)
    c.step(2)
    obs_2, info_2 = c.reset(seed=123)
    np.testing.assert_array_equal(obs_1, obs_2)
    assert info_1["noops"] == info_2["noops"] and info_2["new_game"]
    # different seeds draw different no-op counts
    assert len({create_env(PONG, seed=s).reset()[1]["noops"] for s in range(6)}) > 1


# -- episodic life ------------------------------------------------------------


def _play_until_life_lost(env, rng, max_steps=3000):
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            return obs, reward, terminated, truncated, info
    raise AssertionError("no life lost")


def test_life_loss_ends_training_episode_not_game():
    env = create_env(BREAKOUT, seed=0)
    _, info = env.reset()
    lives0 = info["lives"]
    assert lives0 == 5
    rng = np.random.default_rng(0)
    _, _, terminated, truncated, info = _play_until_life_lost(env, rng)
    assert terminated and not truncated
    assert info["episode_end"] is False
    assert info["lives"] == lives0 - 1
    frames_at_loss = info["frame_number"]
    assert not env.unwrapped.ale.game_over()
    _, info = env.reset()
    # the game continued: same lives, frame counter not restarted
    assert info["new_game"] is False
    assert info["lives"] == lives0 - 1
    assert info["frame_number"] > frames_at_loss


def test_without_episodic_life_a_life_loss_is_not_terminal():
    env = create_env(BREAKOUT, seed=0, episodic_life=False)
    _, info = env.reset()
    rng = np.random.default_rng(0)
    lives_seen = {info["lives"]}
    while True:
        _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        lives_seen.add(info["lives"])
        if terminated or truncated:
            break
    assert info["episode_end"] and info["lives"] == 0  # only game over ends the episode
    assert lives_seen == {5, 4, 3, 2, 1, 0}


def test_whole_games_go_on_after_a_lost_life_as_the_training_envs_reset_does():
    """With life_loss_reset a whole game sees what a policy trained with episodic life saw: the step that loses a
    life returns reset()'s observation (no-op, FIRE and action #2 done, the stack restarted), and the game goes on
    step for step as the training env's, without the policy pressing FIRE."""
    train = create_env(BREAKOUT, seed=3)
    whole = create_env(BREAKOUT, seed=3, episodic_life=False, life_loss_reset=True)
    obs_t, _ = train.reset()
    obs_w, _ = whole.reset()
    np.testing.assert_array_equal(obs_t, obs_w)
    rng = np.random.default_rng(3)
    lost, train_return, whole_return = 0, 0.0, 0.0
    for _ in range(20_000):
        action = int(rng.choice([0, 2, 3]))  # NOOP, RIGHT, LEFT: never FIRE
        obs_t, r_t, terminated_t, truncated_t, info_t = train.step(action)
        obs_w, r_w, terminated_w, truncated_w, info_w = whole.step(action)
        train_return, whole_return = train_return + r_t, whole_return + r_w
        assert info_w["lives"] == info_t["lives"]
        if info_t["episode_end"]:
            break
        if terminated_t:  # a lost life: the training episode ends, reset() goes on with the game
            lost += 1
            obs_t, _ = train.reset()
            assert info_w["life_reset"] and not terminated_w and not truncated_w
            assert all(np.array_equal(obs_w[0], frame) for frame in obs_w)  # the stack restarted
        else:
            assert "life_reset" not in info_w
        np.testing.assert_array_equal(obs_t, obs_w)
        assert info_w["frame_number"] == train.unwrapped.ale.getEpisodeFrameNumber()
    assert lost == 4 and terminated_w and info_w["episode_end"] and info_w["lives"] == 0  # the whole game was played
    assert whole_return == train_return == _breakout_score(whole.unwrapped.ale)


def test_without_life_loss_reset_a_policy_that_never_fires_waits_after_its_first_lost_life():
    """The control: a whole game without life_loss_reset is not served again after a lost life until FIRE."""
    env = create_env(BREAKOUT, seed=3, episodic_life=False)
    _, info = env.reset()
    rng = np.random.default_rng(3)
    while info["lives"] == 5:
        _, _, _, _, info = env.step(int(rng.choice([0, 2, 3])))
    for _ in range(2_000):
        _, reward, terminated, truncated, info = env.step(int(rng.choice([0, 2, 3])))
        assert info["lives"] == 4 and reward == 0 and not (terminated or truncated)


def _breakout_score(ale):
    """Breakout's own score counter (BCD in RAM 76/77, as the ALE reads it)."""
    ram = ale.getRAM()
    return (ram[77] & 0x0F) + 10 * ((ram[77] & 0xF0) >> 4) + 100 * (ram[76] & 0x0F)


def test_whole_game_return_accumulates_across_lives():
    """A logger ending episodes on info['episode_end'] gets the whole game's score."""
    env = create_env(BREAKOUT, seed=1)
    _, info = env.reset()
    rng = np.random.default_rng(1)
    game_return, segment_returns, segment = 0.0, [], 0.0
    life_losses = 0
    for _ in range(20_000):
        _, reward, terminated, truncated, info = env.step(int(rng.integers(4)))
        game_return += reward
        segment += reward
        if terminated or truncated:
            segment_returns.append(segment)
            segment = 0.0
            if info["episode_end"]:
                break
            life_losses += 1
            _, reset_info = env.reset()
            assert not reset_info["new_game"]
    assert info["episode_end"] and env.unwrapped.ale.game_over()
    assert life_losses == 4  # 5 lives: 4 training episodes end on a lost life, the 5th at game over
    assert len(segment_returns) == 5
    assert game_return == sum(segment_returns) == _breakout_score(env.unwrapped.ale)
    assert game_return > max(segment_returns)  # more than any one life's return
    _, info = env.reset()
    assert info["new_game"] and info["lives"] == 5


# -- truncation, sticky actions, action sets, rewards --------------------------


@pytest.mark.parametrize("max_frames,episodic_life", [(200, True), (202, False)])
def test_max_episode_frames_truncates(max_frames, episodic_life):
    env = create_env(PONG, seed=0, noop_max=0, max_episode_frames=max_frames, episodic_life=episodic_life)
    _, info = env.reset()
    steps = 0
    while True:
        _, _, terminated, truncated, info = env.step(0)
        steps += 1
        if terminated or truncated:
            break
    assert truncated and not terminated and info["episode_end"]
    assert info["frame_number"] == max_frames  # exactly, even when not a multiple of 4
    assert steps == -(-(max_frames - FIRE_FRAMES) // 4)
    _, info = env.reset()  # a truncated game is never continued
    assert info["new_game"] and info["frame_number"] == FIRE_FRAMES


def test_sticky_actions():
    def run(sticky, seed=3):
        env = create_env(BREAKOUT, seed=seed, noop_max=0, sticky_actions=sticky)
        assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(sticky)
        obs, _ = env.reset()
        rng = np.random.default_rng(0)
        frames = [obs[-1]]
        for _ in range(60):
            obs, *_ = env.step(int(rng.integers(4)))
            frames.append(obs[-1])
        return np.stack(frames)

    sticky_a, sticky_b, plain = run(0.25), run(0.25), run(0.0)
    np.testing.assert_array_equal(sticky_a, sticky_b)  # seeded
    assert not np.array_equal(sticky_a, plain)  # and it does change the game
    with pytest.raises(UserError):
        create_env(BREAKOUT, seed=0, sticky_actions=1.5)


def test_full_action_space():
    env = create_env(PONG, seed=0, full_action_space=True)
    assert env.action_space.n == 18 == num_actions(PONG, full_action_space=True)
    assert env.unwrapped.get_action_meanings()[:3] == ["NOOP", "FIRE", "UP"]
    env.reset()
    env.step(17)  # the last of the 18 is valid
    minimal = create_env(PONG, seed=0)
    assert minimal.unwrapped.get_action_meanings() == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]


def test_rewards_are_not_clipped():
    env = create_env("SpaceInvadersNoFrameskip-v4", seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    rewards = set()
    for _ in range(600):
        _, reward, terminated, truncated, _ = env.step(int(rng.integers(6)))
        rewards.add(reward)
        if terminated or truncated:
            env.reset()
    assert max(rewards) > 1.0  # aliens are worth 5..30 points


# -- names ------------------------------------------------------------------


def test_canonical_env_id_and_unknown_game():
    for name in (PONG, "ALE/Pong-v5", "Pong-v4", "PongNoFrameskip-v0", "Pong", "pong"):
        assert canonical_env_id(name) == PONG
    assert canonical_env_id("ALE/MontezumaRevenge-v5") == "MontezumaRevengeNoFrameskip-v4"
    assert canonical_env_id("montezuma_revenge") == "MontezumaRevengeNoFrameskip-v4"
    assert num_actions("ALE/Breakout-v5") == 4
    for bad in ("NotAGameNoFrameskip-v4", "ALE/Combat-v5", "CartPole-v1", ""):
        with pytest.raises(UserError) as err:
            canonical_env_id(bad)
        assert str(err.value) == f"unknown Atari game {bad!r}: see list_atari_games.txt"
    with pytest.raises(UserError, match="unknown Atari game 'Pongg-v4'"):
        create_env("Pongg-v4", seed=0)
    with pytest.raises(UserError):
        num_actions("Pongg-v4")


# -- episode statistics --------------------------------------------------------


def test_montezuma_reports_rooms_visited_at_episode_end():
    env = create_env("MontezumaRevengeNoFrameskip-v4", seed=0, max_episode_frames=400)
    env.reset()
    rng = np.random.default_rng(0)
    for _ in range(200):
        _, _, terminated, truncated, info = env.step(int(rng.integers(18)))
        if info["episode_end"]:
            break
        assert "episode_stats" not in info
        if terminated:
            env.reset()
    assert info["episode_end"]
    assert info["episode_stats"]["rooms_visited"] >= 1


def test_rooms_visited_counts_distinct_rooms_per_game():
    env = create_env("MontezumaRevengeNoFrameskip-v4", seed=0, noop_max=0, max_episode_frames=120)
    env.reset()
    ale = env.unwrapped.ale
    assert ale.getRAM()[3] == 1  # the start room
    ale.setRAM(3, 4)  # move the player to another room
    while True:
        *_, info = env.step(0)
        if info["episode_end"]:
            break
    assert info["episode_stats"] == {"rooms_visited": 2.0, "rooms_mask": 2.0**1 + 2.0**4}  # which: rooms 1 and 4
    env.reset()  # a new game starts the count again
    while True:
        *_, info = env.step(0)
        if info["episode_end"]:
            break
    assert info["episode_stats"] == {"rooms_visited": 1.0, "rooms_mask": 2.0**1}


def test_episode_stats_wrapper_is_generic_and_spans_lives():
    """Any game can get a probe; stats come only at the game's end and cover every life."""
    core = AtariEnv(BREAKOUT, 0, max_episode_frames=4000)
    env = FrameStack(EpisodeStats(core, {"lives_seen": lambda: DistinctRamValues(57)}))  # RAM 57: Breakout lives
    env.reset()
    rng = np.random.default_rng(0)
    stats = None
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        if info["episode_end"]:
            stats = info["episode_stats"]
            break
        assert "episode_stats" not in info
        if terminated:
            env.reset()
    assert stats is not None
    assert stats["lives_seen"] >= 3  # several lives of one game went into it


# -- the flags reach the env through make_env / make_test_env ---------------------


def _atari_flags(*argv):
    from rl_core.runtime.entry import parse_flags
    from torchbeast_atari import env as atari

    return parse_flags(atari, ["--env", BREAKOUT, *argv])


def _behaviour(env):
    """What the env does, observed: no-op counts of 6 resets, ALE's sticky probability, the number of
    actions, whether losing a life ends the episode, and the frame at which a NOOP-only game truncates."""
    noops = []
    for seed in range(6):
        _, info = env.reset(seed=seed)
        noops.append(info["noops"])
    sticky = env.unwrapped.ale.getFloat("repeat_action_probability")
    _, info = env.reset(seed=0)
    lives = info["lives"]
    rng = np.random.default_rng(0)
    while True:
        _, _, terminated, truncated, info = env.step(int(rng.integers(4)))
        if info["lives"] < lives or terminated or truncated:
            break
    life_loss_ends = bool(terminated) and info["lives"] == lives - 1
    return {
        "noops": noops,
        "sticky": round(sticky, 6),
        "actions": env.action_space.n,
        "life_loss_ends": life_loss_ends,
        "life_reset": bool(info.get("life_reset")),
    }


def _truncation_frame(env):
    env.reset(seed=0)
    while True:
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            return info["frame_number"] if truncated else None


# not a process: plays Breakout to a lost life under 6 flag sets (15-20 s on 2 loaded cores), kept out of the fast tier
@pytest.mark.multiprocess
@pytest.mark.parametrize("maker", ["make_env", "make_test_env"])
def test_each_atari_flag_reaches_the_env_through_make_env(maker):
    """Each flag, changed alone from the defaults, changes what the env built from the flags does (and
    nothing else): a flag make_env drops fails here.  The test env always plays whole games, going on after a
    lost life as the training env's reset does unless training ran without episodic life."""
    from torchbeast_atari import env as atari

    make = getattr(atari, maker)
    default = _behaviour(make(_atari_flags(), 5))
    assert default["sticky"] == 0.0 and default["actions"] == 4 and max(default["noops"]) > 0
    assert default["life_loss_ends"] is (maker == "make_env")
    assert default["life_reset"] is (maker == "make_test_env")
    cases = {
        "--noop_max=0": {"noops": [0] * 6},
        "--sticky_actions=0.25": {"sticky": 0.25},
        "--full_action_space": {"actions": 18},
        "--disable_episodic_life": {"life_loss_ends": False} if maker == "make_env" else {"life_reset": False},
    }
    for flag, changed in cases.items():
        seen = _behaviour(make(_atari_flags(flag), 5))
        assert seen == {**default, **changed}, flag
    assert _truncation_frame(make(_atari_flags("--noop_max=0", "--max_episode_frames=100"), 5)) == 100


def test_a_recorded_test_env_shows_the_rgb_screen_unless_the_network_view_is_asked():
    from rl_core.evaluation.episodes import frame_of
    from torchbeast_atari import env as atari

    env = atari.make_test_env(_atari_flags("--env", PONG), 3, record=True)
    obs, _ = env.reset(seed=3)
    frame = frame_of(env, obs)
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    assert not np.array_equal(frame[..., 0], frame[..., 2])  # colour, not grayscale
    assert env.metadata["render_fps"] == 15  # 60 Hz / frame skip 4: real time
    network = atari.make_test_env(_atari_flags("--env", PONG, "--video_view", "network"), 3, record=True)
    obs, _ = network.reset(seed=3)
    frame = frame_of(network, obs)
    assert frame.shape == (84, 84, 3) and np.array_equal(frame[..., 0], frame[..., 2])
