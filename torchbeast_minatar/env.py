"""MinAtar (Young & Tian 2019): Atari's game mechanics on a 10x10 grid, one binary channel per kind of object, no
frame skip (an agent step is a frame).  The games are minatar's gymnasium envs, by the ids it registers:

- ``MinAtar/<Game>-v0``: all 6 actions (no-op, left, up, right, down, fire), as the MinAtar paper trained its DQN and
  AC(lambda); ``MinAtar/<Game>-v1``: the game's minimal action set (Breakout's 3, as gymnax and pgx play it).
  Games: Asterix, Breakout, Freeway, Seaquest, SpaceInvaders.
- sticky actions with probability ``--sticky_actions`` (MinAtar's 0.1), difficulty ramping as MinAtar's default;
- an episode truncated after ``--max_episode_steps`` (10,000): MinAtar sets no limit (Freeway's game ends at 2,500
  steps) and a greedy policy may keep Breakout's ball in play for ever; gymnax caps MinAtar's episodes at 1,000.

Observations: uint8 [C, 10, 10], channels first, 0 or 1 (``--model minatar``: the paper's stem).
"""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rl_core.envs.rendering import render_off_screen
from rl_core.errors import UserError
from rl_core.flag_types import ranged

GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
DEFAULT_ENV = "MinAtar/Breakout-v0"
ID = re.compile(r"MinAtar/(?P<game>\w+)-v(?P<version>[01])")
ACTION_KIND = "discrete"  # every MinAtar game acts in Discrete(6), or its minimal set


def add_flags(parser) -> None:
    """MinAtar's flags; the defaults per agent: presets.py."""
    from torchbeast_minatar.presets import PACKAGE_DEFAULTS

    g = parser.add_argument_group(
        "minatar",
        f"--env names a game as minatar registers it: MinAtar/<Game>-v0 (6 actions) or -v1 (the minimal set); "
        f"games: {', '.join(GAMES)}.",
    )
    g.add_argument(
        "--sticky_actions",
        type=ranged(float, "[0, 1]"),
        default=0.1,
        metavar="P",
        help="Probability of repeating the previous action (MinAtar's default, 0.1).",
    )
    g.add_argument(
        "--max_episode_steps",
        type=ranged(int, "[1, inf)"),
        default=10_000,
        metavar="N",
        help="An episode is truncated after N steps (MinAtar sets no limit; a greedy policy may play for ever).",
    )
    parser.set_defaults(env=DEFAULT_ENV, **PACKAGE_DEFAULTS)


def game(env_id: str) -> str:
    """``MinAtar/Breakout-v0`` -> ``Breakout``; one line naming the ids there are where it is not one."""
    match = ID.fullmatch(env_id)
    if match is None or match["game"] not in GAMES:
        raise UserError(
            f"--env {env_id}: not a MinAtar game: give MinAtar/<Game>-v0 (6 actions) or MinAtar/<Game>-v1 (minimal "
            f"set), <Game> one of {', '.join(GAMES)}"
        )
    return match["game"]


def check_flags(parser, flags) -> None:
    """A MinAtar id (checked before any env server starts)."""
    try:
        game(flags.env)
    except UserError as e:
        parser.error(str(e))


def make_env(flags, seed: int, render_mode: str | None = None) -> gym.Env:
    """The game ``--env`` names, its grid channels first as uint8, truncated at ``--max_episode_steps``; seeded by
    the env server's first reset(seed)."""
    import minatar.gym

    game(flags.env)
    if flags.env not in gym.registry:
        minatar.gym.register_envs()  # minatar registers its ids only when asked
    with warnings.catch_warnings():  # gymnasium calls -v0 out of date: here it names the 6-action set
        warnings.filterwarnings("ignore", message=".*is out of date", category=DeprecationWarning)
        env = gym.make(
            flags.env,
            sticky_action_prob=flags.sticky_actions,
            render_mode=render_mode,
            max_episode_steps=flags.max_episode_steps,
        )
    height, width, channels = env.observation_space.shape
    space = spaces.Box(0, 1, (channels, height, width), np.uint8)
    env = gym.wrappers.TransformObservation(env, channels_first, space)
    env.action_space.seed(seed)
    return env


def channels_first(obs: np.ndarray) -> np.ndarray:
    """MinAtar's bool [10, 10, C] grid -> uint8 [C, 10, 10]."""
    return np.ascontiguousarray(obs.transpose(2, 0, 1), dtype=np.uint8)


def make_test_env(flags, seed: int, record: bool = False) -> gym.Env:
    """The same game; rendering MinAtar's colour frames (10x10 pixels) when a video is recorded."""
    if record:
        render_off_screen()
    return make_env(flags, seed, render_mode="rgb_array" if record else None)
