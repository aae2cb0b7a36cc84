"""Any gymnasium environment by id, including ``module:EnvId`` for one a user registers."""

from __future__ import annotations

import re

import gymnasium as gym
from gymnasium import spaces

from rl_core.envs.rendering import render_off_screen
from rl_core.errors import UserError
from torchbeast_gym.presets import IMPALA_DEFAULTS


def add_flags(parser) -> None:
    """CartPole-v1 and IMPALA's defaults for small tasks; per agent, with a core and with --rnd: presets.py."""
    parser.set_defaults(env="CartPole-v1", value_net="separate", **IMPALA_DEFAULTS)


def make_env(flags, seed: int, render_mode: str | None = None) -> gym.Env:
    """The gymnasium env ``flags.env``; seeded by the env server's first reset(seed)."""
    try:
        env = gym.make(flags.env, render_mode=render_mode) if render_mode else gym.make(flags.env)
    except gym.error.Error as e:
        raise UserError(
            f"unknown gymnasium environment '{flags.env}' ({type(e).__name__}): check the id, "
            f"or pass module:EnvId to import the module that registers it"
        ) from None
    except ModuleNotFoundError as e:
        # gymnasium re-raises the import's error without its .name; its text still names the module
        named = re.search(r"No module named '([^']+)'", str(e))
        module = e.name or (named.group(1) if named else flags.env.split(":", 1)[0])
        raise UserError(
            f"--env {flags.env}: module '{module}' not found: install it or fix the module path "
            f"(python -c 'import {module}' must work)"
        ) from None
    if not isinstance(env.action_space, (spaces.Discrete, spaces.Box)):
        raise UserError(f"{flags.env}: action space {env.action_space} is not Discrete or Box")
    if not isinstance(env.observation_space, spaces.Box):
        raise UserError(f"{flags.env}: observation space {env.observation_space} is not a Box")
    env.action_space.seed(seed)
    return env


def make_test_env(flags, seed: int, record: bool = False) -> gym.Env:
    """The same env; rendering frames when a video is recorded."""
    if record:
        render_off_screen()
    return make_env(flags, seed, render_mode="rgb_array" if record else None)


def test_protocol(flags) -> list[dict]:
    """One run of 100 episodes."""
    return [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]
