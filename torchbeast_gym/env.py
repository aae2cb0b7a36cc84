"""Any gymnasium environment by id, including ``module:EnvId`` for one a user registers."""

from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces

from rl_core.errors import UserError


def add_flags(parser) -> None:
    parser.set_defaults(env="CartPole-v1", value_net="separate")


def make_env(flags, seed: int) -> gym.Env:
    """The gymnasium env ``flags.env``; seeded by the env server's first reset(seed)."""
    try:
        env = gym.make(flags.env)
    except gym.error.Error as e:
        raise UserError(
            f"unknown gymnasium environment '{flags.env}' ({type(e).__name__}): check the id, "
            f"or pass module:EnvId to import the module that registers it"
        ) from None
    except ModuleNotFoundError as e:
        raise UserError(f"--env {flags.env}: module '{e.name}' not found: install it or fix the module path") from None
    if not isinstance(env.action_space, (spaces.Discrete, spaces.Box)):
        raise UserError(f"{flags.env}: action space {env.action_space} is not Discrete or Box")
    if not isinstance(env.observation_space, spaces.Box):
        raise UserError(f"{flags.env}: observation space {env.observation_space} is not a Box")
    env.action_space.seed(seed)
    return env
