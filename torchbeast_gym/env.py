"""Any gymnasium environment by id, including ``module:EnvId`` for one a user registers."""

from __future__ import annotations

import importlib
import re

import gymnasium as gym
from gymnasium import spaces

from rl_core.envs.rendering import render_off_screen
from rl_core.errors import UserError
from torchbeast_gym.presets import IMPALA_DEFAULTS

# --cpu_affinity by default: the learner process on its own core, the acting process and the servers on the others;
# CartPole and an env that costs nothing 1.1-1.2x the steps/s on 2 cores (docs/experiments/throughput.md)
CPU_AFFINITY = True


def add_flags(parser) -> None:
    """CartPole-v1 and IMPALA's defaults for small tasks; per agent, with a core and with --rnd: presets.py."""
    parser.set_defaults(env="CartPole-v1", value_net="separate", **IMPALA_DEFAULTS)


def _refusal(env_id: str, error: Exception) -> UserError:
    """The one line for an id gymnasium cannot resolve (unknown, or its module missing)."""
    if isinstance(error, ModuleNotFoundError):
        # gymnasium re-raises the import's error without its .name; its text still names the module
        named = re.search(r"No module named '([^']+)'", str(error))
        module = error.name or (named.group(1) if named else env_id.split(":", 1)[0])
        return UserError(
            f"--env {env_id}: module '{module}' not found: install it or fix the module path "
            f"(python -c 'import {module}' must work)"
        )
    return UserError(
        f"unknown gymnasium environment '{env_id}' ({type(error).__name__}): check the id, "
        f"or pass module:EnvId to import the module that registers it"
    )


def check_flags(parser, flags) -> None:
    """The env id resolved as make_env resolves it (its module imported, the id looked up; no env made), so
    that what --dry_run accepts, a run accepts."""
    module, _, name = flags.env.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        gym.spec(name)
    except (gym.error.Error, ModuleNotFoundError) as e:
        parser.error(str(_refusal(flags.env, e)))


def make_env(flags, seed: int, render_mode: str | None = None) -> gym.Env:
    """The gymnasium env ``flags.env``; seeded by the env server's first reset(seed)."""
    try:
        env = gym.make(flags.env, render_mode=render_mode) if render_mode else gym.make(flags.env)
    except (gym.error.Error, ModuleNotFoundError) as e:
        raise _refusal(flags.env, e) from None
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
