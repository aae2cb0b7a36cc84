"""scripts/returns_by_noops.py: every game of its envs starts with exactly the no-op count asked for."""

from types import SimpleNamespace

from tests.proc_utils import load_script
from torchbeast_atari import env as env_pkg


def _flags(**overrides):
    flags = dict(
        env="PongNoFrameskip-v4",
        seed=1,
        disable_episodic_life=False,
        sticky_actions=0.0,
        full_action_space=False,
        max_episode_frames=108_000,
        noop_max=30,
        video_view="screen",
    )
    flags.update(overrides)
    return SimpleNamespace(**flags)


def test_every_game_starts_with_the_fixed_noop_count():
    script = load_script("returns_by_noops")
    for noops in (0, 3, 7):
        env = script.fixed_noop_env(env_pkg, _flags(), seed=5, noops=noops)
        try:
            for _ in range(3):
                _, info = env.reset()
                assert info["noops"] == noops
                assert info["frame_number"] >= noops
        finally:
            env.close()


def test_the_phase_shows_in_the_frame_numbers():
    """An odd and an even count put the agent's frames on the two parities of the emulator's frame counter."""
    script = load_script("returns_by_noops")
    numbers = {}
    for noops in (2, 3):
        env = script.fixed_noop_env(env_pkg, _flags(), seed=5, noops=noops)
        try:
            env.reset()
            _, _, _, _, info = env.step(0)
            numbers[noops] = info["frame_number"]
        finally:
            env.close()
    assert numbers[3] - numbers[2] == 1
